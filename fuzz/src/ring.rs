//! The ring target: a heap ring laid out like a perf mapping, with a control
//! page and data area taken from the input, read by every reader the crate
//! has (`drain`, `drain_with`, `drain_spans`, a `record_at` walk,
//! `snapshot_backward`). Each reader's output is compared with a model of
//! the README's contract, computed independently over a copy of the data
//! area: records are whole, in order, and in place unless they wrap; a
//! misaligned tail, a head behind the tail or more than a ring ahead, or a
//! record of size 0, misaligned or beyond the head makes the reader skip to
//! the head and count it; the tail ends at the head; nothing is read twice.
//!
//! Input layout (integers little endian), [`PREFIX`] bytes, then the data:
//!
//! | bytes | meaning |
//! |---|---|
//! | 0 | bits 0-1: data pages - 1 (3 pages is refused: not a power of two); bits 2-3: tail base (0, 2^64 - data size, 2^40, raw tail); bits 4-5: head (tail + delta, tail - delta, tail + data size + delta, raw head); bit 6: data written at the head (backward rings) instead of the tail |
//! | 1..3 | added to the tail base (an unaligned tail is one bit away) |
//! | 3..5 | delta |
//! | 5 | every reader's callback stops it at its k-th call (0: never) |
//! | 6 | the value it stops with (as `i8`) |
//! | 7 | the data starts this many 8-byte words before the tail (or head): a tail inside a record |
//! | 8..16 | raw tail |
//! | 16..24 | raw head |
//! | 24.. | bytes written into the data area, wrapping (one ring's worth at most) |

use core::cell::Cell;
use core::ops::ControlFlow;
use core::sync::atomic::{AtomicU64, Ordering};
use perfbuf::internals::record::{self, Record};
use perfbuf::internals::{
    At, Counters, HEADER_SIZE, Header, MMAP_PAGE_DATA_TAIL, PERF_RECORD_SAMPLE, PerfRing, Stop,
};

/// Page size of the synthetic rings.
pub const PAGE: usize = 4096;
/// Bytes of an input before the data.
pub const PREFIX: usize = 24;

/// Where the tail starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailBase {
    /// 0.
    Zero,
    /// One ring below 2^64: positions wrap around u64 during the read.
    NearWrap,
    /// 2^40, as after a long run.
    High,
    /// Any value.
    Raw(u64),
}

/// Where the head is, relative to the tail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Head {
    /// `tail + n`.
    Ahead(u16),
    /// `tail - n`: behind (forward rings) or a backward ring's written bytes.
    Behind(u16),
    /// `tail + data size + n`: more than a ring ahead unless `n` is 0.
    Far(u16),
    /// Any value.
    Raw(u64),
}

/// One ring input.
#[derive(Clone, Copy, Debug)]
pub struct RingInput<'a> {
    /// Data pages, 1 to 4.
    pub pages: u8,
    /// Tail base.
    pub tail_base: TailBase,
    /// Added to the tail base.
    pub tail_offset: u16,
    /// The head.
    pub head: Head,
    /// Data written at the head instead of the tail.
    pub data_at_head: bool,
    /// Callbacks stop the reader at their k-th call (0: never).
    pub stop_at: u8,
    /// The value they stop with.
    pub stop_value: i8,
    /// The data starts this many words before the tail (or head).
    pub back: u8,
    /// Data-area bytes.
    pub data: &'a [u8],
}

impl<'a> RingInput<'a> {
    /// Parses an input; `None` if it is shorter than [`PREFIX`].
    pub fn parse(input: &'a [u8]) -> Option<Self> {
        let p: &[u8; PREFIX] = input.get(..PREFIX)?.try_into().ok()?;
        let word = |at: usize| u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7].map(|i| p[at + i]));
        let delta = u16::from_le_bytes([p[3], p[4]]);
        Some(RingInput {
            pages: (p[0] & 3) + 1,
            tail_base: match (p[0] >> 2) & 3 {
                0 => TailBase::Zero,
                1 => TailBase::NearWrap,
                2 => TailBase::High,
                _ => TailBase::Raw(word(8)),
            },
            tail_offset: u16::from_le_bytes([p[1], p[2]]),
            head: match (p[0] >> 4) & 3 {
                0 => Head::Ahead(delta),
                1 => Head::Behind(delta),
                2 => Head::Far(delta),
                _ => Head::Raw(word(16)),
            },
            data_at_head: p[0] & 0x40 != 0,
            stop_at: p[5],
            stop_value: p[6] as i8,
            back: p[7],
            data: &input[PREFIX..],
        })
    }

    /// The input bytes (the inverse of [`Self::parse`]).
    pub fn encode(&self) -> Vec<u8> {
        let (base, raw_tail) = match self.tail_base {
            TailBase::Zero => (0, 0),
            TailBase::NearWrap => (1, 0),
            TailBase::High => (2, 0),
            TailBase::Raw(t) => (3, t),
        };
        let (mode, delta, raw_head) = match self.head {
            Head::Ahead(d) => (0, d, 0),
            Head::Behind(d) => (1, d, 0),
            Head::Far(d) => (2, d, 0),
            Head::Raw(h) => (3, 0, h),
        };
        let mut v = vec![(self.pages - 1) & 3 | base << 2 | mode << 4 | u8::from(self.data_at_head) << 6];
        v.extend_from_slice(&self.tail_offset.to_le_bytes());
        v.extend_from_slice(&delta.to_le_bytes());
        v.extend_from_slice(&[self.stop_at, self.stop_value as u8, self.back]);
        v.extend_from_slice(&raw_tail.to_le_bytes());
        v.extend_from_slice(&raw_head.to_le_bytes());
        v.extend_from_slice(self.data);
        v
    }

    /// The tail and head for a data area of `ds` bytes.
    pub fn positions(&self, ds: usize) -> (u64, u64) {
        let ds = ds as u64;
        let base = match self.tail_base {
            TailBase::Zero => 0,
            TailBase::NearWrap => 0u64.wrapping_sub(ds),
            TailBase::High => 1 << 40,
            TailBase::Raw(t) => t,
        };
        let tail = base.wrapping_add(self.tail_offset.into());
        let head = match self.head {
            Head::Ahead(d) => tail.wrapping_add(d.into()),
            Head::Behind(d) => tail.wrapping_sub(d.into()),
            Head::Far(d) => tail.wrapping_add(ds).wrapping_add(d.into()),
            Head::Raw(h) => h,
        };
        (tail, head)
    }
}

/// Runs one input through every reader.
pub fn run(input: &[u8]) {
    let Some(case) = RingInput::parse(input) else { return };
    let pages = usize::from(case.pages);
    let Ok(mut ring) = PerfRing::heap(PAGE, pages) else {
        assert!(!pages.is_power_of_two(), "heap({PAGE}, {pages}) refused");
        return;
    };
    assert!(pages.is_power_of_two(), "a data area of {pages} pages must be refused");
    let ds = ring.data_size();
    assert_eq!(ds, pages * PAGE);
    let (tail, head) = case.positions(ds);
    let anchor = if case.data_at_head { head } else { tail };
    let at = anchor.wrapping_sub(8 * u64::from(case.back));
    let data = &case.data[..case.data.len().min(ds)];
    ring.write_data(at, data);
    // The model's copy of the data area.
    let mut image = vec![0u8; ds];
    for (i, &b) in data.iter().enumerate() {
        image[(at as usize).wrapping_add(i) & (ds - 1)] = b;
    }
    let t = Check {
        image,
        tail,
        head,
        data: ring.base() as usize + ring.data_offset(),
        stop_at: usize::from(case.stop_at),
        // Callbacks stop with `Break(value)` and go on with `Continue`, so
        // every value of the input is a stop value.
        stop_value: i32::from(case.stop_value),
    };
    t.reset(&ring);
    assert_eq!(ring.pending_bytes(), head.wrapping_sub(tail).min(ds as u64));
    t.drain(&mut ring);
    t.drain_with(&mut ring);
    t.drain_spans(&mut ring);
    t.record_at(&mut ring);
    t.snapshot(&mut ring);
}

/// What the model expects a forward reader to deliver.
struct Walk {
    /// Position and size of each record, in order.
    recs: Vec<(u64, usize)>,
    /// Where the state is found inconsistent (the reader skips to the head).
    corrupt: Option<u64>,
}

struct Check {
    image: Vec<u8>,
    tail: u64,
    head: u64,
    /// Address of the ring's data area.
    data: usize,
    /// Callbacks break at their `stop_at`-th call (0: never)...
    stop_at: usize,
    /// ... with this value.
    stop_value: i32,
}

impl Check {
    fn ds(&self) -> usize {
        self.image.len()
    }

    /// A callback's answer at its `calls`-th call: break with the input's
    /// value at the `stop_at`-th, go on otherwise.
    fn answer(&self, calls: usize) -> ControlFlow<i32> {
        if calls == self.stop_at { ControlFlow::Break(self.stop_value) } else { ControlFlow::Continue(()) }
    }

    /// A drain's result: `true` if it read up to the head; otherwise it
    /// must have been stopped by its callback, with the input's value, at
    /// the `stop_at`-th call (`calls` made in this drain), and never for
    /// lack of memory.
    fn read_to_head(&self, reader: &str, ret: ControlFlow<Stop<i32>>, calls: usize) -> bool {
        match ret {
            ControlFlow::Continue(()) => true,
            ControlFlow::Break(Stop::By(value)) => {
                assert_eq!((value, calls), (self.stop_value, self.stop_at), "{reader}: returned early");
                false
            }
            ControlFlow::Break(Stop::NoMemory) => panic!("{reader}: no memory for a copy"),
        }
    }

    fn offset(&self, pos: u64) -> usize {
        (pos as usize) & (self.ds() - 1)
    }

    fn wraps(&self, pos: u64, size: usize) -> bool {
        self.offset(pos) + size > self.ds()
    }

    /// True if `rec` holds the model's bytes at `pos`, wrapping.
    fn holds(&self, rec: &[u8], pos: u64) -> bool {
        let off = self.offset(pos);
        let first = rec.len().min(self.ds() - off);
        rec[..first] == self.image[off..off + first] && rec[first..] == self.image[..rec.len() - first]
    }

    /// `header.type` of the record at `pos` (headers never wrap: aligned).
    fn type_at(&self, pos: u64) -> u32 {
        let o = self.offset(pos);
        u32::from_ne_bytes([self.image[o], self.image[o + 1], self.image[o + 2], self.image[o + 3]])
    }

    /// `header.size` of the record at `pos` (headers never wrap: aligned).
    fn size_at(&self, pos: u64) -> usize {
        let o = self.offset(pos);
        usize::from(u16::from_ne_bytes([self.image[o + 6], self.image[o + 7]]))
    }

    /// True if the slice starts inside the data area (then it must end there).
    fn in_ring(&self, s: &[u8]) -> bool {
        let p = s.as_ptr() as usize;
        let inside = p >= self.data && p < self.data + self.ds();
        assert!(!inside || p + s.len() <= self.data + self.ds(), "a slice runs past the ring's end");
        inside
    }

    fn reset(&self, ring: &PerfRing) {
        ring.store_tail(self.tail);
        ring.store_head(self.head);
    }

    /// The forward readers' contract. `whole` is the check `drain` and
    /// `drain_spans` make once before the loop (an unaligned distance to the
    /// head); `record_at` checks record by record instead.
    fn forward(&self, whole: bool) -> Walk {
        let ds = self.ds() as u64;
        let mut walk = Walk { recs: Vec::new(), corrupt: None };
        let avail = self.head.wrapping_sub(self.tail);
        // An empty ring has nothing to check, whatever its alignment.
        if avail != 0 && (!self.tail.is_multiple_of(8) || avail > ds || (whole && !avail.is_multiple_of(8))) {
            walk.corrupt = Some(self.tail);
            return walk;
        }
        let mut pos = self.tail;
        while pos != self.head {
            let avail = self.head.wrapping_sub(pos);
            let size = self.size_at(pos);
            if avail < HEADER_SIZE as u64
                || size < HEADER_SIZE
                || !size.is_multiple_of(8)
                || size as u64 > avail
            {
                walk.corrupt = Some(pos);
                break;
            }
            walk.recs.push((pos, size));
            pos = pos.wrapping_add(size as u64);
        }
        walk
    }

    /// A backward ring read from the head up to the previous head (here the
    /// tail): records oldest first, bytes consumed, bytes written.
    fn backward(&self) -> (Vec<(u64, usize)>, u64, u64) {
        let written = self.tail.wrapping_sub(self.head);
        let readable = written.min(self.ds() as u64);
        let (mut recs, mut consumed) = (Vec::new(), 0u64);
        while consumed < readable {
            let pos = self.head.wrapping_add(consumed);
            let avail = readable - consumed;
            if pos % 8 != 0 || avail < HEADER_SIZE as u64 {
                break;
            }
            let size = self.size_at(pos);
            if size < HEADER_SIZE || !size.is_multiple_of(8) || size as u64 > avail {
                break;
            }
            recs.push((pos, size));
            consumed += size as u64;
        }
        recs.reverse();
        (recs, consumed, written)
    }

    /// A record handed out: whole, aligned, in place unless it wraps, with
    /// the model's bytes.
    fn check_record(&self, rec: &[u8], pos: u64, size: usize) {
        assert_eq!(rec.len(), size, "record at {pos:#x}: wrong length");
        assert_eq!(usize::from(u16::from_ne_bytes([rec[6], rec[7]])), size, "header.size is not the length");
        assert_eq!(rec.as_ptr() as usize % 8, 0, "records are handed out 8-aligned");
        if self.wraps(pos, size) {
            assert!(!self.in_ring(rec), "a record wrapping the end must come contiguous from a copy");
        } else {
            assert_eq!(
                rec.as_ptr() as usize,
                self.data + self.offset(pos),
                "a record not wrapping comes in place"
            );
        }
        assert!(self.holds(rec, pos), "record at {pos:#x}: wrong bytes");
        if let Record::Sample { data } = record::parse(rec) {
            let (lo, hi) = (rec.as_ptr() as usize, rec.as_ptr() as usize + rec.len());
            assert!(data.as_ptr() as usize >= lo && data.as_ptr() as usize + data.len() <= hi);
        }
    }

    /// Stats moved by exactly what the model delivered and skipped.
    fn check_stats(&self, reader: &str, before: Counters, after: Counters, walk: &Walk, counted: bool) {
        let bytes: usize = walk.recs.iter().map(|r| r.1).sum();
        let (records, bytes) = if counted { (walk.recs.len() as u64, bytes as u64) } else { (0, 0) };
        let skipped = walk.corrupt.map_or(0, |p| self.head.wrapping_sub(p).min(self.ds() as u64));
        let expected = Counters {
            records: before.records + records,
            bytes: before.bytes + bytes,
            resyncs: before.resyncs + u64::from(walk.corrupt.is_some()),
            skipped_bytes: before.skipped_bytes + skipped,
            // Lost counts are the dispatcher's to add (PerfRing::count_lost).
            lost: before.lost,
        };
        assert_eq!(after, expected, "{reader}: stats (before {before:?})");
    }

    /// The tail after a reader stopped early: past the last record handed
    /// out, or at the head if it met the inconsistency in that call.
    fn check_stopped_tail(&self, reader: &str, ring: &PerfRing, walk: &Walk, next: usize) {
        let tail = ring.load_tail();
        let past =
            next.checked_sub(1).map_or(self.tail, |i| walk.recs[i].0.wrapping_add(walk.recs[i].1 as u64));
        assert!(
            tail == past || (tail == self.head && next == walk.recs.len()),
            "{reader}: tail {tail:#x} after a stop"
        );
    }

    fn drain(&self, ring: &mut PerfRing) {
        self.reset(ring);
        let walk = self.forward(true);
        let before = ring.stats();
        let mut next = 0;
        for call in 0.. {
            assert!(call <= walk.recs.len(), "drain: no progress");
            let (mut calls, mut bytes) = (0, 0);
            let ret = ring.drain(|rec| {
                let &(pos, size) = walk.recs.get(next).expect("drain: a record the model does not have");
                self.check_record(rec, pos, size);
                (next, calls, bytes) = (next + 1, calls + 1, bytes + size);
                self.answer(calls)
            });
            assert!(bytes <= self.ds(), "drain: more than the ring in one call");
            if self.read_to_head("drain", ret, calls) {
                break;
            }
            self.check_stopped_tail("drain", ring, &walk, next);
        }
        assert_eq!(next, walk.recs.len(), "drain: records missing");
        assert_eq!(ring.load_tail(), self.head, "drain: tail not at the head");
        self.check_stats("drain", before, ring.stats(), &walk, true);
        let settled = ring.stats();
        let ret = ring.drain(|_| -> ControlFlow<i32> { panic!("drain: a record delivered twice") });
        assert_eq!(ret, ControlFlow::Continue(()), "drain: a drained ring");
        self.check_settled("drain", settled, ring.stats());
    }

    /// A second drain of a drained ring changes no counter.
    fn check_settled(&self, reader: &str, settled: Counters, now: Counters) {
        assert_eq!(now, settled, "{reader}: a drain of a drained ring changed the stats");
    }

    fn drain_with(&self, ring: &mut PerfRing) {
        struct State {
            next: usize,
            calls: usize,
            finished: usize,
            tail: u64,
        }
        self.reset(ring);
        let walk = self.forward(true);
        let before = ring.stats();
        let tail_word = ring.base().wrapping_add(MMAP_PAGE_DATA_TAIL).cast::<u64>();
        // SAFETY: `data_tail` of this heap ring: 8-aligned, inside its control
        // page, alive while `ring` is; the ring itself only accesses it
        // atomically.
        let published = || unsafe { AtomicU64::from_ptr(tail_word) }.load(Ordering::Relaxed);
        let mut st = State { next: 0, calls: 0, finished: 0, tail: 0 };
        for call in 0.. {
            assert!(call <= walk.recs.len(), "drain_with: no progress");
            (st.calls, st.finished, st.tail) = (0, 0, ring.load_tail());
            let ret = ring.drain_with(
                &mut st,
                |st, header, rec| {
                    assert_eq!(header, Header::of(rec), "drain_with: header is not the record's");
                    assert_eq!(st.finished, 0, "drain_with: a record after finish");
                    assert_eq!(published(), st.tail, "drain_with: tail published before the batch ended");
                    let &(pos, size) =
                        walk.recs.get(st.next).expect("drain_with: a record the model does not have");
                    self.check_record(rec, pos, size);
                    (st.next, st.calls) = (st.next + 1, st.calls + 1);
                    self.answer(st.calls)
                },
                |st| {
                    st.finished += 1;
                    assert_eq!(published(), st.tail, "drain_with: tail published before finish");
                },
            );
            assert_eq!(st.finished, 1, "drain_with: finish must run once");
            if self.read_to_head("drain_with", ret, st.calls) {
                break;
            }
            self.check_stopped_tail("drain_with", ring, &walk, st.next);
        }
        assert_eq!(st.next, walk.recs.len(), "drain_with: records missing");
        assert_eq!(ring.load_tail(), self.head, "drain_with: tail not at the head");
        self.check_stats("drain_with", before, ring.stats(), &walk, true);
    }

    fn drain_spans(&self, ring: &mut PerfRing) {
        self.reset(ring);
        let walk = self.forward(true);
        // on_record sees every record but the samples, before the sink does.
        let noted: Vec<usize> =
            (0..walk.recs.len()).filter(|&i| self.type_at(walk.recs[i].0) != PERF_RECORD_SAMPLE).collect();
        let before = ring.stats();
        // Records the sink got; read by on_record too, hence a Cell.
        let next = Cell::new(0);
        let mut next_noted = 0;
        for call in 0.. {
            assert!(call <= walk.recs.len(), "drain_spans: no progress");
            let (mut spans, mut bytes) = (0, 0);
            let ret = ring.drain_spans(
                |rec| {
                    let &i = noted.get(next_noted).expect("drain_spans: on_record got an unexpected record");
                    assert!(i >= next.get(), "drain_spans: on_record after the sink got the record");
                    self.check_record(rec, walk.recs[i].0, walk.recs[i].1);
                    next_noted += 1;
                },
                |span, count| {
                    (spans, bytes) = (spans + 1, bytes + span.len());
                    assert!(!span.is_empty(), "drain_spans: empty span");
                    let first = next.get();
                    if self.in_ring(span) {
                        let mut at = 0;
                        while at < span.len() {
                            let &(pos, size) = walk
                                .recs
                                .get(next.get())
                                .expect("drain_spans: a record the model does not have");
                            assert!(at + size <= span.len(), "drain_spans: a span ends inside a record");
                            self.check_record(&span[at..at + size], pos, size);
                            at += size;
                            next.set(next.get() + 1);
                        }
                    } else {
                        let &(pos, size) =
                            walk.recs.get(next.get()).expect("drain_spans: a copy the model does not have");
                        assert!(
                            self.wraps(pos, size),
                            "drain_spans: only a wrapped record comes from a copy"
                        );
                        self.check_record(span, pos, size);
                        next.set(next.get() + 1);
                    }
                    assert_eq!(count, next.get() - first, "drain_spans: wrong record count for a span");
                    self.answer(spans)
                },
            );
            assert!(bytes <= self.ds(), "drain_spans: more than the ring in one call");
            if self.read_to_head("drain_spans", ret, spans) {
                break;
            }
            self.check_stopped_tail("drain_spans", ring, &walk, next.get());
        }
        assert_eq!((next.get(), next_noted), (walk.recs.len(), noted.len()), "drain_spans: records missing");
        assert_eq!(ring.load_tail(), self.head, "drain_spans: tail not at the head");
        self.check_stats("drain_spans", before, ring.stats(), &walk, true);
        let settled = ring.stats();
        let ret = ring.drain_spans(
            |_| panic!("drain_spans: on_record twice"),
            |_, _| -> ControlFlow<i32> { panic!("drain_spans: a span twice") },
        );
        assert_eq!(ret, ControlFlow::Continue(()), "drain_spans: a drained ring");
        self.check_settled("drain_spans", settled, ring.stats());
    }

    fn record_at(&self, ring: &mut PerfRing) {
        self.reset(ring);
        let walk = self.forward(false);
        let before = ring.stats();
        let mut pos = self.tail;
        let mut ended = false;
        for i in 0..=walk.recs.len() {
            match ring.record_at(pos, self.head) {
                At::Record(rec) => {
                    let &(p, size) = walk.recs.get(i).expect("record_at: a record the model does not have");
                    assert_eq!(p, pos);
                    self.check_record(rec, p, size);
                    pos = pos.wrapping_add(size as u64);
                }
                At::End => {
                    assert_eq!((i, walk.corrupt), (walk.recs.len(), None), "record_at: ended early");
                    ended = true;
                    break;
                }
                At::Corrupt => {
                    assert_eq!((i, walk.corrupt), (walk.recs.len(), Some(pos)), "record_at: corrupt early");
                    ring.note_skipped(pos, self.head);
                    ended = true;
                    break;
                }
                At::NoMemory => panic!("record_at: no memory for a copy"),
            }
        }
        assert!(ended, "record_at: walked past the model");
        assert_eq!(ring.load_tail(), self.tail, "record_at must not consume");
        self.check_stats("record_at", before, ring.stats(), &walk, false);
    }

    fn snapshot(&self, ring: &mut PerfRing) {
        self.reset(ring);
        let (recs, consumed, written) = self.backward();
        let before = ring.stats();
        let mut prev = self.tail;
        let (mut next, mut bytes) = (0, 0);
        let overwritten = ring.snapshot_backward(&mut prev, |rec| {
            let &(pos, size) = recs.get(next).expect("snapshot: a record the model does not have");
            self.check_record(rec, pos, size);
            (next, bytes) = (next + 1, bytes + size);
        });
        assert_eq!(next, recs.len(), "snapshot: records missing");
        assert!(bytes <= self.ds(), "snapshot: more than the ring");
        assert_eq!(prev, self.head, "snapshot: the head seen is remembered");
        assert_eq!(overwritten, written - consumed, "snapshot: read + overwritten = written");
        let again = ring.snapshot_backward(&mut prev, |_| panic!("snapshot: a record read twice"));
        assert_eq!((again, prev), (0, self.head));
        assert_eq!(ring.stats(), before, "snapshot: the caller counts what it reads");
    }
}
