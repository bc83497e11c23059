//! The kernel's own count of what did not fit in a ring, for figures that
//! are exact at any moment. The kernel reports lost records in a ring
//! only when it next finds room for a `PERF_RECORD_LOST`; an event opened
//! with `PERF_FORMAT_LOST` (Linux 6.0) also counts, in its `read()`, every
//! record it failed to write (`event->lost_samples`, incremented with the
//! ring's own count). The sum over the events writing into a ring is what
//! that ring lost so far, reported or not.
//!
//! A perf buffer's ring has one writer, its own event ([`KernelLost::Own`]);
//! an event set's ring has many, added and removed while it is read: each
//! registers in the ring's [`LostTally`] and leaves its final count there
//! when it is closed ([`Counted`]).

use crate::kernel::{PERF_FORMAT_GROUP, PERF_FORMAT_ID, PERF_FORMAT_LOST};
use crate::kernel::{PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING, sys};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex, PoisonError};

/// Where a ring's kernel loss count comes from.
#[derive(Clone, Default)]
pub enum KernelLost {
    /// Nowhere: the kernel lacks `PERF_FORMAT_LOST`, or the ring's events
    /// were opened without it (libbpf's attr, a caller's attr).
    #[default]
    Unknown,
    /// The ring's own event, opened with `read_format = PERF_FORMAT_LOST`.
    Own,
    /// The events registered in this tally (an event set's ring).
    Tally(LostTally),
}

impl KernelLost {
    /// The ring's losses so far as the kernel counts them (`own` is the
    /// ring's event); `None` when unknown or unreadable.
    pub fn read(&self, own: BorrowedFd<'_>) -> Option<u64> {
        match self {
            KernelLost::Unknown => None,
            KernelLost::Own => sys::read_lost(own).ok(),
            KernelLost::Tally(t) => Some(t.total()),
        }
    }
}

/// The events writing into one ring, each opened with `PERF_FORMAT_LOST`,
/// and what those already closed had lost. Shared by an event set (which
/// adds and closes events) and the reader of its ring.
#[derive(Clone, Default)]
pub struct LostTally(Arc<Mutex<Tally>>);

#[derive(Default)]
struct Tally {
    /// `(key, fd, read_format)` of each live event.
    events: Vec<(u64, RawFd, u64)>,
    /// Losses of events closed since.
    retired: u64,
    next_key: u64,
}

impl LostTally {
    /// Counts `fd`'s losses in this ring from now until the guard drops
    /// (then its final count stays). An fd without `PERF_FORMAT_LOST` in
    /// `read_format` is not counted.
    ///
    /// # Safety
    /// `fd` stays open until the returned guard is dropped (declare the
    /// guard before the fd in a struct: fields drop in order).
    pub unsafe fn count(&self, fd: BorrowedFd<'_>, read_format: u64) -> Option<Counted> {
        if read_format & PERF_FORMAT_LOST == 0 {
            return None;
        }
        let mut t = self.lock();
        let key = t.next_key;
        t.next_key += 1;
        t.events.push((key, fd.as_raw_fd(), read_format));
        Some(Counted { tally: self.clone(), key })
    }

    /// What the ring's writers lost so far (an event whose count cannot be
    /// read adds nothing).
    pub fn total(&self) -> u64 {
        let t = self.lock();
        t.events.iter().map(|&(_, fd, rf)| lost_of(fd, rf).unwrap_or(0)).fold(t.retired, u64::saturating_add)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tally> {
        // The tally holds plain numbers: a panic elsewhere leaves it whole.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One event counted in a [`LostTally`]; dropping it (before its fd
/// closes) keeps its final count in the tally.
pub struct Counted {
    tally: LostTally,
    key: u64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut t = self.tally.lock();
        if let Some(i) = t.events.iter().position(|&(k, _, _)| k == self.key) {
            let (_, fd, rf) = t.events.swap_remove(i);
            t.retired = t.retired.saturating_add(lost_of(fd, rf).unwrap_or(0));
        }
    }
}

/// Reads the lost count of the event `fd`, whose `read()` layout
/// `read_format` gives. A group leader's read gives its own lost count
/// first among the group's.
fn lost_of(fd: RawFd, read_format: u64) -> Option<u64> {
    // SAFETY: `fd` is open: a `Counted` guard, dropped before its fd
    // closes, keeps it in the tally (`LostTally::count`'s contract), and
    // the tally is locked while it is read.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    if read_format == PERF_FORMAT_LOST {
        return sys::read_lost(fd).ok();
    }
    let has = |bit| usize::from(read_format & bit != 0);
    let times = has(PERF_FORMAT_TOTAL_TIME_ENABLED) + has(PERF_FORMAT_TOTAL_TIME_RUNNING);
    let index = if read_format & PERF_FORMAT_GROUP != 0 {
        // nr, times, then {value, id?, lost?} per member, the leader first.
        1 + times + 1 + has(PERF_FORMAT_ID)
    } else {
        // value, times, id?, lost.
        1 + times + has(PERF_FORMAT_ID)
    };
    // A group read is as long as its members: room for a large group.
    let mut words = [0u64; 512];
    let n = sys::read_counts(fd, &mut words).ok()?;
    words[..n].get(index).copied()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::fake::{self, FakeKernel};
    use crate::kernel::{PerfEventAttr, sys::AttrSource};
    use std::os::fd::AsFd;

    #[test]
    fn a_tally_keeps_what_closed_events_lost() {
        let _k = fake::install(FakeKernel::new(1));
        let mut attr = PerfEventAttr::bpf_output(1);
        attr.read_format = PERF_FORMAT_LOST;
        let a = sys::perf_event_open(AttrSource::Built(&attr), 0).expect("event a");
        let b = sys::perf_event_open(AttrSource::Built(&attr), 0).expect("event b");
        let tally = LostTally::default();
        // SAFETY: both fds outlive their guards (dropped first below).
        let (ga, gb) = unsafe { (tally.count(a.as_fd(), attr.read_format), tally.count(b.as_fd(), 0)) };
        assert!(gb.is_none(), "an event without PERF_FORMAT_LOST is not counted");
        fake::with(|k| k.set_lost_samples(a.as_raw_fd(), 7));
        assert_eq!(tally.total(), 7);
        drop(ga);
        drop(a);
        assert_eq!(tally.total(), 7, "a closed event's losses stay");
        assert!(matches!(KernelLost::Tally(tally).read(b.as_fd()), Some(7)));
        assert_eq!(KernelLost::Unknown.read(b.as_fd()), None);
    }
}
