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

use crate::abi::LIBBPF_PERF_EVENT_CONT;
use crate::buffer::CpuBuf;
use crate::callbacks::Callbacks;
use crate::kernel::PERF_RECORD_SAMPLE;
use crate::record::{self, Record};
use crate::ring::At;
use core::ffi::{c_int, c_void};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Where a record's key comes from.
#[derive(Clone, Copy)]
pub enum KeySource {
    /// The first 8 bytes of a `PERF_SAMPLE_RAW` sample's data (native
    /// endian), e.g. a `bpf_ktime_get_ns()` the program wrote first.
    RawPrefix,
    /// The `PERF_SAMPLE_TIME` field, at this byte offset in a SAMPLE record.
    SampleTime(usize),
    /// The caller's function of `(ctx, cpu, record)`.
    Callback(unsafe extern "C" fn(*mut c_void, c_int, *const c_void) -> u64, *mut c_void),
}

/// Counters of the ordered reader.
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
    last_progress: Instant,
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
        let now = Instant::now();
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

    fn key_of(&self, cpu: c_int, rec: &[u8], fallback: u64) -> u64 {
        if record::record_type(rec) != PERF_RECORD_SAMPLE {
            return fallback; // LOST and friends keep their place in the ring
        }
        match self.key {
            KeySource::RawPrefix => match record::parse(rec) {
                Record::Sample { data } if data.len() >= 8 => {
                    u64::from_ne_bytes(data[..8].try_into().expect("8 bytes"))
                }
                _ => fallback,
            },
            KeySource::SampleTime(off) => {
                rec.get(off..off + 8).map_or(fallback, |b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))
            }
            // SAFETY: the caller registered this function for this ctx and
            // promised it may be called with any record of the buffer.
            KeySource::Callback(f, ctx) => unsafe { f(ctx, cpu, rec.as_ptr().cast()) },
        }
    }

    /// Indexes what each ring gained since the last round.
    fn scan(&mut self, bufs: &mut [CpuBuf], now: Instant) {
        for (i, buf) in bufs.iter_mut().enumerate() {
            let cpu = buf.cpu();
            let ring = buf.ring_mut();
            let head = ring.load_head();
            let mut pos = self.rings[i].scanned_to.unwrap_or_else(|| ring.load_tail());
            let start = pos;
            loop {
                let fallback = self.rings[i].newest.unwrap_or(0);
                let (size, key) = match ring.record_at(pos, head) {
                    At::Record(rec) => (rec.len(), self.key_of(cpu, rec, fallback)),
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
    fn horizon(&self, now: Instant) -> u64 {
        self.rings
            .iter()
            .filter(|r| now.duration_since(r.last_progress) < self.idle_wait)
            .map(|r| r.newest.unwrap_or(0))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// One round: index new records, deliver those at or below the horizon
    /// (all of them when `flush`), publish each ring's tail up to its first
    /// undelivered record. Returns the number delivered, or a callback's
    /// stop value (libbpf's DONE → stop quietly, other values returned).
    pub fn round(&mut self, bufs: &mut [CpuBuf], callbacks: &Callbacks, flush: bool) -> Result<usize, c_int> {
        for buf in bufs.iter_mut() {
            match buf.dispatch_owed(callbacks) {
                LIBBPF_PERF_EVENT_CONT => {}
                0 => return Ok(0),
                ret => return Err(ret),
            }
        }
        let now = Instant::now();
        self.scan(bufs, now);
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
            let buf = &mut bufs[i];
            let cpu = buf.cpu();
            let ret = buf.dispatch_at(callbacks, cpu, entry.pos, entry.size as usize);
            delivered += 1;
            self.stats.delivered += 1;
            if self.last_key.is_some_and(|last| key < last) {
                self.stats.late += 1;
            }
            self.last_key = Some(self.last_key.map_or(key, |l| l.max(key)));
            if ret != LIBBPF_PERF_EVENT_CONT {
                stop = Some(ret);
                break;
            }
        }
        for (i, buf) in bufs.iter_mut().enumerate() {
            let idx = &self.rings[i];
            if let Some(scanned) = idx.scanned_to {
                buf.ring().store_tail(idx.entries.front().map_or(scanned, |e| e.pos));
            }
        }
        match stop {
            Some(ret) if ret != 0 => Err(ret),
            _ => Ok(delivered),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::PerfRing;

    /// Appends a raw sample whose data starts with `stamp` (plays the kernel).
    fn push(buf: &mut CpuBuf, stamp: u64) {
        let mut rec = vec![0u8; 24];
        rec[..4].copy_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
        rec[6..8].copy_from_slice(&24u16.to_ne_bytes());
        rec[8..12].copy_from_slice(&12u32.to_ne_bytes());
        rec[12..20].copy_from_slice(&stamp.to_ne_bytes());
        let ring = buf.ring_mut();
        let head = ring.load_head();
        ring.write_data(head, &rec);
        ring.store_head(head + 24);
    }

    unsafe extern "C" fn collect(ctx: *mut c_void, cpu: c_int, data: *mut c_void, _size: u32) {
        // SAFETY: ctx is the test's Vec; data holds at least 8 bytes.
        unsafe {
            let out = &mut *(ctx as *mut Vec<(c_int, u64)>);
            out.push((cpu, (data as *const u64).read_unaligned()));
        }
    }

    /// Two heap rings, an ordered reader, and where its callback writes.
    type Fixture = (Vec<CpuBuf>, Order, Box<Vec<(c_int, u64)>>, Callbacks);

    fn setup(idle_ms: u64) -> Fixture {
        let bufs: Vec<CpuBuf> =
            (0..2).map(|c| CpuBuf::for_test(c, PerfRing::heap(2048, 1).unwrap())).collect();
        let mut out = Box::new(Vec::new());
        // SAFETY: `collect` matches the sample callback type and `out` lives
        // as long as the callbacks in each test.
        let cb = unsafe { Callbacks::parsed(Some(collect), None, (&mut *out as *mut Vec<_>).cast()) };
        (bufs, Order::new(KeySource::RawPrefix, Duration::from_millis(idle_ms), 2), out, cb)
    }

    #[test]
    fn merges_up_to_the_horizon_then_flushes() {
        let (mut bufs, mut order, out, cb) = setup(10_000);
        for s in [1, 4, 7] {
            push(&mut bufs[0], s);
        }
        for s in [2, 3, 9] {
            push(&mut bufs[1], s);
        }
        assert_eq!(order.round(&mut bufs, &cb, false), Ok(5));
        assert_eq!(out.iter().map(|r| r.1).collect::<Vec<_>>(), vec![1, 2, 3, 4, 7]);
        assert_eq!(out.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0, 1, 1, 0, 0]);
        // The undelivered 9 keeps ring 1's tail in front of it.
        assert_eq!(bufs[0].ring().load_tail(), 72);
        assert_eq!(bufs[1].ring().load_tail(), 48);
        assert_eq!(order.stats().pending, 1);
        assert_eq!(order.round(&mut bufs, &cb, true), Ok(1));
        assert_eq!(out.last().unwrap().1, 9);
        assert_eq!(bufs[1].ring().load_tail(), 72);
        assert_eq!(order.stats().late, 0);
    }

    #[test]
    fn an_idle_ring_holds_delivery_back_only_for_the_idle_bound() {
        let (mut bufs, mut order, out, cb) = setup(30);
        push(&mut bufs[0], 5);
        assert_eq!(order.round(&mut bufs, &cb, false), Ok(0), "ring 1 might still produce something older");
        std::thread::sleep(Duration::from_millis(40));
        push(&mut bufs[0], 6); // ring 0 progresses, ring 1 stays idle
        assert_eq!(order.round(&mut bufs, &cb, false), Ok(2));
        // A record older than what was delivered arrives from the idle ring:
        // delivered at once and counted late.
        push(&mut bufs[1], 3);
        push(&mut bufs[0], 8);
        assert_eq!(order.round(&mut bufs, &cb, false), Ok(1));
        assert_eq!(out.iter().map(|r| r.1).collect::<Vec<_>>(), vec![5, 6, 3]);
        assert_eq!(order.stats().late, 1);
    }

    #[test]
    fn memory_is_bounded_by_the_rings() {
        let (mut bufs, mut order, _out, cb) = setup(10_000);
        // Ring 1 never shows a key, so nothing from ring 0 can go; ring 0
        // fills up and the index holds exactly what the ring holds.
        for s in 1..=(2048 / 24) {
            push(&mut bufs[0], s);
        }
        assert_eq!(order.round(&mut bufs, &cb, false), Ok(0));
        assert_eq!(order.stats().pending, 2048 / 24);
        assert_eq!(order.round(&mut bufs, &cb, false), Ok(0));
        assert_eq!(order.stats().max_pending, 2048 / 24);
    }
}
