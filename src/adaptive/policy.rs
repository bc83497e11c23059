//! The fast mode's decisions, as a pure function of what the reader saw:
//! rates over windows, how long records waited for the reader, how full a
//! ring was when a drain began and how its backlog moved while it was read,
//! how much of its time the reader spent draining, lost reports. No system
//! calls: the parent module applies the moves, and the unit tests below
//! drive every transition with numbers.
//!
//! What the reader can take decides, not thresholds tuned to one
//! producer: a ring batches only while its records wait for the reader
//! at most a share of the time the producer, freed of per-record
//! wake-ups, takes to fill it (that pace measured once it has batched;
//! before, assumed many times its pace under per-record wake-ups), and is
//! read in chunks small enough that a producer outrunning the reader adds
//! at most an eighth of the ring before the reader looks again.

use crate::kernel::clock::Moment;
use std::time::Duration;

/// How long a rate is measured before a ring changes mode.
pub const WINDOW: Duration = Duration::from_millis(50);
/// Records/s above which a ring is batched. Below it, per-record wake-ups
/// cost little and keep libbpf's latency.
pub const BATCH_ABOVE: u64 = 20_000;
/// Records/s below which a batched ring goes back to per-record wake-ups
/// (lower than [`BATCH_ABOVE`] so a rate near the line does not flap).
pub const UNBATCH_BELOW: u64 = 5_000;
/// After the reader fell behind, the ring stays per-record at least this
/// long, twice as long each time it falls behind again, up to [`HOLD_MAX`].
pub const HOLD_MIN: Duration = Duration::from_millis(200);
/// The longest hold.
pub const HOLD_MAX: Duration = Duration::from_millis(6400);
/// The reader's time is measured over spans this long.
pub const BUSY_SPAN: Duration = Duration::from_millis(2);
/// A ring batches only while its records wait for the reader, at worst
/// over a window, at most this share (1/n) of the time the producer,
/// freed of per-record wake-ups, takes to fill it: a reader that comes
/// back later than that (it consumes on a schedule of its own, or waits
/// for its CPU) would not be woken sooner by batching, and would face a
/// producer it does not watch.
pub const REACH_SHARE: u32 = 4;
/// Until a window batched throughout has measured that producer's pace,
/// it is assumed this many times its pace under per-record wake-ups (on
/// the project's fastest host, 66 times: 10 M against 150 k records/s)...
pub const FREED_SPEEDUP: u64 = 128;
/// ... and at most this many bytes/s: above the fastest perf output
/// measured on the project's hosts (10 M records/s of 64-byte samples,
/// 0.8 GB/s).
pub const PRODUCER_PRIOR: u64 = 1 << 30;

/// Where a CPU's map slot points, in the fast mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// An event waking per record: the spill ring's once the CPU has one,
    /// the caller's before.
    #[default]
    PerRecord,
    /// An event writing into the fast ring that wakes only at a quarter of
    /// it: the timer's ticks read it meanwhile, so the producer pays no
    /// wake-up per record or per batch, and the reader wakes on ticks.
    Streaming,
    /// The caller's own event, for good: someone reads the caller's ring
    /// or its event, the slot is no longer this buffer's, or the CPU could
    /// not have fast events.
    Caller,
}

impl Target {
    /// Whether the slot points at an event that does not wake per record
    /// (the timer must tick, and the reader's backlog be watched).
    pub fn batched(self) -> bool {
        self == Target::Streaming
    }
}

/// What one CPU's rings showed, at the end of a window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Window {
    /// Records read so far (a running total).
    pub records: u64,
    /// Their bytes (a running total).
    pub bytes: u64,
    /// Lost records reported in the fast ring so far (a running total).
    pub lost: u64,
    /// The largest backlog, in bytes, a drain found when it began, over
    /// the window.
    pub backlog_max: u64,
    /// Size of the ring batched writes go to.
    pub ring: u64,
    /// How long the window lasted.
    pub elapsed: Duration,
}

/// One CPU's policy state.
#[derive(Clone, Debug, Default)]
pub struct LanePolicy {
    target: Target,
    /// Records read when the window started.
    mark: u64,
    /// Bytes read when the window started.
    bytes_mark: u64,
    /// Lost records reported in the fast ring when the window started.
    lost_mark: u64,
    /// The slot did not move since the window started.
    steady: bool,
    /// Times the slot moved to batching.
    switches: u64,
    /// The current hold after falling behind (zero: none yet).
    hold: Duration,
    /// No batching before this.
    held_until: Moment,
    /// Records/s over the last window (for the log).
    rate: u64,
    /// How long records waited for the reader at worst, in the last window.
    late: Duration,
    /// The last window was fast enough to batch, but its records waited
    /// too long for the reader.
    too_late: bool,
    /// Bytes/s over the fastest window batched throughout: what the
    /// producer does freed of per-record wake-ups, or what the reader
    /// took of it (zero: never measured).
    fast_bytes: u64,
    /// Bytes/s over the last window read under per-record wake-ups.
    slowed_bytes: u64,
}

impl LanePolicy {
    /// Where the slot points now.
    pub fn target(&self) -> Target {
        self.target
    }

    /// Times the slot moved to batching.
    pub fn switches(&self) -> u64 {
        self.switches
    }

    /// Records/s read over the last window.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// How long records waited for the reader at worst in the last window.
    pub fn late(&self) -> Duration {
        self.late
    }

    /// Whether the last window was fast enough to batch, but its records
    /// waited too long for the reader.
    pub fn too_late(&self) -> bool {
        self.too_late
    }

    /// How long records may wait for the reader for a ring of `ring` bytes
    /// to batch (see [`REACH_SHARE`], [`FREED_SPEEDUP`]).
    pub fn reach(&self, ring: u64) -> Duration {
        let pace = match (self.fast_bytes, self.slowed_bytes) {
            (0, 0) => PRODUCER_PRIOR,
            (0, slowed) => slowed.saturating_mul(FREED_SPEEDUP).min(PRODUCER_PRIOR),
            (measured, _) => measured,
        };
        let fill = u128::from(ring) * 1_000_000_000 / u128::from(pace);
        Duration::from_nanos(fill.min(u64::MAX as u128) as u64) / REACH_SHARE
    }

    /// At the end of a window: what the CPU's rings showed. Returns the
    /// move to make, if any.
    pub fn on_window(&mut self, w: Window, now: Moment) -> Option<Target> {
        let micros = w.elapsed.as_micros().max(1) as u64;
        let records = w.records.wrapping_sub(self.mark);
        let bytes = w.bytes.wrapping_sub(self.bytes_mark);
        let rate = records.saturating_mul(1_000_000) / micros;
        // How long the window's stream took to write the largest backlog
        // a drain found: how long its oldest records had waited.
        self.late = match (bytes, w.backlog_max) {
            (_, 0) => Duration::ZERO,
            (0, _) => w.elapsed,
            (b, m) => w.elapsed.mul_f64((m as f64 / b as f64).min(1e6)),
        };
        let byte_rate = bytes.saturating_mul(1_000_000) / micros;
        if self.steady && self.target.batched() {
            self.fast_bytes = self.fast_bytes.max(byte_rate);
        } else if self.target == Target::PerRecord {
            self.slowed_bytes = byte_rate;
        }
        let lost_more = w.lost > self.lost_mark;
        let fast = rate >= BATCH_ABOVE && now >= self.held_until;
        self.too_late = self.target == Target::PerRecord && fast && self.late > self.reach(w.ring);
        (self.mark, self.bytes_mark, self.lost_mark, self.rate, self.steady) =
            (w.records, w.bytes, w.lost, rate, true);
        match self.target {
            // The kernel refused writes while batched: the reader cannot
            // keep up with a producer that no longer pays per record.
            t if t.batched() && lost_more => self.on_pressure(now),
            t if t.batched() && rate < UNBATCH_BELOW => {
                self.hold = Duration::ZERO; // ended by the producer, not by the reader
                Some(Target::PerRecord)
            }
            Target::PerRecord if fast && !self.too_late => Some(Target::Streaming),
            _ => None,
        }
    }

    /// The reader is falling behind (a ring filled up, or draining takes
    /// most of its time): back to per-record wake-ups, which slow the
    /// producer down as libbpf's do, and no batching for a while.
    pub fn on_pressure(&mut self, now: Moment) -> Option<Target> {
        if !self.target.batched() {
            return None;
        }
        self.hold = (self.hold * 2).clamp(HOLD_MIN, HOLD_MAX);
        self.held_until = now + self.hold;
        Some(Target::PerRecord)
    }

    /// Someone reads the caller's ring or event: back to the caller's event.
    pub fn stand_down(&self) -> Option<Target> {
        (self.target != Target::Caller).then_some(Target::Caller)
    }

    /// The move to `target` was made.
    pub fn moved(&mut self, target: Target) {
        self.switches += u64::from(target.batched() && !self.target.batched());
        self.steady &= target == self.target;
        self.target = target;
    }
}

/// Whether a ring of `size` bytes holding `pending` is past half full:
/// checked when a drain of a batched ring begins (the reader came back too
/// late for the producer's pace), and of a per-record one without a spill
/// ring yet (it needs one).
pub fn over_filled(pending: u64, size: u64) -> bool {
    pending.saturating_mul(2) >= size
}

/// A batched ring is drained in chunks, its tail published after each, so
/// that a long drain frees space as it goes and looks at its backlog
/// between them: at most a 32nd of the ring...
pub const CHUNK_SHARE: u64 = 32;
/// ... at first a 256th...
pub const FIRST_CHUNK_SHARE: u64 = 256;
/// ... at least a 1024th ...
pub const MIN_CHUNK_SHARE: u64 = 1024;
/// ... and small enough that a producer outrunning its reader as much as
/// over the last chunk adds at most an eighth of the ring during one.
pub const STEP_SHARE: u64 = 8;
/// A backlog over this share of the ring that grew while a chunk was read
/// means the reader is slower than the producer.
pub const BACKLOG_SHARE: u64 = 16;

/// The first chunk of a batched ring of `size` bytes: its reader's pace is
/// not known yet.
pub fn first_chunk(size: u64) -> u64 {
    size / FIRST_CHUNK_SHARE
}

/// The next chunk of a drain of a ring of `size` bytes, after one of
/// `chunk` bytes that began with `before` bytes pending and ended with
/// `now`: however slow the reader's callback, it looks at its backlog
/// before a producer outrunning it by as much can add an eighth of the
/// ring; a reader that keeps up reads in ever larger chunks.
pub fn next_chunk(chunk: u64, before: u64, now: u64, size: u64) -> u64 {
    let grew = now.saturating_sub(before);
    let next = if grew == 0 {
        chunk.saturating_mul(2)
    } else {
        (u128::from(chunk) * u128::from(size / STEP_SHARE) / u128::from(grew)).min(u64::MAX as u128) as u64
    };
    next.clamp(size / MIN_CHUNK_SHARE, size / CHUNK_SHARE)
}

/// Whether the reader of a batched ring of `size` bytes is falling behind,
/// given the bytes pending when a chunk of its drain began (`before`) and
/// when it ended (`now`): its backlog grew past a sixteenth of the ring
/// while it read (a producer no longer slowed by per-record wake-ups
/// outruns it, and would overflow the ring long before any window ends),
/// or the ring is half full. A backlog that shrinks, however large (the
/// reader was merely descheduled a while), is not falling behind.
pub fn falling_behind(before: u64, now: u64, size: u64) -> bool {
    over_filled(now, size) || (now > before && now.saturating_mul(BACKLOG_SHARE) > size)
}

/// The share of its time the reader spends draining, over spans of
/// [`BUSY_SPAN`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Busy {
    since: Option<Moment>,
    spent: Duration,
}

impl Busy {
    /// Adds a drain of `spent` ending at `now`; true when, over the span
    /// just ended, draining took half the reader's time or more.
    pub fn add(&mut self, spent: Duration, now: Moment) -> bool {
        let since = *self.since.get_or_insert(now);
        self.spent += spent;
        let span = now.since(since);
        if span < BUSY_SPAN {
            return false;
        }
        let busy = self.spent * 2 >= span;
        *self = Busy { since: Some(now), spent: Duration::ZERO };
        busy
    }

    /// Starts over (batching ended).
    pub fn reset(&mut self) {
        *self = Busy::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    /// A 4 MiB fast ring.
    const RING: u64 = 4 << 20;

    fn at(ms: u64) -> Moment {
        Moment::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    /// A stream of 32-byte records and what a window of it showed.
    #[derive(Default)]
    struct Stream {
        records: u64,
        lost: u64,
    }

    impl Stream {
        /// A 50 ms window ending at `ms` in which `per_s` records/s were
        /// read, the largest backlog a drain found having waited `waited`.
        fn window(&mut self, p: &mut LanePolicy, per_s: u64, waited: Duration, ms: u64) -> Option<Target> {
            self.records += per_s * 50 / 1000;
            let backlog_max = (per_s as f64 * 32.0 * waited.as_secs_f64()) as u64;
            let w = Window {
                records: self.records,
                bytes: self.records * 32,
                lost: self.lost,
                backlog_max,
                ring: RING,
                elapsed: 50 * MS,
            };
            let r = p.on_window(w, at(ms));
            if let Some(t) = r {
                p.moved(t);
            }
            r
        }

        /// The same with a prompt reader (records waited 20 us).
        fn prompt(&mut self, p: &mut LanePolicy, per_s: u64, ms: u64) -> Option<Target> {
            self.window(p, per_s, Duration::from_micros(20), ms)
        }
    }

    #[test]
    fn batches_above_the_line_and_stops_below_the_lower_one() {
        let (mut p, mut s) = (LanePolicy::default(), Stream::default());
        assert_eq!(s.prompt(&mut p, 19_000, 50), None);
        assert_eq!(s.prompt(&mut p, 20_000, 100), Some(Target::Streaming));
        assert_eq!(p.switches(), 1);
        // Between the lines: stays batched (no flapping).
        assert_eq!(s.prompt(&mut p, 6_000, 150), None);
        assert_eq!(s.prompt(&mut p, 4_000, 200), Some(Target::PerRecord));
        assert_eq!(s.prompt(&mut p, 30_000, 250), Some(Target::Streaming));
        assert_eq!(p.switches(), 2);
    }

    /// A caller that consumes every 20 ms, or a reader waiting for its
    /// CPU: batching would not bring it back sooner, only free a producer
    /// it does not watch.
    #[test]
    fn a_reader_that_keeps_records_waiting_is_not_batched() {
        let (mut p, mut s) = (LanePolicy::default(), Stream::default());
        assert_eq!(s.window(&mut p, 150_000, 20 * MS, 50), None);
        assert!(p.too_late());
        assert_eq!(p.late(), 20 * MS);
        // 150 k records/s of 32 bytes under per-record wake-ups: assumed
        // 128 times that, 614 MB/s freed, 6.8 ms to fill 4 MiB.
        assert_eq!(p.reach(RING), Duration::from_nanos(1_706_666));
        assert_eq!(s.window(&mut p, 150_000, Duration::from_millis(2), 100), None, "beyond the reach");
        assert_eq!(s.window(&mut p, 150_000, Duration::from_micros(1600), 150), Some(Target::Streaming));
        // A producer slowed more (its CPU shared too) is assumed slower.
        let (mut q, mut s) = (LanePolicy::default(), Stream::default());
        assert_eq!(s.window(&mut q, 30_000, Duration::from_millis(4), 50), Some(Target::Streaming));
        // At most 1 GiB/s: 1 ms for 4 MiB.
        let (mut q, mut s) = (LanePolicy::default(), Stream::default());
        s.window(&mut q, 1_000_000, Duration::from_millis(2), 50);
        assert_eq!(q.reach(RING), Duration::from_nanos(976_562));
        assert!(!p.too_late());
        // Slow, and late: no batching, and not "too late" either.
        let (mut q, mut s) = (LanePolicy::default(), Stream::default());
        assert_eq!(s.window(&mut q, 1_000, 20 * MS, 50), None);
        assert!(!q.too_late());
    }

    /// Once a window batched throughout measured the freed producer, a
    /// reader may keep records waiting a quarter of the time that producer
    /// takes to fill the ring: longer behind a slow producer, shorter
    /// behind a fast one.
    #[test]
    fn the_reach_follows_the_batched_producer() {
        let (mut p, mut s) = (LanePolicy::default(), Stream::default());
        assert_eq!(p.reach(RING), Duration::from_nanos(976_562), "nothing measured: 1 GiB/s");
        s.prompt(&mut p, 100_000, 50);
        let assumed = p.reach(RING);
        assert_eq!(assumed, Duration::from_micros(2560), "128 times 100 k records/s of 32 bytes");
        assert_eq!(p.target(), Target::Streaming);
        s.prompt(&mut p, 1_000_000, 100); // switched during it: not measured
        assert_eq!(p.reach(RING), assumed);
        // 1 M records/s of 32 bytes fill 4 MiB in 131 ms.
        s.prompt(&mut p, 1_000_000, 150);
        assert_eq!(p.reach(RING).as_micros(), 32_768);
        p.on_pressure(at(160));
        p.moved(Target::PerRecord);
        assert_eq!(s.window(&mut p, 150_000, 20 * MS, 400), Some(Target::Streaming), "20 ms: within");
        // 10 M records/s: 13 ms to fill; 5 ms of waiting is too long now.
        s.prompt(&mut p, 10_000_000, 450);
        s.prompt(&mut p, 10_000_000, 500);
        assert_eq!(p.reach(RING).as_micros(), 3_276);
        p.on_pressure(at(510));
        p.moved(Target::PerRecord);
        assert_eq!(s.window(&mut p, 150_000, 5 * MS, 1000), None);
        assert!(p.too_late());
        assert_eq!(s.window(&mut p, 150_000, 3 * MS, 1050), Some(Target::Streaming));
    }

    #[test]
    fn falling_behind_holds_per_record_wake_ups_longer_each_time() {
        let (mut p, mut s) = (LanePolicy::default(), Stream::default());
        s.prompt(&mut p, 1_000_000, 50);
        assert_eq!(p.on_pressure(at(60)), Some(Target::PerRecord));
        p.moved(Target::PerRecord);
        assert_eq!(p.on_pressure(at(61)), None, "only a batched ring backs off");
        // Held for 200 ms: a fast window within it does not batch.
        assert_eq!(s.prompt(&mut p, 1_000_000, 250), None);
        assert_eq!(s.prompt(&mut p, 1_000_000, 300), Some(Target::Streaming));
        // The second time, 400 ms.
        assert_eq!(p.on_pressure(at(310)), Some(Target::PerRecord));
        p.moved(Target::PerRecord);
        assert_eq!(s.prompt(&mut p, 1_000_000, 700), None);
        assert_eq!(s.prompt(&mut p, 1_000_000, 720), Some(Target::Streaming));
        // A batch the producer ended resets the hold.
        assert_eq!(s.prompt(&mut p, 0, 770), Some(Target::PerRecord));
        s.prompt(&mut p, 1_000_000, 820);
        assert_eq!(p.on_pressure(at(830)), Some(Target::PerRecord));
        p.moved(Target::PerRecord);
        assert_eq!(s.prompt(&mut p, 1_000_000, 1040), Some(Target::Streaming), "200 ms again");
    }

    #[test]
    fn the_hold_doubles_up_to_its_limit() {
        let mut p = LanePolicy::default();
        let mut holds = Vec::new();
        for i in 0..8 {
            p.moved(Target::Streaming);
            p.on_pressure(at(i));
            holds.push(p.hold.as_millis());
        }
        assert_eq!(holds, vec![200, 400, 800, 1600, 3200, 6400, 6400, 6400]);
    }

    #[test]
    fn lost_reports_while_batched_are_pressure() {
        let (mut p, mut s) = (LanePolicy::default(), Stream::default());
        p.moved(Target::Streaming);
        assert_eq!(s.prompt(&mut p, 1_000_000, 50), None);
        s.lost = 7;
        assert_eq!(s.prompt(&mut p, 1_000_000, 100), Some(Target::PerRecord));
        // Losses while per-record are libbpf's own: no hold grows from them.
        s.lost = 9;
        assert_eq!(s.prompt(&mut p, 100_000, 400), Some(Target::Streaming));
    }

    #[test]
    fn standing_down_is_for_good() {
        let (mut p, mut s) = (LanePolicy::default(), Stream::default());
        assert_eq!(p.stand_down(), Some(Target::Caller));
        p.moved(Target::Caller);
        assert_eq!(p.stand_down(), None);
        assert_eq!(s.prompt(&mut p, 10_000_000, 50), None);
        assert_eq!(p.on_pressure(at(60)), None);
    }

    #[test]
    fn fill_limit_is_half_the_ring() {
        assert!(!over_filled(2047, 4096));
        assert!(over_filled(2048, 4096));
        assert!(over_filled(u64::MAX, 4096));
    }

    #[test]
    fn a_growing_backlog_is_falling_behind_a_shrinking_one_is_not() {
        let size = 1 << 20;
        assert!(!falling_behind(0, size / 32, size), "growing, but small");
        assert!(falling_behind(size / 32, size / 8, size), "growing past a sixteenth");
        assert!(!falling_behind(size / 3, size / 4, size), "large, but shrinking");
        assert!(falling_behind(size, size / 2, size), "half full");
    }

    /// A 3 us callback behind a producer 30 times faster: each chunk
    /// lets the backlog grow at most an eighth of the ring; a reader that
    /// keeps up reads in ever larger chunks, up to a 32nd of the ring.
    #[test]
    fn chunks_shrink_behind_a_faster_producer_and_grow_behind_a_slower_one() {
        let first = first_chunk(RING);
        assert_eq!(first, RING / 256);
        let next = next_chunk(first, 100_000, 100_000 + 29 * first, RING);
        assert!(29 * next <= RING / 8 + 29 * 8, "{next}");
        assert_eq!(next_chunk(first, 100_000, 90_000, RING), 2 * first);
        assert_eq!(next_chunk(RING / 32, 100_000, 50_000, RING), RING / 32, "at most a 32nd");
        assert_eq!(next_chunk(first, 0, RING, RING), RING / 1024, "at least a 1024th");
    }

    #[test]
    fn busy_is_measured_over_spans() {
        let mut b = Busy::default();
        assert!(!b.add(MS / 2, at(0)), "a span has just begun");
        assert!(!b.add(MS / 2, at(1)));
        assert!(b.add(MS / 2, at(2)), "1.5 ms of 2 ms draining");
        assert!(!b.add(MS / 4, at(3)));
        assert!(!b.add(MS / 4, at(4)), "0.5 ms of 2 ms");
        b.reset();
        assert!(!b.add(3 * MS, at(10)));
    }
}
