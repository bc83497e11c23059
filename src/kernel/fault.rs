//! Fault injection for tests (cargo feature `fault-injection`, never in a
//! release build): make the n-th call of one system call wrapper fail with a
//! chosen errno, to prove every failure path cleans up after itself.
//!
//! Armed from C with `perfbuf_fault_arm(point, nth, errno)`, exported only
//! by builds with the feature.

use crate::error::{Error, Result};
use std::sync::Mutex;

/// The failure points, named after the [`super::sys`] wrappers.
pub(crate) const POINTS: &[&str] = &[
    "epoll_create",
    "perf_event_open",
    "mmap",
    "ioctl",
    "map_update",
    "epoll_ctl",
    "eventfd",
    "timerfd",
    "alloc",
];

struct Armed {
    point: &'static str,
    remaining: u32,
    errno: i32,
}

static ARMED: Mutex<Option<Armed>> = Mutex::new(None);

/// Arms `point` to fail on its `nth` call from now (1 = the next one).
pub(crate) fn arm(point: &str, nth: u32, errno: i32) -> Result<()> {
    let point = POINTS.iter().find(|&&p| p == point).ok_or(Error::INVAL)?;
    let mut armed = ARMED.lock().unwrap_or_else(|e| e.into_inner());
    *armed = (nth > 0).then_some(Armed { point, remaining: nth, errno });
    Ok(())
}

/// Called by each wrapper before its system call.
pub(crate) fn check(point: &str) -> Result<()> {
    let mut armed = ARMED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(a) = armed.as_mut()
        && a.point == point
    {
        a.remaining -= 1;
        if a.remaining == 0 {
            let errno = a.errno;
            *armed = None;
            return Err(Error::from_errno(errno));
        }
    }
    Ok(())
}
