//! The Rust face: [`PerfBuffer`] and its [`Builder`], over the same
//! reader as the C face (the C constructors fill this very builder).

#[cfg(feature = "tokio")]
mod async_tokio;
mod map_fd;
mod threading;

#[cfg(feature = "tokio")]
pub use async_tokio::AsyncPerfBuffer;
pub use map_fd::MapFd;
pub use threading::{Boxes, Local, Sendable, Threading};

use crate::error::{Error, Result};
use crate::kernel::PerfEventAttr;
use crate::kernel::sys::CallerAttr;
use crate::reader::order::{KeyFn, OrderBy, OrderKey, OrderStats};
use crate::reader::batch::Batch;
use crate::reader::config::{AttrChoice, CpuSelection, Options, Wakeup};
use crate::reader::deliver::{self, Flow, Halt, Handler};
use crate::reader::stats::RingStats;
use crate::reader::waker::WakeFd;
use crate::reader::{BatchStop, Reader};
use crate::ring::PerfRing;
use crate::ring::record::DispatchStats;
use core::ops::ControlFlow;
use once_cell::sync::OnceCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

/// Per-CPU perf rings over a `BPF_MAP_TYPE_PERF_EVENT_ARRAY`, read through
/// one epoll instance: what libbpf's `struct perf_buffer` is, for Rust.
///
/// Records go to the closures given to the [`Builder`]; they run on the
/// thread that calls [`PerfBuffer::poll`] or a `consume` method. The
/// buffer borrows the map's fd (`'a`) and whatever the closures borrow.
///
/// A buffer is `Send` (it can move into a thread or a tokio task) when its
/// closures are: by default the builder takes only `Send` closures; after
/// [`Builder::local`] it takes any and the buffer is `!Send`
/// ([`Threading`]). It is never `Sync`: one thread at a time polls it.
///
/// ```no_run
/// # fn main() -> perfbuf::Result<()> {
/// # let map: std::os::fd::OwnedFd = unimplemented!();
/// let mut samples = 0u64;
/// let mut pb = perfbuf::PerfBuffer::builder(&map)
///     .pages(64)
///     .on_sample(|cpu, data| {
///         samples += 1;
///         println!("cpu {cpu}: {} bytes", data.len());
///     })
///     .on_lost(|cpu, n| eprintln!("cpu {cpu}: {n} lost"))
///     .build()?;
/// loop {
///     pb.poll(Some(std::time::Duration::from_millis(100)))?;
/// }
/// # }
/// ```
pub struct PerfBuffer<'a, T: Threading = Sendable> {
    reader: Reader<Closures<'a, T>>,
    /// Made when a [`Waker`] is first asked for.
    wake: OnceCell<Arc<WakeFd>>,
    /// The map's fd: borrowed for `'a`, or owned and closed with the buffer.
    _map: MapFd<'a>,
}

/// The options of a [`PerfBuffer`]: see [`PerfBuffer::builder`].
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
    opts: Options,
    closures: Closures<'a, T>,
    map: MapFd<'a>,
}

/// The Rust face's handler: its closures.
pub struct Closures<'a, T: Threading> {
    sample: Option<T::SampleFn<'a>>,
    lost: Option<T::LostFn<'a>>,
    record: Option<T::RecordFn<'a>>,
    key: Option<KeyFn<'a>>,
}

impl<T: Threading> Default for Closures<'_, T> {
    fn default() -> Self {
        Closures { sample: None, lost: None, record: None, key: None }
    }
}

impl<T: Threading> Handler for Closures<'_, T> {
    fn drain(&mut self, ring: &mut PerfRing, head: u64, cpu: i32, stats: &mut DispatchStats) -> Flow {
        let cpu_id = cpu as u32;
        if let Some(record) = &mut self.record {
            return deliver::drain_raw(ring, head, stats, |rec| {
                record(cpu_id, rec).map_break(|()| Halt::Done)
            });
        }
        let lost = &mut self.lost;
        let mut on_lost = |n| {
            if let Some(f) = lost {
                f(cpu_id, n)
            }
        };
        match &mut self.sample {
            Some(sample) => deliver::drain_parsed(ring, head, stats, |data| sample(cpu_id, data), on_lost),
            None => deliver::drain_lost_only(ring, head, stats, &mut on_lost),
        }
    }

    fn deliver(&mut self, cpu: i32, rec: &[u8], stats: &mut DispatchStats) -> ControlFlow<Halt> {
        let cpu_id = cpu as u32;
        if let Some(record) = &mut self.record {
            return deliver::deliver_raw(rec, stats, |rec| record(cpu_id, rec).map_break(|()| Halt::Done));
        }
        let Closures { sample, lost, .. } = self;
        deliver::deliver_parsed(
            rec,
            stats,
            &mut |data| {
                if let Some(f) = sample {
                    f(cpu_id, data)
                }
            },
            &mut |n| {
                if let Some(f) = lost {
                    f(cpu_id, n)
                }
            },
        )
    }

    fn order_key(&mut self, cpu: i32, rec: &[u8]) -> u64 {
        self.key.as_mut().map_or(0, |k| k(cpu as u32, rec))
    }
}

impl<'a> PerfBuffer<'a> {
    /// A builder for a buffer over `map`, a `BPF_MAP_TYPE_PERF_EVENT_ARRAY`:
    /// a reference to anything with an fd (`&OwnedFd`, libbpf-rs's `&Map`,
    /// aya's `map.fd()`...), a `BorrowedFd`, or an `OwnedFd`, which the
    /// buffer keeps and closes ([`MapFd`]). Defaults are libbpf's: 8 pages
    /// per CPU, every online CPU, a wake-up per record.
    pub fn builder(map: impl Into<MapFd<'a>>) -> Builder<'a> {
        let map = map.into();
        Builder { opts: Options::new(map.as_raw_fd()), closures: Closures::default(), map }
    }
}

impl<'a, T: Threading> PerfBuffer<'a, T> {

    /// Waits up to `timeout` (`None`: forever) for rings the kernel
    /// signalled and reads them; returns how many rings were read (0 when
    /// the timeout passed). Fails with [`crate::ErrorKind::Cancelled`] after
    /// a [`Waker::wake`], and with EINTR on a signal (not retried).
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<usize> {
        self.reader.poll(timeout_ms(timeout))
    }

    /// Waits for rings to hold records without reading them (the
    /// perf.data writer's poll, which then drains them run by run).
    pub(crate) fn wait_ready(&mut self, timeout_ms: i32) -> Result<usize> {
        self.reader.wait_ready(timeout_ms)
    }

    /// Reads every ring without waiting.
    pub fn consume(&mut self) -> Result<()> {
        self.reader.consume()
    }

    /// Reads ring `idx` without waiting.
    pub fn consume_ring(&mut self, idx: usize) -> Result<()> {
        self.reader.consume_buffer(idx)
    }

    /// Reads every ring, handing `f` runs of whole records contiguous in
    /// memory instead of one call per record (see [`Batch`]). `f`'s
    /// `Break` stops after that run. Returns the number of records read.
    pub fn consume_batch(&mut self, mut f: impl FnMut(&Batch<'_>) -> ControlFlow<()>) -> Result<usize> {
        let mut stopped = false;
        let counted = self.reader.consume_batch(|b| {
            f(b).map_break(|()| {
                stopped = true;
                0
            })
        });
        match counted {
            Ok(n) => Ok(n),
            Err(BatchStop::Sink(_)) if stopped => Ok(0),
            Err(BatchStop::Sink(v)) => Err(Error::stopped(v)),
            Err(BatchStop::Error(e)) => Err(e),
        }
    }

    /// Number of rings (the online CPUs, bounded by the map's size).
    pub fn rings(&self) -> usize {
        self.reader.buffer_cnt()
    }

    /// The CPU ring `idx` reads.
    pub fn ring_cpu(&self, idx: usize) -> Result<u32> {
        self.reader.cpu_of(idx).map(|c| c as u32)
    }

    /// Ring `idx`'s perf event, for ioctls or an event loop of your own
    /// (libbpf's `perf_buffer__buffer_fd`). In the fast mode, this ring
    /// goes back to libbpf's event for good.
    pub fn ring_event(&mut self, idx: usize) -> Result<BorrowedFd<'_>> {
        let fd = self.reader.event_fd(idx)?;
        // SAFETY: the fd is the reader's own event, open while self is
        // borrowed.
        Ok(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Ring `idx` record by record: peek at the next record, advance past
    /// it, publish what was read (see [`RingReader`]). In the fast mode,
    /// this ring goes back to libbpf's event for good.
    pub fn ring(&mut self, idx: usize) -> Result<RingReader<'_, 'a, T>> {
        self.reader.cpu_buf(idx)?;
        Ok(RingReader { pb: self, idx })
    }

    /// Ring `idx`'s figures (see [`RingStats::lost`] for what `lost`
    /// counts).
    pub fn stats(&self, idx: usize) -> Result<RingStats> {
        self.reader.figures(idx)
    }

    /// The final drain, once the producers have stopped: reads every ring
    /// to its head (an ordered buffer flushes what it holds), then hands
    /// the lost callback (a record callback: a `PERF_RECORD_LOST` made
    /// here, id 0) one report per ring of what the kernel counted lost and
    /// has not yet written into it as a LOST record: nothing goes
    /// unreported for want of a later record. Only rings whose events
    /// count their losses ([`Builder::count_lost`], an event set's rings
    /// on Linux 6.0+) have such a count; elsewhere this is a consume. A
    /// LOST record the kernel writes afterwards is reduced by what was
    /// reported here. Returns the number of records reported lost by that
    /// last step.
    pub fn drain_final(&mut self) -> Result<u64> {
        self.reader.drain_final()
    }

    /// Stops the kernel's output into every ring: records produced
    /// meanwhile are dropped, and reported lost after [`Self::resume`].
    pub fn pause(&self) -> Result<()> {
        self.reader.set_paused(true)
    }

    /// Resumes output after [`Self::pause`].
    pub fn resume(&self) -> Result<()> {
        self.reader.set_paused(false)
    }

    /// A handle that wakes this buffer's [`Self::poll`] from another thread.
    pub fn waker(&self) -> Result<Waker> {
        let shared = self.wake.get_or_try_init(|| WakeFd::owning(self.reader.epoll_fd()).map(Arc::new))?;
        Ok(Waker(shared.clone()))
    }

    /// From now on, [`Self::poll`] and [`Self::consume`] deliver the
    /// records of all CPUs in `key` order. A record goes out only when
    /// every ring has shown a newer key or been idle for `idle_wait`;
    /// records stay in their rings until delivered. In the fast mode every
    /// ring goes back to libbpf's wake-ups.
    pub fn set_order(&mut self, key: OrderKey<'a>, idle_wait: Duration) -> Result<()> {
        let by = match key {
            OrderKey::RawPrefix => OrderBy::RawPrefix,
            OrderKey::SampleTime => OrderBy::SampleTime,
            OrderKey::Fn(f) => {
                self.reader.handler_mut().key = Some(f);
                OrderBy::Handler
            }
        };
        self.reader.set_order(by, idle_wait)
    }

    /// In ordered mode, delivers everything already in the rings, in key
    /// order, ignoring the horizon (at shutdown).
    pub fn flush_ordered(&mut self) -> Result<usize> {
        self.reader.flush_ordered()
    }

    /// The ordered reader's counters, if ordering is on.
    pub fn order_stats(&self) -> Option<OrderStats> {
        self.reader.order_stats()
    }

    /// Reads overwritable ring `idx` ([`Builder::overwrite`]): pauses its
    /// output, delivers what was written since the last read, oldest
    /// first, resumes. Returns the number of records.
    pub fn snapshot(&mut self, idx: usize) -> Result<usize> {
        self.reader.snapshot(idx)
    }
}

impl<T: Threading> Drop for PerfBuffer<'_, T> {
    fn drop(&mut self) {
        if let Some(w) = self.wake.get() {
            w.retire();
        }
    }
}

/// The epoll fd over all rings, for reactors such as tokio's `AsyncFd`:
/// readable when a ring (or the fast mode's timer) calls for a read.
impl<T: Threading> AsFd for PerfBuffer<'_, T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the reader's epoll fd is open while self lives.
        unsafe { BorrowedFd::borrow_raw(self.reader.epoll_fd()) }
    }
}

impl<T: Threading> AsRawFd for PerfBuffer<'_, T> {
    fn as_raw_fd(&self) -> RawFd {
        self.reader.epoll_fd()
    }
}

/// Wakes a [`PerfBuffer::poll`] blocked in another thread: that poll (or
/// the next) fails with [`crate::ErrorKind::Cancelled`]. `Send + Sync`,
/// cloneable; once its buffer is dropped, [`Waker::wake`] fails instead of
/// touching anything.
///
/// ```no_run
/// # fn f(mut pb: perfbuf::PerfBuffer<'static>) -> perfbuf::Result<()> {
/// let waker = pb.waker()?;
/// std::thread::spawn(move || waker.wake());
/// let err = pb.poll(None).unwrap_err();
/// assert_eq!(err.kind(), perfbuf::ErrorKind::Cancelled);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Waker(Arc<WakeFd>);

impl Waker {
    /// Wakes the buffer's poll.
    pub fn wake(&self) -> Result<()> {
        self.0.wake()
    }
}

/// One ring read record by record, borrowed from its [`PerfBuffer`]:
/// [`Self::peek`] shows the next record, [`Self::advance`] moves past it,
/// [`Self::publish`] frees the space of everything advanced past.
///
/// ```no_run
/// # fn f(pb: &mut perfbuf::PerfBuffer<'_>) -> perfbuf::Result<()> {
/// let mut ring = pb.ring(0)?;
/// while let Some(rec) = ring.peek()? {
///     println!("{} bytes", rec.len());
///     ring.advance()?;
/// }
/// ring.publish()?;
/// # Ok(()) }
/// ```
pub struct RingReader<'b, 'a, T: Threading = Sendable> {
    pb: &'b mut PerfBuffer<'a, T>,
    idx: usize,
}

impl<T: Threading> RingReader<'_, '_, T> {
    /// The next record, whole (header included; a copy when it wraps the
    /// ring's end), without consuming it; `None` when the ring is empty.
    pub fn peek(&mut self) -> Result<Option<&[u8]>> {
        self.pb.reader.cpu_buf(self.idx)?.peek()
    }

    /// Moves past the next record (ENODATA when there is none).
    pub fn advance(&mut self) -> Result<()> {
        self.pb.reader.cpu_buf(self.idx)?.advance()
    }

    /// Frees the space of every record advanced past.
    pub fn publish(&mut self) -> Result<()> {
        self.pb.reader.publish(self.idx)
    }
}

impl<'a> Builder<'a> {
    /// A builder over a map fd the caller vouches for (the C face; the fd
    /// may even be invalid: the reader reports that as libbpf does).
    pub fn for_raw_fd(map_fd: RawFd) -> Builder<'a> {
        Builder { opts: Options::new(map_fd), closures: Closures::default(), map: MapFd::None }
    }

    /// Takes closures that are not `Send` (capturing an `Rc`, a
    /// `&RefCell`...), for a buffer that stays on this thread.
    pub fn local(self) -> Builder<'a, Local> {
        let Closures { sample, lost, record, key } = self.closures;
        let closures = Closures {
            sample: sample.map(|f| -> <Local as Threading>::SampleFn<'a> { f }),
            lost: lost.map(|f| -> <Local as Threading>::LostFn<'a> { f }),
            record: record.map(|f| -> <Local as Threading>::RecordFn<'a> { f }),
            key,
        };
        Builder { opts: self.opts, closures, map: self.map }
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
    /// read (default 10 ms): a timer in the epoll set makes [`PerfBuffer::poll`]
    /// read every ring holding data at least this often.
    pub fn max_delay(mut self, bound: Duration) -> Self {
        self.opts.max_delay = Some(bound);
        self
    }

    /// Read only these CPUs (map key = CPU id); offline or absent ones are
    /// skipped ([`PerfBuffer::ring_cpu`] tells which CPU a ring reads).
    pub fn cpus(mut self, cpus: &[u32]) -> Self {
        self.opts.cpus = CpuSelection::Subset(cpus.iter().map(|&c| c as i32).collect());
        self
    }

    /// Overwritable rings: the kernel keeps the newest records, overwriting
    /// the oldest; read them with [`PerfBuffer::snapshot`].
    pub fn overwrite(mut self) -> Self {
        self.opts.overwrite = true;
        self
    }

    /// The fast mode (off by default): while a CPU's rate is high, the
    /// kernel wakes the reader only when a quarter of a spill ring 16 times
    /// the caller's is full, instead of for every record, and a timer
    /// delivers the rest within about 1 ms. Several times libbpf's records/s at a fraction of
    /// its CPU; README lists the callers it does not suit.
    pub fn adaptive(mut self, on: bool) -> Self {
        self.opts.adaptive = on;
        self
    }

    /// Exact lost figures (off by default): each CPU's event counts the
    /// records it could not write (`PERF_FORMAT_LOST`, Linux 6.0+; without
    /// it, nothing changes), so [`RingStats::lost`] includes the losses
    /// the kernel has not yet reported in a LOST record, and
    /// [`PerfBuffer::drain_final`] reports them. A `read()` of
    /// [`PerfBuffer::ring_event`] then returns 16 bytes (count, lost)
    /// instead of 8. In the fast mode its own events' losses count too.
    /// Ignored with [`Self::attr`] (whose `read_format = PERF_FORMAT_LOST`
    /// does the same).
    pub fn count_lost(mut self, on: bool) -> Self {
        self.opts.count_lost = on;
        self
    }

    /// Opens the buffer: one event and ring per CPU, stored in the map.
    pub fn build(self) -> Result<PerfBuffer<'a, T>> {
        let reader = Reader::open(self.opts, self.closures)?;
        Ok(PerfBuffer { reader, wake: OnceCell::new(), _map: self.map })
    }

    /// Opens a reader delivering to `handler` (the C face's callbacks).
    pub fn build_with<H: Handler>(self, handler: H) -> Result<Reader<H>> {
        Reader::open(self.opts, handler)
    }

    /// The caller's attr, passed to the kernel untouched (raw mode).
    pub fn caller_attr(mut self, attr: CallerAttr, sample_type: u64) -> Self {
        self.opts.attr = AttrChoice::Caller(attr, sample_type);
        self
    }

    /// Exactly these `(cpu, map key)` pairs (raw mode's opts).
    pub fn cpu_keys(mut self, pairs: Vec<(i32, i32)>) -> Self {
        self.opts.cpus = CpuSelection::Explicit(pairs);
        self
    }

    /// These CPUs (map key = CPU id), already collected.
    pub fn cpu_list(mut self, cpus: Vec<i32>) -> Self {
        self.opts.cpus = CpuSelection::Subset(cpus);
        self
    }
}

impl crate::events::EventSet {
    /// A reader of the set's rings, through the same [`PerfBuffer`] as
    /// BPF output (poll, consume, batches, ordering by
    /// [`OrderKey::SampleTime`], stats), handing `f` each record attributed
    /// to its event and decoded. Once per set (EBUSY after); EINVAL for a
    /// set built without rings. Events added later are read too. Its
    /// [`RingStats::lost`] is exact at any moment on Linux 6.0+ (every
    /// event of the set counts its losses), and [`PerfBuffer::drain_final`]
    /// reports what the kernel has not yet written as an
    /// [`crate::events::EventRecord::Lost`] with no event. The
    /// buffer is `Send`, so `f` must be; see [`Self::local_reader`].
    pub fn reader<'a>(
        &mut self,
        mut f: impl FnMut(crate::events::EventRecord<'_>) + Send + 'a,
    ) -> Result<PerfBuffer<'a>> {
        let decoder = self.decoder();
        self.reader_over::<Sendable>(Box::new(move |cpu, rec: &[u8]| {
            decoder.decode(cpu, rec, &mut f);
            ControlFlow::Continue(())
        }))
    }

    /// [`Self::reader`] for an `f` that is not `Send` (it captures an
    /// `Rc`, a `&RefCell`...): the buffer stays on this thread.
    pub fn local_reader<'a>(
        &mut self,
        mut f: impl FnMut(crate::events::EventRecord<'_>) + 'a,
    ) -> Result<PerfBuffer<'a, Local>> {
        let decoder = self.decoder();
        self.reader_over::<Local>(Box::new(move |cpu, rec: &[u8]| {
            decoder.decode(cpu, rec, &mut f);
            ControlFlow::Continue(())
        }))
    }

    /// A reader of the set's rings handing every record to `record`.
    fn reader_over<'a, T: Threading>(&mut self, record: T::RecordFn<'a>) -> Result<PerfBuffer<'a, T>> {
        let closures = Closures { record: Some(record), ..Closures::default() };
        let reader = Reader::over_rings(
            self.take_rings()?,
            closures,
            crate::events::BASE_SAMPLE_TYPE,
            self.max_delay(),
        )?;
        Ok(PerfBuffer { reader, wake: OnceCell::new(), _map: MapFd::None })
    }
}

/// A poll timeout in libbpf's milliseconds: -1 forever, rounded up.
pub(crate) fn timeout_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) => d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32,
    }
}

