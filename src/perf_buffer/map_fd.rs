//! The map a buffer reads, as the buffer holds it: a borrowed fd, or one
//! it owns. Holding the fd rather than the caller's map object keeps the
//! buffer `Send` whatever that object is (libbpf-rs's `Map` is not).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A `BPF_MAP_TYPE_PERF_EVENT_ARRAY`'s fd given to [`super::PerfBuffer::builder`]:
/// from `&map` for any map type with an fd (`&OwnedFd`, libbpf-rs's `&Map`,
/// aya's `map.fd()`), from a `BorrowedFd`, or an `OwnedFd` the buffer
/// keeps and closes.
#[derive(Debug)]
pub enum MapFd<'a> {
    /// Lent for `'a`.
    Borrowed(BorrowedFd<'a>),
    /// Owned by the buffer.
    Owned(OwnedFd),
}

impl<'a, M: AsFd + ?Sized> From<&'a M> for MapFd<'a> {
    fn from(map: &'a M) -> Self {
        MapFd::Borrowed(map.as_fd())
    }
}

impl<'a> From<BorrowedFd<'a>> for MapFd<'a> {
    fn from(fd: BorrowedFd<'a>) -> Self {
        MapFd::Borrowed(fd)
    }
}

impl From<OwnedFd> for MapFd<'_> {
    fn from(fd: OwnedFd) -> Self {
        MapFd::Owned(fd)
    }
}

impl MapFd<'_> {
    /// The fd.
    pub fn as_raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match self {
            MapFd::Borrowed(fd) => fd.as_raw_fd(),
            MapFd::Owned(fd) => fd.as_raw_fd(),
        }
    }
}
