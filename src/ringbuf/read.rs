//! One read of a BPF ring buffer for the reader's sink: the walk over the
//! ring that drops what was reserved while paused and reports it as lost,
//! and the whole-record mode's perf records made of the ring's samples.
//! Kept apart from the channel so the sink can name a read without
//! depending on the channel, which depends on the sink.

use super::layout::RingMemory;
use super::walk::{Stats, record_size};
use crate::kernel::{PERF_RECORD_SAMPLE, fallible};
use crate::reader::deliver::{Flow, Halt};
use crate::ring::Stop;
use crate::ring::record::LostRecord;
use core::cell::Cell;
use core::ops::ControlFlow;
use core::sync::atomic::Ordering;

/// No pause window edge.
pub(super) const NONE: u64 = u64::MAX;

/// The longest record a `PERF_RECORD_SAMPLE` can carry (its header's
/// `u16` size, 8-aligned, less the header and the raw size).
const MAX_WHOLE: usize = (u16::MAX as usize & !7) - 12;

/// What reads of the ring counted and carry over.
#[derive(Default)]
pub(crate) struct ReadState {
    pub(super) stats: Stats,
    /// Records dropped while paused, and how many of them the lost
    /// callback was told about.
    pub(super) dropped: u64,
    pub(super) reported: u64,
    /// Records handed out by the last read.
    pub(super) read: u64,
    /// A record too long to be made a perf record of (the whole-record
    /// mode), which stopped the read: its length.
    pub(super) too_long: Option<usize>,
    /// The whole-record mode's copy of the record.
    pub(super) scratch: Vec<u8>,
}

/// The positions between which records are dropped: from the producer's
/// position at `pause` to its position at `resume` ([`NONE`] while
/// paused, or for no window).
#[derive(Default)]
pub(super) struct Pause {
    pub(super) from: Cell<u64>,
    pub(super) to: Cell<u64>,
}

/// One read of a ring buffer, for [`crate::reader::sink::Records`]: the ring and what its reads
/// count.
pub struct RingRead<'r> {
    pub(super) memory: &'r RingMemory,
    pub(super) state: &'r mut ReadState,
    pub(super) pause: &'r Pause,
    /// Records after which the walk stops (see [`RingMemory::walk`]).
    pub(super) limit: u64,
}

impl RingRead<'_> {
    /// libbpf's sample/lost split over the ring (see [`Records::samples`]).
    #[inline(always)]
    pub(crate) fn samples<S: FnMut(&[u8]), L: FnMut(u64)>(self, mut sample: S, mut lost: L) -> Flow {
        self.walk(
            move |_, data| {
                sample(data);
                ControlFlow::Continue(())
            },
            move |_, n| {
                lost(n);
                ControlFlow::Continue(())
            },
        )
    }

    /// Every record as the perf record a perf buffer would hold (see
    /// [`Records::each`]).
    #[inline(always)]
    pub(crate) fn whole<R: FnMut(&[u8]) -> ControlFlow<Halt>>(self, record: R) -> Flow {
        let record = core::cell::RefCell::new(record);
        self.walk(
            |scratch, data| {
                let rec = as_sample(scratch, data)?;
                (record.borrow_mut())(rec).map_break(Stop::By)
            },
            |_, n| (record.borrow_mut())(LostRecord::new(n).bytes()).map_break(Stop::By),
        )
    }

    /// Walks the ring: records reserved in the pause window are dropped and
    /// counted; the first record past a closed window (or the end of the
    /// walk, once past it) reports them to `lost` first.
    #[inline(always)]
    fn walk<F, L>(self, mut f: F, mut lost: L) -> Flow
    where
        F: FnMut(&mut Vec<u8>, &[u8]) -> ControlFlow<Stop<Halt>>,
        L: FnMut(&mut Vec<u8>, u64) -> ControlFlow<Stop<Halt>>,
    {
        let RingRead { memory, state, pause, limit } = self;
        let ReadState { stats, dropped, reported, read, too_long, scratch } = state;
        let (mut from, to) = (pause.from.get(), pause.to.get());
        let (mut skipped, mut skipped_bytes) = (0u64, 0u64);
        let mut report = |dropped: u64, reported: &mut u64, scratch: &mut Vec<u8>| {
            let n = dropped - *reported;
            *reported = dropped;
            pause.from.set(NONE);
            pause.to.set(NONE);
            if n > 0 { lost(scratch, n) } else { ControlFlow::Continue(()) }
        };
        let walked = memory.walk_at(limit, stats, |pos, data| {
            if pos >= from {
                if pos < to {
                    *dropped += 1;
                    skipped += 1;
                    skipped_bytes += record_size(data.len() as u32);
                    return ControlFlow::Continue(());
                }
                from = NONE;
                report(*dropped, reported, scratch)?;
            }
            f(scratch, data).map_break(|stop| {
                // Only `as_sample` stops with `Unknown`: the sink's own
                // `Stop` has no such value.
                if matches!(stop, Stop::By(Halt::Unknown(_))) {
                    *too_long = Some(data.len());
                }
                stop
            })
        });
        stats.records -= skipped;
        stats.bytes -= skipped_bytes;
        match walked {
            ControlFlow::Continue(n) => {
                *read = n - skipped;
                // Past a closed window with nothing after it yet.
                let cons = memory.consumer().load(Ordering::Acquire);
                if from != NONE && to != NONE && cons >= to {
                    report(*dropped, reported, scratch)
                } else {
                    ControlFlow::Continue(())
                }
            }
            ControlFlow::Break(stop) => {
                *read = 0;
                ControlFlow::Break(stop)
            }
        }
    }
}

/// `data` as the `PERF_RECORD_SAMPLE` of a perf buffer's default event
/// (`PERF_SAMPLE_RAW`), in `scratch`. Too long a record stops the read
/// with `Halt::Unknown` (told apart by the caller), no memory with
/// `Stop::NoMemory`.
#[inline(never)]
fn as_sample<'s>(scratch: &'s mut Vec<u8>, data: &[u8]) -> ControlFlow<Stop<Halt>, &'s [u8]> {
    if data.len() > MAX_WHOLE {
        return ControlFlow::Break(Stop::By(Halt::Unknown(PERF_RECORD_SAMPLE)));
    }
    let size = (12 + data.len() + 7) & !7;
    scratch.clear();
    if fallible::reserve(scratch, size).is_err() {
        return ControlFlow::Break(Stop::NoMemory);
    }
    scratch.extend_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
    scratch.extend_from_slice(&0u16.to_ne_bytes());
    scratch.extend_from_slice(&(size as u16).to_ne_bytes());
    scratch.extend_from_slice(&(data.len() as u32).to_ne_bytes());
    scratch.extend_from_slice(data);
    scratch.resize(size, 0);
    ControlFlow::Continue(scratch)
}
