//! How each ring is doing, cheap enough to leave on: the reader notes, per
//! drain, the backlog it found (one compare), when it last read a record
//! (one store), and once a second snapshots the counters rates are taken
//! from. Nothing here reads the kernel or the clock per record.
//!
//! Sizing from evidence: a ring that lost records was too small by at
//! least what it lost. A reader as fast as this one, on a ring big enough,
//! would have had waiting at most what this ring held plus what it lost
//! since the backlog last cleared (the reader reads at least as much when
//! more is there), so the backlog it needed is estimated as the backlog
//! found plus the bytes of the records lost since the reader was last idle
//! for [`IDLE_RESET`] (lost records counted at the ring's mean record size).

use crate::kernel::clock::Moment;
use std::time::Duration;

/// A reader with nothing to read this long has caught up with any backlog a
/// bigger ring would have held: losses before it no longer add to the
/// backlog needed.
pub const IDLE_RESET: Duration = Duration::from_secs(1);
/// Rates are taken over windows of at least this long.
pub const RATE_WINDOW: Duration = Duration::from_secs(1);
/// The bookkeeping below is compiled out only in `make bench`'s second
/// build of the library, which measures what leaving it on costs.
pub const ENABLED: bool = !cfg!(feature = "bench-health-off");

/// Counters at a moment, for rates.
#[derive(Clone, Copy, Debug, Default)]
pub struct Snapshot {
    pub at: Moment,
    pub records: u64,
    pub bytes: u64,
    pub wakeups: u64,
}

/// What the reader notes about one ring as it reads it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tracker {
    /// Most bytes found waiting when a drain began.
    pub peak_pending: u64,
    /// Most bytes a ring losing nothing would have held (see the module docs).
    pub peak_needed: u64,
    /// When a drain last found records.
    pub last_record: Option<Moment>,
    /// Lost records counted since the reader was last idle, and the most
    /// bytes found waiting meanwhile.
    burst_lost: u64,
    burst_peak: u64,
    /// The lost count when last looked at.
    lost_seen: u64,
    /// The window before the current one, and the current one's start.
    pub previous: Snapshot,
    pub current: Snapshot,
}

impl Tracker {
    /// A drain begins at `now` with `pending` bytes waiting.
    #[inline(always)]
    pub fn drain_begins(&mut self, pending: u64, now: Moment) {
        if !ENABLED {
            return;
        }
        if pending > self.peak_pending {
            self.peak_pending = pending;
        }
        if pending > 0 {
            if self.last_record.is_some_and(|t| now.since(t) >= IDLE_RESET) {
                (self.burst_lost, self.burst_peak) = (0, 0);
            }
            self.burst_peak = self.burst_peak.max(pending);
            self.last_record = Some(now);
        }
    }

    /// After a drain: `lost` is the ring's lost count now, `mean_record`
    /// the ring's mean record size.
    #[inline(always)]
    pub fn drain_ends(&mut self, lost: u64, mean_record: impl FnOnce() -> u64) {
        if ENABLED && lost != self.lost_seen {
            self.note_lost(lost, mean_record());
        }
    }

    #[cold]
    fn note_lost(&mut self, lost: u64, mean_record: u64) {
        self.burst_lost += lost.saturating_sub(self.lost_seen);
        self.lost_seen = lost;
        let needed = self.burst_peak.saturating_add(self.burst_lost.saturating_mul(mean_record));
        self.peak_needed = self.peak_needed.max(needed);
    }

    /// The backlog a ring losing nothing would have needed: the peak
    /// backlog, or more where records were lost; `lost` is the count now
    /// (losses the kernel counted but has not written into the ring yet
    /// count too).
    pub fn needed(&self, lost: u64, mean_record: u64) -> u64 {
        let burst = self.burst_lost + lost.saturating_sub(self.lost_seen);
        let now =
            if burst > 0 { self.burst_peak.saturating_add(burst.saturating_mul(mean_record)) } else { 0 };
        self.peak_pending.max(self.peak_needed).max(now)
    }

    /// Starts a new rate window at `now` with these counters.
    pub fn rotate(&mut self, now: Snapshot) {
        self.previous = self.current;
        self.current = now;
    }

    /// Records, bytes and wake-ups per second: over the last whole window,
    /// or since the current one began if that is longer ago than a window
    /// (a reader not polled for a while).
    pub fn rates(&self, now: Snapshot) -> (f64, f64, f64) {
        let (from, to) =
            if now.at.since(self.current.at) >= RATE_WINDOW || self.previous.at == Moment::default() {
                (self.current, now)
            } else {
                (self.previous, self.current)
            };
        let secs = to.at.since(from.at).as_secs_f64();
        if secs <= 0.0 {
            return (0.0, 0.0, 0.0);
        }
        let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs;
        (per(from.records, to.records), per(from.bytes, to.bytes), per(from.wakeups, to.wakeups))
    }
}

/// The smallest power-of-two page count whose data area holds `bytes`.
pub fn pages_for(bytes: u64, page_size: usize) -> usize {
    let pages = bytes.div_ceil(page_size as u64).max(1);
    usize::try_from(pages).ok().and_then(usize::checked_next_power_of_two).unwrap_or(usize::MAX)
}

/// How one ring is doing (see [`crate::PerfBuffer::health`]).
///
/// ```no_run
/// # fn f(pb: &perfbuf::PerfBuffer<'_>) -> perfbuf::Result<()> {
/// let h = pb.health(0)?;
/// println!(
///     "cpu {}: {:.0} records/s, backlog {} of {} bytes (peak {}), would need {} pages",
///     h.cpu, h.records_per_sec, h.pending_bytes, h.data_size, h.peak_pending_bytes, h.suggested_pages
/// );
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RingHealth {
    /// The CPU this ring reads.
    pub cpu: i32,
    /// Whether the CPU is online, as the reader last saw it (a ring of a
    /// CPU that went offline is kept, and read, until it comes back).
    pub online: bool,
    /// Bytes waiting in the ring now (the backlog).
    pub pending_bytes: u64,
    /// The most bytes the reader found waiting when it came to read: the
    /// fill high-water mark, as the reader saw it.
    pub peak_pending_bytes: u64,
    /// Size of the ring's data area.
    pub data_size: u64,
    /// Records, bytes and wake-ups per second, over the last second (or
    /// since the reader last looked, if longer).
    pub records_per_sec: f64,
    /// Bytes per second (see `records_per_sec`).
    pub bytes_per_sec: f64,
    /// Wake-ups per second (see `records_per_sec`).
    pub wakeups_per_sec: f64,
    /// Time since the reader last found records in the ring (`None`:
    /// never).
    pub since_last_record: Option<Duration>,
    /// The backlog a ring that loses nothing would have held: the peak
    /// backlog, plus, where records were lost, their bytes (at the ring's
    /// mean record size) since the reader was last idle for a second.
    pub needed_bytes: u64,
    /// The smallest ring (data pages, a power of two) holding
    /// `needed_bytes`: the `pages` to build with for this load.
    pub suggested_pages: usize,
    /// Times the CPU came back online and its ring got a fresh event (the
    /// kernel never revives the old one).
    pub replaced: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Moment {
        Moment::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn the_backlog_needed_counts_what_was_lost_until_the_reader_idles() {
        let mut t = Tracker::default();
        t.drain_begins(1000, at(1));
        t.drain_ends(0, || 100);
        assert_eq!(t.needed(0, 100), 1000, "no loss: the peak backlog");
        // A full ring of 4096 bytes, then 50 records of 100 bytes lost.
        t.drain_begins(4096, at(2));
        t.drain_ends(50, || 100);
        assert_eq!(t.needed(50, 100), 4096 + 5000);
        // Losses the kernel counted but did not report yet count too.
        assert_eq!(t.needed(60, 100), 4096 + 6000);
        // Two seconds idle: a later loss starts from nothing again.
        t.drain_begins(200, at(2100));
        t.drain_ends(51, || 100);
        assert_eq!(t.peak_needed, 4096 + 5000);
        assert_eq!(t.needed(51, 100), 4096 + 5000, "the peak stays");
        assert_eq!(pages_for(4096 + 5000, 4096), 4);
        assert_eq!(pages_for(0, 4096), 1);
        assert_eq!(pages_for(4096, 4096), 1);
    }

    #[test]
    fn rates_come_from_the_last_whole_window() {
        let mut t = Tracker::default();
        let snap = |ms, records| Snapshot { at: at(ms), records, bytes: records * 10, wakeups: records / 2 };
        t.rotate(snap(5000, 0));
        t.rotate(snap(6000, 500));
        assert_eq!(t.rates(snap(6200, 700)), (500.0, 5000.0, 250.0));
        // Not rotated for longer than a window: since the last rotation.
        assert_eq!(t.rates(snap(8000, 900)), (200.0, 2000.0, 100.0));
    }
}
