//! Monotonic time for the reader's timers and the adaptive policy.
//!
//! [`Moment::now`] reads `CLOCK_MONOTONIC` (about 24 ns in a VM); for
//! decisions measured in tens of milliseconds [`Moment::coarse`] reads
//! `CLOCK_MONOTONIC_COARSE`, the time of the last scheduler tick from the
//! vDSO (about 5 ns, moving once per jiffy). Both count from the same
//! origin, so readings compare. In test builds a fake kernel can own the
//! clock (see `super::fake`).

use std::time::Duration;

/// A reading of `CLOCK_MONOTONIC`, in nanoseconds (one word, so comparing
/// two is one instruction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moment(u64);

impl Moment {
    /// Now, to the nanosecond.
    pub fn now() -> Moment {
        #[cfg(test)]
        if let Some(m) = super::fake::with(|k| k.now()) {
            return m;
        }
        Moment(read(libc::CLOCK_MONOTONIC).unwrap_or(0))
    }

    /// Now, to the last scheduler tick.
    pub fn coarse() -> Moment {
        #[cfg(test)]
        if let Some(m) = super::fake::with(|k| k.now()) {
            return m;
        }
        Moment(read(libc::CLOCK_MONOTONIC_COARSE).or_else(|| read(libc::CLOCK_MONOTONIC)).unwrap_or(0))
    }

    /// A moment `nanos` after the clock's origin (fake kernels, tests).
    #[cfg(test)]
    pub const fn from_nanos(nanos: u64) -> Moment {
        Moment(nanos)
    }

    /// Time from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: Moment) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Time from `self` to now (the fine clock).
    pub fn elapsed(self) -> Duration {
        Moment::now().since(self)
    }
}

/// Clock `id` in nanoseconds; `None` if the kernel refuses it (both clocks
/// exist since Linux 2.6.32, so only a seccomp filter could). Were both
/// refused, every reading would be 0: no rate window would ever end and
/// rings would keep libbpf's per-record wake-ups.
fn read(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let ret = unsafe { libc::clock_gettime(id, &mut ts) };
    (ret == 0).then(|| (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64))
}

impl core::ops::Add<Duration> for Moment {
    type Output = Moment;
    fn add(self, d: Duration) -> Moment {
        Moment(self.0.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The coarse clock's resolution (one jiffy).
    fn resolution() -> Duration {
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // SAFETY: `ts` is a valid, writable timespec.
        assert_eq!(unsafe { libc::clock_getres(libc::CLOCK_MONOTONIC_COARSE, &mut ts) }, 0);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }

    #[test]
    fn coarse_moves_with_the_fine_clock() {
        // Each coarse reading trails the true time by up to about two
        // jiffies (a tick's update can come late, later still in a VM whose
        // CPU the host held back), so the coarse interval lies within that
        // of the fine readings around it, widened by that.
        let slack = 2 * resolution() + Duration::from_millis(10);
        let (f0, c0, f1) = (Moment::now(), Moment::coarse(), Moment::now());
        std::thread::sleep(Duration::from_millis(100));
        let (f2, c1, f3) = (Moment::now(), Moment::coarse(), Moment::now());
        let moved = c1.since(c0);
        assert!(moved + slack >= f2.since(f1), "{moved:?} vs at least {:?}", f2.since(f1));
        assert!(moved <= f3.since(f0) + slack, "{moved:?} vs at most {:?}", f3.since(f0));
        assert_eq!(c0.since(c1), Duration::ZERO);
        assert_eq!((c0 + Duration::from_secs(1)).since(c0), Duration::from_secs(1));
        assert!(c1.since(f0) < Duration::from_secs(1), "same origin");
    }
}
