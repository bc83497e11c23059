//! How records reach a reader's owner. A face (the Rust API's closures,
//! the C face's function pointers) implements [`Handler`]; the parsing
//! both share lives here: libbpf's sample/lost split
//! (`perf_buffer__process_record`) and the raw every-record mode.

use crate::kernel::PERF_RECORD_SAMPLE;
use crate::ring::record::{self, DispatchStats, LostRecord, Record};
use crate::ring::{Header, PerfRing, Stop};
use core::ops::ControlFlow;

/// Why a handler stopped a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Halt {
    /// Stop this ring quietly and go on with the others (libbpf's
    /// `LIBBPF_PERF_EVENT_DONE`).
    Done,
    /// Stop the read and return this value (libbpf returns a raw
    /// callback's value other than `CONT` and `DONE` as is).
    Code(i32),
    /// A record of this type reached sample/lost callbacks (libbpf stops
    /// with `LIBBPF_PERF_EVENT_ERROR`).
    Unknown(u32),
}

/// A drain's outcome for a handler.
pub type Flow = ControlFlow<Stop<Halt>>;

/// Where a reader's records go.
pub trait Handler {
    /// Reads `ring` up to `head` (see [`PerfRing::drain_until`]), handing
    /// over every record of `cpu`.
    fn drain(&mut self, ring: &mut PerfRing, head: u64, cpu: i32, stats: &mut DispatchStats) -> Flow;

    /// Hands over one whole record of `cpu` (a record made here, one the
    /// ordered reader picked, a snapshot's).
    fn deliver(&mut self, cpu: i32, rec: &[u8], stats: &mut DispatchStats) -> ControlFlow<Halt>;

    /// The ordered reader's key of a record of `cpu`, when ordering by the
    /// owner's own key function.
    fn order_key(&mut self, _cpu: i32, _rec: &[u8]) -> u64 {
        0
    }
}

/// The common case with the fewest checks: a `PERF_RECORD_SAMPLE` whose raw
/// size fits its record. Returns the raw data. The type comes from `header`
/// (a register, the same along a run of equal headers), so only the raw
/// size is read here.
#[inline(always)]
fn raw_sample(header: Header, rec: &[u8]) -> Option<&[u8]> {
    if header.type_() != PERF_RECORD_SAMPLE {
        return None;
    }
    let (head, rest) = rec.split_first_chunk::<12>()?;
    let size = u32::from_ne_bytes([head[8], head[9], head[10], head[11]]) as usize;
    rest.get(..size)
}

/// libbpf's sample/lost callbacks over a whole ring: `sample(data)` for
/// each sample, `lost(count)` for each lost report; a record of another
/// type stops the read. Inlined into each face's drain, so the callables
/// the face passes (a function pointer and its context, say) stay in
/// registers across the loop: give it `move` closures. No callable's
/// address leaves the loop (the out-of-line path of other records returns
/// what to do instead of calling), since a value whose address escapes is
/// reloaded from memory after every call.
#[inline(always)]
pub fn drain_parsed<S, L>(
    ring: &mut PerfRing,
    head: u64,
    stats: &mut DispatchStats,
    mut sample: S,
    mut lost: L,
) -> Flow
where
    S: FnMut(&[u8]),
    L: FnMut(u64),
{
    ring.drain_until(
        head,
        &mut (),
        |(), header, rec| {
            if let Some(data) = raw_sample(header, rec) {
                sample(data);
                return ControlFlow::Continue(());
            }
            // Not a sample that fits its record: what raw_sample checks is
            // what makes parse() call it a sample, so no sample is lost here.
            other_record(rec, stats).deliver(&mut lost)
        },
        |()| (),
    )
}

/// What to do with a record that is not a well-formed sample.
enum Other {
    /// Report this many lost records.
    Lost(u64),
    /// Nothing (a malformed record, counted).
    Skip,
    /// Stop: a type the sample/lost callbacks cannot take.
    Unknown(u32),
}

impl Other {
    /// Hands a lost count to `lost`; stops on a type it cannot take.
    #[inline(always)]
    fn deliver<L: FnMut(u64) + ?Sized>(self, lost: &mut L) -> ControlFlow<Halt> {
        match self {
            Other::Lost(n) => {
                lost(n);
                ControlFlow::Continue(())
            }
            Other::Skip => ControlFlow::Continue(()),
            Other::Unknown(t) => ControlFlow::Break(Halt::Unknown(t)),
        }
    }
}

/// Classifies a record that is not a well-formed sample, counting lost
/// and malformed ones. Never inlined: kept out of the drain loop, it
/// leaves that loop its registers.
#[cold]
#[inline(never)]
fn other_record(rec: &[u8], stats: &mut DispatchStats) -> Other {
    stats.others += 1;
    match record::parse(rec) {
        // Dropped only when an early report covered it all (a count of 0
        // from the ring still reaches the callback, as in libbpf).
        Record::Lost { lost } => match take_lost(lost, stats) {
            0 if lost > 0 => Other::Skip,
            left => Other::Lost(left),
        },
        Record::Other { type_ } => {
            crate::log::warn(format_args!("unknown perf sample type {type_}"));
            Other::Unknown(type_)
        }
        Record::Sample { .. } | Record::Malformed => {
            stats.malformed += 1;
            Other::Skip
        }
    }
}

/// One record for sample/lost callbacks (records handed over one at a
/// time: lost reports made here, the ordered reader's, snapshots).
pub fn deliver_parsed(
    rec: &[u8],
    stats: &mut DispatchStats,
    sample: &mut dyn FnMut(&[u8]),
    lost: &mut dyn FnMut(u64),
) -> ControlFlow<Halt> {
    if let Record::Sample { data } = record::parse(rec) {
        // Not counted here: the ring counts records and bytes.
        sample(data);
        return ControlFlow::Continue(());
    }
    other_record(rec, stats).deliver(lost)
}

/// Counts the `lost` records a `PERF_RECORD_LOST` reports, less those an
/// early report already delivered (`stats.lost_credit`); returns how many
/// are still to report.
pub fn take_lost(lost: u64, stats: &mut DispatchStats) -> u64 {
    let early = lost.min(stats.lost_credit);
    stats.lost_credit -= early;
    stats.lost += lost - early;
    lost - early
}

/// Every record of a ring, whole, to `record(rec)` (libbpf's raw
/// `event_cb`); lost reports are counted on the way.
#[inline(always)]
pub fn drain_raw<R>(ring: &mut PerfRing, head: u64, stats: &mut DispatchStats, mut record: R) -> Flow
where
    R: FnMut(&[u8]) -> ControlFlow<Halt>,
{
    ring.drain_until(
        head,
        &mut (),
        |(), header, rec| {
            if header.type_() != PERF_RECORD_SAMPLE {
                return raw_other(rec, stats, &mut record);
            }
            record(rec)
        },
        |()| (),
    )
}

/// One whole record for a raw reader (records handed over one at a time),
/// lost reports counted as [`drain_raw`] counts them.
pub fn deliver_raw(
    rec: &[u8],
    stats: &mut DispatchStats,
    record: impl FnOnce(&[u8]) -> ControlFlow<Halt>,
) -> ControlFlow<Halt> {
    if rec.len() < 8 || crate::ring::Header::of(rec).type_() == PERF_RECORD_SAMPLE {
        return record(rec);
    }
    raw_other(rec, stats, record)
}

/// A record other than a sample to a raw reader: counted, and handed over
/// as [`count_lost`] says.
#[inline(never)]
fn raw_other(
    rec: &[u8],
    stats: &mut DispatchStats,
    record: impl FnOnce(&[u8]) -> ControlFlow<Halt>,
) -> ControlFlow<Halt> {
    stats.others += 1;
    match count_lost(rec, stats) {
        RawLost::Keep => record(rec),
        RawLost::Skip => ControlFlow::Continue(()),
        RawLost::Made(made) => record(made.bytes()),
    }
}

/// What a raw reader hands over for a record other than a sample.
pub enum RawLost {
    /// The record as it is.
    Keep,
    /// Nothing: a LOST record whose losses were all reported early.
    Skip,
    /// This record instead: a LOST record reporting only the losses not
    /// reported early (without the original's `sample_id` trailer).
    Made(LostRecord),
}

/// Adds what a `PERF_RECORD_LOST` reports to `stats` (raw mode, batches),
/// and says what to hand over in its place (see [`RawLost`]).
#[inline(never)]
pub fn count_lost(rec: &[u8], stats: &mut DispatchStats) -> RawLost {
    let Record::Lost { lost } = record::parse(rec) else { return RawLost::Keep };
    if stats.lost_credit == 0 {
        stats.lost += lost;
        return RawLost::Keep;
    }
    match take_lost(lost, stats) {
        left if left == lost => RawLost::Keep,
        0 => RawLost::Skip,
        left => RawLost::Made(LostRecord::new(left)),
    }
}

/// A handler for tests: collects `(cpu, first 8 bytes)` of each sample
/// and the lost counts.
#[cfg(test)]
#[derive(Default)]
pub struct Collect(pub Vec<(i32, u64)>, pub Vec<(i32, u64)>);

#[cfg(test)]
impl Collect {
    fn sample(&mut self, cpu: i32, data: &[u8]) {
        self.0.push((cpu, data.get(..8).map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))));
    }
}

#[cfg(test)]
impl Handler for Collect {
    fn drain(&mut self, ring: &mut PerfRing, head: u64, cpu: i32, stats: &mut DispatchStats) -> Flow {
        let (samples, lost) = (&mut self.0, &mut self.1);
        drain_parsed(
            ring,
            head,
            stats,
            |data| {
                samples.push((cpu, data.get(..8).map_or(0, |b| u64::from_ne_bytes(b.try_into().expect("8")))))
            },
            |n| lost.push((cpu, n)),
        )
    }

    fn deliver(&mut self, cpu: i32, rec: &[u8], stats: &mut DispatchStats) -> ControlFlow<Halt> {
        let mut samples = Vec::new();
        let mut lost = Vec::new();
        let r = deliver_parsed(rec, stats, &mut |d| samples.push(d.to_vec()), &mut |n| lost.push(n));
        for d in samples {
            self.sample(cpu, &d);
        }
        self.1.extend(lost.into_iter().map(|n| (cpu, n)));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lost_of(rec: &[u8]) -> u64 {
        match record::parse(rec) {
            Record::Lost { lost } => lost,
            other => panic!("not a LOST record: {other:?}"),
        }
    }

    #[test]
    fn a_lost_record_is_reduced_by_what_was_reported_early() {
        let rec = LostRecord::new(10);
        // Raw: partly covered, a made record with the rest.
        let mut stats = DispatchStats { lost: 4, lost_credit: 4, ..DispatchStats::default() };
        let mut got = Vec::new();
        let _ = deliver_raw(rec.bytes(), &mut stats, |r| {
            got.push(lost_of(r));
            ControlFlow::Continue(())
        });
        assert_eq!((got, stats.lost, stats.lost_credit), (vec![6], 10, 0));
        // Raw: wholly covered, nothing handed over.
        let mut stats = DispatchStats { lost: 12, lost_credit: 12, ..DispatchStats::default() };
        let _ = deliver_raw(rec.bytes(), &mut stats, |_| panic!("reported twice"));
        assert_eq!((stats.lost, stats.lost_credit), (12, 2));
        // Parsed: the lost callback gets the rest; none when covered.
        let mut stats = DispatchStats { lost_credit: 3, ..DispatchStats::default() };
        let mut lost = Vec::new();
        let _ = deliver_parsed(rec.bytes(), &mut stats, &mut |_| {}, &mut |n| lost.push(n));
        let _ = deliver_parsed(rec.bytes(), &mut stats, &mut |_| {}, &mut |n| lost.push(n));
        // A count of 0 still reaches the callback, as in libbpf.
        let _ = deliver_parsed(LostRecord::new(0).bytes(), &mut stats, &mut |_| {}, &mut |n| lost.push(n));
        assert_eq!((lost, stats.lost), (vec![7, 10, 0], 17));
        // No credit: the record as it is.
        let mut stats = DispatchStats::default();
        let _ = deliver_raw(rec.bytes(), &mut stats, |r| {
            assert_eq!(r.as_ptr(), rec.bytes().as_ptr());
            ControlFlow::Continue(())
        });
        assert_eq!(stats.lost, 10);
    }
}
