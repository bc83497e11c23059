//! One CPU of a reader: the caller's event, its rings, what was read, and
//! the record-by-record cursor.

use super::health::Tracker;
use super::lost::KernelLost;
use super::output_counts::OutputCounts;
use super::stats::RingStats;
use crate::adaptive::{Lane, SlotMove};
use crate::error::{Error, Result};
use crate::kernel::PERF_EVENT_IOC_DISABLE;
use crate::kernel::sys;
use crate::ring::pair::CpuRings;
use crate::ring::record::DispatchStats;
use crate::ring::{At, PerfRing};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// A CPU's new event and ring, once it came back online (see
/// [`super::hotplug`]), waiting for the old ring to be read; where its
/// losses are counted.
pub struct Successor {
    pub fd: OwnedFd,
    pub ring: PerfRing,
    pub lost: KernelLost,
}

/// One CPU's event and rings.
pub struct CpuBuf {
    pub cpu: i32,
    pub map_key: i32,
    /// The caller's event (`perf_buffer__buffer_fd`).
    pub fd: OwnedFd,
    pub rings: CpuRings,
    pub stats: DispatchStats,
    /// Times epoll reported this ring.
    pub wakeups: u64,
    /// Overwritable rings: the head seen by the previous snapshot.
    pub overwrite_prev_head: Option<u64>,
    /// Overwritable rings: bytes overwritten before they could be read.
    pub overwritten_bytes: u64,
    /// Record-level API: read position ahead of the published tail.
    cursor: Option<u64>,
    /// The poll round that last drained this ring (one count per round).
    pub drained_round: u64,
    /// Where the kernel's count of what did not fit in this ring comes from.
    pub kernel_lost: KernelLost,
    /// What the reader noted as it read (backlog, last record, rates).
    pub health: Tracker,
    /// Samples the caller dropped after reading them.
    pub dropped: u64,
    /// The CPU is online as far as the reader knows.
    pub online: bool,
    /// Times the CPU came back and got a fresh event.
    pub replaced: u64,
    /// What the events this ring had before the current one lost, as the
    /// kernel counted it (replaced after their CPU came back).
    pub retired_lost: u64,
    /// The fresh event and ring of a CPU that came back, in the slot
    /// already, taking this ring's place once it is read.
    pub successor: Option<Successor>,
}

impl CpuBuf {
    /// A CPU's buffer over its event and mapped ring.
    pub fn new(cpu: i32, map_key: i32, fd: OwnedFd, ring: PerfRing, overwrite: bool) -> CpuBuf {
        CpuBuf {
            cpu,
            map_key,
            fd,
            rings: CpuRings::new(ring),
            stats: DispatchStats::default(),
            wakeups: 0,
            overwrite_prev_head: overwrite.then_some(0),
            overwritten_bytes: 0,
            cursor: None,
            drained_round: 0,
            kernel_lost: KernelLost::Unknown,
            health: Tracker::default(),
            dropped: 0,
            online: true,
            replaced: 0,
            retired_lost: 0,
            successor: None,
        }
    }

    /// A buffer over a heap ring, for tests of code above the ring.
    #[cfg(test)]
    pub fn for_test(cpu: i32, ring: PerfRing) -> CpuBuf {
        let fd = std::fs::File::open("/dev/null").expect("/dev/null").into();
        CpuBuf::new(cpu, cpu, fd, ring, false)
    }

    /// The next record at the cursor, without consuming it (`None` when
    /// the ring is empty). An inconsistent ring state skips to the head.
    pub fn peek(&mut self) -> Result<Option<&[u8]>> {
        let ring = self.rings.main_mut();
        let head = ring.load_head();
        let pos = self.cursor.unwrap_or_else(|| ring.load_tail());
        // Decide first, then borrow the record (the checks need &mut ring).
        match ring.record_at(pos, head) {
            At::Record(_) => {}
            At::End => return Ok(None),
            At::NoMemory => return Err(Error::NOMEM),
            At::Corrupt => {
                ring.note_skipped(pos, head);
                self.cursor = Some(head);
                return Ok(None);
            }
        }
        match self.rings.main_mut().record_at(pos, head) {
            At::Record(rec) => Ok(Some(rec)),
            _ => Ok(None),
        }
    }

    /// Moves the cursor past the next record; ENODATA when there is none.
    pub fn advance(&mut self) -> Result<()> {
        let ring = self.rings.main_mut();
        let head = ring.load_head();
        let pos = self.cursor.unwrap_or_else(|| ring.load_tail());
        match ring.record_at(pos, head) {
            At::Record(rec) => {
                let size = rec.len() as u64;
                self.cursor = Some(pos.wrapping_add(size));
                Ok(())
            }
            _ => Err(Error::from_errno(libc::ENODATA)),
        }
    }

    /// Publishes the cursor as the tail (release), freeing the space of
    /// every record advanced past.
    pub fn publish(&mut self) {
        if let Some(pos) = self.cursor.take() {
            self.rings.main().store_tail(pos);
        }
    }

    /// What the events writing into this ring lost so far as the kernel
    /// counts it, but for the fast mode's own events (see
    /// `RingSet::counted_lost`); `None` when unknown.
    pub fn counted_lost(&self) -> Option<u64> {
        self.kernel_lost.read(self.fd.as_fd()).map(|n| n + self.retired_lost)
    }

    /// Of `counted` losses, those no lost report has told about yet (0
    /// when the count is unknown).
    pub fn unreported_of(&self, counted: Option<u64>) -> u64 {
        counted.map_or(0, |counted| counted.saturating_sub(self.stats.lost))
    }

    /// Current figures, `counted` being the kernel's count of what its
    /// rings lost and `output` what perfbuf.bpf.h counted on this CPU, if
    /// known (the fast mode's figures are filled in by the reader).
    pub fn figures(&self, counted: Option<u64>, output: Option<OutputCounts>) -> RingStats {
        let all = self.rings.figures();
        let unreported = self.unreported_of(counted);
        RingStats {
            cpu: self.cpu,
            samples: all.records.saturating_sub(self.stats.others),
            dropped: self.dropped,
            output_failed: output.map_or(0, |o| o.failed_uncounted_perf()),
            produced: output.map(|o| o.calls),
            records: all.records,
            bytes: all.bytes,
            lost: self.stats.lost + unreported,
            lost_unreported: unreported,
            wakeups: self.wakeups,
            pending_bytes: self.rings.pending_bytes(),
            data_size: self.rings.main().data_size() as u64,
            resyncs: all.resyncs,
            skipped_bytes: all.skipped_bytes,
            malformed: self.stats.malformed,
            overwritten_bytes: self.overwritten_bytes,
            batched: false,
            batch_switches: 0,
            spill_size: self.rings.spill().map_or(0, |s| s.data_size() as u64),
        }
    }

    /// What moving this CPU's slot back to per-record wake-ups takes, for
    /// the fast mode while the ring is drained.
    pub fn slot_move(&self, map_fd: RawFd) -> SlotMove {
        SlotMove { map_fd, map_key: self.map_key as u32, cpu: self.cpu, caller_event: self.fd.as_raw_fd() }
    }

    /// libbpf's teardown order: forget the map entry, unmap, disable, close.
    /// With `keep_slots` (cilium/ebpf's Close), only unmap and close: the
    /// map's slot keeps its event (output into it fails, -ENOSPC) until
    /// someone replaces it, and a newer reader's slot is left alone.
    pub fn teardown(self, map_fd: RawFd, keep_slots: bool) {
        let CpuBuf { map_key, fd, rings, successor, .. } = self;
        if map_fd >= 0 && !keep_slots {
            let _ = sys::map_delete_u32(map_fd, map_key as u32);
        }
        drop(rings);
        if !keep_slots {
            let _ = sys::perf_ioctl(fd.as_fd(), PERF_EVENT_IOC_DISABLE, 0);
        }
        drop(fd);
        if let Some(next) = successor {
            drop(next.ring);
            if !keep_slots {
                let _ = sys::perf_ioctl(next.fd.as_fd(), PERF_EVENT_IOC_DISABLE, 0);
            }
        }
    }
}

impl Lane for CpuBuf {
    fn cpu(&self) -> i32 {
        self.cpu
    }

    fn map_key(&self) -> u32 {
        self.map_key as u32
    }

    fn event(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn rings(&self) -> &CpuRings {
        &self.rings
    }

    fn rings_mut(&mut self) -> &mut CpuRings {
        &mut self.rings
    }
}
