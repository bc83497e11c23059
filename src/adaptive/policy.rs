//! The fast mode's decisions, as a pure function of what the reader saw:
//! rates over windows, how full a ring was when a drain began, how much of
//! its time the reader spent draining, lost reports. No system calls: the
//! step in the parent module applies the moves, and the unit tests below
//! drive every transition with numbers.

use crate::kernel::clock::Moment;
use std::time::Duration;

/// How long a rate is measured before a ring changes mode.
pub const WINDOW: Duration = Duration::from_millis(50);
/// Records/s above which a ring is batched (streaming, where the CPU has
/// a streaming event). Below it, per-record wake-ups cost little and keep
/// libbpf's latency.
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

/// Where a CPU's map slot points, in the fast mode.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// A per-record event writing into the fast ring.
    #[default]
    PerRecord,
    /// A batching event writing into the fast ring.
    Batched,
    /// An event writing into the fast ring that wakes only at a quarter of
    /// it: the timer's ticks read it meanwhile. Batching goes here when
    /// the CPU has one: the ticks read a batched ring as often anyway, so
    /// a wake-up every [`super::BATCH_EVENTS`] records would only add an
    /// irq_work for the producer and an epoll round for the reader (15,000
    /// a second at 1 M records/s, where ticks are 1,250).
    Streaming,
    /// The caller's own event, for good: someone reads the caller's ring
    /// or its event, or the slot is no longer this buffer's.
    Caller,
}

impl Target {
    /// Whether the slot points at an event that does not wake per record
    /// (the timer must tick, and the reader's backlog be watched).
    pub fn batched(self) -> bool {
        matches!(self, Target::Batched | Target::Streaming)
    }
}

/// One CPU's policy state.
#[derive(Clone, Debug, Default)]
pub struct LanePolicy {
    target: Target,
    /// The CPU has a streaming event.
    can_stream: bool,
    /// Records read when the window started.
    mark: u64,
    /// Lost records reported in the fast ring when the window started.
    lost_mark: u64,
    /// Times the slot moved to batching.
    switches: u64,
    /// The current hold after falling behind (zero: none yet).
    hold: Duration,
    /// No batching before this.
    held_until: Moment,
    /// Records/s over the last window (for the log).
    rate: u64,
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

    /// The CPU has a streaming event to move to.
    pub fn allow_streaming(&mut self) {
        self.can_stream = true;
    }

    /// At the end of a window of `elapsed`: `records` read and `lost`
    /// reported in the fast ring so far (both running totals). Returns
    /// the move to make, if any.
    pub fn on_window(&mut self, records: u64, lost: u64, elapsed: Duration, now: Moment) -> Option<Target> {
        let micros = elapsed.as_micros().max(1) as u64;
        let rate = records.wrapping_sub(self.mark).saturating_mul(1_000_000) / micros;
        let lost_more = lost > self.lost_mark;
        (self.mark, self.lost_mark, self.rate) = (records, lost, rate);
        match self.target {
            // The kernel refused writes while batched: the reader cannot
            // keep up with a producer that no longer pays per record.
            t if t.batched() && lost_more => self.on_pressure(now),
            t if t.batched() && rate < UNBATCH_BELOW => {
                self.hold = Duration::ZERO; // ended by the producer, not by the reader
                Some(Target::PerRecord)
            }
            Target::PerRecord if rate >= BATCH_ABOVE && now >= self.held_until => Some(self.batching()),
            _ => None,
        }
    }

    /// Where a ring goes when it batches.
    fn batching(&self) -> Target {
        if self.can_stream { Target::Streaming } else { Target::Batched }
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
        self.target = target;
    }
}

/// Whether a ring of `size` bytes holding `pending` is past half full:
/// checked when a drain of a batched ring begins.
pub fn over_filled(pending: u64, size: u64) -> bool {
    pending.saturating_mul(2) >= size
}

/// A batched ring is drained in chunks of this share of its size, so that
/// a long drain frees space as it goes and looks at the backlog between
/// chunks.
pub const CHUNK_SHARE: u64 = 32;
/// A backlog over this share of the ring that grew while a chunk was read
/// means the reader is slower than the producer.
pub const BACKLOG_SHARE: u64 = 16;

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

    fn at(ms: u64) -> Moment {
        Moment::from_nanos(1_000_000_000 + ms * 1_000_000)
    }

    /// A window of 50 ms in which `per_s` records/s were read.
    fn window(p: &mut LanePolicy, records: &mut u64, per_s: u64, ms: u64) -> Option<Target> {
        *records += per_s * 50 / 1000;
        let r = p.on_window(*records, 0, 50 * MS, at(ms));
        if let Some(t) = r {
            p.moved(t);
        }
        r
    }

    #[test]
    fn batches_above_the_line_and_stops_below_the_lower_one() {
        let (mut p, mut n) = (LanePolicy::default(), 0);
        assert_eq!(window(&mut p, &mut n, 19_000, 50), None);
        assert_eq!(window(&mut p, &mut n, 20_000, 100), Some(Target::Batched));
        assert_eq!(p.switches(), 1);
        // Between the lines: stays batched (no flapping).
        assert_eq!(window(&mut p, &mut n, 6_000, 150), None);
        assert_eq!(window(&mut p, &mut n, 4_000, 200), Some(Target::PerRecord));
        assert_eq!(window(&mut p, &mut n, 30_000, 250), Some(Target::Batched));
        assert_eq!(p.switches(), 2);
    }

    #[test]
    fn a_cpu_with_a_streaming_event_streams_when_it_batches() {
        let (mut p, mut n) = (LanePolicy::default(), 0);
        p.allow_streaming();
        assert_eq!(window(&mut p, &mut n, 19_000, 50), None);
        // The first fast window: per-record wake-ups cap the producer near
        // 100 k records/s here, so that is all a window can see.
        assert_eq!(window(&mut p, &mut n, 90_000, 100), Some(Target::Streaming));
        assert_eq!(p.switches(), 1);
        assert_eq!(window(&mut p, &mut n, 6_000, 150), None, "between the lines: stays");
        assert_eq!(window(&mut p, &mut n, 4_000, 200), Some(Target::PerRecord));
        assert_eq!(window(&mut p, &mut n, 30_000, 250), Some(Target::Streaming));
        assert_eq!(p.on_pressure(at(260)), Some(Target::PerRecord), "falling behind while streaming");
        p.moved(Target::PerRecord);
        assert_eq!(window(&mut p, &mut n, 1_000, 300), None);
        let mut q = LanePolicy::default();
        assert_eq!(window(&mut q, &mut n, 250_000, 50), Some(Target::Batched), "no streaming event");
        assert_eq!(window(&mut q, &mut n, 250_000, 100), None, "stays batched");
    }

    #[test]
    fn falling_behind_holds_per_record_wake_ups_longer_each_time() {
        let (mut p, mut n) = (LanePolicy::default(), 0);
        window(&mut p, &mut n, 1_000_000, 50);
        assert_eq!(p.on_pressure(at(60)), Some(Target::PerRecord));
        p.moved(Target::PerRecord);
        assert_eq!(p.on_pressure(at(61)), None, "only a batched ring backs off");
        // Held for 200 ms: a fast window within it does not batch.
        assert_eq!(window(&mut p, &mut n, 1_000_000, 250), None);
        assert_eq!(window(&mut p, &mut n, 1_000_000, 300), Some(Target::Batched));
        // The second time, 400 ms.
        assert_eq!(p.on_pressure(at(310)), Some(Target::PerRecord));
        p.moved(Target::PerRecord);
        assert_eq!(window(&mut p, &mut n, 1_000_000, 700), None);
        assert_eq!(window(&mut p, &mut n, 1_000_000, 720), Some(Target::Batched));
        // A batch the producer ended resets the hold.
        assert_eq!(window(&mut p, &mut n, 0, 770), Some(Target::PerRecord));
        window(&mut p, &mut n, 1_000_000, 820);
        assert_eq!(p.on_pressure(at(830)), Some(Target::PerRecord));
        p.moved(Target::PerRecord);
        assert_eq!(window(&mut p, &mut n, 1_000_000, 1040), Some(Target::Batched), "200 ms again");
    }

    #[test]
    fn the_hold_doubles_up_to_its_limit() {
        let mut p = LanePolicy::default();
        let mut holds = Vec::new();
        for i in 0..8 {
            p.moved(Target::Batched);
            p.on_pressure(at(i));
            holds.push(p.hold.as_millis());
        }
        assert_eq!(holds, vec![200, 400, 800, 1600, 3200, 6400, 6400, 6400]);
    }

    #[test]
    fn lost_reports_while_batched_are_pressure() {
        let mut p = LanePolicy::default();
        p.moved(Target::Batched);
        assert_eq!(p.on_window(1_000_000, 0, 50 * MS, at(50)), None);
        assert_eq!(p.on_window(2_000_000, 7, 50 * MS, at(100)), Some(Target::PerRecord));
        p.moved(Target::PerRecord);
        // Losses while per-record are libbpf's own: no hold grows from them.
        assert_eq!(p.on_window(2_100_000, 9, 50 * MS, at(400)), Some(Target::Batched));
    }

    #[test]
    fn standing_down_is_for_good() {
        let mut p = LanePolicy::default();
        assert_eq!(p.stand_down(), Some(Target::Caller));
        p.moved(Target::Caller);
        assert_eq!(p.stand_down(), None);
        assert_eq!(p.on_window(10_000_000, 0, 50 * MS, at(50)), None);
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
