//! The ring buffer's fast mode: reading on a tick while records flow, so
//! the producer is spared the kernel's wake-ups.
//!
//! The kernel wakes a ring buffer's reader when a commit finds
//! `consumer_pos` at the committed record, that is when the reader had
//! caught up. A reader that keeps up with a bursty producer catches up
//! often, so about every burst pays an `irq_work` on the producer's CPU and
//! a wake-up of the reader. While records flow, this mode publishes
//! `consumer_pos` one record behind what it read ([`Publish::HoldLast`]):
//! no commit finds it caught up, so no wake-up is sent, and `poll` sleeps
//! a tick instead of waiting in epoll. The tick follows the producer's
//! pace: at most a quarter of the smallest ring fills between two reads,
//! and never more than [`MAX_TICK`] passes (the bound on delivery delay).
//! When [`IDLE_TICKS`] ticks in a row find nothing new (a producer that
//! writes in bursts a few ticks apart stays in the mode), the held records
//! are given back and `poll` waits in epoll as libbpf does; a producer so fast that a quarter
//! ring fills in less than [`MIN_TICK`] gets the default's behaviour too.

use super::walk::Publish;
use super::{CALL_LIMIT, RingBuffer, RingThreading};
use crate::error::Result;
use crate::kernel::sys;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// The longest sleep between reads while records flow: the delivery delay
/// the fast mode adds at most.
pub const MAX_TICK: Duration = Duration::from_micros(500);
/// Below this a sleep costs about what a wake-up does (timer slack is
/// 50 µs by default): faster producers are read as by default.
pub const MIN_TICK: Duration = Duration::from_micros(50);
/// Empty ticks in a row after which the held records are given back and
/// `poll` waits for the kernel's wake-up.
pub const IDLE_TICKS: u32 = 4;

/// The fast mode's state.
#[derive(Debug)]
pub(super) struct Pacer {
    /// How long `poll` sleeps before its next read while records flow.
    tick: Duration,
    /// When the rings were last read, while holding.
    last_read: Option<Instant>,
    /// Ticks in a row that found nothing new.
    idle: u32,
}

impl Pacer {
    pub(super) fn new() -> Self {
        Pacer { tick: MAX_TICK / 2, last_read: None, idle: 0 }
    }

    /// The next tick after reading `fill` (the largest share of a ring
    /// written, 0.0..=1.0) over `elapsed`: a quarter ring per tick, within
    /// the bounds. `None` when even [`MIN_TICK`] would let more in.
    fn next_tick(&self, fill: f64, elapsed: Duration) -> Option<Duration> {
        if fill <= 0.0 {
            return Some(MAX_TICK);
        }
        let ideal = elapsed.as_secs_f64() * 0.25 / fill;
        if ideal < MIN_TICK.as_secs_f64() {
            return None;
        }
        Some(Duration::from_secs_f64(ideal).min(MAX_TICK))
    }
}

impl<T: RingThreading> RingBuffer<'_, T> {
    /// `poll` in the fast mode (see the module's documentation).
    pub(super) fn poll_fast(&mut self, timeout: Option<Duration>) -> Result<usize> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let left = || deadline.map(|d| d.saturating_duration_since(Instant::now()));
        while let Some((since, tick)) = self.pacer.as_ref().and_then(|p| Some((p.last_read?, p.tick))) {
            let nap = tick.saturating_sub(since.elapsed());
            std::thread::sleep(left().map_or(nap, |l| l.min(nap)));
            let (n, fill) = self.read_all(Publish::HoldLast)?;
            let elapsed = since.elapsed();
            if n > 0 {
                match self.pacer.as_ref().and_then(|p| p.next_tick(fill, elapsed)) {
                    Some(tick) => self.set_pacing(Some(tick), 0),
                    None => self.stop_holding(),
                }
                return Ok(n);
            }
            let idle = self.pacer.as_ref().map_or(IDLE_TICKS, |p| p.idle + 1);
            if idle >= IDLE_TICKS {
                // The producer paused: give the held records back, and
                // wait for the wake-up the next commit sends.
                self.stop_holding();
                break;
            }
            self.set_pacing(Some(MAX_TICK), idle);
            if left() == Some(Duration::ZERO) {
                return Ok(0);
            }
        }
        let wait = left().map_or(-1, |l| l.as_millis().min(i32::MAX as u128) as i32);
        let ready = sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, self.rings.len(), wait)?;
        if ready == 0 {
            return Ok(0);
        }
        for i in 0..ready {
            if let Some(ring) = self.rings.get_mut(self.events[i].u64 as usize) {
                ring.wakeups += 1;
            }
        }
        let (n, _) = self.read_all(Publish::HoldLast)?;
        if n > 0 {
            self.set_pacing(None, 0);
        }
        Ok(n)
    }

    /// Reads every ring publishing as `publish` says; returns the records
    /// read and the largest share of a ring they took.
    pub(super) fn read_all(&mut self, publish: Publish) -> Result<(usize, f64)> {
        let (mut total, mut fill) = (0u64, 0.0f64);
        for ring in &mut self.rings {
            let before = ring.stats.bytes + ring.stats.skipped_bytes;
            total += ring.read_publishing(CALL_LIMIT, publish)?;
            let bytes = ring.stats.bytes + ring.stats.skipped_bytes - before;
            fill = fill.max(bytes as f64 / ring.memory.size() as f64);
            if total > CALL_LIMIT {
                break;
            }
        }
        self.end_read();
        Ok((total as usize, fill))
    }

    /// Starts or goes on holding: reads again after `tick` (`None`: keep
    /// the current one), counted from now, after `idle` empty ticks.
    fn set_pacing(&mut self, tick: Option<Duration>, idle: u32) {
        if let Some(p) = self.pacer.as_mut() {
            if let Some(tick) = tick {
                p.tick = tick;
            }
            p.last_read = Some(Instant::now());
            p.idle = idle;
        }
    }

    /// Gives every held record back to the producer, so the next commit
    /// wakes the reader.
    pub(super) fn stop_holding(&mut self) {
        for ring in &mut self.rings {
            ring.release();
        }
        if let Some(p) = self.pacer.as_mut() {
            p.last_read = None;
            p.idle = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_ring_per_tick_within_the_bounds() {
        let p = Pacer::new();
        let ms = Duration::from_millis(1);
        // A quarter of the ring in 1 ms: 1 ms would do, bounded by MAX_TICK.
        assert_eq!(p.next_tick(0.25, ms), Some(MAX_TICK));
        // Half the ring in 400 µs: 200 µs.
        assert_eq!(p.next_tick(0.5, Duration::from_micros(400)), Some(Duration::from_micros(200)));
        // A whole ring in 100 µs: 25 µs, below MIN_TICK: read as by default.
        assert_eq!(p.next_tick(1.0, Duration::from_micros(100)), None);
        assert_eq!(p.next_tick(0.0, ms), Some(MAX_TICK));
    }
}
