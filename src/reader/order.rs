//! Ordered reading across CPUs: a k-way merge of the per-CPU rings by a
//! timestamp key, delivered through the buffer's usual callbacks.
//!
//! Records stay in their rings until delivered (the tail is published only
//! up to the first undelivered one), so memory is bounded by an index of
//! (position, size, key) per pending record. A record is delivered only when
//! its key is at or below the *horizon*: the minimum over rings of the newest
//! key seen in each (a ring's future records are no older than its newest).
//! A ring that makes no progress for `idle_wait` stops holding the horizon
//! back; a record that then arrives older than one already delivered is
//! delivered at once and counted as late, never dropped or reordered.

use super::cpu_buf::CpuBuf;
use super::deliver::{Halt, Handler};
use crate::kernel::PERF_RECORD_SAMPLE;
use crate::kernel::clock::Moment;
use crate::ring::At;
use crate::ring::record::{self, LostRecord, Record};
use core::ops::ControlFlow;
use std::collections::VecDeque;
use std::time::Duration;

/// What records of all CPUs are ordered by.
#[non_exhaustive]
pub enum OrderKey<'a> {
    /// The first 8 bytes of each sample's raw data, native endian (e.g. a
    /// `bpf_ktime_get_ns()` the BPF program wrote first).
    RawPrefix,
    /// The record's `PERF_SAMPLE_TIME` field (an attr that samples TIME).
    SampleTime,
    /// A function of `(cpu, whole record)`.
    Fn(KeyFn<'a>),
    /// The reader's sink's [`crate::sink::Sink::order_key`].
    Sink,
}

/// What a face asks the reader to order by (a key function lives in the
/// face's handler).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderBy {
    /// See [`OrderKey::RawPrefix`].
    RawPrefix,
    /// See [`OrderKey::SampleTime`].
    SampleTime,
    /// The handler's [`Handler::order_key`] (a key function, or the
    /// sink's own).
    Handler,
}

/// A key function: `(cpu, whole record)` to an ordered key.
pub type KeyFn<'a> = Box<dyn FnMut(u32, &[u8]) -> u64 + Send + 'a>;

/// Where the reader takes a record's key from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// See [`OrderKey::RawPrefix`].
    RawPrefix,
    /// The `PERF_SAMPLE_TIME` field: at byte offset `sample` in a SAMPLE
    /// record, and with `sample_id_all` at `trailer` bytes before the end
    /// of any other record (its `sample_id` trailer's TIME).
    SampleTime {
        /// Offset in a sample.
        sample: usize,
        /// Offset back from the end of another record (`None`: no trailer).
        trailer: Option<usize>,
    },
    /// The handler's [`Handler::order_key`].
    Handler,
}

/// Counters of the ordered reader.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OrderStats {
    /// Records delivered in order.
    pub delivered: u64,
    /// Records delivered with a key older than one already delivered.
    pub late: u64,
    /// Records indexed but not yet delivered, now.
    pub pending: u64,
    /// Most records ever pending at once.
    pub max_pending: u64,
}

struct Entry {
    pos: u64,
    size: u32,
    key: u64,
}

struct RingIndex {
    scanned_to: Option<u64>,
    entries: VecDeque<Entry>,
    newest: Option<u64>,
    last_progress: Moment,
}

/// The ordered reader's state for one buffer.
pub struct Order {
    key: KeySource,
    idle_wait: Duration,
    rings: Vec<RingIndex>,
    last_key: Option<u64>,
    stats: OrderStats,
}

impl Order {
    /// An ordered reader over `rings` rings.
    pub fn new(key: KeySource, idle_wait: Duration, rings: usize) -> Self {
        let now = Moment::now();
        let rings = (0..rings)
            .map(|_| RingIndex {
                scanned_to: None,
                entries: VecDeque::new(),
                newest: None,
                last_progress: now,
            })
            .collect();
        Order { key, idle_wait, rings, last_key: None, stats: OrderStats::default() }
    }

    /// Room for rings added since (a CPU that came online).
    pub fn grow(&mut self, rings: usize) {
        let now = Moment::now();
        while self.rings.len() < rings {
            self.rings.push(RingIndex {
                scanned_to: None,
                entries: VecDeque::new(),
                newest: None,
                last_progress: now,
            });
        }
    }

    /// Whether ring `i` holds no record indexed and not yet delivered.
    pub fn holds_nothing_of(&self, i: usize) -> bool {
        self.rings.get(i).is_none_or(|r| r.entries.is_empty())
    }

    /// Ring `i` now reads other memory (a fresh event's): scanning starts
    /// again at its tail.
    pub fn restart(&mut self, i: usize) {
        if let Some(r) = self.rings.get_mut(i) {
            r.scanned_to = None;
        }
    }

    /// Current counters.
    pub fn stats(&self) -> OrderStats {
        self.stats
    }

    /// How long an idle ring may hold the horizon back.
    pub fn idle_wait(&self) -> Duration {
        self.idle_wait
    }

    /// Whether records are indexed but held back by the horizon.
    pub fn has_pending(&self) -> bool {
        self.stats.pending > 0
    }

    fn key_of<H: Handler>(&self, handler: &mut H, cpu: i32, rec: &[u8], fallback: u64) -> u64 {
        let word = |at: usize| {
            rec.get(at..at.checked_add(8)?).map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
        };
        if record::record_type(rec) != PERF_RECORD_SAMPLE {
            // Side-band records carry their time in the sample_id trailer;
            // LOST and friends without one keep their place in the ring.
            return match self.key {
                KeySource::SampleTime { trailer: Some(back), .. } => {
                    rec.len().checked_sub(back).filter(|&at| at >= 8).and_then(word).unwrap_or(fallback)
                }
                _ => fallback,
            };
        }
        match self.key {
            KeySource::RawPrefix => match record::parse(rec) {
                Record::Sample { data } if data.len() >= 8 => {
                    u64::from_ne_bytes(data[..8].try_into().expect("8 bytes"))
                }
                _ => fallback,
            },
            KeySource::SampleTime { sample, .. } => word(sample).unwrap_or(fallback),
            KeySource::Handler => handler.order_key(cpu, rec),
        }
    }

    /// Indexes what each ring gained since the last round.
    fn scan<H: Handler>(&mut self, bufs: &mut [CpuBuf], handler: &mut H, now: Moment) {
        for (i, buf) in bufs.iter_mut().enumerate() {
            let cpu = buf.cpu;
            let ring = buf.rings.main_mut();
            let head = ring.load_head();
            let mut pos = self.rings[i].scanned_to.unwrap_or_else(|| ring.load_tail());
            let start = pos;
            loop {
                let fallback = self.rings[i].newest.unwrap_or(0);
                let (size, key) = match ring.record_at(pos, head) {
                    At::Record(rec) => (rec.len(), self.key_of(handler, cpu, rec, fallback)),
                    At::End | At::NoMemory => break,
                    At::Corrupt => {
                        // Keep what was indexed; give up on the rest.
                        ring.note_skipped(pos, head);
                        pos = head;
                        break;
                    }
                };
                let idx = &mut self.rings[i];
                idx.entries.push_back(Entry { pos, size: size as u32, key });
                idx.newest = Some(idx.newest.map_or(key, |n| n.max(key)));
                self.stats.pending += 1;
                pos = pos.wrapping_add(size as u64);
            }
            let idx = &mut self.rings[i];
            if pos != start {
                idx.last_progress = now;
            }
            idx.scanned_to = Some(pos);
        }
        self.stats.max_pending = self.stats.max_pending.max(self.stats.pending);
    }

    /// The newest key every ring that still counts has reached.
    fn horizon(&self, now: Moment) -> u64 {
        self.rings
            .iter()
            .filter(|r| now.since(r.last_progress) < self.idle_wait)
            .map(|r| r.newest.unwrap_or(0))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// One round: deliver what the library owes first (lost reports it
    /// made, spill-ring leftovers of the fast mode), index new records,
    /// deliver those at or below the horizon (all of them when `flush`),
    /// publish each ring's tail up to its first undelivered record.
    /// Returns the number delivered, or why a handler stopped (`Done`
    /// stops quietly).
    pub fn round<H: Handler>(
        &mut self,
        bufs: &mut [CpuBuf],
        handler: &mut H,
        flush: bool,
    ) -> Result<usize, Halt> {
        for buf in bufs.iter_mut() {
            match owed(buf, handler) {
                ControlFlow::Continue(()) => {}
                ControlFlow::Break(Halt::Done) => return Ok(0),
                ControlFlow::Break(halt) => return Err(halt),
            }
        }
        let now = Moment::now();
        self.scan(bufs, handler, now);
        let horizon = if flush { u64::MAX } else { self.horizon(now) };
        let mut delivered = 0;
        let mut stop = None;
        loop {
            let next =
                (0..self.rings.len()).filter_map(|i| self.rings[i].entries.front().map(|e| (e.key, i))).min();
            let Some((key, i)) = next else { break };
            if key > horizon {
                break;
            }
            let entry = self.rings[i].entries.pop_front().expect("front exists");
            self.stats.pending -= 1;
            let ret = deliver_at(&mut bufs[i], handler, entry.pos, entry.size as usize);
            delivered += 1;
            self.stats.delivered += 1;
            if self.last_key.is_some_and(|last| key < last) {
                self.stats.late += 1;
            }
            self.last_key = Some(self.last_key.map_or(key, |l| l.max(key)));
            if let ControlFlow::Break(halt) = ret {
                stop = Some(halt);
                break;
            }
        }
        for (i, buf) in bufs.iter_mut().enumerate() {
            let idx = &self.rings[i];
            if let Some(scanned) = idx.scanned_to {
                buf.rings.main().store_tail(idx.entries.front().map_or(scanned, |e| e.pos));
            }
        }
        match stop {
            Some(halt) if halt != Halt::Done => Err(halt),
            _ => Ok(delivered),
        }
    }
}

/// Hands over what a CPU owes before its ring's records: a lost report
/// the library made, and records left in a spill ring the fast mode used
/// before ordering began (they are older than any in the caller's ring).
fn owed<H: Handler>(buf: &mut CpuBuf, handler: &mut H) -> ControlFlow<Halt> {
    if let Some(lost) = buf.rings.take_owed() {
        handler.deliver(buf.cpu, LostRecord::new(lost).bytes(), &mut buf.stats)?;
    }
    let (cpu, stats) = (buf.cpu, &mut buf.stats);
    if let Some(spill) = buf.rings.spill_mut().filter(|s| s.pending_bytes() > 0) {
        let head = spill.load_head();
        if let ControlFlow::Break(stop) = handler.drain(spill, head, cpu, stats) {
            return ControlFlow::Break(match stop {
                crate::ring::Stop::By(halt) => halt,
                crate::ring::Stop::NoMemory => Halt::Code(-1),
            });
        }
    }
    ControlFlow::Continue(())
}

/// Hands the `size`-byte record at `pos` of the CPU's ring over.
fn deliver_at<H: Handler>(buf: &mut CpuBuf, handler: &mut H, pos: u64, size: usize) -> ControlFlow<Halt> {
    let ring = buf.rings.main_mut();
    let ret = match ring.record_at(pos, pos.wrapping_add(size as u64)) {
        At::Record(rec) => handler.deliver(buf.cpu, rec, &mut buf.stats),
        _ => return ControlFlow::Continue(()),
    };
    buf.rings.main_mut().count_read(1, size as u64);
    ret
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::deliver::Collect;
    use crate::ring::PerfRing;

    /// Appends a raw sample whose data starts with `stamp` (plays the kernel).
    fn push(buf: &mut CpuBuf, stamp: u64) {
        let mut rec = vec![0u8; 24];
        rec[..4].copy_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
        rec[6..8].copy_from_slice(&24u16.to_ne_bytes());
        rec[8..12].copy_from_slice(&12u32.to_ne_bytes());
        rec[12..20].copy_from_slice(&stamp.to_ne_bytes());
        let ring = buf.rings.main_mut();
        let head = ring.load_head();
        ring.write_data(head, &rec);
        ring.store_head(head + 24);
    }

    /// Two heap rings, an ordered reader, and a handler that collects
    /// `(cpu, first 8 bytes)` of each sample.
    type Fixture = (Vec<CpuBuf>, Order, Collect);

    fn setup(idle_ms: u64) -> Fixture {
        let bufs: Vec<CpuBuf> =
            (0..2).map(|c| CpuBuf::for_test(c, PerfRing::heap(2048, 1).unwrap())).collect();
        (bufs, Order::new(KeySource::RawPrefix, Duration::from_millis(idle_ms), 2), Collect::default())
    }

    #[test]
    fn merges_up_to_the_horizon_then_flushes() {
        let (mut bufs, mut order, mut out) = setup(10_000);
        for s in [1, 4, 7] {
            push(&mut bufs[0], s);
        }
        for s in [2, 3, 9] {
            push(&mut bufs[1], s);
        }
        assert_eq!(order.round(&mut bufs, &mut out, false), Ok(5));
        assert_eq!(out.0.iter().map(|r| r.1).collect::<Vec<_>>(), vec![1, 2, 3, 4, 7]);
        assert_eq!(out.0.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0, 1, 1, 0, 0]);
        // The undelivered 9 keeps ring 1's tail in front of it.
        assert_eq!(bufs[0].rings.main().load_tail(), 72);
        assert_eq!(bufs[1].rings.main().load_tail(), 48);
        assert_eq!(order.stats().pending, 1);
        assert_eq!(order.round(&mut bufs, &mut out, true), Ok(1));
        assert_eq!(out.0.last().unwrap().1, 9);
        assert_eq!(bufs[1].rings.main().load_tail(), 72);
        assert_eq!(order.stats().late, 0);
    }

    #[test]
    fn an_idle_ring_holds_delivery_back_only_for_the_idle_bound() {
        // The fake kernel's clock: time passes only when the test says (a
        // loaded machine could otherwise let 30 ms go before the first round).
        let _clock = crate::kernel::fake::install(crate::kernel::fake::FakeKernel::new(2));
        let (mut bufs, mut order, mut out) = setup(30);
        push(&mut bufs[0], 5);
        assert_eq!(
            order.round(&mut bufs, &mut out, false),
            Ok(0),
            "ring 1 might still produce something older"
        );
        crate::kernel::fake::with(|k| k.advance(Duration::from_millis(40)));
        push(&mut bufs[0], 6); // ring 0 progresses, ring 1 stays idle
        assert_eq!(order.round(&mut bufs, &mut out, false), Ok(2));
        // A record older than what was delivered arrives from the idle ring:
        // delivered at once and counted late.
        push(&mut bufs[1], 3);
        push(&mut bufs[0], 8);
        assert_eq!(order.round(&mut bufs, &mut out, false), Ok(1));
        assert_eq!(out.0.iter().map(|r| r.1).collect::<Vec<_>>(), vec![5, 6, 3]);
        assert_eq!(order.stats().late, 1);
    }

    #[test]
    fn memory_is_bounded_by_the_rings() {
        let (mut bufs, mut order, mut out) = setup(10_000);
        // Ring 1 never shows a key, so nothing from ring 0 can go; ring 0
        // fills up and the index holds exactly what the ring holds.
        for s in 1..=(2048 / 24) {
            push(&mut bufs[0], s);
        }
        assert_eq!(order.round(&mut bufs, &mut out, false), Ok(0));
        assert_eq!(order.stats().pending, 2048 / 24);
        assert_eq!(order.round(&mut bufs, &mut out, false), Ok(0));
        assert_eq!(order.stats().max_pending, 2048 / 24);
    }
}
