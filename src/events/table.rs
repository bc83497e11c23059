//! Which event a record came from, and what it says: the kernel ids of a
//! set's events, each event's record layout and tracepoint format. Shared
//! (behind a lock) by the set, which adds and removes events, and its
//! readers, which decode on the polling thread.

use super::desc::EventId;
use super::format::{Format, Value, Values};
use crate::decode::{self, Body, DecodeAttr, DecodeError, Record, Sample};
use crate::kernel::PERF_RECORD_SAMPLE;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// How one event's records are laid out.
pub(crate) struct Layout {
    pub(crate) decode: DecodeAttr,
    pub(crate) format: Option<Arc<Format>>,
}

/// Kernel event ids (one per CPU and target) → the set's events.
#[derive(Default)]
pub(crate) struct IdTable {
    ids: HashMap<u64, EventId>,
    layouts: HashMap<EventId, Layout>,
    /// The kernel ids of the rings' dummy events (side-band records).
    owner_ids: HashSet<u64>,
    owner_layout: DecodeAttr,
}

impl IdTable {
    pub(crate) fn insert(&mut self, event: EventId, layout: Layout, ids: impl Iterator<Item = u64>) {
        self.ids.extend(ids.map(|id| (id, event)));
        self.layouts.insert(event, layout);
    }

    /// The rings' dummy events, whose records are side-band records.
    pub(crate) fn insert_owners(&mut self, layout: DecodeAttr, ids: impl Iterator<Item = u64>) {
        self.owner_ids.extend(ids);
        self.owner_layout = layout;
    }

    /// More kernel ids of `event` (opened again with another filter).
    pub(crate) fn add_ids(&mut self, event: EventId, ids: impl Iterator<Item = u64>) {
        self.ids.extend(ids.map(|id| (id, event)));
    }

    pub(crate) fn remove(&mut self, event: EventId) {
        self.ids.retain(|_, e| *e != event);
        self.layouts.remove(&event);
    }

    /// The event of a kernel id.
    pub(crate) fn event_of_id(&self, id: u64) -> Option<EventId> {
        self.ids.get(&id).copied()
    }

    pub(crate) fn layout(&self, event: EventId) -> Option<&Layout> {
        self.layouts.get(&event)
    }
}

/// The kernel id a record carries: a sample's first word after the
/// header (`PERF_SAMPLE_IDENTIFIER`), another record's last word (the
/// `sample_id` trailer's IDENTIFIER). `None` for a record too short.
pub(crate) fn record_id(rec: &[u8]) -> Option<u64> {
    let header = decode::header(rec)?;
    let size = usize::from(header.size).min(rec.len());
    let at = if header.type_ == PERF_RECORD_SAMPLE { 8 } else { size.checked_sub(8)? };
    if size < 16 || at < 8 {
        return None;
    }
    let word = rec.get(at..at + 8)?;
    Some(u64::from_ne_bytes(word.try_into().ok()?))
}

/// Decodes records of a set's rings: which event each came from, and its
/// fields. Cheap to clone; usable from any thread, and after events are
/// added or removed (records of a removed event are no longer attributed).
#[derive(Clone, Default)]
pub struct Decoder {
    pub(crate) table: Arc<RwLock<IdTable>>,
    unattributed: Arc<AtomicU64>,
}

impl Decoder {
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, IdTable> {
        self.table.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, IdTable> {
        self.table.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The event `rec` (a whole record, header included) came from.
    pub fn event_of(&self, rec: &[u8]) -> Option<EventId> {
        self.read().event_of_id(record_id(rec)?)
    }

    /// What wrote `rec` (`None`: the set's rings, for its side-band
    /// records) and the layout of its records; `None` for a record of
    /// nothing in the set.
    pub fn layout_of(&self, rec: &[u8]) -> Option<(Option<EventId>, DecodeAttr)> {
        let table = self.read();
        let id = record_id(rec)?;
        match table.event_of_id(id) {
            Some(e) => table.layout(e).map(|l| (Some(e), l.decode)),
            None => table.owner_ids.contains(&id).then_some((None, table.owner_layout)),
        }
    }

    /// Decodes `rec`, read from the ring of `cpu`, and hands it to `f`.
    /// A record of an event no longer in the set (removed while its
    /// records were in flight) or that does not decode is counted (see
    /// [`Self::unattributed`]) and given as [`EventRecord::Other`].
    pub fn decode<R>(&self, cpu: u32, rec: &[u8], f: impl FnOnce(EventRecord<'_>) -> R) -> R {
        let table = self.read();
        let id = record_id(rec);
        let event = id.and_then(|id| table.event_of_id(id));
        let layout = match event {
            Some(e) => table.layout(e).map(|l| (&l.decode, l.format.as_deref())),
            None if id.is_some_and(|id| table.owner_ids.contains(&id)) => Some((&table.owner_layout, None)),
            None => None,
        };
        let decoded = layout.and_then(|(d, format)| decode::decode(rec, d).ok().map(|r| (format, r)));
        match decoded {
            Some((format, record)) => match record.body {
                Body::Sample(sample) => match event {
                    Some(event) => f(EventRecord::Sample(EventSample { event, cpu, sample, format })),
                    None => self.other(cpu, rec, f),
                },
                Body::Lost(lost) => f(EventRecord::Lost { event, cpu, lost: lost.lost }),
                Body::LostSamples(lost) => f(EventRecord::Lost { event, cpu, lost: lost.lost }),
                _ if record.is_sideband() => f(EventRecord::Sideband { event, cpu, record }),
                _ => f(EventRecord::Other { event, cpu, record: rec }),
            },
            None => {
                // Lost reports keep their count even when unattributed.
                if let Some(h) = decode::header(rec)
                    && h.type_ == crate::kernel::PERF_RECORD_LOST
                    && let Some(lost) = rec.get(16..24)
                {
                    let lost = u64::from_ne_bytes(lost.try_into().unwrap_or_default());
                    return f(EventRecord::Lost { event: None, cpu, lost });
                }
                self.other(cpu, rec, f)
            }
        }
    }

    /// Why [`Self::decode`] handed `rec` over whole as
    /// [`EventRecord::Other`], for a face that reports the records it could
    /// not decode apart from those it does not decode (decoding `rec` again:
    /// call it for those records only).
    pub fn why_whole(&self, rec: &[u8]) -> Whole {
        match self.layout_of(rec) {
            None => Whole::NoEvent,
            Some((_, layout)) => match decode::decode(rec, &layout) {
                Err(e) => Whole::Undecodable(e),
                Ok(_) => Whole::NotDecoded,
            },
        }
    }

    fn other<R>(&self, cpu: u32, rec: &[u8], f: impl FnOnce(EventRecord<'_>) -> R) -> R {
        self.unattributed.fetch_add(1, Ordering::Relaxed);
        f(EventRecord::Other { event: None, cpu, record: rec })
    }

    /// Records that could not be attributed to an event of the set.
    pub fn unattributed(&self) -> u64 {
        self.unattributed.load(Ordering::Relaxed)
    }
}

/// A record of an event set's ring, decoded.
#[derive(Debug)]
#[non_exhaustive]
#[allow(clippy::large_enum_variant, reason = "passed by value per record; boxing would allocate each time")]
pub enum EventRecord<'a> {
    /// A sample.
    Sample(EventSample<'a>),
    /// The kernel dropped `lost` records for lack of space in this CPU's
    /// ring (`event`: the one whose write found it full;
    /// `PERF_RECORD_LOST`), or `lost` samples (`PERF_RECORD_LOST_SAMPLES`).
    Lost {
        /// The event, if still in the set.
        event: Option<EventId>,
        /// The ring's CPU.
        cpu: u32,
        /// Records dropped.
        lost: u64,
    },
    /// A side-band record ([`super::Sideband`]): a task's or an address
    /// space's news, decoded ([`decode::Body::Comm`], `Fork`, `Exit`,
    /// `Mmap2`...).
    Sideband {
        /// The event that asked for it (`None`: the set, on its rings).
        event: Option<EventId>,
        /// The ring's CPU.
        cpu: u32,
        /// The record, decoded, with its `sample_id` trailer.
        record: Record<'a>,
    },
    /// Any other record (throttling, or one not attributed: see
    /// [`Decoder::decode`]), whole.
    Other {
        /// The event, if known.
        event: Option<EventId>,
        /// The ring's CPU.
        cpu: u32,
        /// The record, header included.
        record: &'a [u8],
    },
}

/// Why a record came whole as [`EventRecord::Other`] (see
/// [`Decoder::why_whole`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Whole {
    /// A kind the decoder leaves whole (throttling).
    NotDecoded,
    /// Of no event in the set (one removed while its records were in
    /// flight), nor of the set's rings: counted in
    /// [`Decoder::unattributed`].
    NoEvent,
    /// It does not decode with its event's layout (malformed, or fields
    /// this decoder does not know): counted in [`Decoder::unattributed`].
    Undecodable(DecodeError),
}

/// A sample of one event of a set: the common fields every sample of a
/// set has, the decoded [`Sample`], and for tracepoints the fields by name.
#[derive(Debug)]
pub struct EventSample<'a> {
    /// The event it belongs to.
    pub event: EventId,
    /// The ring's CPU.
    pub cpu: u32,
    /// Every field the event samples.
    pub sample: Sample<'a>,
    format: Option<&'a Format>,
}

impl<'a> EventSample<'a> {
    /// The event it belongs to (also the field `event`).
    pub fn event(&self) -> EventId {
        self.event
    }

    /// The CPU whose ring it came from (also the field `cpu`).
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    /// `CLOCK_MONOTONIC` time of the sample, in ns.
    pub fn time(&self) -> u64 {
        self.sample.time.unwrap_or(0)
    }

    /// Process id of the task it sampled.
    pub fn pid(&self) -> u32 {
        self.sample.tid.map_or(0, |t| t.pid)
    }

    /// Thread id of the task it sampled.
    pub fn tid(&self) -> u32 {
        self.sample.tid.map_or(0, |t| t.tid)
    }

    /// Instruction pointer.
    pub fn ip(&self) -> u64 {
        self.sample.ip.unwrap_or(0)
    }

    /// The raw record (tracing events): the tracepoint's bytes, starting
    /// with `common_type`, as the kernel padded them.
    pub fn raw(&self) -> &'a [u8] {
        self.sample.raw.unwrap_or_default()
    }

    /// The tracepoint's format (`None` for other events).
    pub fn format(&self) -> Option<&'a Format> {
        self.format
    }

    /// A tracepoint field by name (`"filename"`, `"common_pid"`), decoded
    /// per the tracepoint's format file; `None` for an unknown field, a
    /// record too short for it, or an event that is not a tracepoint.
    pub fn field(&self, name: &str) -> Option<Value<'a>> {
        self.format?.field(name)?.decode(self.raw()).ok()
    }

    /// Every field of a tracepoint, in format order.
    pub fn fields(&self) -> Option<Values<'a, 'a>> {
        Some(self.format?.values(self.raw()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(type_: u32, words: &[u64]) -> Vec<u8> {
        let size = 8 + 8 * words.len();
        let mut v = Vec::with_capacity(size);
        v.extend_from_slice(&type_.to_ne_bytes());
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&(size as u16).to_ne_bytes());
        words.iter().for_each(|w| v.extend_from_slice(&w.to_ne_bytes()));
        v
    }

    #[test]
    fn ids_come_first_in_samples_and_last_elsewhere() {
        assert_eq!(record_id(&record(PERF_RECORD_SAMPLE, &[7, 1, 2])), Some(7));
        assert_eq!(record_id(&record(2, &[1, 2, 3, 9])), Some(9));
        assert_eq!(record_id(&record(PERF_RECORD_SAMPLE, &[])), None);
        assert_eq!(record_id(&[1, 2, 3]), None);
        // A header claiming more than is there reads what is there.
        let mut short = record(2, &[1, 2, 5]);
        short[6] = 200;
        assert_eq!(record_id(&short), Some(5));
    }

    #[test]
    fn decodes_attributed_samples_and_counts_the_rest() {
        use crate::kernel::{PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_TIME};
        let d = Decoder::default();
        let attr = DecodeAttr {
            sample_type: PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TIME,
            sample_id_all: true,
            ..DecodeAttr::default()
        };
        d.write().insert(EventId(3), Layout { decode: attr, format: None }, [40u64, 41].into_iter());
        let got = d.decode(1, &record(PERF_RECORD_SAMPLE, &[41, 1234]), |r| match r {
            EventRecord::Sample(s) => Some((s.event, s.cpu, s.time())),
            _ => None,
        });
        assert_eq!(got, Some((EventId(3), 1, 1234)));
        // Unknown id: other, counted.
        let other =
            d.decode(0, &record(PERF_RECORD_SAMPLE, &[99, 1]), |r| matches!(r, EventRecord::Other { .. }));
        assert!(other);
        assert_eq!(d.unattributed(), 1);
        // A lost report with the trailer's identifier.
        let lost = d.decode(0, &record(2, &[40, 17, 555, 40]), |r| match r {
            EventRecord::Lost { event, lost, .. } => Some((event, lost)),
            _ => None,
        });
        assert_eq!(lost, Some((Some(EventId(3)), 17)));
        // LOST_SAMPLES: a loss too.
        let lost = d.decode(0, &record(13, &[5, 555, 40]), |r| match r {
            EventRecord::Lost { event, lost, .. } => Some((event, lost)),
            _ => None,
        });
        assert_eq!(lost, Some((Some(EventId(3)), 5)));
        // Why records came whole: no event, a sample cut short, a kind
        // not decoded.
        assert_eq!(d.why_whole(&record(PERF_RECORD_SAMPLE, &[99, 1])), Whole::NoEvent);
        assert!(matches!(d.why_whole(&record(PERF_RECORD_SAMPLE, &[41])), Whole::Undecodable(_)));
        assert_eq!(d.why_whole(&record(5, &[1, 2, 3, 555, 40])), Whole::NotDecoded);
        d.write().remove(EventId(3));
        assert_eq!(d.event_of(&record(PERF_RECORD_SAMPLE, &[41, 1])), None);
    }
}
