//! Adaptive wake-ups under libbpf's default attr.
//!
//! With `wakeup_events = 1` the kernel queues an irq_work for every record,
//! whether or not anyone sleeps on the ring: a self-IPI, which costs the
//! producer about 6 µs per record on these VMs and caps a stream near
//! 110 k records/s. When a ring's rate stays high, its map slot is pointed
//! at a second event that writes into the same ring
//! (`PERF_EVENT_IOC_SET_OUTPUT`) but wakes the reader only every
//! [`BATCH_EVENTS`] records; a timer in the epoll set bounds the delay of
//! what sits below that (each poll reads every batched ring and pushes the
//! next tick back, so a busy stream gets no ticks). When the rate falls,
//! the slot goes back to the
//! per-record event and the timer stops, so an idle reader gets no ticks.
//!
//! Records keep their order (one ring per CPU, whichever event writes), the
//! caller's fds are untouched (`perf_buffer__buffer_fd` is still the
//! per-record event), and pausing or freeing works on the shared ring.
//! Decisions are taken in `perf_buffer__poll`, `perf_buffer__consume`,
//! `perfbuf_consume_batch` and `perfbuf_ring_publish`, the calls that end
//! a read of every ring; a caller that only ever uses
//! `perf_buffer__consume_buffer` keeps per-record wake-ups.

use crate::buffer::CpuBuf;
use crate::error::Result;
use crate::fallible;
use crate::kernel::PerfEventAttr;
use crate::log;
use crate::sys::{self, AttrSource, PERF_EVENT_IOC_ENABLE, PERF_EVENT_IOC_SET_OUTPUT};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Records per wake-up while batched.
pub const BATCH_EVENTS: u32 = 64;
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

#[derive(Default)]
struct Slot {
    /// The batching event, opened on first use and kept for reuse.
    batched: Option<OwnedFd>,
    /// The map slot currently points at `batched`.
    on: bool,
    /// Setting up the batching event failed once: never retry.
    unavailable: bool,
    /// Records read when the window started.
    mark: u64,
    /// Times this slot switched to batching.
    switches: u64,
}

/// Per-buffer adaptive state.
pub struct Adaptive {
    slots: Vec<Slot>,
    window_start: Instant,
    /// Rings currently batched.
    batched: usize,
    /// After the last ring leaves batching, tick until then, so a record
    /// the batching event was writing during the switch is still read.
    grace_until: Option<Instant>,
}

impl Adaptive {
    /// State for `rings` rings, all waking per record.
    pub fn new(rings: usize) -> Result<Adaptive> {
        let slots = fallible::collect(rings, core::iter::repeat_with(Slot::default))?;
        Ok(Adaptive { slots, window_start: Instant::now(), batched: 0, grace_until: None })
    }

    /// Whether any ring is batched now.
    pub fn any_batched(&self) -> bool {
        self.batched > 0
    }

    /// Whether ring `idx` is batched now, and how many times it switched
    /// to batching.
    pub fn state(&self, idx: usize) -> (bool, u64) {
        self.slots.get(idx).map_or((false, 0), |s| (s.on, s.switches))
    }

    /// Called after every ring was read: looks at the rates once a window
    /// has passed, moves rings between modes, and says what to do with the
    /// timer. Cheap when called often: arithmetic until a window has passed.
    pub fn observe(&mut self, now: Instant, bufs: &[CpuBuf], map_fd: RawFd) -> Timer {
        let elapsed = now.duration_since(self.window_start);
        if elapsed < WINDOW {
            return self.grace_over(now);
        }
        let micros = elapsed.as_micros().max(1) as u64;
        let was_batched = self.batched;
        for (slot, buf) in self.slots.iter_mut().zip(bufs) {
            let records = buf.ring().stats().records;
            let rate = records.wrapping_sub(slot.mark).saturating_mul(1_000_000) / micros;
            slot.mark = records;
            if !slot.on && !slot.unavailable && rate >= BATCH_ABOVE {
                if let Err(e) = slot.batch(buf, map_fd) {
                    log::debug(format_args!("cpu #{}: batched wake-ups unavailable: {e}", buf.cpu()));
                    slot.unavailable = true;
                    continue;
                }
                self.batched += 1;
                slot.switches += 1;
            } else if slot.on && rate < UNBATCH_BELOW {
                // Back to the event that wakes per record. On failure the
                // slot stays batched and the timer keeps bounding the delay.
                if sys::map_update_u32(map_fd, buf.map_key() as u32, buf.fd() as u32).is_ok() {
                    slot.on = false;
                    self.batched -= 1;
                }
            }
        }
        self.window_start = now;
        if self.batched > 0 {
            self.grace_until = None;
            return if was_batched == 0 { Timer::Arm } else { Timer::Keep };
        }
        if was_batched > 0 {
            self.grace_until = Some(now + 2 * TICK);
            return Timer::Keep;
        }
        self.grace_over(now)
    }

    /// Points every batched slot back at its per-record event, for good.
    pub fn abandon(&mut self, bufs: &[CpuBuf], map_fd: RawFd) {
        for (slot, buf) in self.slots.iter_mut().zip(bufs) {
            if slot.on {
                let _ = sys::map_update_u32(map_fd, buf.map_key() as u32, buf.fd() as u32);
                slot.on = false;
            }
            slot.unavailable = true;
        }
        self.batched = 0;
    }

    fn grace_over(&mut self, now: Instant) -> Timer {
        match self.grace_until {
            Some(t) if now >= t && self.batched == 0 => {
                self.grace_until = None;
                Timer::Disarm
            }
            _ => Timer::Keep,
        }
    }
}

impl Slot {
    /// Points the map slot of `buf` at a batching event writing into the
    /// same ring, opening it first if needed.
    fn batch(&mut self, buf: &CpuBuf, map_fd: RawFd) -> Result<()> {
        let fd = match &self.batched {
            Some(fd) => fd,
            None => {
                let attr = PerfEventAttr::bpf_output(BATCH_EVENTS);
                let fd = sys::perf_event_open(AttrSource::Built(&attr), buf.cpu())?;
                sys::perf_ioctl(&fd, PERF_EVENT_IOC_SET_OUTPUT, buf.fd() as libc::c_ulong)?;
                sys::perf_ioctl(&fd, PERF_EVENT_IOC_ENABLE, 0)?;
                self.batched.insert(fd)
            }
        };
        sys::map_update_u32(map_fd, buf.map_key() as u32, fd.as_raw_fd() as u32)?;
        self.on = true;
        Ok(())
    }
}
