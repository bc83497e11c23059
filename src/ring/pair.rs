//! One CPU's rings: the caller's, and the spill ring the fast mode (see
//! `crate::adaptive`) may point the CPU's map slot at. Records of one CPU
//! are in at most these two rings, split by the moments the slot moved;
//! [`CpuRings::drain_watched`] reads them in the order they were written.

use super::record::{DispatchStats, LOST_RECORD_SIZE};
use super::{Counters, PerfRing, Stop};
use core::ops::ControlFlow;

/// A CPU's rings and what they owe the reader.
pub struct CpuRings {
    main: PerfRing,
    spill: Option<PerfRing>,
    /// The map slot points at an event writing into the spill ring.
    spill_current: bool,
    /// The slot left the caller's ring long ago and it was read to its
    /// head: nothing writes there until the slot comes back, so reads skip
    /// it (one ring per CPU to look at, not two).
    main_quiet: bool,
    /// Lost records the kernel will not report in a ring (see
    /// `crate::adaptive`), delivered before the next records read.
    owed_lost: u64,
    /// Lost reports delivered for `owed_lost`: the figures count them with
    /// the records read, as the ring would have held them.
    lost_reports_made: u64,
    /// What a spill ring released earlier read, so figures never go back.
    retired: Counters,
}

impl CpuRings {
    /// A CPU's rings: the caller's ring only.
    pub fn new(main: PerfRing) -> CpuRings {
        CpuRings {
            main,
            spill: None,
            spill_current: false,
            main_quiet: false,
            owed_lost: 0,
            lost_reports_made: 0,
            retired: Counters::default(),
        }
    }

    /// The caller's ring.
    pub fn main(&self) -> &PerfRing {
        &self.main
    }

    /// The caller's ring, to read it record by record.
    pub fn main_mut(&mut self) -> &mut PerfRing {
        &mut self.main
    }

    /// The spill ring, if the CPU has one.
    pub fn spill(&self) -> Option<&PerfRing> {
        self.spill.as_ref()
    }

    /// The spill ring, to read it whole.
    pub fn spill_mut(&mut self) -> Option<&mut PerfRing> {
        self.spill.as_mut()
    }

    /// Gives the CPU a spill ring (not current yet).
    pub fn set_spill(&mut self, ring: PerfRing) {
        self.spill = Some(ring);
    }

    /// Takes the spill ring away (after it was read for the last time);
    /// what it read stays in the figures.
    pub fn take_spill(&mut self) -> Option<PerfRing> {
        self.spill_current = false;
        self.main_quiet = false;
        let spill = self.spill.take()?;
        add(&mut self.retired, spill.stats());
        Some(spill)
    }

    /// Puts `ring` in place of the caller's ring (a fresh event's, after
    /// its CPU came back online); what the old one read stays in the
    /// figures. Returns the old ring.
    pub fn replace_main(&mut self, ring: PerfRing) -> PerfRing {
        let old = core::mem::replace(&mut self.main, ring);
        add(&mut self.retired, old.stats());
        self.main_quiet = false;
        old
    }

    /// Records now go to the spill ring (`true`) or to the caller's.
    pub fn set_spill_current(&mut self, current: bool) {
        self.spill_current = current && self.spill.is_some();
        self.main_quiet &= self.spill_current;
    }

    /// Called once no BPF program can still write the caller's ring
    /// through the slot that left it: if the slot is on the spill ring
    /// and the caller's ring is read to its head, reads skip it until the
    /// slot comes back (see [`Self::set_spill_current`]).
    pub fn settle_main(&mut self) {
        if self.spill_current && !self.main_quiet && self.main.pending_bytes() == 0 {
            self.main_quiet = true;
        }
    }

    /// Adds lost records to deliver before the next records read.
    pub fn owe_lost(&mut self, lost: u64) {
        self.owed_lost += lost;
    }

    /// The owed lost records, if any, now being delivered.
    pub fn take_owed(&mut self) -> Option<u64> {
        let lost = core::mem::take(&mut self.owed_lost);
        (lost > 0).then(|| {
            self.lost_reports_made += 1;
            lost
        })
    }

    /// Whether a read would deliver anything.
    pub fn has_pending(&self) -> bool {
        self.owed_lost > 0
            || (!self.main_quiet && self.main.pending_bytes() > 0)
            || self.spill.as_ref().is_some_and(|s| s.pending_bytes() > 0)
    }

    /// Records read from this CPU's rings.
    pub fn records_read(&self) -> u64 {
        self.main.stats().records
            + self.retired.records
            + self.spill.as_ref().map_or(0, |s| s.stats().records)
    }

    /// Bytes waiting in this CPU's rings.
    pub fn pending_bytes(&self) -> u64 {
        self.main.pending_bytes() + self.spill.as_ref().map_or(0, PerfRing::pending_bytes)
    }

    /// The ring records go to now.
    pub fn current(&self) -> &PerfRing {
        match &self.spill {
            Some(spill) if self.spill_current => spill,
            _ => &self.main,
        }
    }

    /// Drains this CPU's rings with `drain(ring, head, stats)` in the order
    /// their records were written: the ring the map slot left, then the one
    /// it points at. The newer ring's head is loaded before the older ring
    /// is read, so a record the older ring got just before a switch is read
    /// before any the newer one got after it. Each ring counts the lost
    /// records reported in it (what `drain` added to `stats.lost`). Calls
    /// `watch(chunk, before, now)` between the chunks of a ring drained in
    /// chunks (see [`PerfRing::set_drain_chunk`]) with the chunk's size and
    /// the bytes pending when it began and now; it returns the size of the
    /// next chunk.
    #[inline(always)]
    pub fn drain_watched<B, F, W>(
        &mut self,
        stats: &mut DispatchStats,
        mut drain: F,
        mut watch: W,
    ) -> ControlFlow<Stop<B>>
    where
        F: FnMut(&mut PerfRing, u64, &mut DispatchStats) -> ControlFlow<Stop<B>>,
        W: FnMut(u64, u64, u64) -> u64,
    {
        let (older, newer) = match &mut self.spill {
            None => {
                let head = self.main.load_head();
                return drain_ring(&mut self.main, head, stats, &mut drain, &mut watch);
            }
            Some(spill) if self.main_quiet => {
                let head = spill.load_head();
                return drain_ring(spill, head, stats, &mut drain, &mut watch);
            }
            Some(spill) if self.spill_current => (&mut self.main, spill),
            Some(spill) => (spill, &mut self.main),
        };
        let head = newer.load_head();
        drain_ring(older, older.load_head(), stats, &mut drain, &mut watch)?;
        drain_ring(newer, head, stats, &mut drain, &mut watch)
    }

    /// Drains the spill ring alone, once the map slot has left it for
    /// good: what it holds is older than anything the caller's ring gets.
    pub fn drain_spill<B, F>(&mut self, stats: &mut DispatchStats, mut drain: F) -> ControlFlow<Stop<B>>
    where
        F: FnMut(&mut PerfRing, u64, &mut DispatchStats) -> ControlFlow<Stop<B>>,
    {
        match &mut self.spill {
            Some(spill) if !self.spill_current => {
                let head = spill.load_head();
                drain_ring(spill, head, stats, &mut drain, &mut |chunk, _, _| chunk)
            }
            _ => ControlFlow::Continue(()),
        }
    }

    /// The rings' figures together, a lost report made here counting as a
    /// record read.
    pub fn figures(&self) -> Counters {
        let mut all = self.main.stats();
        all.records += self.lost_reports_made;
        all.bytes += self.lost_reports_made * LOST_RECORD_SIZE as u64;
        add(&mut all, self.retired);
        if let Some(spill) = &self.spill {
            add(&mut all, spill.stats());
        }
        all
    }
}

/// Drains `ring` up to `head` with `drain`, chunk by chunk if the ring
/// drains in chunks (`watch` between them sizes the next), counting in the ring the lost
/// records the kernel reported there: what `drain` added to `stats.lost`,
/// and what it took off `stats.lost_credit` (losses reported early, which
/// the ring's LOST record reports again: the fast mode's reconciliation
/// of a spill ring compares the kernel's reports with its count).
#[inline(always)]
fn drain_ring<B, F, W>(
    ring: &mut PerfRing,
    head: u64,
    stats: &mut DispatchStats,
    drain: &mut F,
    watch: &mut W,
) -> ControlFlow<Stop<B>>
where
    F: FnMut(&mut PerfRing, u64, &mut DispatchStats) -> ControlFlow<Stop<B>>,
    W: FnMut(u64, u64, u64) -> u64,
{
    // An empty ring costs two loads: no drain set up, no tail store.
    let tail = ring.load_tail();
    if head == tail {
        return ControlFlow::Continue(());
    }
    let mut before = head.wrapping_sub(tail);
    loop {
        let (lost, credit) = (stats.lost, stats.lost_credit);
        let ret = drain(ring, head, stats);
        ring.count_lost((stats.lost - lost) + credit.saturating_sub(stats.lost_credit));
        if ret.is_break() || ring.load_tail() == head {
            return ret;
        }
        let now = ring.pending_bytes();
        let next = watch(ring.drain_chunk(), before, now);
        ring.set_drain_chunk(next);
        before = now;
    }
}

fn add(sum: &mut Counters, c: Counters) {
    sum.records += c.records;
    sum.bytes += c.bytes;
    sum.resyncs += c.resyncs;
    sum.skipped_bytes += c.skipped_bytes;
    sum.lost += c.lost;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::PERF_RECORD_SAMPLE;

    fn push(ring: &mut PerfRing, stamp: u64) {
        let mut rec = vec![0u8; 24];
        rec[..4].copy_from_slice(&PERF_RECORD_SAMPLE.to_ne_bytes());
        rec[6..8].copy_from_slice(&24u16.to_ne_bytes());
        rec[8..12].copy_from_slice(&12u32.to_ne_bytes());
        rec[12..20].copy_from_slice(&stamp.to_ne_bytes());
        let head = ring.load_head();
        ring.write_data(head, &rec);
        ring.store_head(head + 24);
    }

    fn stamps(rings: &mut CpuRings) -> Vec<u64> {
        let mut out = Vec::new();
        let _ = rings.drain_watched::<(), _, _>(
            &mut DispatchStats::default(),
            |ring, head, _| {
                ring.drain_until(
                    head,
                    &mut out,
                    |out, _, rec| {
                        out.push(u64::from_ne_bytes(rec[12..20].try_into().unwrap()));
                        ControlFlow::Continue(())
                    },
                    |_| (),
                )
            },
            |chunk, _, _| chunk,
        );
        out
    }

    #[test]
    fn the_ring_the_slot_left_is_read_first() {
        let mut rings = CpuRings::new(PerfRing::heap(2048, 1).unwrap());
        rings.set_spill(PerfRing::heap(2048, 2).unwrap());
        push(rings.main_mut(), 1);
        rings.set_spill_current(true);
        push(rings.spill_mut().unwrap(), 2);
        assert_eq!(rings.pending_bytes(), 48);
        assert_eq!(stamps(&mut rings), vec![1, 2]);
        // Back to the caller's ring: what the spill ring got first comes first.
        push(rings.spill_mut().unwrap(), 3);
        rings.set_spill_current(false);
        push(rings.main_mut(), 4);
        assert_eq!(stamps(&mut rings), vec![3, 4]);
        assert_eq!(rings.records_read(), 4);
        assert!(!rings.has_pending());
        rings.owe_lost(5);
        assert!(rings.has_pending());
        assert_eq!((rings.take_owed(), rings.take_owed()), (Some(5), None));
        assert_eq!(rings.figures().records, 5, "a lost report made here counts as a record");
        assert!(rings.take_spill().is_some());
        assert_eq!((rings.records_read(), rings.figures().records), (4, 5), "a released ring's count stays");
    }

    #[test]
    fn a_settled_callers_ring_is_skipped_until_the_slot_comes_back() {
        let mut rings = CpuRings::new(PerfRing::heap(2048, 1).unwrap());
        rings.set_spill(PerfRing::heap(2048, 2).unwrap());
        push(rings.main_mut(), 1);
        rings.settle_main();
        rings.set_spill_current(true);
        rings.settle_main();
        assert!(rings.has_pending(), "not settled while the caller's ring holds records");
        assert_eq!(stamps(&mut rings), vec![1]);
        rings.settle_main();
        // A write the settled state would not see (none can happen while
        // the slot stays on the spill ring; this one shows the skip).
        push(rings.main_mut(), 2);
        assert!(!rings.has_pending());
        push(rings.spill_mut().unwrap(), 3);
        assert_eq!(stamps(&mut rings), vec![3], "only the spill ring is read");
        // The slot comes back: the caller's ring is read again, first.
        push(rings.spill_mut().unwrap(), 4);
        rings.set_spill_current(false);
        assert!(rings.has_pending());
        assert_eq!(stamps(&mut rings), vec![4, 2]);
    }
}
