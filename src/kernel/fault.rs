//! Fault injection for tests (cargo feature `fault-injection`, never in a
//! release build): make the n-th call of one system call wrapper fail with a
//! chosen errno, to prove every failure path cleans up after itself.
//!
//! Armed from C with `perfbuf_fault_arm(point, nth, errno)`, exported only
//! by builds with the feature. The bottom of `kernel/`: every wrapper
//! ([`super::sys`], [`super::fallible`]) passes its point ([`at`]), and
//! this module uses nothing else of the kernel's.

use crate::error::Result;

#[cfg(feature = "fault-injection")]
pub use injected::{arm, armed, online, set_online};

/// Fails here when a test armed this point (feature `fault-injection`);
/// nothing at all without the feature.
#[inline(always)]
pub fn at(point: &str) -> Result<()> {
    #[cfg(feature = "fault-injection")]
    injected::check(point)?;
    let _ = point;
    Ok(())
}

#[cfg(feature = "fault-injection")]
mod injected {
    use crate::error::{Error, Result};
    use std::sync::Mutex;

    /// The failure points, named after the [`crate::kernel::sys`] wrappers.
    const POINTS: &[&str] = &[
        "epoll_create",
        "perf_event_open",
        "mmap",
        "ioctl",
        "map_update",
        "epoll_ctl",
        "eventfd",
        "timerfd",
        "alloc",
        "enable",
        "set_output",
        "attach",
        "link_create",
        "event_id",
        "set_filter",
        "read",
    ];

    struct Armed {
        point: &'static str,
        remaining: u32,
        errno: i32,
    }

    static ARMED: Mutex<Option<Armed>> = Mutex::new(None);

    /// Arms `point` to fail on its `nth` call from now (1 = the next one).
    pub fn arm(point: &str, nth: u32, errno: i32) -> Result<()> {
        let point = POINTS.iter().find(|&&p| p == point).ok_or(Error::INVAL)?;
        let mut armed = ARMED.lock().unwrap_or_else(|e| e.into_inner());
        *armed = (nth > 0).then_some(Armed { point, remaining: nth, errno });
        Ok(())
    }

    /// Fails if `point` is armed and its turn has come.
    pub(super) fn check(point: &str) -> Result<()> {
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

    /// Whether a point is armed and has not fired yet.
    pub fn armed() -> bool {
        ARMED.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    static ONLINE: Mutex<Option<Vec<bool>>> = Mutex::new(None);

    /// Makes the library see `mask` as the online CPUs, or the machine's
    /// again with `None`: CPUs going offline, without hotplug.
    pub fn set_online(mask: Option<Vec<bool>>) {
        *ONLINE.lock().unwrap_or_else(|e| e.into_inner()) = mask;
    }

    /// The online mask a test set, if any.
    pub fn online() -> Option<Vec<bool>> {
        ONLINE.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}
