//! The options of a [`super::PerfBuffer`], and the closures it delivers to.

use super::closures::Closures;
use super::map_fd::MapFd;
use super::reader::Reader;
use super::threading::{Boxes, Local, Sendable, Threading};
use crate::error::{Error, Result, What};
use crate::kernel::sys::{self, MapInfo};
use crate::kernel::{BPF_MAP_TYPE_PERF_EVENT_ARRAY, BPF_MAP_TYPE_RINGBUF, PerfEventAttr};
use crate::log;
use crate::reader::RingSet;
use crate::reader::config::{AttrChoice, CpuSelection, Options, Wakeup};
use crate::reader::sink::{Keyed, Sink};
use crate::ringbuf::channel::{Channel, check_options};
use core::ops::ControlFlow;
use std::os::fd::{BorrowedFd, RawFd};
use std::time::Duration;

/// The options of a [`super::PerfBuffer`]: see [`super::PerfBuffer::builder`].
///
/// The map may be a `BPF_MAP_TYPE_PERF_EVENT_ARRAY` or a
/// `BPF_MAP_TYPE_RINGBUF`: [`Self::build`] asks the kernel which, so a tool
/// switches by changing its map's type, not this code. With a ring buffer
/// the same closures get the records, with what differs: one ring for all
/// CPUs, whose records come in the order their space was reserved, with
/// the CPU `u32::MAX` ([`crate::NO_CPU`]); each sample's data exactly as
/// the program wrote it (a perf buffer's is padded to 8 bytes with its
/// 4-byte size); and no lost reports from the kernel, which counts no
/// losses of a ring buffer (a full ring makes the program's output fail:
/// only the program sees it; `on_lost` hears only of the records dropped
/// while [`Reader::pause`]d). Of the options, those that size or batch
/// per-CPU perf rings have nothing to act on and are ignored: [`Self::pages`]
/// (the map's `max_entries` sizes the ring), [`Self::wakeup`] and
/// [`Self::max_delay`] (the program's `bpf_ringbuf_output` flags decide
/// its wake-ups), [`Self::adaptive`] and [`Self::count_lost`]. Those a ring
/// buffer cannot honour fail the build with a message naming them:
/// [`Self::cpus`], [`Self::slots`], [`Self::overwrite`], [`Self::attr`].
///
/// ```no_run
/// # fn main() -> perfbuf::Result<()> {
/// # let map: std::os::fd::OwnedFd = unimplemented!();
/// use std::time::Duration;
/// let pb = perfbuf::PerfBuffer::builder(&map)
///     .pages(8)
///     .wakeup(perfbuf::Wakeup::Records(64))
///     .max_delay(Duration::from_millis(1))
///     .cpus(&[0, 1])
///     .on_sample(|_cpu, _data| {})
///     .build()?;
/// # Ok(()) }
/// ```
#[must_use = "a builder does nothing until built"]
pub struct Builder<'a, T: Threading = Sendable> {
    pub(crate) opts: Options,
    closures: Closures<'a, T>,
    /// `None`: a map fd the caller keeps (see [`crate::libbpf_compat`]).
    map: Option<MapFd<'a>>,
    /// perfbuf.bpf.h's output counts map, until built.
    counts: Option<MapFd<'a>>,
    /// A `BPF_MAP_TYPE_RINGBUF` is read too (not by libbpf's constructors).
    pub(crate) ring_buffers: bool,
}

impl<'a> Builder<'a> {
    /// A builder over `map` with libbpf's defaults, but for CPUs that come
    /// and go, which it serves ([`Self::hotplug`]).
    pub(super) fn new(map: MapFd<'a>) -> Builder<'a> {
        let mut opts = Options::new(map.as_raw_fd());
        opts.hotplug = true;
        Builder { opts, closures: Closures::default(), map: Some(map), counts: None, ring_buffers: true }
    }

    /// A builder over a map fd nobody holds for the reader (the fd may
    /// even be invalid: the reader reports that as libbpf does).
    pub(crate) fn over_raw_fd(map_fd: RawFd) -> Builder<'a> {
        Builder {
            opts: Options::new(map_fd),
            closures: Closures::default(),
            map: None,
            counts: None,
            ring_buffers: false,
        }
    }

    /// A builder over a map fd the caller vouches for.
    #[deprecated(note = "give PerfBuffer::builder a BorrowedFd (BorrowedFd::borrow_raw)")]
    #[doc(hidden)]
    pub fn for_raw_fd(map_fd: RawFd) -> Builder<'a> {
        Builder::over_raw_fd(map_fd)
    }

    /// Takes closures that are not `Send` (capturing an `Rc`, a
    /// `&RefCell`...), for a buffer that stays on this thread.
    pub fn local(self) -> Builder<'a, Local> {
        let Closures { sample, lost, record } = self.closures;
        let closures = Closures {
            sample: sample.map(|f| -> <Local as Threading>::SampleFn<'a> { f }),
            lost: lost.map(|f| -> <Local as Threading>::LostFn<'a> { f }),
            record: record.map(|f| -> <Local as Threading>::RecordFn<'a> { f }),
        };
        Builder {
            opts: self.opts,
            closures,
            map: self.map,
            counts: self.counts,
            ring_buffers: self.ring_buffers,
        }
    }
}

impl<'a, T: Threading> Builder<'a, T> {
    /// Data pages per CPU, a power of two (default 8).
    pub fn pages(mut self, pages: usize) -> Self {
        self.opts.pages = pages;
        self
    }

    /// Called with `(cpu, data)` for each sample's raw data, as libbpf's
    /// `sample_cb` (the data is padded by the kernel to 8 bytes with its
    /// 4-byte size).
    pub fn on_sample<F: FnMut(u32, &[u8]) + 'a>(mut self, f: F) -> Self
    where
        T: Boxes<'a, F>,
    {
        self.closures.sample = Some(T::sample(f));
        self
    }

    /// Called with `(cpu, count)` for each report of records the kernel
    /// dropped, as libbpf's `lost_cb`.
    pub fn on_lost<F: FnMut(u32, u64) + 'a>(mut self, f: F) -> Self
    where
        T: Boxes<'a, F>,
    {
        self.closures.lost = Some(T::lost(f));
        self
    }

    /// Called with `(cpu, record)` for every record whole, header included
    /// (libbpf's raw `event_cb`; decode samples with [`crate::decode`]).
    /// Replaces [`Self::on_sample`] and [`Self::on_lost`]. `Break` stops
    /// reading this ring for now.
    pub fn on_record<F: FnMut(u32, &[u8]) -> ControlFlow<()> + 'a>(mut self, f: F) -> Self
    where
        T: Boxes<'a, F>,
    {
        self.closures.record = Some(T::record(f));
        self
    }

    /// The event to open on each CPU instead of libbpf's BPF output
    /// event (for `sample_type`s beyond RAW, say; pair with
    /// [`Self::on_record`]).
    pub fn attr(mut self, attr: PerfEventAttr) -> Self {
        self.opts.attr = AttrChoice::Custom(attr);
        self
    }

    /// When the kernel wakes the reader (default: every record).
    pub fn wakeup(mut self, wakeup: Wakeup) -> Self {
        self.opts.wakeup = wakeup;
        self
    }

    /// With a batching [`Wakeup`], no record waits longer than this to be
    /// read (default 10 ms): a timer in the epoll set makes
    /// [`Reader::poll`] read every ring holding data at least this often.
    pub fn max_delay(mut self, bound: Duration) -> Self {
        self.opts.max_delay = Some(bound);
        self
    }

    /// Read only these CPUs (map key = CPU id); offline or absent ones are
    /// skipped ([`Reader::ring_cpu`] tells which CPU a ring reads).
    pub fn cpus(mut self, cpus: &[u32]) -> Self {
        self.opts.cpus = CpuSelection::Subset(cpus.iter().map(|&c| c as i32).collect());
        self
    }

    /// Exactly these `(cpu, map key)` pairs, in order, for a map laid out
    /// other than by CPU id (libbpf's `perf_buffer_raw_opts`): ring `i`
    /// reads CPU `pairs[i].0` and is stored under key `pairs[i].1`; a CPU
    /// may have several rings. None is skipped: an offline CPU fails the
    /// build.
    pub fn slots(mut self, pairs: &[(u32, u32)]) -> Self {
        self.opts.cpus = CpuSelection::Explicit(pairs.iter().map(|&(c, k)| (c as i32, k as i32)).collect());
        self
    }

    /// Overwritable rings: the kernel keeps the newest records, overwriting
    /// the oldest; read them with [`Reader::snapshot`].
    pub fn overwrite(mut self) -> Self {
        self.opts.overwrite = true;
        self
    }

    /// The fast mode (off by default): while a CPU's rate is high and its
    /// reader keeps up, the kernel wakes the reader only when a quarter of a
    /// spill ring 16 times the caller's is full, instead of for every
    /// record, and a timer delivers the rest within about 1 ms. Several
    /// times libbpf's records/s at a fraction of its CPU; README lists the
    /// callers it does not suit.
    pub fn adaptive(mut self, on: bool) -> Self {
        self.opts.adaptive = on;
        self
    }

    /// Exact lost figures (off by default): each CPU's event counts the
    /// records it could not write (`PERF_FORMAT_LOST`, Linux 6.0+; without
    /// it, nothing changes), so [`crate::RingStats::lost`] includes the
    /// losses the kernel has not yet reported in a LOST record, and
    /// [`Reader::drain_final`] reports them. A `read()` of
    /// [`Reader::ring_event`] then returns 16 bytes (count, lost) instead
    /// of 8. In the fast mode its own events' losses count too. Ignored
    /// with [`Self::attr`] (whose `read_format = PERF_FORMAT_LOST` does the
    /// same).
    pub fn count_lost(mut self, on: bool) -> Self {
        self.opts.count_lost = on;
        self
    }

    /// CPUs that come and go (on by default for this builder; libbpf's
    /// C constructors leave it off unless asked): a CPU that comes online
    /// gets its event, ring and map slot within a second (the poll waiting
    /// is woken by the kernel's uevent), one that goes offline has its
    /// ring read and kept, and one that comes back gets a fresh event (the
    /// kernel leaves the old one dead). New rings get the next indexes, so
    /// [`Reader::rings`] may grow. Needs the default or a custom attr, and
    /// is off for explicit [`Self::slots`].
    pub fn hotplug(mut self, on: bool) -> Self {
        self.opts.hotplug = on;
        self
    }

    /// Leave the map's slots as they are when the buffer is dropped (off by
    /// default: libbpf deletes them). cilium/ebpf's perf reader never
    /// deletes them at Close, so a program that opens a new reader on the
    /// same map while the old one is closing keeps the new reader's slots;
    /// a slot left behind holds its unmapped event, and BPF output into it
    /// fails with -ENOSPC until a reader replaces it.
    pub fn keep_slots(mut self, on: bool) -> Self {
        self.opts.keep_slots = on;
        self
    }

    /// The BPF program's own counts of its outputs: `map` is the
    /// `PERFBUF_OUTPUT_COUNTS` map its output wrapper from
    /// `include/perfbuf.bpf.h` writes. With it, [`crate::RingStats::produced`]
    /// and [`crate::RingStats::output_failed`] are known, so the loss
    /// identity can be checked (see [`crate::RingStats`]). The map is
    /// checked when built (EINVAL for another kind of map) and read only
    /// when figures are asked for.
    pub fn output_counts(mut self, map: impl Into<MapFd<'a>>) -> Self {
        self.counts = Some(map.into());
        self
    }

    /// Opens the buffer: one event and ring per CPU, stored in the map.
    pub fn build(self) -> Result<super::PerfBuffer<'a, T>> {
        let closures = self.closures;
        Self::open(self.opts, self.map, self.counts, closures, self.ring_buffers)
    }

    /// Opens the buffer delivering to `sink` instead of closures (those
    /// given to this builder are dropped): see [`Sink`].
    pub fn build_with<S: Sink>(self, sink: S) -> Result<Reader<'a, S>> {
        Self::open(self.opts, self.map, self.counts, sink, self.ring_buffers)
    }

    fn open<S: Sink>(
        mut opts: Options,
        map: Option<MapFd<'a>>,
        counts: Option<MapFd<'a>>,
        sink: S,
        ring_buffers: bool,
    ) -> Result<Reader<'a, S>> {
        // Borrowed for the call only: the reader keeps a duplicate.
        opts.counts_map = counts.as_ref().map(MapFd::as_raw_fd);
        if ring_buffers && let Some(info) = ring_buffer_map(opts.map_fd)? {
            check_options(&opts)?;
            let mut channel = Channel::open(opts.map_fd, info.max_entries, info.id)?;
            if let Some(counts) = &counts {
                // SAFETY: the map's fd is open while `counts` lives, through this
                // call; the channel keeps a duplicate.
                channel.set_output_counts(unsafe { BorrowedFd::borrow_raw(counts.as_raw_fd()) })?;
            }
            return Ok(Reader::over_ring_buffer(channel, sink, map));
        }
        let rings = RingSet::open(opts, Keyed { sink, key: None })?;
        Ok(Reader::new(rings, map))
    }

    /// Exactly these `(cpu, map key)` pairs.
    #[deprecated(note = "use slots()")]
    #[doc(hidden)]
    pub fn cpu_keys(mut self, pairs: Vec<(i32, i32)>) -> Self {
        self.opts.cpus = CpuSelection::Explicit(pairs);
        self
    }

    /// These CPUs (map key = CPU id), already collected.
    #[deprecated(note = "use cpus()")]
    #[doc(hidden)]
    pub fn cpu_list(mut self, cpus: Vec<i32>) -> Self {
        self.opts.cpus = CpuSelection::Subset(cpus);
        self
    }
}

/// The map's description when it is a `BPF_MAP_TYPE_RINGBUF`; `None` for a
/// perf event array, or when the kernel cannot describe it (the perf
/// reader then decides, as libbpf does); EINVAL naming both kinds for a
/// map of any other type.
fn ring_buffer_map(map_fd: RawFd) -> Result<Option<MapInfo>> {
    match sys::map_info(map_fd) {
        Ok(info) if info.map_type == BPF_MAP_TYPE_RINGBUF => Ok(Some(info)),
        Ok(info) if info.map_type != BPF_MAP_TYPE_PERF_EVENT_ARRAY => {
            Err(log::failed(Error::new(libc::EINVAL, What::NotEventMap(map_fd, info.map_type))))
        }
        _ => Ok(None),
    }
}
