//! Where a reader's records go: a [`Sink`], the one trait every face
//! implements (the Rust builder's closures, an event set's decoder, the C
//! library's function pointers). A reader hands its sink the records of
//! one ring at a time as [`Records`]; the sink says how it wants them
//! (libbpf's sample and lost callbacks, or every record whole), and the
//! reader's drain loop, inlined into the sink's own code, calls it back
//! for each record.

use super::deliver::{self, Flow, Halt, Handler};
use super::order::KeyFn;
use crate::ring::record::DispatchStats;
use crate::ring::{PerfRing, Stop as RingStop};
use crate::ringbuf::read::RingRead;
use core::ops::ControlFlow;

/// Where a reader's records go.
///
/// [`Sink::take`] gets the records of one read of one ring (or one record
/// the reader hands over by itself: a lost report it made, a record the
/// ordered reader picked, an overwritable ring's snapshot) and passes them
/// on with one of [`Records`]'s methods. Mark an implementation
/// `#[inline(always)]`: the reader's loop over the ring is inlined into
/// it, so the closures given to [`Records`] stay in registers.
///
/// ```
/// use core::ops::ControlFlow;
/// use perfbuf::sink::{Records, Sink, Taken};
///
/// /// Counts samples and lost records.
/// #[derive(Default)]
/// struct Counter {
///     samples: u64,
///     bytes: u64,
///     lost: u64,
/// }
///
/// impl Sink for Counter {
///     #[inline(always)]
///     fn take(&mut self, records: Records<'_>) -> Taken {
///         let Counter { samples, bytes, lost } = self;
///         records.samples(
///             |data| {
///                 *samples += 1;
///                 *bytes += data.len() as u64;
///             },
///             |n| *lost += n,
///         )
///     }
/// }
/// # fn f(map: std::os::fd::OwnedFd) -> perfbuf::Result<()> {
/// let mut reader = perfbuf::PerfBuffer::builder(map).build_with(Counter::default())?;
/// reader.poll(None)?;
/// println!("{} samples", reader.sink().samples);
/// # Ok(()) }
/// ```
pub trait Sink {
    /// Takes `records`: hands them on with [`Records::samples`] or
    /// [`Records::each`], and returns what that returned.
    fn take(&mut self, records: Records<'_>) -> Taken;

    /// The key of a record of `cpu`'s ring (header included), when the
    /// reader orders records by the sink's keys
    /// ([`crate::OrderKey::Sink`]). 0 by default.
    fn order_key(&mut self, cpu: u32, record: &[u8]) -> u64 {
        let _ = (cpu, record);
        0
    }
}

/// Records for a [`Sink`]: the unread records of one ring (a CPU's perf
/// ring, or a BPF ring buffer, which has no CPU), or one record.
pub struct Records<'r> {
    source: Source<'r>,
    cpu: i32,
}

enum Source<'r> {
    /// A ring, read up to `head`.
    Ring { ring: &'r mut PerfRing, head: u64, stats: &'r mut DispatchStats },
    /// One whole record.
    One(&'r [u8], &'r mut DispatchStats),
    /// A BPF ring buffer's records, which are samples' data only.
    RingBuf(RingRead<'r>),
}

/// What a [`Sink`] did with its [`Records`]: read them all, or stopped.
/// Made only by [`Records`]'s methods.
#[must_use = "a sink returns what its records' method returned"]
pub struct Taken(Flow);

impl Taken {
    /// What the read's loop made of it.
    pub(crate) fn into_flow(self) -> Flow {
        self.0
    }
}

/// Why a record callback stops a read (see [`Records::each`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// Stop reading this ring for now; the read goes on with the others
    /// (libbpf's `LIBBPF_PERF_EVENT_DONE`).
    Ring,
    /// Stop the read, which fails with [`crate::ErrorKind::Stopped`] and
    /// this value (libbpf returns a raw callback's other values as is).
    Read(i32),
}

impl<'r> Records<'r> {
    pub(crate) fn ring(ring: &'r mut PerfRing, head: u64, cpu: i32, stats: &'r mut DispatchStats) -> Self {
        Records { source: Source::Ring { ring, head, stats }, cpu }
    }

    pub(crate) fn one(record: &'r [u8], cpu: i32, stats: &'r mut DispatchStats) -> Self {
        Records { source: Source::One(record, stats), cpu }
    }

    pub(crate) fn ring_buffer(read: RingRead<'r>) -> Self {
        Records { source: Source::RingBuf(read), cpu: -1 }
    }

    /// The CPU of the ring these records come from (`None` for a ring
    /// that is not one CPU's: a BPF ring buffer's records carry no CPU).
    #[inline(always)]
    pub fn cpu(&self) -> Option<u32> {
        u32::try_from(self.cpu).ok()
    }

    /// libbpf's split (`perf_buffer__new`'s callbacks): `sample(data)` with
    /// each sample's raw data (padded by the kernel to 8 bytes with its
    /// 4-byte size), `lost(count)` with each report of records the kernel
    /// dropped. A record of another type stops the read (the read fails
    /// with [`crate::ErrorKind::UnknownRecord`], libbpf's
    /// `LIBBPF_PERF_EVENT_ERROR`). Give `move` closures: a callable whose
    /// address escapes is reloaded from memory after every call.
    ///
    /// From a BPF ring buffer, `sample` gets each record's bytes exactly as
    /// the program wrote them (no padding), and `lost` the records the
    /// reader dropped while paused (the kernel counts no losses there).
    #[inline(always)]
    pub fn samples<S: FnMut(&[u8]), L: FnMut(u64)>(self, mut sample: S, mut lost: L) -> Taken {
        match self.source {
            Source::Ring { ring, head, stats } => {
                Taken(deliver::drain_parsed(ring, head, stats, sample, lost))
            }
            Source::One(rec, stats) => {
                Taken(deliver::deliver_parsed(rec, stats, &mut sample, &mut lost).map_break(RingStop::By))
            }
            Source::RingBuf(read) => Taken(read.samples(sample, lost)),
        }
    }

    /// Every record whole, header included (libbpf's raw `event_cb`): a
    /// `PERF_RECORD_LOST` reporting losses already reported by a final
    /// drain comes reduced by them (a record made here), or not at all.
    /// `record`'s `Break` stops the read as [`Stop`] says.
    ///
    /// From a BPF ring buffer, each record comes as the `PERF_RECORD_SAMPLE`
    /// a perf buffer's default event would make of it (header, `u32` raw
    /// size, the bytes, zeros to 8; copied, up to 65516 bytes: a longer
    /// record fails the read), and the records dropped while paused as a
    /// `PERF_RECORD_LOST` made here.
    #[inline(always)]
    pub fn each<R: FnMut(&[u8]) -> ControlFlow<Stop>>(self, mut record: R) -> Taken {
        let mut halting = move |rec: &[u8]| record(rec).map_break(Halt::from);
        match self.source {
            Source::Ring { ring, head, stats } => Taken(deliver::drain_raw(ring, head, stats, halting)),
            Source::One(rec, stats) => {
                Taken(deliver::deliver_raw(rec, stats, &mut halting).map_break(RingStop::By))
            }
            Source::RingBuf(read) => Taken(read.whole(halting)),
        }
    }
}

impl From<Stop> for Halt {
    #[inline(always)]
    fn from(stop: Stop) -> Halt {
        match stop {
            Stop::Ring => Halt::Done,
            Stop::Read(v) => Halt::Code(v),
        }
    }
}

/// A [`Sink`] as the reader's handler, with the key function of
/// [`crate::OrderKey::Fn`] beside it.
pub(crate) struct Keyed<'a, S> {
    pub(crate) sink: S,
    pub(crate) key: Option<KeyFn<'a>>,
}

impl<S: Sink> Handler for Keyed<'_, S> {
    #[inline(always)]
    fn drain(&mut self, ring: &mut PerfRing, head: u64, cpu: i32, stats: &mut DispatchStats) -> Flow {
        self.sink.take(Records::ring(ring, head, cpu, stats)).0
    }

    fn deliver(&mut self, cpu: i32, rec: &[u8], stats: &mut DispatchStats) -> ControlFlow<Halt> {
        match self.sink.take(Records::one(rec, cpu, stats)).0 {
            ControlFlow::Continue(()) => ControlFlow::Continue(()),
            ControlFlow::Break(RingStop::By(halt)) => ControlFlow::Break(halt),
            // One record is never copied: it cannot run out of memory.
            ControlFlow::Break(RingStop::NoMemory) => ControlFlow::Break(Halt::Done),
        }
    }

    fn order_key(&mut self, cpu: i32, rec: &[u8]) -> u64 {
        match &mut self.key {
            Some(key) => key(cpu as u32, rec),
            None => self.sink.order_key(cpu as u32, rec),
        }
    }
}
