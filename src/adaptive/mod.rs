//! The fast mode (adaptive wake-ups), an opt-in: `PERFBUF_ADAPTIVE=1`,
//! `PERFBUF_F_ADAPTIVE`, or `.adaptive(true)` in the Rust builder.
//!
//! With libbpf's attr (`wakeup_events = 1`) the kernel queues an irq_work
//! for every record whether or not anyone sleeps on the ring: a
//! self-IPI, which costs the producer about 6 µs per record in a VM and
//! caps a stream near 130 k records/s. In the fast mode, while a CPU's
//! rate stays high its map slot points at a second event that wakes the
//! reader only every [`BATCH_EVENTS`] records, and a timer in the epoll
//! set bounds the delay of what sits below that.
//!
//! **Where records go.** A producer freed from the per-record cost runs
//! about 15 times faster, so the caller's ring would last only as long as
//! the reader's ordinary scheduling hiccups (1 to 15 ms measured). Each
//! CPU gets, at construction, a spill ring [`SPILL_FACTOR`] times the
//! caller's (at most [`SPILL_MAX`] bytes), and its slot points from the
//! start at events writing there: one waking per record, one per batch
//! (`PERF_EVENT_IOC_SET_OUTPUT`). A caller ring of [`SPILL_MAX`] or more
//! is big enough: its batching event writes into it, and its per-record
//! event is the caller's own. Nothing is allocated later, so no poll waits
//! on a mapping.
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
//! **Streaming.** A CPU that batches (above [`policy::BATCH_ABOVE`]
//! records/s) moves to an event that wakes only at a quarter of the fast
//! ring: the timer's ticks read it meanwhile, so the reader wakes 1,250
//! times a second however fast the stream, and the producer pays no
//! irq_work per batch. The event waking every [`BATCH_EVENTS`] records is
//! used only where the streaming one could not be opened.
//!
//! **Back-pressure.** libbpf's per-record wake-ups slow the producer down;
//! without them a slow reader would lose records libbpf keeps. A batched
//! ring is drained in chunks, and goes back to per-record wake-ups in the
//! middle of a drain when the reader's backlog grows past a sixteenth of
//! the ring; also, and stays there a while, when a drain finds it half
//! full, when draining takes half the reader's time, or when the kernel
//! reports lost records in it (see [`policy`]).
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
use crate::kernel::{PERF_EVENT_IOC_ENABLE, PERF_FORMAT_LOST, PerfEventAttr, cpu};
use crate::log;
use crate::ring::PerfRing;
use crate::ring::pair::CpuRings;
use claim::Claim;
use policy::{Busy, LanePolicy, Target};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::time::Duration;

/// Records per wake-up while batched.
pub const BATCH_EVENTS: u32 = 64;
/// The spill ring's size, in caller's rings.
pub const SPILL_FACTOR: usize = 16;
/// The spill ring's largest size in bytes; a caller ring this big needs none.
pub const SPILL_MAX: usize = 4 << 20;
/// While batched, what sits below the batch is read this often, which
/// keeps its delay, tick plus the reader's wake-up, under 1 ms. Each tick
/// is a reader wake-up (about 20 us of its CPU here): at 200 k records/s,
/// 500 us ticks cost the reader 3 times the CPU per record of a raw
/// reader draining every 1 ms; 800 us, 1.7 times, with a p99 delay of
/// 0.8 ms at full rate instead of 0.5 ms.
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
    /// Wakes every [`BATCH_EVENTS`] records; owns the spill ring if any.
    batched: OwnedFd,
    /// Wakes when a quarter of the ring is full (fast streams, read on
    /// the timer's ticks); `None` if it could not be opened.
    streaming: Option<OwnedFd>,
    /// Wakes per record into the spill ring; `None` with no spill ring
    /// (the caller's event is the per-record one then).
    per_record: Option<OwnedFd>,
}

impl FastEvents {
    /// What these events failed to write so far, as the kernel counts it
    /// (`PERF_FORMAT_LOST`); an error if one of them does not count.
    fn lost(&self) -> Result<u64> {
        [Some(&self.batched), self.per_record.as_ref(), self.streaming.as_ref()]
            .into_iter()
            .flatten()
            .try_fold(0u64, |sum, fd| sys::read_lost(fd.as_fd()).map(|n| sum + n))
    }
}

#[derive(Default)]
struct Slot {
    policy: LanePolicy,
    events: Option<FastEvents>,
    /// When the slot left the spill ring, until its lost records are
    /// reconciled and it is released.
    left: Option<Moment>,
    /// What the fast events released so far failed to write, as the
    /// kernel counted it.
    retired_lost: u64,
}

/// Per-buffer fast-mode state.
pub struct Adaptive {
    slots: Vec<Slot>,
    window_start: Moment,
    /// When the slots left the caller's rings for the spill rings.
    set_up_at: Moment,
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
}

impl Adaptive {
    /// Sets up every CPU's fast events and points its slot at them; a CPU
    /// where that fails keeps the caller's event. `None` when no CPU could
    /// have them (then the buffer is libbpf's, as without the opt-in).
    pub fn setup<L: Lane>(
        lanes: &mut [L],
        map_fd: RawFd,
        epoll_fd: RawFd,
        claim: Option<Claim>,
    ) -> Option<Adaptive> {
        let mut slots = Vec::new();
        slots.try_reserve_exact(lanes.len()).ok()?;
        for (idx, lane) in lanes.iter_mut().enumerate() {
            let mut slot = Slot::default();
            match set_up_lane(lane, idx, map_fd, epoll_fd) {
                Ok(events) => {
                    if events.streaming.is_some() {
                        slot.policy.allow_streaming();
                    }
                    slot.events = Some(events);
                }
                Err(e) => {
                    log::info(format_args!("cpu #{}: no fast mode, libbpf's wake-ups: {e}", lane.cpu()));
                    slot.policy.moved(Target::Caller);
                }
            }
            slots.push(slot);
        }
        let fast = slots.iter().filter(|s| s.events.is_some()).count();
        log::info(format_args!("fast mode on {fast} of {} CPUs", slots.len()));
        if fast == 0 {
            return None;
        }
        Some(Adaptive {
            slots,
            window_start: Moment::coarse(),
            set_up_at: Moment::coarse(),
            batched: 0,
            // Set up, every slot wakes per record: none is batched.
            recount: false,
            leaving: false,
            grace_until: None,
            busy: Busy::default(),
            claim,
            owner_pid: sys::getpid(),
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
            Some(FastEvents { batched, per_record: Some(_), .. }) => Some(batched.as_fd()),
            _ => None,
        })
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
        epoll_fd: RawFd,
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
            // Writers that loaded a slot before set-up moved it to the
            // spill ring have long finished: the caller's rings, once read,
            // get nothing more while the slots stay on the spill rings.
            let settled = now.since(self.set_up_at) >= QUIET_AFTER;
            for (idx, lane) in lanes.iter_mut().enumerate() {
                if settled && self.slots[idx].policy.target() != Target::Caller {
                    lane.rings_mut().settle_main();
                }
                let rings = lane.rings();
                let lost = rings.spill().map_or(rings.main().stats().lost, |s| s.stats().lost);
                let records = rings.records_read();
                if let Some(target) = self.slots[idx].policy.on_window(records, lost, elapsed, now) {
                    let why = if target.batched() {
                        "the rate is high"
                    } else {
                        "the rate fell, or records were lost"
                    };
                    self.apply(idx, lane, target, map_fd, now, why);
                }
            }
        }
        if self.leaving {
            let mut still = false;
            for (idx, lane) in lanes.iter_mut().enumerate() {
                self.release_if_done(idx, lane, now, epoll_fd);
                still |= self.slots[idx].left.is_some();
            }
            self.leaving = still;
        }
        self.timer_after_moves(now)
    }

    /// Before draining ring `idx`: a batched ring found half full goes
    /// back to per-record wake-ups now, before the drain lets the producer
    /// fill the rest.
    #[inline(always)]
    pub fn before_drain<L: Lane>(&mut self, idx: usize, lane: &mut L, map_fd: RawFd) {
        if !self.slots[idx].policy.target().batched() {
            return;
        }
        let ring = lane.rings().current();
        if policy::over_filled(ring.pending_bytes(), ring.data_size() as u64) {
            self.pressure(idx, lane, map_fd);
        }
    }

    /// Between chunks of a drain of ring `idx` (pending bytes when the
    /// chunk began and now, in a ring of `size`): a batched ring whose
    /// reader falls behind goes back to per-record wake-ups now, in the
    /// middle of the drain, before the producer can fill the ring.
    /// `caller_event` is the ring's per-record event when it has no spill
    /// ring.
    #[inline(always)]
    pub fn between_chunks(&mut self, idx: usize, before: u64, now: u64, size: u64, to: SlotMove) {
        if self.slots[idx].policy.target().batched() && policy::falling_behind(before, now, size) {
            self.back_off(idx, to);
        }
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

    #[cold]
    fn pressure<L: Lane>(&mut self, idx: usize, lane: &mut L, map_fd: RawFd) {
        let now = Moment::coarse();
        if let Some(target) = self.slots[idx].policy.on_pressure(now) {
            self.apply(idx, lane, target, map_fd, now, "the ring is half full");
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
    /// are still ours), then records the move.
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
        let Some(events) = &slot.events else { return };
        let fd = match (target, &events.per_record) {
            (Target::Batched, _) => events.batched.as_raw_fd(),
            (Target::Streaming, _) => events.streaming.as_ref().unwrap_or(&events.batched).as_raw_fd(),
            (Target::PerRecord, Some(per_record)) => per_record.as_raw_fd(),
            (Target::PerRecord, None) | (Target::Caller, _) => lane.event().as_raw_fd(),
        };
        if let Err(e) = sys::map_update_u32(map_fd, lane.map_key(), fd as u32) {
            // The slot stays where it was, and so does the policy.
            log::debug(format_args!("cpu #{}: cannot move the slot: {e}", lane.cpu()));
            return;
        }
        let to = match target {
            Target::Batched => "batched wake-ups",
            Target::Streaming => "wake-ups at a quarter of the ring, read on ticks",
            Target::PerRecord => "per-record wake-ups",
            Target::Caller => "the caller's event, for good",
        };
        log::debug(format_args!("cpu #{}: {to} ({why}; {} records/s)", lane.cpu(), slot.policy.rate()));
        slot.policy.moved(target);
        let spilling = events.per_record.is_some();
        lane.rings_mut().set_spill_current(spilling && target != Target::Caller);
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
    fn release_if_done<L: Lane>(&mut self, idx: usize, lane: &mut L, now: Moment, epoll_fd: RawFd) {
        let Some(since) = self.slots[idx].left else { return };
        let rings = lane.rings();
        if now.since(since) < QUIET_AFTER || rings.spill().is_none_or(|s| s.pending_bytes() > 0) {
            return;
        }
        self.release(idx, lane, epoll_fd);
    }

    /// Releases the spill ring slot `idx` left, which no BPF program
    /// writes any more and which was read to its head: what it still owes
    /// goes to the reader as a lost record of our own, then the ring and
    /// its events are freed.
    pub fn release<L: Lane>(&mut self, idx: usize, lane: &mut L, epoll_fd: RawFd) {
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
        let _ = sys::epoll_del(epoll_fd, events.batched.as_raw_fd());
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

/// Opens CPU `idx`'s fast events and points its slot at the per-record one.
fn set_up_lane<L: Lane>(lane: &mut L, idx: usize, map_fd: RawFd, epoll_fd: RawFd) -> Result<FastEvents> {
    let cpu = lane.cpu();
    let caller = lane.rings().main().data_size();
    if caller >= SPILL_MAX {
        // Big enough to absorb the faster producer: batch into it. Its
        // events count their losses where the kernel can (for exact lost
        // figures: the caller's ring has more writers than its own event).
        let counted = sys::format_lost_supported();
        let batched = open_event(BATCH_EVENTS, cpu, counted)?;
        sys::perf_set_output(batched.as_fd(), lane.event())?;
        sys::perf_ioctl(batched.as_fd(), PERF_EVENT_IOC_ENABLE, 0)?;
        let streaming = open_streaming(caller, cpu, counted, lane.event());
        return Ok(FastEvents { batched, per_record: None, streaming });
    }
    if !sys::format_lost_supported() {
        return Err(crate::error::Error::from_errno(libc::EOPNOTSUPP));
    }
    let batched = open_event(BATCH_EVENTS, cpu, true)?;
    let size = caller.saturating_mul(SPILL_FACTOR).min(SPILL_MAX);
    let page = cpu::page_size();
    let mut ring = PerfRing::map(batched.as_fd(), page, size / page, true)?;
    ring.set_drain_chunk(size as u64 / policy::CHUNK_SHARE);
    sys::perf_ioctl(batched.as_fd(), PERF_EVENT_IOC_ENABLE, 0)?;
    let per_record = open_event(1, cpu, true)?;
    sys::perf_set_output(per_record.as_fd(), batched.as_fd())?;
    sys::perf_ioctl(per_record.as_fd(), PERF_EVENT_IOC_ENABLE, 0)?;
    let streaming = open_streaming(size, cpu, true, batched.as_fd());
    // The caller's ring's token: a wake-up of either drains both.
    sys::epoll_add(epoll_fd, batched.as_raw_fd(), idx as u64)?;
    if let Err(e) = sys::map_update_u32(map_fd, lane.map_key(), per_record.as_raw_fd() as u32) {
        let _ = sys::epoll_del(epoll_fd, batched.as_raw_fd());
        return Err(e);
    }
    let rings = lane.rings_mut();
    rings.set_spill(ring);
    rings.set_spill_current(true);
    Ok(FastEvents { batched, per_record: Some(per_record), streaming })
}

/// The streaming event of a CPU whose fast ring (`ring_size` bytes) is
/// `output`'s: wakes at a quarter of the ring. `None` when it cannot be
/// had (few fds to spare, say): the CPU then batches without streaming.
fn open_streaming(ring_size: usize, cpu: i32, counted: bool, output: BorrowedFd<'_>) -> Option<OwnedFd> {
    let attr = PerfEventAttr {
        read_format: if counted { PERF_FORMAT_LOST } else { 0 },
        ..PerfEventAttr::bpf_output_ext(0, (ring_size / 4).min(u32::MAX as usize) as u32, false)
    };
    let open = || {
        let fd = sys::perf_event_open(AttrSource::Built(&attr), cpu)?;
        sys::perf_set_output(fd.as_fd(), output)?;
        sys::perf_ioctl(fd.as_fd(), PERF_EVENT_IOC_ENABLE, 0)?;
        Ok::<_, crate::error::Error>(fd)
    };
    open().inspect_err(|e| log::debug(format_args!("cpu #{cpu}: no streaming event: {e}"))).ok()
}

/// A BPF output event on `cpu` waking the reader every `wakeup_events`
/// records, counting what it fails to write if `counted`.
fn open_event(wakeup_events: u32, cpu: i32, counted: bool) -> Result<OwnedFd> {
    let read_format = if counted { PERF_FORMAT_LOST } else { 0 };
    let attr = PerfEventAttr { read_format, ..PerfEventAttr::bpf_output(wakeup_events) };
    sys::perf_event_open(AttrSource::Built(&attr), cpu)
}
