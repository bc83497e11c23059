//! Waking a blocked poll from another thread: an eventfd in the reader's
//! epoll set, created on first use so that buffers that never wake keep
//! libbpf's set of fds.

use crate::error::{Error, Result};
use crate::kernel::sys;
use core::sync::atomic::{AtomicBool, Ordering};
use once_cell::sync::OnceCell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// epoll token of the wake-up eventfd: this bit, or'ed with the fd (the
/// waker lives outside the reader, so poll learns the fd from the token).
pub const WAKE_TAG: u64 = 1 << 62;

/// The part of a buffer other threads may touch. Kept outside the reader
/// (which a poll holds mutably) by the face that owns both.
pub struct WakeFd {
    /// The reader's epoll fd: borrowed (the C face's contract keeps the
    /// reader alive while a wake runs), or a duplicate the waker owns.
    epoll: Epoll,
    eventfd: OnceCell<OwnedFd>,
    /// Cleared when the reader is gone (owned epoll only).
    alive: AtomicBool,
}

enum Epoll {
    Borrowed(RawFd),
    Owned(OwnedFd),
}

impl WakeFd {
    /// A waker for the reader whose epoll fd is `epoll_fd`; it must not
    /// be used after that reader is gone.
    pub fn borrowing(epoll_fd: RawFd) -> WakeFd {
        WakeFd { epoll: Epoll::Borrowed(epoll_fd), eventfd: OnceCell::new(), alive: AtomicBool::new(true) }
    }

    /// A waker holding its own reference to the reader's epoll instance
    /// (a duplicate of `epoll_fd`), safe to use after the reader is gone.
    pub fn owning(epoll_fd: RawFd) -> Result<WakeFd> {
        // SAFETY: F_DUPFD_CLOEXEC takes an integer argument.
        let fd = unsafe { libc::fcntl(epoll_fd, libc::F_DUPFD_CLOEXEC, 0) };
        if fd < 0 {
            return Err(Error::last_os());
        }
        // SAFETY: a new fd nothing else owns.
        let owned = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        Ok(WakeFd { epoll: Epoll::Owned(owned), eventfd: OnceCell::new(), alive: AtomicBool::new(true) })
    }

    /// The reader is gone: wakes fail from now on.
    pub fn retire(&self) {
        self.alive.store(false, Ordering::Release);
    }

    /// Makes a poll in progress (or the next one) fail with ECANCELED.
    /// Safe from any thread while the reader lives; ENODEV once it is gone.
    pub fn wake(&self) -> Result<()> {
        if !self.alive.load(Ordering::Acquire) {
            return Err(Error::invalid("the buffer this waker wakes is gone").with_errno(libc::ENODEV));
        }
        let epoll = match &self.epoll {
            Epoll::Borrowed(fd) => *fd,
            Epoll::Owned(fd) => fd.as_raw_fd(),
        };
        let efd = self.eventfd.get_or_try_init(|| {
            let efd = sys::eventfd()?;
            sys::epoll_add(epoll, efd.as_raw_fd(), WAKE_TAG | efd.as_raw_fd() as u64)?;
            Ok::<_, Error>(efd)
        })?;
        sys::write_u64(efd.as_raw_fd(), 1)
    }
}

/// Clears a wake-up so the next poll blocks again (`token` from epoll).
pub fn clear_wake(token: u64) {
    sys::read_u64((token & !WAKE_TAG) as RawFd);
}
