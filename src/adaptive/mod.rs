//! The fast mode (adaptive wake-ups), an opt-in: `PERFBUF_ADAPTIVE=1`,
//! `PERFBUF_F_ADAPTIVE`, or `.adaptive(true)` in the Rust builder.
//!
//! With libbpf's attr (`wakeup_events = 1`) the kernel queues an irq_work
//! for every record whether or not anyone sleeps on the ring: a
//! self-IPI, which costs the producer about 6 µs per record in a VM and
//! caps a stream near 130 k records/s. In the fast mode, while a CPU's
//! rate stays high and its reader keeps up, its map slot points at a
//! second event that wakes the reader only when a quarter of its ring is
//! full, and a timer in the epoll set reads the ring meanwhile: the reader
//! wakes on ticks ([`TICK`]), the producer pays no wake-up.
//!
//! **Where records go.** A producer freed from the per-record cost runs
//! 20 to 60 times faster, so the caller's ring would last only as long as
//! the reader's ordinary scheduling hiccups. A CPU that needs it gets a
//! spill ring [`SPILL_FACTOR`] times the caller's (at most [`SPILL_MAX`]
//! bytes), with two events writing there (`PERF_EVENT_IOC_SET_OUTPUT`):
//! one waking per record, one at a quarter of the ring. It needs one when
//! it first batches, or when a drain finds the caller's ring half full; a
//! CPU that does neither costs what libbpf's does (one event, one ring).
//! From then on its slot stays on the spill ring's events, so its records
//! stay in one ring. A caller ring of [`SPILL_MAX`] or more is big enough:
//! the quarter-ring event writes into it, and its per-record event is the
//! caller's own.
//!
//! **Standing down.** The caller's event (`perf_buffer__buffer_fd`) and
//! ring (`perf_buffer__buffer`, the record API, ordered reading) are the
//! caller's to use: the first such call on a ring points its slot back at
//! the caller's event for good, so the caller's ioctls, epoll and raw
//! reads see what libbpf would show them. The spill ring's records are
//! older than anything written afterwards: once no BPF program can still
//! write there (see [`crate::kernel::quiesce`]: a task switch on that CPU,
//! or an RCU grace period), that call hands them to the callbacks, since a
//! caller reading its ring itself may never poll again.
//!
//! **Back-pressure** (see [`policy`]). libbpf's per-record wake-ups slow
//! the producer down; without them a slow reader would lose records
//! libbpf keeps. So what the reader can take decides: a ring batches only
//! while its records wait for the reader no longer than a share of the
//! time the freed producer takes to fill the ring; a batched ring is
//! drained in chunks sized so that the reader looks at its backlog before
//! a producer outrunning it can add an eighth of the ring, and goes back
//! to per-record wake-ups in the middle of a drain when that backlog
//! grows past a sixteenth; also, and stays there a while, when a drain
//! finds it half full, when draining takes half the reader's time, or when
//! the kernel reports lost records in it.
//!
//! **Lost records stay exact.** The kernel reports a ring's lost records
//! only with the next record it writes there, which a spill ring may never
//! get once the slot has left it. The spill ring's events are opened with
//! `PERF_FORMAT_LOST`, whose `read()` counts what each failed to write:
//! once the spill ring a slot left is quiet ([`QUIET_AFTER`]) and read,
//! the difference is delivered as a lost record of our own, and the spill
//! ring is released. Without `PERF_FORMAT_LOST` (Linux < 6.0) only caller
//! rings of [`SPILL_MAX`] or more get the fast mode.
//!
//! **Slots that are not ours.** See [`claim`]: the fast mode writes a slot
//! only while its buffer holds the newest claim on the map.

pub mod claim;
pub mod policy;

use crate::error::Result;
use crate::kernel::clock::Moment;
use crate::kernel::sys::{self, AttrSource};
use crate::kernel::{
    PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_PAUSE_OUTPUT, PERF_FORMAT_LOST, PerfEventAttr, cpu,
};
use crate::log;
use crate::ring::PerfRing;
use crate::ring::pair::CpuRings;
use claim::Claim;
use policy::{Busy, LanePolicy, Target, Window};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The spill ring's size, in caller's rings.
pub const SPILL_FACTOR: usize = 16;
/// The spill ring's largest size in bytes; a caller ring this big needs none.
pub const SPILL_MAX: usize = 4 << 20;
/// While batched, what sits below a quarter of the ring is read this
/// often, which keeps its delay, tick plus the reader's wake-up, under
/// 1 ms. Each tick is a reader wake-up (about 20 us of its CPU here): at
/// 200 k records/s, 500 us ticks cost the reader 3 times the CPU per
/// record of a raw reader draining every 1 ms; 800 us, 1.7 times, with a
/// p99 delay of 0.8 ms at full rate instead of 0.5 ms.
pub const TICK: Duration = Duration::from_micros(800);
/// How long after its map slot moved away a ring is taken to get no more
/// writes: a BPF program that loaded the old slot has long finished.
pub const QUIET_AFTER: Duration = Duration::from_millis(100);

/// What the fast mode needs of one of the reader's CPUs.
pub trait Lane {
    /// The CPU.
    fn cpu(&self) -> i32;
    /// Its slot in the map.
    fn map_key(&self) -> u32;
    /// The caller's event.
    fn event(&self) -> BorrowedFd<'_>;
    /// Its rings.
    fn rings(&self) -> &CpuRings;
    /// Its rings, to change.
    fn rings_mut(&mut self) -> &mut CpuRings;
}

/// What the reader must do with its timer after a decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerAction {
    /// Leave it as it is.
    Keep,
    /// Start ticking every [`TICK`].
    Arm,
    /// Stop ticking.
    Disarm,
}

/// What moving a ring's slot back to per-record wake-ups takes, copied
/// out of the ring's lane so it can be done while the ring is drained.
#[derive(Clone, Copy)]
pub struct SlotMove {
    pub map_fd: RawFd,
    pub map_key: u32,
    pub cpu: i32,
    /// The caller's event (the per-record one of a ring without a spill ring).
    pub caller_event: RawFd,
}

/// The events of one CPU's fast mode.
struct FastEvents {
    /// Wakes when a quarter of the fast ring is full (read on the timer's
    /// ticks meanwhile); owns the spill ring if any.
    streaming: OwnedFd,
    /// Wakes per record into the spill ring; `None` with no spill ring
    /// (the caller's event is the per-record one then).
    per_record: Option<OwnedFd>,
}

impl FastEvents {
    /// What these events failed to write so far, as the kernel counts it
    /// (`PERF_FORMAT_LOST`); an error if one of them does not count.
    fn lost(&self) -> Result<u64> {
        [Some(&self.streaming), self.per_record.as_ref()]
            .into_iter()
            .flatten()
            .try_fold(0u64, |sum, fd| sys::read_lost(fd.as_fd()).map(|n| sum + n))
    }
}

#[derive(Default)]
struct Slot {
    policy: LanePolicy,
    /// Opened when the CPU first needs them.
    events: Option<FastEvents>,
    /// When the slot first moved to the spill ring.
    spilled_at: Option<Moment>,
    /// When the slot left the spill ring, until its lost records are
    /// reconciled and it is released.
    left: Option<Moment>,
    /// What the fast events released so far failed to write, as the
    /// kernel counted it.
    retired_lost: u64,
    /// The largest backlog a drain found when it began, this window.
    backlog_max: u64,
    /// While the slot is on the caller's ring: the backlog the last drain
    /// of it began with, and the most two drains in a row began with
    /// together, this window (see [`Adaptive::may_leave_callers_ring`]).
    last_backlog: u64,
    pair_max: u64,
}

/// Per-buffer fast-mode state.
pub struct Adaptive {
    slots: Vec<Slot>,
    window_start: Moment,
    /// Rings batched now.
    batched: usize,
    /// A slot moved since `batched` was counted (counting reads every
    /// slot: an empty read of many rings should not).
    recount: bool,
    /// Some slot may have left a spill ring not released yet.
    leaving: bool,
    /// After the last ring left batching, tick until then, so a record the
    /// batching event was writing during the switch is still read.
    grace_until: Option<Moment>,
    busy: Busy,
    claim: Option<Claim>,
    /// The process that opened the buffer (a forked child's copy writes no slot).
    owner_pid: i32,
    /// The reader's epoll set, where spill rings join their CPU's token.
    epoll_fd: RawFd,
    /// The caller paused output: a spill ring opened meanwhile starts paused.
    paused: AtomicBool,
}

impl Adaptive {
    /// The fast mode over `lanes`, whose slots point at the callers'
    /// events: nothing is opened until a CPU needs it. `None` when no CPU
    /// could ever batch (small rings before Linux 6.0: a spill ring's
    /// losses could not be counted); the buffer is then libbpf's.
    pub fn setup<L: Lane>(lanes: &[L], epoll_fd: RawFd, claim: Option<Claim>) -> Option<Adaptive> {
        let counted = sys::format_lost_supported();
        let mut slots = Vec::new();
        slots.try_reserve_exact(lanes.len()).ok()?;
        for lane in lanes {
            let mut slot = Slot::default();
            if !counted && lane.rings().main().data_size() < SPILL_MAX {
                slot.policy.moved(Target::Caller);
            }
            slots.push(slot);
        }
        let fast = slots.iter().filter(|s| s.policy.target() != Target::Caller).count();
        log::info(format_args!("fast mode on {fast} of {} CPUs", slots.len()));
        if fast == 0 {
            log::info(format_args!("no fast mode: a spill ring's losses cannot be counted before Linux 6.0"));
            return None;
        }
        Some(Adaptive {
            slots,
            window_start: Moment::coarse(),
            batched: 0,
            recount: false,
            leaving: false,
            grace_until: None,
            busy: Busy::default(),
            claim,
            owner_pid: sys::getpid(),
            epoll_fd,
            paused: AtomicBool::new(false),
        })
    }

    /// Whether any ring is batched now.
    pub fn any_batched(&self) -> bool {
        self.batched > 0
    }

    /// Whether ring `idx` is batched now, and how many times it switched
    /// to batching.
    pub fn state(&self, idx: usize) -> (bool, u64) {
        self.slots.get(idx).map_or((false, 0), |s| (s.policy.target().batched(), s.policy.switches()))
    }

    /// The events that own the spill rings: pausing one pauses its ring
    /// for every event writing there.
    pub fn spill_owners(&self) -> impl Iterator<Item = BorrowedFd<'_>> {
        self.slots.iter().filter_map(|s| match &s.events {
            Some(FastEvents { streaming, per_record: Some(_) }) => Some(streaming.as_fd()),
            _ => None,
        })
    }

    /// The caller pauses (`true`) or resumes output: the spill rings that
    /// exist are paused with the rings (see [`Self::spill_owners`]), and
    /// one opened while paused starts paused.
    pub fn note_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
    }

    /// Whether this buffer may still write its map's slots.
    fn owns_slots(&self) -> bool {
        self.claim.as_ref().is_none_or(Claim::held) && sys::getpid() == self.owner_pid
    }

    /// Called after a read of every ring (`spent`: how long its drains
    /// took, measured while a ring is batched): takes the window's
    /// decisions once it has passed, backs off when the reader is falling
    /// behind, reconciles and releases spill rings left behind, and says
    /// what to do with the timer. Arithmetic only until a window has passed.
    pub fn observe<L: Lane>(
        &mut self,
        now: Moment,
        spent: Option<Duration>,
        lanes: &mut [L],
        map_fd: RawFd,
    ) -> TimerAction {
        if let Some(spent) = spent
            && self.batched > 0
            && self.busy.add(spent, now)
        {
            for (idx, lane) in lanes.iter_mut().enumerate() {
                if let Some(target) = self.slots[idx].policy.on_pressure(now) {
                    self.apply(idx, lane, target, map_fd, now, "the reader spends half its time draining");
                }
            }
        }
        if now >= self.window_start + policy::WINDOW {
            let elapsed = now.since(self.window_start);
            self.window_start = now;
            if !self.owns_slots() {
                self.relinquish(now);
            }
            for (idx, lane) in lanes.iter_mut().enumerate() {
                self.end_window(idx, lane, elapsed, map_fd, now);
            }
        }
        if self.leaving {
            let mut still = false;
            for (idx, lane) in lanes.iter_mut().enumerate() {
                self.release_if_done(idx, lane, now);
                still |= self.slots[idx].left.is_some();
            }
            self.leaving = still;
        }
        self.timer_after_moves(now)
    }

    /// Ring `idx`'s decisions at the end of a window of `elapsed`.
    fn end_window<L: Lane>(
        &mut self,
        idx: usize,
        lane: &mut L,
        elapsed: Duration,
        map_fd: RawFd,
        now: Moment,
    ) {
        let slot = &mut self.slots[idx];
        if slot.policy.target() == Target::Caller {
            return;
        }
        // Writers that loaded the slot before it moved to the spill ring
        // have long finished: the caller's ring, once read, gets nothing
        // more while the slot stays there.
        if slot.spilled_at.is_some_and(|t| now.since(t) >= QUIET_AFTER) {
            lane.rings_mut().settle_main();
        }
        let rings = lane.rings();
        let read = rings.figures();
        let window = Window {
            records: read.records,
            bytes: read.bytes,
            lost: rings.spill().map_or(rings.main().stats().lost, |s| s.stats().lost),
            backlog_max: core::mem::take(&mut slot.backlog_max),
            ring: fast_ring_size(rings) as u64,
            elapsed,
        };
        let pairs = core::mem::take(&mut slot.pair_max).max(slot.last_backlog + rings.main().pending_bytes());
        let was_late = slot.policy.too_late();
        let decided = slot.policy.on_window(window, now);
        if slot.policy.too_late() && !was_late {
            log::debug(format_args!(
                "cpu #{}: per-record wake-ups still: records waited up to {:?} for the reader (more than {:?})",
                lane.cpu(),
                slot.policy.late(),
                slot.policy.reach(window.ring)
            ));
        }
        let Some(target) = decided else { return };
        if target.batched() {
            if !self.may_leave_callers_ring(idx, lane, pairs) || !self.ensure_events(idx, lane) {
                return;
            }
            let p = &self.slots[idx].policy;
            log::debug(format_args!(
                "cpu #{}: the rate is high and records waited at most {:?} for the reader (within {:?})",
                lane.cpu(),
                p.late(),
                p.reach(window.ring)
            ));
            self.apply(idx, lane, target, map_fd, now, "the reader keeps up");
        } else {
            self.apply(idx, lane, target, map_fd, now, "the rate fell, or records were lost");
        }
    }

    /// Before draining ring `idx`: notes how much waited for the reader;
    /// a batched ring found half full goes back to per-record wake-ups
    /// now, before the drain lets the producer fill the rest.
    #[inline(always)]
    pub fn before_drain<L: Lane>(&mut self, idx: usize, lane: &mut L, map_fd: RawFd) {
        let slot = &mut self.slots[idx];
        if slot.policy.target() == Target::Caller {
            return;
        }
        let ring = lane.rings().current();
        let (pending, size) = (ring.pending_bytes(), ring.data_size() as u64);
        slot.backlog_max = slot.backlog_max.max(pending);
        if slot.spilled_at.is_none() {
            slot.pair_max = slot.pair_max.max(slot.last_backlog + pending);
            slot.last_backlog = pending;
        }
        if policy::over_filled(pending, size) {
            if slot.policy.target().batched() {
                self.filled(idx, lane, map_fd);
            } else {
                self.callers_ring_filled(idx, lane, map_fd);
            }
        }
    }

    /// Between chunks of a drain of ring `idx` (a chunk of `chunk` bytes;
    /// pending bytes when it began and now, in a ring of `size`): a
    /// batched ring whose reader falls behind goes back to per-record
    /// wake-ups now, in the middle of the drain, before the producer can
    /// fill the ring. Returns the next chunk's size. `to` says how to
    /// move the slot.
    #[inline(always)]
    pub fn between_chunks(
        &mut self,
        idx: usize,
        chunk: u64,
        before: u64,
        now: u64,
        size: u64,
        to: SlotMove,
    ) -> u64 {
        if self.slots[idx].policy.target().batched() && policy::falling_behind(before, now, size) {
            self.back_off(idx, to);
        }
        policy::next_chunk(chunk, before, now, size)
    }

    #[cold]
    fn back_off(&mut self, idx: usize, to: SlotMove) {
        let now = Moment::coarse();
        if !self.owns_slots() {
            self.relinquish(now);
            return;
        }
        let slot = &mut self.slots[idx];
        let Some(events) = &slot.events else { return };
        let fd = events.per_record.as_ref().map_or(to.caller_event, AsRawFd::as_raw_fd);
        if let Err(e) = sys::map_update_u32(to.map_fd, to.map_key, fd as u32) {
            log::debug(format_args!("cpu #{}: cannot move the slot: {e}", to.cpu));
            return;
        }
        if let Some(target) = slot.policy.on_pressure(now) {
            slot.policy.moved(target);
            self.recount = true;
            log::debug(format_args!("cpu #{}: per-record wake-ups (the reader's backlog grows)", to.cpu));
        }
    }

    /// A drain found batched ring `idx` half full.
    #[cold]
    fn filled<L: Lane>(&mut self, idx: usize, lane: &mut L, map_fd: RawFd) {
        let now = Moment::coarse();
        if let Some(target) = self.slots[idx].policy.on_pressure(now) {
            self.apply(idx, lane, target, map_fd, now, "the ring is half full");
        }
    }

    /// Whether ring `idx`'s slot may leave the caller's ring for a spill
    /// ring (the first time: it batches, or the caller's ring was found
    /// half full), given the most two drains in a row began with together
    /// (`pairs`) since the window began. The kernel reports a ring's lost
    /// records only with the next record it writes there, and the
    /// caller's event does not count them (libbpf's attr): a ring that lost
    /// records just before the slot left would never tell. Records are
    /// lost only in a full ring. Between the start of one drain and that of
    /// the next, the producer sees at most both backlogs together (the
    /// first is freed only when its drain ends, the second was written
    /// since it began); while that stays a record (records under a quarter
    /// of the ring) short of the ring, nothing was lost, and a loss before
    /// was told by the records written since, read first. So: every pair
    /// of backlogs since the window began under 3/4 of the ring (`pairs`,
    /// the last drain's with what waited since included).
    fn may_leave_callers_ring<L: Lane>(&self, idx: usize, lane: &L, pairs: u64) -> bool {
        let size = lane.rings().main().data_size() as u64;
        self.slots[idx].spilled_at.is_some() || size >= SPILL_MAX as u64 || pairs.saturating_mul(4) < size * 3
    }

    /// A drain found per-record ring `idx` half full: a CPU without a
    /// spill ring yet needs one, and its slot moves there now if no loss
    /// can be left untold in the caller's ring.
    #[cold]
    fn callers_ring_filled<L: Lane>(&mut self, idx: usize, lane: &mut L, map_fd: RawFd) {
        let slot = &self.slots[idx];
        if slot.events.is_some() || !self.may_leave_callers_ring(idx, lane, slot.pair_max) {
            return;
        }
        if self.ensure_events(idx, lane) {
            let now = Moment::coarse();
            self.apply(
                idx,
                lane,
                Target::PerRecord,
                map_fd,
                now,
                "the caller's ring was half full: a spill ring",
            );
        }
    }

    /// Opens ring `idx`'s fast events (and spill ring) if it has none yet;
    /// false if they cannot be had: the CPU keeps the caller's event for
    /// good then (and says why once).
    fn ensure_events<L: Lane>(&mut self, idx: usize, lane: &mut L) -> bool {
        let slot = &mut self.slots[idx];
        if slot.events.is_some() {
            return true;
        }
        let opened = open_events(lane, idx, self.epoll_fd).and_then(|events| {
            if self.paused.load(Ordering::Relaxed) {
                sys::perf_ioctl(events.streaming.as_fd(), PERF_EVENT_IOC_PAUSE_OUTPUT, 1)?;
            }
            Ok(events)
        });
        match opened {
            Ok(events) => {
                slot.events = Some(events);
                true
            }
            Err(e) => {
                log::info(format_args!("cpu #{}: no fast mode, libbpf's wake-ups: {e}", lane.cpu()));
                slot.policy.moved(Target::Caller);
                self.recount = true;
                false
            }
        }
    }

    /// Ring `idx`'s caller reads its ring or event itself: its slot goes
    /// back to the caller's event for good. The timer stops at once when
    /// no ring is batched any more (a caller that reads rings itself may
    /// never call what would stop it later).
    pub fn stand_down<L: Lane>(&mut self, idx: usize, lane: &mut L, map_fd: RawFd) -> TimerAction {
        let Some(target) = self.slots[idx].policy.stand_down() else { return TimerAction::Keep };
        let now = Moment::coarse();
        self.apply(idx, lane, target, map_fd, now, "the caller uses the ring's event or ring itself");
        self.stand_down_timer(now)
    }

    /// [`Self::stand_down`] for every ring (ordered reading).
    pub fn stand_down_all<L: Lane>(&mut self, lanes: &mut [L], map_fd: RawFd) -> TimerAction {
        let now = Moment::coarse();
        for (idx, lane) in lanes.iter_mut().enumerate() {
            if let Some(target) = self.slots[idx].policy.stand_down() {
                self.apply(idx, lane, target, map_fd, now, "ordered reading");
            }
        }
        self.stand_down_timer(now)
    }

    fn stand_down_timer(&mut self, now: Moment) -> TimerAction {
        match self.timer_after_moves(now) {
            TimerAction::Keep if self.batched == 0 && self.grace_until.take().is_some() => {
                TimerAction::Disarm
            }
            action => action,
        }
    }

    /// Another buffer took the map, or this is a forked copy: no slot is
    /// written from now on; spill rings left behind are still read and
    /// reconciled.
    fn relinquish(&mut self, now: Moment) {
        if self.slots.iter().any(|s| s.policy.target() != Target::Caller) {
            log::debug(format_args!(
                "the map's slots are no longer this buffer's: the fast mode writes none from now on"
            ));
        }
        for slot in &mut self.slots {
            if slot.policy.target() != Target::Caller {
                slot.policy.moved(Target::Caller);
                self.recount = true;
                if slot.events.as_ref().is_some_and(|e| e.per_record.is_some()) {
                    slot.left = Some(now);
                    self.leaving = true;
                }
            }
        }
    }

    /// Points ring `idx`'s slot at the event for `target` (if the slots
    /// are still ours), then records the move. A CPU without fast events
    /// is on the caller's event already: only the record changes.
    fn apply<L: Lane>(
        &mut self,
        idx: usize,
        lane: &mut L,
        target: Target,
        map_fd: RawFd,
        now: Moment,
        why: &str,
    ) {
        if !self.owns_slots() {
            self.relinquish(now);
            return;
        }
        let slot = &mut self.slots[idx];
        let Some(events) = &slot.events else {
            if !target.batched() {
                slot.policy.moved(target);
                self.recount = true;
            }
            return;
        };
        let fd = match (target, &events.per_record) {
            (Target::Streaming, _) => events.streaming.as_raw_fd(),
            (Target::PerRecord, Some(per_record)) => per_record.as_raw_fd(),
            (Target::PerRecord, None) | (Target::Caller, _) => lane.event().as_raw_fd(),
        };
        if let Err(e) = sys::map_update_u32(map_fd, lane.map_key(), fd as u32) {
            // The slot stays where it was, and so does the policy.
            log::debug(format_args!("cpu #{}: cannot move the slot: {e}", lane.cpu()));
            return;
        }
        let to = match target {
            Target::Streaming => "wake-ups at a quarter of the ring, read on ticks",
            Target::PerRecord => "per-record wake-ups",
            Target::Caller => "the caller's event, for good",
        };
        log::debug(format_args!("cpu #{}: {to} ({why}; {} records/s)", lane.cpu(), slot.policy.rate()));
        slot.policy.moved(target);
        let spilling = events.per_record.is_some();
        let rings = lane.rings_mut();
        rings.set_spill_current(spilling && target != Target::Caller);
        if spilling && target != Target::Caller {
            slot.spilled_at.get_or_insert(now);
        }
        // A batched ring's drains start from small chunks again (the
        // reader's pace may have changed); a big caller's ring is drained
        // in chunks only while batched.
        let first = policy::first_chunk(fast_ring_size(rings) as u64);
        match (target, rings.spill_mut()) {
            (Target::Streaming, Some(spill)) => spill.set_drain_chunk(first),
            (Target::Streaming, None) => rings.main_mut().set_drain_chunk(first),
            (_, None) => rings.main_mut().unchunk(),
            (_, Some(_)) => {}
        }
        if spilling && target == Target::Caller {
            slot.left = Some(now);
            self.leaving = true;
        }
        self.recount = true;
    }

    /// Whether ring `idx`'s slot left a spill ring that was written to
    /// and is not released yet.
    pub fn left_written_spill<L: Lane>(&self, idx: usize, lane: &L) -> bool {
        self.slots[idx].left.is_some() && lane.rings().spill().is_some_and(|s| s.load_head() != 0)
    }

    /// Once the spill ring a slot left is quiet and read, releases it.
    fn release_if_done<L: Lane>(&mut self, idx: usize, lane: &mut L, now: Moment) {
        let Some(since) = self.slots[idx].left else { return };
        let rings = lane.rings();
        if now.since(since) < QUIET_AFTER || rings.spill().is_none_or(|s| s.pending_bytes() > 0) {
            return;
        }
        self.release(idx, lane);
    }

    /// Releases the spill ring slot `idx` left, which no BPF program
    /// writes any more and which was read to its head: what it still owes
    /// goes to the reader as a lost record of our own, then the ring and
    /// its events are freed.
    pub fn release<L: Lane>(&mut self, idx: usize, lane: &mut L) {
        let slot = &mut self.slots[idx];
        if slot.left.is_none() {
            return;
        }
        slot.left = None;
        let rings = lane.rings();
        let Some(events) = slot.events.take() else { return };
        let reported = rings.spill().map_or(0, |s| s.stats().lost);
        match events.lost() {
            Ok(failed) => {
                slot.retired_lost += failed;
                if failed > reported {
                    lane.rings_mut().owe_lost(failed - reported);
                }
            }
            Err(e) => {
                log::warn(format_args!("cpu #{}: lost records of a spill ring unknown: {e}", lane.cpu()))
            }
        }
        let _ = sys::epoll_del(self.epoll_fd, events.streaming.as_raw_fd());
        drop(lane.rings_mut().take_spill());
        drop(events);
    }

    /// What CPU `idx`'s fast events failed to write so far, released ones
    /// included, as the kernel counts it (`PERF_FORMAT_LOST`); `None` if a
    /// live one does not count or cannot be read.
    pub fn counted_lost(&self, idx: usize) -> Option<u64> {
        let slot = &self.slots[idx];
        match &slot.events {
            Some(events) => events.lost().ok().map(|n| slot.retired_lost + n),
            None => Some(slot.retired_lost),
        }
    }

    /// Counts the batched rings after moves: the timer starts with the
    /// first, and after the last has left, ticks two ticks more, then stops.
    fn timer_after_moves(&mut self, now: Moment) -> TimerAction {
        let was = self.batched;
        if core::mem::take(&mut self.recount) {
            self.batched = self.slots.iter().filter(|s| s.policy.target().batched()).count();
        }
        if self.batched > 0 {
            self.grace_until = None;
            return if was == 0 { TimerAction::Arm } else { TimerAction::Keep };
        }
        if was > 0 {
            self.busy.reset();
            self.grace_until = Some(now + 2 * TICK);
            return TimerAction::Keep;
        }
        match self.grace_until {
            Some(t) if now >= t => {
                self.grace_until = None;
                TimerAction::Disarm
            }
            _ => TimerAction::Keep,
        }
    }
}

/// The ring a CPU batches into: its spill ring, or the one it would get,
/// or the caller's ring if that is big enough.
fn fast_ring_size(rings: &CpuRings) -> usize {
    if let Some(spill) = rings.spill() {
        return spill.data_size();
    }
    let caller = rings.main().data_size();
    if caller >= SPILL_MAX { caller } else { caller.saturating_mul(SPILL_FACTOR).min(SPILL_MAX) }
}

/// Opens CPU `idx`'s fast events (and maps its spill ring, in the epoll
/// set under the CPU's token); the slot does not move yet.
fn open_events<L: Lane>(lane: &mut L, idx: usize, epoll_fd: RawFd) -> Result<FastEvents> {
    let cpu = lane.cpu();
    let size = fast_ring_size(lane.rings());
    if lane.rings().main().data_size() >= SPILL_MAX {
        // Big enough to absorb the faster producer: stream into it. Its
        // event counts its losses where the kernel can (for exact lost
        // figures: the caller's ring has more writers than its own event).
        let counted = sys::format_lost_supported();
        let streaming = open_event(0, size, cpu, counted)?;
        sys::perf_set_output(streaming.as_fd(), lane.event())?;
        sys::perf_ioctl(streaming.as_fd(), PERF_EVENT_IOC_ENABLE, 0)?;
        return Ok(FastEvents { streaming, per_record: None });
    }
    let streaming = open_event(0, size, cpu, true)?;
    let page = cpu::page_size();
    let mut ring = PerfRing::map(streaming.as_fd(), page, size / page, true)?;
    ring.set_drain_chunk(policy::first_chunk(size as u64));
    sys::perf_ioctl(streaming.as_fd(), PERF_EVENT_IOC_ENABLE, 0)?;
    let per_record = open_event(1, 0, cpu, true)?;
    sys::perf_set_output(per_record.as_fd(), streaming.as_fd())?;
    sys::perf_ioctl(per_record.as_fd(), PERF_EVENT_IOC_ENABLE, 0)?;
    // The caller's ring's token: a wake-up of either drains both.
    sys::epoll_add(epoll_fd, streaming.as_raw_fd(), idx as u64)?;
    lane.rings_mut().set_spill(ring);
    Ok(FastEvents { streaming, per_record: Some(per_record) })
}

/// A BPF output event on `cpu` waking the reader every `wakeup_events`
/// records, or if that is 0, when a quarter of its ring (`ring_size`
/// bytes) is full; counting what it fails to write if `counted`.
fn open_event(wakeup_events: u32, ring_size: usize, cpu: i32, counted: bool) -> Result<OwnedFd> {
    let quarter = if wakeup_events == 0 { (ring_size / 4).min(u32::MAX as usize) as u32 } else { 0 };
    let attr = PerfEventAttr {
        read_format: if counted { PERF_FORMAT_LOST } else { 0 },
        ..PerfEventAttr::bpf_output_ext(wakeup_events, quarter, false)
    };
    sys::perf_event_open(AttrSource::Built(&attr), cpu)
}
