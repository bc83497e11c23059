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
        Coarse(read(libc::CLOCK_MONOTONIC_COARSE).or_else(|| read(libc::CLOCK_MONOTONIC)).unwrap_or(0))
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Coarse) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

/// Clock `id` in nanoseconds; `None` if the kernel refuses it (both clocks
/// exist since Linux 2.6.32, so only a seccomp filter could). Were both
/// refused, every reading would be 0 and no rate window would ever end:
/// rings would keep libbpf's per-record wake-ups.
fn read(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let ret = unsafe { libc::clock_gettime(id, &mut ts) };
    (ret == 0).then(|| (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64))
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
    use std::time::Instant;

    /// The coarse clock's resolution (one jiffy).
    fn resolution() -> Duration {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec.
        assert_eq!(unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) }, 0);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    #[test]
    fn moves_forward_with_the_fine_clock() {
        // Each coarse reading trails the true time by up to about two
        // jiffies (a tick's update can come late), so the coarse interval
        // lies within that of the fine readings around it, widened by that.
        let slack = 2 * resolution() + Duration::from_millis(1);
        let (f0, c0, f1) = (Instant::now(), Coarse::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        let (f2, c1, f3) = (Instant::now(), Coarse::now(), Instant::now());
        let moved = c1.since(c0);
        assert!(moved + slack >= f2 - f1, "{moved:?} vs at least {:?}", f2 - f1);
        assert!(moved <= f3 - f0 + slack, "{moved:?} vs at most {:?}", f3 - f0);
        assert_eq!(c0.since(c1), Duration::ZERO);
        assert_eq!((c0 + Duration::from_secs(1)).since(c0), Duration::from_secs(1));
    }
}
