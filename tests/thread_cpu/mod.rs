//! This thread's CPU time, for tests that spin for CPU time rather than
//! wall time (a loaded machine may deschedule a wall-clock spin for most
//! of it) or that compare a loop's CPU time with its wall time.

use std::time::Duration;

/// This thread's CPU time (user + system).
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `ts` is.
    assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) }, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
