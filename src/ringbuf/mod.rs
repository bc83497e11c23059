//! BPF ring buffers (`BPF_MAP_TYPE_RINGBUF`, Linux 5.8): one ring shared
//! by all CPUs, written by `bpf_ringbuf_output` or
//! `bpf_ringbuf_reserve`/`submit`/`discard`, read here through one epoll
//! instance over any number of maps, as libbpf's `struct ring_buffer`
//! reads them.
//!
//! ```no_run
//! use std::time::Duration;
//! # fn main() -> perfbuf::Result<()> {
//! # let (events, errors): (std::os::fd::OwnedFd, std::os::fd::OwnedFd) = unimplemented!();
//! // `events`, `errors`: BPF_MAP_TYPE_RINGBUF maps, from aya, libbpf-rs or raw fds.
//! let mut rb = perfbuf::RingBuffer::builder()
//!     .add(&events, |data: &[u8]| println!("event: {} bytes", data.len()))
//!     .add(&errors, |data: &[u8]| eprintln!("error record: {data:?}"))
//!     .build()?;
//! loop {
//!     let records = rb.poll(Some(Duration::from_millis(100)))?;
//!     # let _ = records;
//! }
//! # }
//! ```
//!
//! Unlike a perf buffer, a ring buffer has no per-CPU rings (records of
//! all CPUs are in one order, the order their space was reserved) and no
//! lost count: when the ring is full the BPF program's output fails, and
//! only the program sees it. `include/perfbuf.bpf.h`'s wrappers count those
//! refusals in a map the reader reads ([`Builder::output_counts`]), which
//! makes a ring buffer's losses countable at all ([`Ring::accounts`]).
//!
//! Layout: [`layout`](self) maps a ring (the consumer page read-write, the
//! rest read-only), `walk` reads its records without trusting the pages
//! for sizes, this module reads several maps through epoll.

mod callback;
pub(crate) mod channel;
mod fast;
mod layout;
pub(crate) mod read;
mod walk;

#[cfg(test)]
mod tests;

pub use callback::{BoxesSample, RingThreading, SampleResult};
pub use fast::{MAX_TICK, MIN_TICK};
pub use walk::Stats;

#[cfg(feature = "internals")]
#[doc(hidden)]
pub use layout::{BUSY_BIT, DISCARD_BIT, RingMemory};

use crate::error::{Error, Result, What};
use crate::kernel::clock::Moment;
use crate::kernel::fallible;
use crate::kernel::{BPF_MAP_TYPE_RINGBUF, cpu, sys};
use crate::log;
use crate::perf_buffer::{Local, MapFd, Sendable, timeout_ms};
use crate::reader::health::{RATE_WINDOW, RingHealth, Snapshot, Tracker, pages_for};
use crate::reader::output_counts::CountsMap;
use core::ops::ControlFlow;
use layout::RingMemory as Memory;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;
use walk::Publish;

/// The most records one ring gives a call, and the most a call counts
/// (libbpf's `INT_MAX`): reads stay bounded while the producer keeps up.
const CALL_LIMIT: u64 = i32::MAX as u64;

/// Any number of `BPF_MAP_TYPE_RINGBUF` maps read through one epoll
/// instance, each with its own callback: what libbpf's `struct
/// ring_buffer` is, for Rust.
///
/// Callbacks run on the thread that calls [`Self::poll`] or a `consume`
/// method, with each record's bytes, in place in the ring (valid for the
/// call only). The ring buffer borrows the maps' fds (`'a`) and whatever
/// the callbacks borrow. Like a [`crate::PerfBuffer`], it is `Send` when
/// its callbacks are (the default; [`Builder::local`] takes any), and
/// never `Sync`.
pub struct RingBuffer<'a, T: RingThreading = Sendable> {
    epoll: OwnedFd,
    rings: Vec<Ring<'a, T>>,
    /// `epoll_wait`'s output, one slot per ring (as libbpf sizes it).
    events: Vec<libc::epoll_event>,
    /// When the rings' rate windows last began.
    window_at: Moment,
    /// The fast mode's state, when it is on ([`Builder::fast`]).
    pacer: Option<fast::Pacer>,
}

/// The maps and callbacks of a [`RingBuffer`]: see [`RingBuffer::builder`].
#[must_use = "a builder does nothing until built"]
pub struct Builder<'a, T: RingThreading = Sendable> {
    maps: Vec<(MapFd<'a>, T::Callback<'a>, Option<MapFd<'a>>)>,
    fast: bool,
}

/// One map of a [`RingBuffer`] (libbpf's `struct ring`): its positions,
/// size and fd, and reads of this map alone.
pub struct Ring<'a, T: RingThreading = Sendable> {
    memory: Memory,
    map_fd: RawFd,
    /// The map's fd: borrowed for `'a`, or owned; `None`: the caller's
    /// raw fd.
    _map: Option<MapFd<'a>>,
    callback: T::Callback<'a>,
    stats: Stats,
    /// perfbuf.bpf.h's counts of this map's outputs, if given.
    counts: Option<CountsMap>,
    /// Records the caller read and dropped by its own policy.
    dropped: u64,
    /// Times epoll reported the map ready.
    wakeups: u64,
    health: Tracker,
    /// Where reading stopped while `consumer_pos` is held one record
    /// behind (the fast mode); `None`: the two are the same.
    held: Option<u64>,
    /// The map's id: two rings over one map (the same map added twice,
    /// through a dup of its fd) share its `consumer_pos`.
    map_id: u32,
    /// Another ring of this ring buffer reads the same map: the fast mode
    /// never holds its records (the other would read them again).
    shared: bool,
}

impl<'a> RingBuffer<'a> {
    /// A builder; add maps with [`Builder::add`].
    pub fn builder() -> Builder<'a> {
        Builder { maps: Vec::new(), fast: false }
    }

    /// An empty ring buffer (its epoll instance only): add maps with
    /// [`Self::add`] before polling it.
    pub fn new() -> Result<Self> {
        RingBuffer::with_epoll()
    }
}

impl<'a, T: RingThreading> RingBuffer<'a, T> {
    fn with_epoll() -> Result<Self> {
        let epoll = sys::epoll_create().map_err(|e| log::failed(e.with(What::EpollCreate)))?;
        Ok(RingBuffer {
            epoll,
            rings: Vec::new(),
            events: Vec::new(),
            window_at: Moment::coarse(),
            pacer: None,
        })
    }

    /// Turns the fast mode on or off (see [`Builder::fast`]); turning it
    /// off gives back any record it holds.
    pub fn set_fast(&mut self, on: bool) {
        if !on {
            self.stop_holding();
        }
        self.pacer = on.then(|| self.pacer.take().unwrap_or_else(fast::Pacer::new));
    }

    /// Whether the fast mode is on.
    pub fn is_fast(&self) -> bool {
        self.pacer.is_some()
    }

    /// Adds `map`, a `BPF_MAP_TYPE_RINGBUF` (a reference to anything with
    /// an fd, a `BorrowedFd`, or an `OwnedFd` kept and closed with the
    /// ring buffer), whose records go to `f` (libbpf's `ring_buffer__add`).
    /// Fails with EINVAL for a map of another type, with the kernel's
    /// error for an fd that is not a BPF object.
    pub fn add<F, R>(&mut self, map: impl Into<MapFd<'a>>, f: F) -> Result<()>
    where
        F: FnMut(&[u8]) -> R + 'a,
        R: SampleResult,
        T: BoxesSample<'a, F, R>,
    {
        let map = map.into();
        self.add_ring(map.as_raw_fd(), Some(map), T::boxed(f))
    }

    /// [`Self::add`] for a raw fd, as C callers hold them (libbpf does not
    /// keep the fd either: its number is what [`Ring::map_fd`] returns).
    ///
    /// # Safety
    /// If `map_fd` is open, it stays open, and names the same map, for as
    /// long as the ring buffer lives (an fd that is not open fails here).
    pub unsafe fn add_raw_fd<F, R>(&mut self, map_fd: RawFd, f: F) -> Result<()>
    where
        F: FnMut(&[u8]) -> R + 'a,
        R: SampleResult,
        T: BoxesSample<'a, F, R>,
    {
        self.add_ring(map_fd, None, T::boxed(f))
    }

    fn add_ring(&mut self, map_fd: RawFd, map: Option<MapFd<'a>>, callback: T::Callback<'a>) -> Result<()> {
        let info = sys::map_info(map_fd).map_err(|e| log::failed(e.with(What::MapInfo(map_fd))))?;
        if info.map_type != BPF_MAP_TYPE_RINGBUF {
            return Err(log::failed(Error::new(libc::EINVAL, What::NotRingBuf(map_fd, info.map_type))));
        }
        fallible::reserve(&mut self.rings, 1)?;
        fallible::reserve(&mut self.events, 1)?;
        let token = self.rings.len() as u64;
        let memory = map_ring(self.epoll.as_raw_fd(), map_fd, info.max_entries, token)?;
        let mut health = Tracker::default();
        health.current.at = self.window_at;
        let shared = self.rings.iter().any(|r| r.map_id == info.id);
        for ring in self.rings.iter_mut().filter(|r| r.map_id == info.id) {
            ring.release();
            ring.shared = true;
        }
        self.rings.push(Ring {
            memory,
            map_fd,
            _map: map,
            callback,
            stats: Stats::default(),
            counts: None,
            dropped: 0,
            wakeups: 0,
            health,
            held: None,
            map_id: info.id,
            shared,
        });
        self.events.push(libc::epoll_event { events: 0, u64: 0 });
        Ok(())
    }

    /// Waits up to `timeout` (`None`: forever) for maps holding records and
    /// reads them (libbpf's `ring_buffer__poll`). Returns the number of
    /// records the callbacks got (0 when the timeout passed, or when what
    /// woke the wait is not committed yet). Fails with EINTR on a signal
    /// (not retried), with EINVAL while no map was added, and with
    /// [`crate::ErrorKind::Stopped`] when a callback stopped the read.
    ///
    /// In the fast mode ([`Builder::fast`]) a call made while records flow
    /// sleeps up to a tick ([`MAX_TICK`] at most) and reads what came.
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<usize> {
        if self.pacer.is_some() {
            return self.poll_fast(timeout);
        }
        let ready =
            sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, self.rings.len(), timeout_ms(timeout))?;
        let mut total = 0u64;
        for i in 0..ready {
            let idx = self.events[i].u64 as usize;
            if let Some(ring) = self.rings.get_mut(idx) {
                ring.wakeups += 1;
                total += ring.read(CALL_LIMIT)?;
            }
        }
        self.end_read();
        Ok(total as usize)
    }

    /// Starts the rings' next rate windows once a second.
    fn end_read(&mut self) {
        let now = Moment::coarse();
        if now.since(self.window_at) >= RATE_WINDOW {
            self.window_at = now;
            for ring in &mut self.rings {
                let snap = ring.snapshot(now);
                ring.health.rotate(snap);
            }
        }
    }

    /// Counts perfbuf.bpf.h's output counts `counts` as those of map `idx`
    /// (see [`Builder::output_counts`]).
    pub fn set_output_counts(&mut self, idx: usize, counts: BorrowedFd<'_>) -> Result<()> {
        let ring = self.rings.get_mut(idx).ok_or(Error::INVAL)?;
        ring.counts = Some(CountsMap::open(counts)?);
        Ok(())
    }

    /// Reads every map without waiting (libbpf's `ring_buffer__consume`):
    /// at most 2^31 - 1 records per map, and no further map once more than
    /// that many were read in all. Returns the number of records read.
    pub fn consume(&mut self) -> Result<usize> {
        self.stop_holding();
        self.read_all(Publish::Each).map(|(n, _)| n)
    }

    /// Reads up to `n` records without waiting, map after map (libbpf
    /// 1.5's `ring_buffer__consume_n`, whose counting this keeps: a map is
    /// read until `n` were handed out, discarded records stepping over in
    /// between, so `n = 0` still reads a record of the first map that has
    /// one).
    pub fn consume_n(&mut self, n: usize) -> Result<usize> {
        self.stop_holding();
        let (mut left, mut total) = (n as u64, 0u64);
        for ring in &mut self.rings {
            let got = ring.read(left)?;
            total += got;
            left = left.wrapping_sub(got);
            if left == 0 {
                break;
            }
        }
        self.end_read();
        Ok(total as usize)
    }

    /// Number of maps added.
    pub fn rings(&self) -> usize {
        self.rings.len()
    }

    /// Map `idx`, in the order they were added (libbpf's
    /// `ring_buffer__ring`).
    pub fn ring(&self, idx: usize) -> Option<&Ring<'a, T>> {
        self.rings.get(idx)
    }

    /// Map `idx`, to read it alone ([`Ring::consume`]).
    pub fn ring_mut(&mut self, idx: usize) -> Option<&mut Ring<'a, T>> {
        self.rings.get_mut(idx)
    }
}

/// Maps the ring buffer map `map_fd` (the kernel just described it: open,
/// `max_entries` bytes of data) and adds it to `epoll` under `token`.
fn map_ring(epoll: RawFd, map_fd: RawFd, max_entries: u32, token: u64) -> Result<Memory> {
    // SAFETY: the kernel just described this fd, so it is open (and not
    // -1); it stays open while the ring lives (a borrow for 'a, an fd the
    // reader owns, or the raw fd's contract). The mappings taken from it
    // outlive any use of the fd itself.
    let fd = unsafe { BorrowedFd::borrow_raw(map_fd) };
    let memory = Memory::map(fd, max_entries, cpu::page_size()).map_err(log::failed)?;
    sys::epoll_add(epoll, map_fd, token)
        .map_err(|e| log::failed(e.about(format_args!("ringbuf: failed to epoll add map fd={map_fd}"))))?;
    Ok(memory)
}

impl<'a, T: RingThreading> Ring<'a, T> {
    /// Reads up to `limit` records (see `walk`), counting them, and
    /// publishes every record read.
    fn read(&mut self, limit: u64) -> Result<u64> {
        self.read_publishing(limit, Publish::Each)
    }

    /// [`Self::read`], publishing as `publish` says (from where a holding
    /// read stopped).
    fn read_publishing(&mut self, limit: u64, publish: Publish) -> Result<u64> {
        let publish = if self.shared { Publish::Each } else { publish };
        self.health.drain_begins(self.avail_data_size(), Moment::coarse());
        let from = self.held.take();
        let (flow, end) = self.memory.walk_from(from, publish, limit, &mut self.stats, &mut self.callback);
        match publish {
            Publish::HoldLast => self.held = Some(end),
            // A read from a held position that found nothing new stored
            // nothing: give the held record back here.
            Publish::Each if from.is_some() => self.memory.publish(end),
            Publish::Each => {}
        }
        match flow {
            ControlFlow::Continue(n) => Ok(n),
            ControlFlow::Break(v) => Err(Error::stopped(v)),
        }
    }

    /// Gives back a record held by the fast mode.
    fn release(&mut self) {
        if let Some(end) = self.held.take() {
            self.memory.publish(end);
        }
    }

    /// Reads this map without waiting, at most 2^31 - 1 records (libbpf's
    /// `ring__consume`). Returns the number read.
    pub fn consume(&mut self) -> Result<usize> {
        self.read(CALL_LIMIT).map(|n| n as usize)
    }

    /// Reads up to `n` records of this map (libbpf's `ring__consume_n`;
    /// discarded records are stepped over without counting, and `n = 0`
    /// still reads one record).
    pub fn consume_n(&mut self, n: usize) -> Result<usize> {
        self.read(n as u64).map(|n| n as usize)
    }

    /// Where the reader is (`consumer_pos`, bytes since the map's creation).
    pub fn consumer_pos(&self) -> u64 {
        self.memory.consumer().load(core::sync::atomic::Ordering::Acquire)
    }

    /// Where the kernel has reserved up to (`producer_pos`).
    pub fn producer_pos(&self) -> u64 {
        self.memory.producer().load(core::sync::atomic::Ordering::Acquire)
    }

    /// Bytes reserved but not yet read (some may still be being written):
    /// `producer_pos - consumer_pos`, as libbpf computes it.
    pub fn avail_data_size(&self) -> u64 {
        self.producer_pos().wrapping_sub(self.consumer_pos())
    }

    /// Size of the data area in bytes (the map's `max_entries`).
    pub fn size(&self) -> u64 {
        self.memory.size()
    }

    /// The map's fd, as given.
    pub fn map_fd(&self) -> RawFd {
        self.map_fd
    }

    /// What this map's reads handed out, stepped over and skipped.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Counts `n` records the caller read and dropped by its own policy.
    pub fn count_dropped(&mut self, n: u64) {
        self.dropped = self.dropped.saturating_add(n);
    }

    /// Where every record of this map went (see [`RingAccounts`]): with
    /// perfbuf.bpf.h's counts, `produced = delivered + output_failed +
    /// dropped` once the ring is read to its end.
    pub fn accounts(&self) -> Result<RingAccounts> {
        let counts = match &self.counts {
            Some(c) => Some(
                c.read()?
                    .iter()
                    .fold((0u64, 0u64), |(calls, failed), c| (calls + c.calls, failed + c.failed)),
            ),
            None => None,
        };
        Ok(RingAccounts {
            produced: counts.map(|(calls, _)| calls),
            read: self.stats.records,
            dropped: self.dropped,
            output_failed: counts.map_or(0, |(_, failed)| failed),
            discarded: self.stats.discarded,
        })
    }

    /// This map's health, as a perf buffer's ring's ([`RingHealth`]'s
    /// `cpu` is -1: one ring for every CPU). Its losses are what
    /// perfbuf.bpf.h counted refused, so sizing from evidence needs its
    /// counts.
    pub fn health(&self) -> Result<RingHealth> {
        let now = Moment::coarse();
        let (records_per_sec, bytes_per_sec, wakeups_per_sec) = self.health.rates(self.snapshot(now));
        let failed = self.accounts()?.output_failed;
        let mean = self.stats.bytes.checked_div(self.stats.records).unwrap_or(0);
        let needed = self.health.needed(failed, mean);
        let pending = self.avail_data_size();
        Ok(RingHealth {
            cpu: -1,
            online: true,
            pending_bytes: pending,
            peak_pending_bytes: self.health.peak_pending.max(pending),
            data_size: self.size(),
            records_per_sec,
            bytes_per_sec,
            wakeups_per_sec,
            since_last_record: self.health.last_record.map(|t| now.since(t)),
            needed_bytes: needed,
            suggested_pages: pages_for(needed, cpu::page_size()),
            replaced: 0,
        })
    }

    fn snapshot(&self, at: Moment) -> Snapshot {
        Snapshot { at, records: self.stats.records, bytes: self.stats.bytes, wakeups: self.wakeups }
    }
}

/// Where the records of one ring buffer map went.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingAccounts {
    /// Records the BPF program sent (outputs and submitted reservations),
    /// refused ones included, as perfbuf.bpf.h counted them on every CPU
    /// (`None` without [`Builder::output_counts`]).
    pub produced: Option<u64>,
    /// Records read (handed to the callback).
    pub read: u64,
    /// Of those, records the caller dropped by its own policy
    /// ([`Ring::count_dropped`]).
    pub dropped: u64,
    /// Outputs and reservations the kernel refused (a full ring): the ring
    /// buffer's only losses, counted by perfbuf.bpf.h alone.
    pub output_failed: u64,
    /// Records the program reserved and discarded (its own choice: neither
    /// produced nor lost).
    pub discarded: u64,
}

impl RingAccounts {
    /// Records that reached the caller and were kept: `read - dropped`.
    pub fn delivered(&self) -> u64 {
        self.read.saturating_sub(self.dropped)
    }

    /// Every loss: `output_failed + dropped`.
    pub fn lost_total(&self) -> u64 {
        self.output_failed.saturating_add(self.dropped)
    }
}

impl<'a> Builder<'a> {
    /// Takes callbacks that are not `Send` (capturing an `Rc`, a
    /// `&RefCell`...), for a ring buffer that stays on this thread.
    pub fn local(self) -> Builder<'a, Local> {
        let maps = self.maps.into_iter().map(|(m, f, c)| (m, f as <Local as RingThreading>::Callback<'a>, c));
        Builder { maps: maps.collect(), fast: self.fast }
    }
}

impl<'a, T: RingThreading> Builder<'a, T> {
    /// Adds `map`, a `BPF_MAP_TYPE_RINGBUF`, whose records go to `f` (see
    /// [`RingBuffer::add`]; checked when built).
    pub fn add<F, R>(mut self, map: impl Into<MapFd<'a>>, f: F) -> Self
    where
        F: FnMut(&[u8]) -> R + 'a,
        R: SampleResult,
        T: BoxesSample<'a, F, R>,
    {
        self.maps.push((map.into(), T::boxed(f), None));
        self
    }

    /// The output counts (`PERFBUF_OUTPUT_COUNTS`, `include/perfbuf.bpf.h`)
    /// of the map added last: with them [`Ring::accounts`] knows what was
    /// produced and refused. Checked when built.
    pub fn output_counts(mut self, counts: impl Into<MapFd<'a>>) -> Self {
        if let Some(last) = self.maps.last_mut() {
            last.2 = Some(counts.into());
        }
        self
    }

    /// Opts in to the fast mode: while records flow, [`RingBuffer::poll`]
    /// reads on a tick of its own (at most [`MAX_TICK`], sized so a
    /// quarter of the ring fills between reads) and holds `consumer_pos`
    /// one record behind what it read, so the kernel sends no wake-ups and
    /// the producer's CPU pays none. The costs: up to [`MAX_TICK`] more
    /// delivery delay, one record's space held while records flow, and a
    /// `poll` that sleeps rather than waits on the epoll fd (a reactor
    /// watching the fd sees it readable while a record is held: use the
    /// default mode there). `consume` and the other reads give the held
    /// record back first.
    pub fn fast(mut self) -> Self {
        self.fast = true;
        self
    }

    /// Creates the epoll instance and maps every map added, in order; the
    /// first that fails is the error.
    pub fn build(self) -> Result<RingBuffer<'a, T>> {
        let mut rb = RingBuffer::with_epoll()?;
        rb.set_fast(self.fast);
        for (map, f, counts) in self.maps {
            rb.add_ring(map.as_raw_fd(), Some(map), f)?;
            if let Some(counts) = counts {
                // SAFETY: the counts map's fd is open while `counts` lives,
                // through this call; the ring keeps a duplicate.
                let fd = unsafe { BorrowedFd::borrow_raw(counts.as_raw_fd()) };
                rb.set_output_counts(rb.rings.len() - 1, fd)?;
            }
        }
        Ok(rb)
    }
}

/// A record the fast mode holds goes back to the producer: nothing reads
/// it twice, whoever reads the map next.
impl<T: RingThreading> Drop for RingBuffer<'_, T> {
    fn drop(&mut self) {
        self.stop_holding();
    }
}

/// The epoll fd over all maps, for reactors such as tokio's `AsyncFd`:
/// readable while a map holds records (libbpf's `ring_buffer__epoll_fd`).
impl<T: RingThreading> AsFd for RingBuffer<'_, T> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.epoll.as_fd()
    }
}

impl<T: RingThreading> AsRawFd for RingBuffer<'_, T> {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }
}
