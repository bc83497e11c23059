//! The record walk: from `consumer_pos` to `producer_pos`, as libbpf's
//! `ringbuf_process_ring` reads it, and never trusting either for sizes.
//!
//! Ordering follows the kernel's contract: `producer_pos` is loaded with
//! acquire (the kernel publishes it with release after writing the busy
//! header), each header's `len` with acquire (the kernel clears the busy
//! bit with a full barrier after writing the record), and `consumer_pos`
//! is stored with release after each record, once its callback returned,
//! so the kernel reuses no byte the callback may still read. As in
//! libbpf, the walk reloads `producer_pos` once it has caught up, and
//! stores after every record: the kernel wakes the reader only when a
//! commit finds `consumer_pos` at the committed record, so a reader that
//! published late would miss wake-ups.
//!
//! What the pages say is checked before it is used: a consumer position
//! that is misaligned, behind or more than a ring ahead of the producer's,
//! or a record longer than what the producer published, makes the walk
//! skip to `producer_pos` (counted in [`Stats`]) rather than read
//! outside the data area. A record still busy ends the walk for now: the
//! walk never waits on it.

use super::layout::{BUSY_BIT, DISCARD_BIT, HEADER_SIZE, RingMemory};
use core::ops::ControlFlow;
use core::sync::atomic::Ordering;

/// What a ring's walks read, and what they had to skip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records handed to the callback.
    pub records: u64,
    /// Their bytes, headers and padding included.
    pub bytes: u64,
    /// Records the producer discarded, stepped over.
    pub discarded: u64,
    /// Times the walk jumped to `producer_pos` because the positions or a
    /// header were inconsistent.
    pub resyncs: u64,
    /// Bytes skipped by those jumps.
    pub skipped_bytes: u64,
}

/// How a walk publishes `consumer_pos`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    /// After every record, as libbpf does: the next commit that finds the
    /// reader caught up wakes it.
    Each,
    /// One record behind what was read: no commit finds the reader caught
    /// up, so the kernel sends no wake-ups while the walk's caller reads on
    /// a tick of its own (the fast mode). The held record's space returns
    /// to the producer at the next walk, or by [`RingMemory::publish`].
    HoldLast,
}

/// A record's total size in the ring for a header `len`: the busy and
/// discard bits cleared, the header added, rounded up to 8.
#[inline(always)]
pub fn record_size(len: u32) -> u64 {
    let body = (len & !(BUSY_BIT | DISCARD_BIT)) as u64;
    (body + HEADER_SIZE + 7) & !7
}

impl RingMemory {
    /// Reads committed records from `consumer_pos` on, handing each one not
    /// discarded to `f`, until the walk catches up with `producer_pos`,
    /// meets a record still busy, or has handed out `limit` records (checked
    /// after each record, discarded ones included, as libbpf does: a limit
    /// of 0 still reads one).
    ///
    /// Returns how many records `f` got, or `f`'s `Break` value: the record
    /// that stopped the walk counts as consumed, as in libbpf.
    #[cfg(any(test, feature = "internals"))]
    #[inline]
    pub fn walk<F>(&self, limit: u64, stats: &mut Stats, f: F) -> ControlFlow<i32, u64>
    where
        F: FnMut(&[u8]) -> ControlFlow<i32>,
    {
        self.walk_from(None, Publish::Each, limit, stats, f).0
    }

    /// [`Self::walk`] from `from` (`None`: the published `consumer_pos`),
    /// publishing as `publish` says. Also returns where the walk stopped
    /// reading: with [`Publish::HoldLast`] the published position stays at
    /// the start of the last record read, so pass this back as `from`.
    #[inline]
    pub fn walk_from<F>(
        &self,
        from: Option<u64>,
        publish: Publish,
        limit: u64,
        stats: &mut Stats,
        mut f: F,
    ) -> (ControlFlow<i32, u64>, u64)
    where
        F: FnMut(&[u8]) -> ControlFlow<i32>,
    {
        self.walk_from_at(from, publish, limit, stats, |_, body| f(body))
    }

    /// [`Self::walk`] from the published `consumer_pos`, handing `f` each
    /// record's position (bytes since the map's creation, as
    /// `consumer_pos` counts) with its body.
    #[inline(always)]
    pub fn walk_at<B, F>(&self, limit: u64, stats: &mut Stats, f: F) -> ControlFlow<B, u64>
    where
        F: FnMut(u64, &[u8]) -> ControlFlow<B>,
    {
        self.walk_from_at(None, Publish::Each, limit, stats, f).0
    }

    /// [`Self::walk_from`], handing `f` each record's position with its
    /// body, and stopping with whatever `f` breaks with.
    #[inline(always)]
    fn walk_from_at<B, F>(
        &self,
        from: Option<u64>,
        publish: Publish,
        limit: u64,
        stats: &mut Stats,
        mut f: F,
    ) -> (ControlFlow<B, u64>, u64)
    where
        F: FnMut(u64, &[u8]) -> ControlFlow<B>,
    {
        let (size, mask) = (self.size(), self.size() - 1);
        let mut cons = from.unwrap_or_else(|| self.consumer().load(Ordering::Acquire));
        let mut delivered = 0u64;
        // Publishes that every record before `at` is read: up to `at`
        // itself, or, holding, up to the start of the record just read.
        let done = |start: u64, at: u64| {
            let pos = if publish == Publish::HoldLast { start } else { at };
            self.consumer().store(pos, Ordering::Release);
        };
        loop {
            let prod = self.producer().load(Ordering::Acquire);
            let avail = prod.wrapping_sub(cons);
            if avail == 0 {
                return (ControlFlow::Continue(delivered), cons);
            }
            // Records are multiples of 8 and the kernel never lets the
            // producer get more than a ring ahead.
            if cons % 8 != 0 || prod % 8 != 0 || avail > size {
                self.resync(prod, avail, stats);
                return (ControlFlow::Continue(delivered), prod);
            }
            while cons != prod {
                let offset = cons & mask;
                // SAFETY: offset is 8-aligned (cons is) and below size.
                let len = unsafe { self.header_len(offset) }.load(Ordering::Acquire);
                if len & BUSY_BIT != 0 {
                    return (ControlFlow::Continue(delivered), cons); // not committed yet
                }
                let total = record_size(len);
                let left = prod.wrapping_sub(cons);
                if total > left {
                    self.resync(prod, left, stats);
                    return (ControlFlow::Continue(delivered), prod);
                }
                let next = cons.wrapping_add(total);
                if len & DISCARD_BIT == 0 {
                    // SAFETY: offset < size and 8 + len <= total <= left <=
                    // size, so the body lies in the double mapping; it is
                    // committed and at or above consumer_pos until the store
                    // below.
                    let body = unsafe { self.body(offset, len as usize) };
                    stats.records += 1;
                    stats.bytes += total;
                    if let ControlFlow::Break(v) = f(cons, body) {
                        done(cons, next);
                        return (ControlFlow::Break(v), next);
                    }
                    delivered += 1;
                } else {
                    stats.discarded += 1;
                }
                done(cons, next);
                cons = next;
                if delivered >= limit {
                    return (ControlFlow::Continue(delivered), cons);
                }
            }
        }
    }

    /// How many committed records from `consumer_pos` on, discarded ones
    /// not counted, `fits(len)` accepts in a row (it sees each record's
    /// length and keeps its own tally), and whether the walk stopped at an
    /// inconsistent state (which a walk would skip, and count).
    pub fn count_fitting(&self, mut fits: impl FnMut(usize) -> bool) -> (u64, bool) {
        let (size, mask) = (self.size(), self.size() - 1);
        let mut cons = self.consumer().load(Ordering::Acquire);
        let prod = self.producer().load(Ordering::Acquire);
        let avail = prod.wrapping_sub(cons);
        if cons % 8 != 0 || prod % 8 != 0 || avail > size {
            return (0, true);
        }
        let mut n = 0;
        while cons != prod {
            // SAFETY: cons is 8-aligned, so is the offset, below size.
            let len = unsafe { self.header_len(cons & mask) }.load(Ordering::Acquire);
            if len & BUSY_BIT != 0 {
                return (n, false);
            }
            let total = record_size(len);
            if total > prod.wrapping_sub(cons) {
                return (n, true);
            }
            if len & DISCARD_BIT == 0 {
                if !fits(len as usize) {
                    return (n, false);
                }
                n += 1;
            }
            cons = cons.wrapping_add(total);
        }
        (n, false)
    }

    /// Publishes that everything before `pos` (a position a
    /// [`Publish::HoldLast`] walk returned) is read.
    pub fn publish(&self, pos: u64) {
        self.consumer().store(pos, Ordering::Release);
    }

    /// Gives up on what lies between the consumer and `prod`: the consumer
    /// jumps to the producer, and the jump is counted.
    #[cold]
    fn resync(&self, prod: u64, skipped: u64, stats: &mut Stats) {
        stats.resyncs += 1;
        stats.skipped_bytes += skipped.min(self.size());
        self.consumer().store(prod, Ordering::Release);
    }
}
