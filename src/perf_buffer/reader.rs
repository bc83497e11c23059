//! [`Reader`]: per-CPU perf rings read through one epoll instance,
//! delivering to a [`Sink`]; the generic type behind [`super::PerfBuffer`]
//! (whose sink is the builder's closures), an event set's reader and the
//! C library's `struct perf_buffer`.

use super::closures::Closures;
use super::map_fd::MapFd;
use super::threading::Sendable;
use super::timeout_ms;
use crate::error::{Error, Result, What};
use crate::kernel::clock::Moment;
use crate::reader::batch::Batch;
use crate::reader::batch_read::BatchBuf;
#[cfg(doc)]
use crate::reader::batch_read::BatchEntry;
use crate::reader::health::RingHealth;
use crate::reader::order::{OrderBy, OrderKey, OrderStats};
use crate::reader::output_counts::OutputCounts;
use crate::reader::sink::{Keyed, Sink};
use crate::reader::stats::RingStats;
use crate::reader::waker::WakeFd;
use crate::reader::{BatchStop, OwnedRing, RingSet};
use crate::reader::{epoll_ms, timeout_left};
use crate::ringbuf::channel::{Channel, not_for_ring_buffer};
use core::ops::ControlFlow;
use once_cell::sync::OnceCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

/// Per-CPU perf rings over a `BPF_MAP_TYPE_PERF_EVENT_ARRAY` (or an event
/// set's), or a `BPF_MAP_TYPE_RINGBUF`, read through one epoll instance,
/// delivering to the sink `S`: what libbpf's `struct perf_buffer` is, for
/// Rust, and what a tool reads either kind of map with.
///
/// Over a ring buffer (see [`super::Builder`] for what changes) the reader
/// has one ring, 0, whose CPU is `u32::MAX` ([`crate::NO_CPU`]); the calls
/// about per-CPU perf rings and their events ([`Self::ring_event`],
/// [`Self::ring`], [`Self::consume_batch`], [`Self::snapshot`]) fail with
/// [`crate::ErrorKind::Unsupported`] (EOPNOTSUPP), naming what it lacks.
///
/// Records go to the sink ([`super::PerfBuffer`]: the closures given to
/// the [`super::Builder`]; [`super::Builder::build_with`]: any [`Sink`]);
/// it runs on the thread that calls [`Self::poll`] or a `consume` method.
/// The reader borrows the map's fd (`'a`) and whatever the sink borrows.
/// It is `Send` when its sink is, and never `Sync`: one thread at a time
/// polls it.
pub struct Reader<'a, S> {
    rings: Rings<'a, S>,
    /// Made when a [`Waker`] is first asked for.
    wake: OnceCell<Arc<WakeFd>>,
    /// The map's fd: borrowed for `'a`, owned and closed with the reader,
    /// or not held (an event set's rings, the C library's caller's map).
    _map: Option<MapFd<'a>>,
}

/// What a reader reads: per-CPU perf rings, or a BPF ring buffer (with
/// the sink beside it).
enum Rings<'a, S> {
    Perf(RingSet<Keyed<'a, S>>),
    RingBuf(Channel, Keyed<'a, S>),
}

impl<'a, S: Sink> Reader<'a, S> {
    /// A reader over `rings`, delivering to `sink`.
    pub(super) fn new(rings: RingSet<Keyed<'a, S>>, map: Option<MapFd<'a>>) -> Self {
        Reader { rings: Rings::Perf(rings), wake: OnceCell::new(), _map: map }
    }

    /// A reader over a BPF ring buffer, delivering to `sink`.
    pub(super) fn over_ring_buffer(channel: Channel, sink: S, map: Option<MapFd<'a>>) -> Self {
        let handler = Keyed { sink, key: None };
        Reader { rings: Rings::RingBuf(channel, handler), wake: OnceCell::new(), _map: map }
    }

    /// The perf rings, or EOPNOTSUPP naming `what` for a ring buffer.
    fn perf(&mut self, what: &'static str) -> Result<&mut RingSet<Keyed<'a, S>>> {
        match &mut self.rings {
            Rings::Perf(rings) => Ok(rings),
            Rings::RingBuf(..) => Err(not_for_ring_buffer(what)),
        }
    }

    fn handler(&self) -> &Keyed<'a, S> {
        match &self.rings {
            Rings::Perf(rings) => rings.handler(),
            Rings::RingBuf(_, handler) => handler,
        }
    }

    fn handler_mut(&mut self) -> &mut Keyed<'a, S> {
        match &mut self.rings {
            Rings::Perf(rings) => rings.handler_mut(),
            Rings::RingBuf(_, handler) => handler,
        }
    }

    /// Whether the map is a BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`)
    /// rather than a perf event array.
    pub fn is_ring_buffer(&self) -> bool {
        matches!(self.rings, Rings::RingBuf(..))
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
        &self.handler().sink
    }

    /// Where the records go, to change it between reads.
    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.handler_mut().sink
    }

    /// Waits up to `timeout` (`None`: forever) for rings the kernel
    /// signalled and reads them; returns how many rings were read (0 when
    /// the timeout passed). Fails with [`crate::ErrorKind::Cancelled`] after
    /// a [`Waker::wake`], and with EINTR on a signal (not retried).
    pub fn poll(&mut self, timeout: Option<Duration>) -> Result<usize> {
        match &mut self.rings {
            Rings::Perf(rings) => rings.poll(timeout_ms(timeout)),
            Rings::RingBuf(channel, handler) => channel.poll(handler, timeout_ms(timeout)),
        }
    }

    /// Waits for rings to hold records without reading them (the
    /// perf.data writer's poll, which then drains them run by run).
    pub(crate) fn wait_ready(&mut self, timeout_ms: i32) -> Result<usize> {
        self.perf("waiting without reading")?.wait_ready(timeout_ms)
    }

    /// Reads every ring without waiting.
    pub fn consume(&mut self) -> Result<()> {
        match &mut self.rings {
            Rings::Perf(rings) => rings.consume(),
            Rings::RingBuf(channel, handler) => channel.read(handler).map(drop),
        }
    }

    /// Reads ring `idx` without waiting.
    pub fn consume_ring(&mut self, idx: usize) -> Result<()> {
        match &mut self.rings {
            Rings::Perf(rings) => rings.consume_buffer(idx),
            Rings::RingBuf(channel, handler) if idx == 0 => channel.read(handler).map(drop),
            Rings::RingBuf(..) => Err(Error::new(libc::EINVAL, What::RingIndex(idx))),
        }
    }

    /// Reads every ring, handing `f` runs of whole records contiguous in
    /// memory instead of one call per record (see [`Batch`]). `f`'s
    /// `Break` stops after that run. Returns the number of records read.
    pub fn consume_batch(&mut self, mut f: impl FnMut(&Batch<'_>) -> ControlFlow<()>) -> Result<usize> {
        let mut stopped = false;
        let counted = self.perf("batches of perf records")?.consume_batch(|b| {
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

    /// Copies into `out` what the rings hold, as far as it fits, without
    /// waiting and without the sink: each sample's bytes (as the sample
    /// callback would get them) at an 8-aligned offset of `out`'s data,
    /// and one [`BatchEntry`] per sample or loss report (what the lost
    /// callback would get). A record that does not fit stays in its ring
    /// for the next read, which starts with that ring; nothing is consumed
    /// that is not delivered, and the figures ([`Self::stats`],
    /// [`Self::health`]) count what was read as a consume would. Appends
    /// to `out` (see [`BatchBuf::clear`]) and returns the entries added.
    ///
    /// Fails with EMSGSIZE when the next record alone is larger than
    /// `out`'s whole data ([`BatchBuf::needed`] says how large: read again
    /// with that much, the record waits in its ring); EINVAL with fewer
    /// than 2 entries free or in the ordered mode; EOPNOTSUPP over rings
    /// whose samples are not BPF output (an event set's).
    ///
    /// ```no_run
    /// # fn f(pb: &mut perfbuf::PerfBuffer<'_>) -> perfbuf::Result<()> {
    /// use perfbuf::{BatchBuf, BatchEntry};
    /// let (mut data, mut entries) = (vec![0u8; 1 << 20], vec![BatchEntry::default(); 4096]);
    /// let mut batch = BatchBuf::new(&mut data, &mut entries);
    /// pb.poll_batch(Some(std::time::Duration::from_millis(100)), &mut batch)?;
    /// for (i, e) in batch.entries().iter().enumerate() {
    ///     match e.lost {
    ///         0 => println!("cpu {}: {} bytes", e.cpu, batch.record(i).unwrap_or_default().len()),
    ///         n => println!("cpu {}: {n} lost", e.cpu),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub fn read_batch(&mut self, out: &mut BatchBuf<'_>) -> Result<usize> {
        if out.entries_left() < 2 {
            return Err(crate::log::invalid("a batch read with fewer than 2 entries free"));
        }
        match &mut self.rings {
            Rings::Perf(rings) => rings.read_batch(out),
            Rings::RingBuf(channel, _) => channel.read_batch(out),
        }
    }

    /// [`Self::read_batch`]; when that finds nothing, waits up to
    /// `timeout` (`None`: forever) for a ring to signal and reads again,
    /// until something is read or the time is up (then 0). Records stay
    /// out of the sink: use this instead of [`Self::poll`]. Fails with
    /// [`crate::ErrorKind::Cancelled`] after a [`Waker::wake`].
    pub fn poll_batch(&mut self, timeout: Option<Duration>, out: &mut BatchBuf<'_>) -> Result<usize> {
        let (timeout_ms, start) = (timeout_ms(timeout), Moment::now());
        loop {
            let n = self.read_batch(out)?;
            if n > 0 {
                return Ok(n);
            }
            let Some(left) = timeout_left(start, timeout_ms) else { return Ok(0) };
            let wait_ms = epoll_ms(left);
            match &mut self.rings {
                Rings::Perf(rings) => rings.wait_ready(wait_ms).map(drop)?,
                Rings::RingBuf(channel, _) => channel.wait(wait_ms).map(drop)?,
            }
        }
    }

    /// Number of rings (the online CPUs, bounded by the map's size; 1 for
    /// a ring buffer).
    pub fn rings(&self) -> usize {
        match &self.rings {
            Rings::Perf(rings) => rings.buffer_cnt(),
            Rings::RingBuf(..) => 1,
        }
    }

    /// The CPU ring `idx` reads ([`crate::NO_CPU`] for a ring buffer's).
    pub fn ring_cpu(&self, idx: usize) -> Result<u32> {
        match &self.rings {
            Rings::Perf(rings) => rings.cpu_of(idx).map(|c| c as u32),
            Rings::RingBuf(..) if idx == 0 => Ok(crate::NO_CPU),
            Rings::RingBuf(..) => Err(Error::new(libc::EINVAL, What::RingIndex(idx))),
        }
    }

    /// Ring `idx`'s perf event, for ioctls or an event loop of your own
    /// (libbpf's `perf_buffer__buffer_fd`). In the fast mode, this ring
    /// goes back to libbpf's event for good.
    pub fn ring_event(&mut self, idx: usize) -> Result<BorrowedFd<'_>> {
        let fd = self.perf("per-CPU perf events")?.event_fd(idx)?;
        // SAFETY: the fd is the reader's own event, open while self is
        // borrowed.
        Ok(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Ring `idx` record by record: peek at the next record, advance past
    /// it, publish what was read (see [`RingReader`]). In the fast mode,
    /// this ring goes back to libbpf's event for good.
    pub fn ring(&mut self, idx: usize) -> Result<RingReader<'_, 'a, S>> {
        self.perf("per-CPU perf rings read record by record")?.cpu_buf(idx)?;
        Ok(RingReader { pb: self, idx })
    }

    /// Ring `idx`'s figures (see [`RingStats::lost`] for what `lost`
    /// counts).
    pub fn stats(&self, idx: usize) -> Result<RingStats> {
        match &self.rings {
            Rings::Perf(rings) => rings.figures(idx),
            Rings::RingBuf(channel, _) if idx == 0 => channel.figures(),
            Rings::RingBuf(..) => Err(Error::new(libc::EINVAL, What::RingIndex(idx))),
        }
    }

    /// Ring `idx`'s health: its backlog now and at its peak, records,
    /// bytes and wake-ups per second, time since its last record, and the
    /// smallest ring that would have held what it had to hold (see
    /// [`RingHealth`]). Cheap: the reader keeps these as it reads.
    pub fn health(&self, idx: usize) -> Result<RingHealth> {
        match &self.rings {
            Rings::Perf(rings) => rings.health(idx),
            Rings::RingBuf(channel, _) if idx == 0 => channel.health(),
            Rings::RingBuf(..) => Err(Error::new(libc::EINVAL, What::RingIndex(idx))),
        }
    }

    /// Counts `n` samples of ring `idx` the caller read and then dropped
    /// by its own policy (a filter, a full queue downstream): they move
    /// from delivered to the `dropped` bucket of [`RingStats`], so the
    /// loss identity still adds up.
    pub fn count_dropped(&mut self, idx: usize, n: u64) -> Result<()> {
        match &mut self.rings {
            Rings::Perf(rings) => rings.count_dropped(idx, n),
            Rings::RingBuf(channel, _) if idx == 0 => {
                channel.count_dropped(n);
                Ok(())
            }
            Rings::RingBuf(..) => Err(Error::new(libc::EINVAL, What::RingIndex(idx))),
        }
    }

    /// What the BPF program's output wrappers counted on every CPU,
    /// indexed by CPU id (see [`super::Builder::output_counts`]); `None`
    /// without that map.
    pub fn output_counts(&self) -> Option<Result<Vec<OutputCounts>>> {
        match &self.rings {
            Rings::Perf(rings) => rings.output_counts(),
            Rings::RingBuf(channel, _) => channel.output_counts(),
        }
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
    ///
    /// A ring buffer's final drain reads it, and reports what was dropped
    /// while paused once the read has passed it (the kernel counts no
    /// losses of a ring buffer).
    pub fn drain_final(&mut self) -> Result<u64> {
        match &mut self.rings {
            Rings::Perf(rings) => rings.drain_final(),
            Rings::RingBuf(channel, handler) => channel.drain_final(handler),
        }
    }

    /// Stops the kernel's output into every ring: records produced
    /// meanwhile are dropped, and reported lost after [`Self::resume`].
    /// The kernel cannot pause a ring buffer: its reader drops the records
    /// reserved from now until [`Self::resume`] instead (those reserved
    /// before are still delivered), and reports them lost once read past;
    /// the program's output keeps succeeding while the reader keeps
    /// reading.
    pub fn pause(&self) -> Result<()> {
        match &self.rings {
            Rings::Perf(rings) => rings.set_paused(true),
            Rings::RingBuf(channel, _) => {
                channel.pause();
                Ok(())
            }
        }
    }

    /// Resumes output after [`Self::pause`].
    pub fn resume(&self) -> Result<()> {
        match &self.rings {
            Rings::Perf(rings) => rings.set_paused(false),
            Rings::RingBuf(channel, _) => {
                channel.resume();
                Ok(())
            }
        }
    }

    /// The epoll fd over the rings.
    fn epoll_fd(&self) -> RawFd {
        match &self.rings {
            Rings::Perf(rings) => rings.epoll_fd(),
            Rings::RingBuf(channel, _) => channel.epoll_fd(),
        }
    }

    /// A handle that wakes this reader's [`Self::poll`] from another thread.
    pub fn waker(&self) -> Result<Waker> {
        let shared = self.wake.get_or_try_init(|| WakeFd::owning(self.epoll_fd()).map(Arc::new))?;
        Ok(Waker(shared.clone()))
    }

    /// From now on, [`Self::poll`] and [`Self::consume`] deliver the
    /// records of all CPUs in `key` order. A record goes out only when
    /// every ring has shown a newer key or been idle for `idle_wait`;
    /// records stay in their rings until delivered. In the fast mode every
    /// ring goes back to libbpf's wake-ups.
    ///
    /// A ring buffer's records are in one order already, the order their
    /// space was reserved in: there this does nothing (and the key is not
    /// asked for).
    pub fn set_order(&mut self, key: OrderKey<'a>, idle_wait: Duration) -> Result<()> {
        let Rings::Perf(rings) = &mut self.rings else { return Ok(()) };
        let by = match key {
            OrderKey::RawPrefix => OrderBy::RawPrefix,
            OrderKey::SampleTime => OrderBy::SampleTime,
            OrderKey::Sink => OrderBy::Handler,
            OrderKey::Fn(f) => {
                rings.handler_mut().key = Some(f);
                OrderBy::Handler
            }
        };
        rings.set_order(by, idle_wait)
    }

    /// In ordered mode, delivers everything already in the rings, in key
    /// order, ignoring the horizon (at shutdown). A ring buffer is read
    /// (it is always in order).
    pub fn flush_ordered(&mut self) -> Result<usize> {
        match &mut self.rings {
            Rings::Perf(rings) => rings.flush_ordered(),
            Rings::RingBuf(channel, handler) => channel.read(handler),
        }
    }

    /// The ordered reader's counters, if ordering is on (never for a ring
    /// buffer).
    pub fn order_stats(&self) -> Option<OrderStats> {
        match &self.rings {
            Rings::Perf(rings) => rings.order_stats(),
            Rings::RingBuf(..) => None,
        }
    }

    /// Reads overwritable ring `idx` ([`super::Builder::overwrite`]):
    /// pauses its output, delivers what was written since the last read,
    /// oldest first, resumes. Returns the number of records.
    pub fn snapshot(&mut self, idx: usize) -> Result<usize> {
        self.perf("overwritable rings")?.snapshot(idx)
    }

    /// The perf rings, for what only libbpf's C API needs
    /// ([`crate::libbpf_compat`]); EOPNOTSUPP naming `what` for a ring
    /// buffer.
    pub(crate) fn ring_set(&mut self, what: &'static str) -> Result<&mut RingSet<Keyed<'a, S>>> {
        self.perf(what)
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
        unsafe { BorrowedFd::borrow_raw(self.epoll_fd()) }
    }
}

impl<S: Sink> AsRawFd for Reader<'_, S> {
    fn as_raw_fd(&self) -> RawFd {
        self.epoll_fd()
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
        self.pb.perf("per-CPU perf rings")?.cpu_buf(self.idx)?.peek()
    }

    /// Moves past the next record (ENODATA when there is none).
    pub fn advance(&mut self) -> Result<()> {
        self.pb.perf("per-CPU perf rings")?.cpu_buf(self.idx)?.advance()
    }

    /// Frees the space of every record advanced past.
    pub fn publish(&mut self) -> Result<()> {
        self.pb.perf("per-CPU perf rings")?.publish(self.idx)
    }
}
