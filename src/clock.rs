//! A cheap monotonic clock for decisions measured in milliseconds.
//!
//! `perf_buffer__consume` ends every call with the adaptive mode's check
//! of its rate window, so the clock read is part of every drain's fixed
//! cost. `CLOCK_MONOTONIC_COARSE` returns the time of the last scheduler
//! tick from the vDSO without reading the TSC: about 5 ns on these VMs
//! against 24 ns for `CLOCK_MONOTONIC` (`Instant::now`). It moves once per
//! jiffy (1 to 10 ms), which is fine for windows of 50 ms and more; timers
//! of microseconds keep using `Instant`.

use std::time::Duration;

/// A reading of `CLOCK_MONOTONIC_COARSE`, in nanoseconds (one word, so
/// comparing two is one instruction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Coarse(u64);

impl Coarse {
    /// The time of the last tick.
    pub fn now() -> Coarse {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid timespec to write; the clock id is a
        // constant the kernel has had since 2.6.32, so the call cannot fail
        // (a failure would leave zero, which only delays a decision).
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
        Coarse((ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64))
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Coarse) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl core::ops::Add<Duration> for Coarse {
    type Output = Coarse;
    fn add(self, d: Duration) -> Coarse {
        Coarse(self.0.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moves_forward_with_the_fine_clock() {
        let (coarse, fine) = (Coarse::now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        let moved = Coarse::now().since(coarse);
        // Within a jiffy (at most 10 ms, at HZ=100) of the fine clock.
        let fine_moved = fine.elapsed();
        assert!(moved + Duration::from_millis(11) >= fine_moved, "{moved:?} vs {fine_moved:?}");
        assert!(moved <= fine_moved + Duration::from_millis(11), "{moved:?} vs {fine_moved:?}");
        assert_eq!(coarse.since(Coarse::now()), Duration::ZERO);
        assert_eq!((coarse + Duration::from_secs(1)).since(coarse), Duration::from_secs(1));
    }
}
