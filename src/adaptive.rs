//! Adaptive wake-ups under libbpf's default attr.
//!
//! With `wakeup_events = 1` the kernel queues an irq_work for every record,
//! whether or not anyone sleeps on the ring: a self-IPI, which costs the
//! producer about 6 µs per record on these VMs and caps a stream near
//! 110 k records/s. When a ring's rate stays high, its map slot is pointed
//! at a second event that wakes the reader only every [`BATCH_EVENTS`]
//! records; a timer in the epoll set bounds the delay of what sits below
//! that (each poll reads every batched ring and pushes the next tick back,
//! so a busy stream gets no ticks). When the rate falls, the slot goes back
//! to an event that wakes per record and the timer stops, so an idle reader
//! gets no ticks.
//!
//! **Spill rings.** A producer freed from the per-record cost runs about 15
//! times faster, so the caller's ring alone would last only as long as the
//! reader's usual scheduling hiccups (1 to 15 ms measured here), where a
//! per-record stream of libbpf lasts 15 times longer. So the batching event
//! writes into a ring of its own, [`SPILL_FACTOR`] times the caller's (at
//! most [`SPILL_MAX`] bytes), mapped on first use; once a CPU has spilled,
//! its slow phases use a per-record event writing into that same ring
//! (`PERF_EVENT_IOC_SET_OUTPUT`). The reader reads the ring the slot left
//! before the one it points at, so records keep their order.
//!
//! **Lost records stay exact.** The kernel reports a ring's lost records
//! only with the next record it writes there, and a ring the slot has left
//! may never get one. So every event is opened with `PERF_FORMAT_LOST`,
//! whose `read()` counts what the event failed to write, reported or not:
//! a slot leaves the caller's ring only when those counts equal what the
//! ring's `PERF_RECORD_LOST` records said; and once a ring it left is quiet
//! ([`QUIET_AFTER`], no writer can still hold the old slot) and read, any
//! difference is delivered as a lost record of our own. Without
//! `PERF_FORMAT_LOST` (Linux < 6.0) there are no spill rings.
//!
//! Records stay in the caller's ring, batched there through
//! `PERF_EVENT_IOC_SET_OUTPUT`, when the spill ring cannot be had
//! (memory-lock limits, say) or the caller reads the caller's rings itself
//! (`perf_buffer__buffer`, the record-level API): then a spilled slot goes
//! back to the caller's event, and what the spill ring holds is delivered
//! by the next poll or consume. Ordered reading turns this mode off for
//! good ([`Adaptive::abandon`]): its rounds end no read of every ring, so
//! no decision would ever be taken again.
//!
//! The caller's fds are untouched (`perf_buffer__buffer_fd` is still the
//! per-record event), and pausing or freeing covers the spill rings too.
//! Decisions are taken in `perf_buffer__poll`, `perf_buffer__consume`,
//! `perfbuf_consume_batch` and `perfbuf_ring_publish`, the calls that end
//! a read of every ring; a caller that only ever uses
//! `perf_buffer__consume_buffer` keeps per-record wake-ups.

use crate::buffer::CpuBuf;
use crate::clock::Coarse;
use crate::cpu;
use crate::error::Result;
use crate::fallible;
use crate::kernel::{PERF_FORMAT_LOST, PerfEventAttr};
use crate::log;
use crate::ring::PerfRing;
use crate::sys::{self, AttrSource, PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_OUTPUT};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Records per wake-up while batched.
pub const BATCH_EVENTS: u32 = 64;
/// The spill ring's size, in caller's rings.
pub const SPILL_FACTOR: usize = 16;
/// The spill ring's largest size in bytes (unless the caller's is larger).
pub const SPILL_MAX: usize = 4 << 20;
/// While batched, what sits below the batch is read this often, which keeps
/// its delay, tick plus the reader's wake-up, under 1 ms.
pub const TICK: Duration = Duration::from_micros(500);
/// How long a rate is measured before a ring changes mode.
const WINDOW: Duration = Duration::from_millis(50);
/// Records/s above which a ring is batched. Below it, per-record wake-ups
/// cost little and keep libbpf's latency.
const BATCH_ABOVE: u64 = 20_000;
/// Records/s below which a batched ring goes back to per-record wake-ups
/// (lower than [`BATCH_ABOVE`] so a rate near the line does not flap).
const UNBATCH_BELOW: u64 = 5_000;
/// How long after its map slot moved away a ring is taken to get no more
/// writes: a BPF program that loaded the old slot has long finished.
pub const QUIET_AFTER: Duration = Duration::from_millis(100);

/// What the buffer must do with its timer after a decision.
#[derive(Debug, PartialEq, Eq)]
pub enum Timer {
    /// Leave it as it is.
    Keep,
    /// Start ticking every [`TICK`].
    Arm,
    /// Stop ticking.
    Disarm,
}

/// One of a CPU's rings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The caller's ring, the one `perf_buffer__buffer` shows.
    Caller,
    /// The spill ring.
    Spill,
}

/// Where a CPU's map slot points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Target {
    /// The caller's event: the caller's ring, a wake-up per record.
    #[default]
    Caller,
    /// A batching event writing into the caller's ring.
    CallerBatched,
    /// A batching event writing into its own spill ring.
    Spill,
    /// A per-record event writing into the spill ring.
    SpillPerRecord,
}

impl Target {
    fn batched(self) -> bool {
        matches!(self, Target::CallerBatched | Target::Spill)
    }

    fn ring(self) -> Which {
        match self {
            Target::Caller | Target::CallerBatched => Which::Caller,
            Target::Spill | Target::SpillPerRecord => Which::Spill,
        }
    }
}

/// The events writing into a spill ring.
struct SpillEvents {
    /// The batching event; the spill ring is its mapping.
    batched: OwnedFd,
    /// The per-record event, opened when the rate first falls.
    per_record: Option<OwnedFd>,
}

#[derive(Default)]
struct Slot {
    /// The batching event writing into the caller's ring, opened on first
    /// use and kept for reuse.
    caller_batched: Option<OwnedFd>,
    spill: Option<SpillEvents>,
    target: Target,
    /// Setting up batching failed once: never retry.
    unavailable: bool,
    /// Setting up the spill ring failed once: never retry.
    no_spill: bool,
    /// Records read when the window started.
    mark: u64,
    /// Times this slot switched to batching.
    switches: u64,
    /// The ring the slot left last and when, until its lost records are
    /// reconciled.
    left: Option<(Which, Coarse)>,
}

/// Per-buffer adaptive state.
pub struct Adaptive {
    slots: Vec<Slot>,
    window_start: Coarse,
    /// Rings currently batched.
    batched: usize,
    /// After the last ring leaves batching, tick until then, so a record
    /// the batching event was writing during the switch is still read.
    /// On the fine clock: it is two ticks, shorter than a jiffy.
    grace_until: Option<Instant>,
    /// Slots may move to spill rings: every event counts its lost records
    /// and no one reads the caller's rings directly.
    spill_allowed: bool,
    /// A slot failed to leave its spill ring after spilling was forbidden:
    /// retried at the next read.
    leave_failed: bool,
}

impl Adaptive {
    /// State for `rings` rings, all waking per record. `counted`: the
    /// caller's events were opened with `PERF_FORMAT_LOST`.
    pub fn new(rings: usize, counted: bool) -> Result<Adaptive> {
        let slots = fallible::collect(rings, core::iter::repeat_with(Slot::default))?;
        Ok(Adaptive {
            slots,
            window_start: Coarse::now(),
            batched: 0,
            grace_until: None,
            spill_allowed: counted,
            leave_failed: false,
        })
    }

    /// Whether any ring is batched now.
    pub fn any_batched(&self) -> bool {
        self.batched > 0
    }

    /// Whether ring `idx` is batched now, and how many times it switched
    /// to batching.
    pub fn state(&self, idx: usize) -> (bool, u64) {
        self.slots.get(idx).map_or((false, 0), |s| (s.target.batched(), s.switches))
    }

    /// Called after every ring was read: looks at the rates once a window
    /// has passed, moves rings between modes, reconciles the lost records
    /// of rings left a while ago, and says what to do with the timer.
    /// Cheap when called often: arithmetic until a window has passed.
    pub fn observe(&mut self, now: Coarse, bufs: &mut [CpuBuf], map_fd: RawFd, epoll: &OwnedFd) -> Timer {
        if now < self.window_start + WINDOW {
            return self.grace_over();
        }
        let elapsed = now.since(self.window_start);
        let micros = elapsed.as_micros().max(1) as u64;
        for (idx, (slot, buf)) in self.slots.iter_mut().zip(bufs).enumerate() {
            let records = buf.records_read();
            let rate = records.wrapping_sub(slot.mark).saturating_mul(1_000_000) / micros;
            slot.mark = records;
            slot.decide(rate, buf, idx, map_fd, epoll, self.spill_allowed, now);
            slot.reconcile(buf, now);
        }
        let was_batched = self.recount_batched();
        self.window_start = now;
        if self.batched > 0 {
            self.grace_until = None;
            return if was_batched == 0 { Timer::Arm } else { Timer::Keep };
        }
        if was_batched > 0 {
            return Timer::Keep; // the grace period has just begun
        }
        self.grace_over()
    }

    /// Points every slot back at its per-record event, for good.
    pub fn abandon(&mut self, bufs: &mut [CpuBuf], map_fd: RawFd) {
        for (slot, buf) in self.slots.iter_mut().zip(bufs) {
            if slot.target != Target::Caller {
                let _ = slot.point(Target::Caller, buf, map_fd);
            }
            slot.unavailable = true;
        }
        self.batched = 0;
    }

    /// From now on records stay in the caller's rings: someone reads them
    /// there. Spilled slots go back to the caller's event (and batch again,
    /// into the caller's ring, while still busy); the spill rings become
    /// rings left behind, read by the next poll or consume.
    /// Cheap once done: retried only while a move back failed.
    pub fn forbid_spill(&mut self, bufs: &mut [CpuBuf], map_fd: RawFd) {
        if !self.spill_allowed && !self.leave_failed {
            return;
        }
        (self.spill_allowed, self.leave_failed) = (false, false);
        let now = Coarse::now();
        for (slot, buf) in self.slots.iter_mut().zip(bufs) {
            if slot.target.ring() == Which::Spill {
                match slot.point(Target::Caller, buf, map_fd) {
                    // The caller's ring is written again: the kernel reports
                    // what it may still owe there itself.
                    Ok(()) => slot.left = Some((Which::Spill, now)),
                    Err(e) => {
                        log::warn(format_args!("cpu #{}: cannot leave the spill ring: {e}", buf.cpu()));
                        self.leave_failed = true;
                    }
                }
            }
        }
        self.recount_batched();
    }

    /// The spill rings' batching events: pausing one pauses its ring for
    /// every event writing there.
    pub fn spill_fds(&self) -> impl Iterator<Item = &OwnedFd> {
        self.slots.iter().filter_map(|s| s.spill.as_ref().map(|e| &e.batched))
    }

    /// Counts the batched rings after slots moved; returns the count
    /// before. When the last batched ring has left batching, wherever it
    /// moved, the timer ticks on for two ticks more, then stops.
    fn recount_batched(&mut self) -> usize {
        let was =
            core::mem::replace(&mut self.batched, self.slots.iter().filter(|s| s.target.batched()).count());
        if was > 0 && self.batched == 0 {
            self.grace_until = Some(Instant::now() + 2 * TICK);
        }
        was
    }

    fn grace_over(&mut self) -> Timer {
        match self.grace_until {
            Some(t) if self.batched == 0 && Instant::now() >= t => {
                self.grace_until = None;
                Timer::Disarm
            }
            _ => Timer::Keep,
        }
    }
}

impl Slot {
    /// Moves the slot for a window's `rate`.
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &mut self,
        rate: u64,
        buf: &mut CpuBuf,
        idx: usize,
        map_fd: RawFd,
        epoll: &OwnedFd,
        spill_allowed: bool,
        now: Coarse,
    ) {
        let cpu = buf.cpu();
        let result = match self.target {
            Target::Caller | Target::CallerBatched if rate >= BATCH_ABOVE => {
                if spill_allowed && !self.no_spill {
                    let was = self.target;
                    match self.spill(buf, idx, map_fd, epoll) {
                        Ok(true) => {
                            self.switches += u64::from(was == Target::Caller);
                            self.left = Some((Which::Caller, now));
                            return;
                        }
                        // The caller's ring owes lost records, which the
                        // kernel reports with its next record there: batch
                        // into it meanwhile, and try again next window.
                        Ok(false) => {}
                        Err(e) => {
                            log::debug(format_args!("cpu #{cpu}: no spill ring: {e}"));
                            self.no_spill = true;
                        }
                    }
                }
                if self.target == Target::CallerBatched || self.unavailable {
                    return;
                }
                let r = self.point(Target::CallerBatched, buf, map_fd);
                if let Err(e) = &r {
                    log::debug(format_args!("cpu #{cpu}: batched wake-ups unavailable: {e}"));
                    self.unavailable = true;
                    return;
                }
                self.switches += 1;
                r
            }
            Target::SpillPerRecord if rate >= BATCH_ABOVE => {
                self.switches += 1;
                self.point(Target::Spill, buf, map_fd)
            }
            // On failure the slot stays batched and the timer keeps
            // bounding the delay.
            Target::CallerBatched if rate < UNBATCH_BELOW => self.point(Target::Caller, buf, map_fd),
            Target::Spill if rate < UNBATCH_BELOW => self.point(Target::SpillPerRecord, buf, map_fd),
            _ => Ok(()),
        };
        if let Err(e) = result {
            log::debug(format_args!("cpu #{cpu}: cannot change wake-ups: {e}"));
        }
    }

    /// Points the slot at the spill ring, set up first if needed, when
    /// the caller's ring owes no lost records (`Ok(false)` when it does).
    fn spill(&mut self, buf: &mut CpuBuf, idx: usize, map_fd: RawFd, epoll: &OwnedFd) -> Result<bool> {
        if self.unreported(Which::Caller, buf)? > 0 {
            return Ok(false);
        }
        if self.spill.is_none() {
            let fd = open_counted(BATCH_EVENTS, buf.cpu())?;
            let caller = buf.ring().data_size();
            let size = caller.saturating_mul(SPILL_FACTOR).min(SPILL_MAX).max(caller);
            let page = cpu::page_size();
            let ring = PerfRing::map(fd.as_raw_fd(), page, size / page, true)?;
            sys::perf_ioctl(&fd, PERF_EVENT_IOC_ENABLE, 0)?;
            // The caller's ring's token: a wake-up of either drains both.
            sys::epoll_add(epoll, fd.as_raw_fd(), idx as u64)?;
            buf.set_spill(ring);
            self.spill = Some(SpillEvents { batched: fd, per_record: None });
        }
        self.point(Target::Spill, buf, map_fd)?;
        Ok(true)
    }

    /// Points the map slot at the event for `target`, opening it if needed.
    fn point(&mut self, target: Target, buf: &mut CpuBuf, map_fd: RawFd) -> Result<()> {
        let fd = match target {
            Target::Caller => buf.fd(),
            Target::CallerBatched => match &self.caller_batched {
                Some(fd) => fd.as_raw_fd(),
                None => {
                    let fd = open_counted(BATCH_EVENTS, buf.cpu())?;
                    redirect(&fd, buf.fd())?;
                    self.caller_batched.insert(fd).as_raw_fd()
                }
            },
            Target::Spill | Target::SpillPerRecord => {
                let Some(spill) = &mut self.spill else { return Err(crate::error::Errno::INVAL) };
                match (target, &spill.per_record) {
                    (Target::Spill, _) => spill.batched.as_raw_fd(),
                    (_, Some(fd)) => fd.as_raw_fd(),
                    (_, None) => {
                        let fd = open_counted(1, buf.cpu())?;
                        redirect(&fd, spill.batched.as_raw_fd())?;
                        spill.per_record.insert(fd).as_raw_fd()
                    }
                }
            }
        };
        sys::map_update_u32(map_fd, buf.map_key() as u32, fd as u32)?;
        self.target = target;
        buf.set_spill_current(target.ring() == Which::Spill);
        Ok(())
    }

    /// Records the events writing into ring `which` failed to write that
    /// its `PERF_RECORD_LOST` records have not reported yet.
    fn unreported(&self, which: Which, buf: &CpuBuf) -> Result<u64> {
        let writers = match (which, &self.spill) {
            (Which::Caller, _) => [Some(buf.event()), self.caller_batched.as_ref()],
            (Which::Spill, Some(s)) => [Some(&s.batched), s.per_record.as_ref()],
            (Which::Spill, None) => [None, None],
        };
        let mut failed = 0;
        for fd in writers.into_iter().flatten() {
            failed += sys::read_lost(fd)?;
        }
        Ok(failed.saturating_sub(ring_of(buf, which).map_or(0, |r| r.stats().lost)))
    }

    /// Once the ring the slot left is quiet and read, hands what it still
    /// owes to the reader as a lost record of our own.
    fn reconcile(&mut self, buf: &mut CpuBuf, now: Coarse) {
        let Some((which, since)) = self.left else { return };
        if now.since(since) < QUIET_AFTER || ring_of(buf, which).is_some_and(|r| r.pending_bytes() > 0) {
            return;
        }
        self.left = None;
        match self.unreported(which, buf) {
            Ok(0) => {}
            Ok(n) => buf.owe_lost(n),
            Err(e) => {
                log::warn(format_args!("cpu #{}: lost records of a ring left behind unknown: {e}", buf.cpu()))
            }
        }
    }
}

/// Ring `which` of `buf`, if it has one.
fn ring_of(buf: &CpuBuf, which: Which) -> Option<&PerfRing> {
    match which {
        Which::Caller => Some(buf.ring()),
        Which::Spill => buf.spill_ring(),
    }
}

/// A BPF output event on `cpu` waking the reader every `wakeup_events`
/// records, counting its lost records where the kernel can.
fn open_counted(wakeup_events: u32, cpu: i32) -> Result<OwnedFd> {
    let read_format = if sys::format_lost_supported() { PERF_FORMAT_LOST } else { 0 };
    let attr = PerfEventAttr { read_format, ..PerfEventAttr::bpf_output(wakeup_events) };
    sys::perf_event_open(AttrSource::Built(&attr), cpu)
}

/// Sends `fd`'s records into the ring of `target` and enables it.
fn redirect(fd: &OwnedFd, target: RawFd) -> Result<()> {
    sys::perf_ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, target as libc::c_ulong)?;
    sys::perf_ioctl(fd, PERF_EVENT_IOC_ENABLE, 0)
}
