//! [`Reader`]: per-CPU perf rings read through one epoll instance,
//! delivering to a [`Sink`]; the generic type behind [`super::PerfBuffer`]
//! (whose sink is the builder's closures), an event set's reader and the
//! C library's `struct perf_buffer`.

use super::closures::Closures;
use super::map_fd::MapFd;
use super::threading::Sendable;
use super::timeout_ms;
use crate::error::{Error, Result};
use crate::reader::batch::Batch;
use crate::reader::health::RingHealth;
use crate::reader::order::{OrderBy, OrderKey, OrderStats};
use crate::reader::output_counts::OutputCounts;
use crate::reader::sink::{Keyed, Sink};
use crate::reader::stats::RingStats;
use crate::reader::waker::WakeFd;
use crate::reader::{BatchStop, OwnedRing, RingSet};
use core::ops::ControlFlow;
use once_cell::sync::OnceCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

/// Per-CPU perf rings over a `BPF_MAP_TYPE_PERF_EVENT_ARRAY` (or an event
/// set's), read through one epoll instance, delivering to the sink `S`:
/// what libbpf's `struct perf_buffer` is, for Rust.
///
/// Records go to the sink ([`super::PerfBuffer`]: the closures given to
/// the [`super::Builder`]; [`super::Builder::build_with`]: any [`Sink`]);
/// it runs on the thread that calls [`Self::poll`] or a `consume` method.
/// The reader borrows the map's fd (`'a`) and whatever the sink borrows.
/// It is `Send` when its sink is, and never `Sync`: one thread at a time
/// polls it.
pub struct Reader<'a, S> {
    rings: RingSet<Keyed<'a, S>>,
    /// Made when a [`Waker`] is first asked for.
    wake: OnceCell<Arc<WakeFd>>,
    /// The map's fd: borrowed for `'a`, owned and closed with the reader,
    /// or not held (an event set's rings, the C library's caller's map).
    _map: Option<MapFd<'a>>,
}

impl<'a, S: Sink> Reader<'a, S> {
    /// A reader over `rings`, delivering to `sink`.
    pub(super) fn new(rings: RingSet<Keyed<'a, S>>, map: Option<MapFd<'a>>) -> Self {
        Reader { rings, wake: OnceCell::new(), _map: map }
    }

    /// A reader over rings mapped by someone else (an event set's), their
    /// records starting with `sample_type`'s fields; `max_delay` bounds a
    /// batching set's wake-ups.
    pub(crate) fn over_rings(
        rings: Vec<OwnedRing>,
        sink: S,
        sample_type: u64,
        max_delay: Option<Duration>,
    ) -> Result<Self> {
        let rings = RingSet::over_rings(rings, Keyed { sink, key: None }, sample_type, max_delay)?;
        Ok(Reader::new(rings, None))
    }

    /// Where the records go.
    pub fn sink(&self) -> &S {
        &self.rings.handler().sink
    }

    /// Where the records go, to change it between reads.
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.rings.handler_mut().sink
    }

    /// Waits up to `timeout` (`None`: forever) for rings the kernel
    /// signalled and reads them; returns how many rings were read (0 when
    /// the timeout passed). Fails with [`crate::ErrorKind::Cancelled`] after
    /// a [`Waker::wake`], and with EINTR on a signal (not retried).
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<usize> {
        self.rings.poll(timeout_ms(timeout))
    }

    /// Waits for rings to hold records without reading them (the
    /// perf.data writer's poll, which then drains them run by run).
    pub(crate) fn wait_ready(&mut self, timeout_ms: i32) -> Result<usize> {
        self.rings.wait_ready(timeout_ms)
    }

    /// Reads every ring without waiting.
    pub fn consume(&mut self) -> Result<()> {
        self.rings.consume()
    }

    /// Reads ring `idx` without waiting.
    pub fn consume_ring(&mut self, idx: usize) -> Result<()> {
        self.rings.consume_buffer(idx)
    }

    /// Reads every ring, handing `f` runs of whole records contiguous in
    /// memory instead of one call per record (see [`Batch`]). `f`'s
    /// `Break` stops after that run. Returns the number of records read.
    pub fn consume_batch(&mut self, mut f: impl FnMut(&Batch<'_>) -> ControlFlow<()>) -> Result<usize> {
        let mut stopped = false;
        let counted = self.rings.consume_batch(|b| {
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
        self.rings.buffer_cnt()
    }

    /// The CPU ring `idx` reads.
    pub fn ring_cpu(&self, idx: usize) -> Result<u32> {
        self.rings.cpu_of(idx).map(|c| c as u32)
    }

    /// Ring `idx`'s perf event, for ioctls or an event loop of your own
    /// (libbpf's `perf_buffer__buffer_fd`). In the fast mode, this ring
    /// goes back to libbpf's event for good.
    pub fn ring_event(&mut self, idx: usize) -> Result<BorrowedFd<'_>> {
        let fd = self.rings.event_fd(idx)?;
        // SAFETY: the fd is the reader's own event, open while self is
        // borrowed.
        Ok(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Ring `idx` record by record: peek at the next record, advance past
    /// it, publish what was read (see [`RingReader`]). In the fast mode,
    /// this ring goes back to libbpf's event for good.
    pub fn ring(&mut self, idx: usize) -> Result<RingReader<'_, 'a, S>> {
        self.rings.cpu_buf(idx)?;
        Ok(RingReader { pb: self, idx })
    }

    /// Ring `idx`'s figures (see [`RingStats::lost`] for what `lost`
    /// counts).
    pub fn stats(&self, idx: usize) -> Result<RingStats> {
        self.rings.figures(idx)
    }

    /// Ring `idx`'s health: its backlog now and at its peak, records,
    /// bytes and wake-ups per second, time since its last record, and the
    /// smallest ring that would have held what it had to hold (see
    /// [`RingHealth`]). Cheap: the reader keeps these as it reads.
    pub fn health(&self, idx: usize) -> Result<RingHealth> {
        self.rings.health(idx)
    }

    /// Counts `n` samples of ring `idx` the caller read and then dropped
    /// by its own policy (a filter, a full queue downstream): they move
    /// from delivered to the `dropped` bucket of [`RingStats`], so the
    /// loss identity still adds up.
    pub fn count_dropped(&mut self, idx: usize, n: u64) -> Result<()> {
        self.rings.count_dropped(idx, n)
    }

    /// What the BPF program's output wrappers counted on every CPU,
    /// indexed by CPU id (see [`super::Builder::output_counts`]); `None`
    /// without that map.
    pub fn output_counts(&self) -> Option<Result<Vec<OutputCounts>>> {
        self.rings.output_counts()
    }

    /// The final drain, once the producers have stopped: reads every ring
    /// to its head (an ordered buffer flushes what it holds), then hands
    /// the lost callback (a record callback: a `PERF_RECORD_LOST` made
    /// here, id 0) one report per ring of what the kernel counted lost and
    /// has not yet written into it as a LOST record: nothing goes
    /// unreported for want of a later record. Only rings whose events
    /// count their losses ([`super::Builder::count_lost`], an event set's
    /// rings on Linux 6.0+) have such a count; elsewhere this is a consume.
    /// A LOST record the kernel writes afterwards is reduced by what was
    /// reported here. Returns the number of records reported lost by that
    /// last step.
    pub fn drain_final(&mut self) -> Result<u64> {
        self.rings.drain_final()
    }

    /// Stops the kernel's output into every ring: records produced
    /// meanwhile are dropped, and reported lost after [`Self::resume`].
    pub fn pause(&self) -> Result<()> {
        self.rings.set_paused(true)
    }

    /// Resumes output after [`Self::pause`].
    pub fn resume(&self) -> Result<()> {
        self.rings.set_paused(false)
    }

    /// A handle that wakes this reader's [`Self::poll`] from another thread.
    pub fn waker(&self) -> Result<Waker> {
        let shared = self.wake.get_or_try_init(|| WakeFd::owning(self.rings.epoll_fd()).map(Arc::new))?;
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
            OrderKey::Sink => OrderBy::Handler,
            OrderKey::Fn(f) => {
                self.rings.handler_mut().key = Some(f);
                OrderBy::Handler
            }
        };
        self.rings.set_order(by, idle_wait)
    }

    /// In ordered mode, delivers everything already in the rings, in key
    /// order, ignoring the horizon (at shutdown).
    pub fn flush_ordered(&mut self) -> Result<usize> {
        self.rings.flush_ordered()
    }

    /// The ordered reader's counters, if ordering is on.
    pub fn order_stats(&self) -> Option<OrderStats> {
        self.rings.order_stats()
    }

    /// Reads overwritable ring `idx` ([`super::Builder::overwrite`]):
    /// pauses its output, delivers what was written since the last read,
    /// oldest first, resumes. Returns the number of records.
    pub fn snapshot(&mut self, idx: usize) -> Result<usize> {
        self.rings.snapshot(idx)
    }

    /// The rings, for what only libbpf's C API needs
    /// ([`crate::libbpf_compat`]).
    pub(crate) fn ring_set(&mut self) -> &mut RingSet<Keyed<'a, S>> {
        &mut self.rings
    }
}

impl<S> Drop for Reader<'_, S> {
    fn drop(&mut self) {
        if let Some(w) = self.wake.get() {
            w.retire();
        }
    }
}

/// The epoll fd over all rings, for reactors such as tokio's `AsyncFd`:
/// readable when a ring (or the fast mode's timer) calls for a read.
impl<S: Sink> AsFd for Reader<'_, S> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the reader's epoll fd is open while self lives.
        unsafe { BorrowedFd::borrow_raw(self.rings.epoll_fd()) }
    }
}

impl<S: Sink> AsRawFd for Reader<'_, S> {
    fn as_raw_fd(&self) -> RawFd {
        self.rings.epoll_fd()
    }
}

/// Wakes a [`Reader::poll`] blocked in another thread: that poll (or the
/// next) fails with [`crate::ErrorKind::Cancelled`]. `Send + Sync`,
/// cloneable; once its reader is dropped, [`Waker::wake`] fails instead of
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
    /// Wakes the reader's poll.
    pub fn wake(&self) -> Result<()> {
        self.0.wake()
    }
}

/// One ring read record by record, borrowed from its [`Reader`]:
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
pub struct RingReader<'b, 'a, S = Closures<'a, Sendable>> {
    pb: &'b mut Reader<'a, S>,
    idx: usize,
}

impl<S: Sink> RingReader<'_, '_, S> {
    /// The next record, whole (header included; a copy when it wraps the
    /// ring's end), without consuming it; `None` when the ring is empty.
    pub fn peek(&mut self) -> Result<Option<&[u8]>> {
        self.pb.rings.cpu_buf(self.idx)?.peek()
    }

    /// Moves past the next record (ENODATA when there is none).
    pub fn advance(&mut self) -> Result<()> {
        self.pb.rings.cpu_buf(self.idx)?.advance()
    }

    /// Frees the space of every record advanced past.
    pub fn publish(&mut self) -> Result<()> {
        self.pb.rings.publish(self.idx)
    }
}
