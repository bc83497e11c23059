//! A BPF ring buffer read for a [`Sink`]: what a [`crate::Reader`] (and so
//! a [`crate::PerfBuffer`], and the C library's `perfbuf_new`) holds when
//! its map is a `BPF_MAP_TYPE_RINGBUF`, so that a tool reads either kind
//! of map with the same code.
//!
//! The ring is one for all CPUs: its records reach the sink with no CPU
//! (`u32::MAX` to the Rust closures, -1 to C), in the order their space
//! was reserved. The kernel counts no losses: a full ring makes the
//! program's output fail. What this reader counts lost is its own doing:
//! the records reserved between [`Channel::pause`] and [`Channel::resume`]
//! (the kernel cannot pause a ring buffer, so the reader drops them, as a
//! perf ring's paused output is dropped), reported to the lost callback
//! once the read passes them.

use super::layout::RingMemory;
use super::read::{NONE, Pause, ReadState, RingRead};
use super::{CALL_LIMIT, map_ring};
use crate::error::{Error, Result, What};
use crate::kernel::clock::Moment;
use crate::kernel::cpu;
use crate::kernel::sys;
use crate::log;
use crate::reader::batch_read::BatchBuf;
use crate::reader::config::{AttrChoice, CpuSelection, Options};
use crate::reader::health::{RATE_WINDOW, RingHealth, Snapshot, Tracker, pages_for};
use crate::reader::output_counts::{CountsMap, OutputCounts};
use crate::reader::sink::{Keyed, Records, Sink};
use crate::reader::stats::RingStats;
use crate::reader::waker::{WAKE_TAG, clear_wake};
use core::cell::Cell;
use core::sync::atomic::Ordering;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

/// The ring token in the epoll set (the waker's carries [`WAKE_TAG`]).
const RING_TOKEN: u64 = 0;

/// One ring buffer map read through its own epoll instance.
pub(crate) struct Channel {
    memory: RingMemory,
    state: ReadState,
    pause: Pause,
    wakeups: u64,
    events: [libc::epoll_event; 2],
    epoll: OwnedFd,
    /// perfbuf.bpf.h's counts of the outputs into this map, if given:
    /// a ring buffer's only losses (the refused outputs).
    counts: Option<CountsMap>,
    /// Records the caller read and dropped by its own policy.
    caller_dropped: u64,
    health: Tracker,
}

/// Refuses, with a message naming it, an option a ring buffer cannot
/// honour (the others are ignored: see [`crate::Builder`]).
pub(crate) fn check_options(opts: &Options) -> Result<()> {
    if !matches!(opts.attr, AttrChoice::Default) {
        return Err(log::invalid(
            "a BPF ring buffer has no perf events: a perf_event_attr does not apply to it",
        ));
    }
    if !matches!(opts.cpus, CpuSelection::AllOnline) {
        return Err(log::invalid(
            "a BPF ring buffer is one ring for all CPUs: it cannot be read for some CPUs only",
        ));
    }
    if opts.overwrite {
        return Err(log::invalid("a BPF ring buffer cannot be overwritable"));
    }
    Ok(())
}

/// An operation a ring buffer has nothing for: EOPNOTSUPP naming it.
pub(crate) fn not_for_ring_buffer(what: &'static str) -> Error {
    Error::new(libc::EOPNOTSUPP, What::NotForRingBuf(what))
}

impl Channel {
    /// Maps the ring buffer map `map_fd` of `max_entries` bytes and
    /// watches it with a new epoll instance.
    pub(crate) fn open(map_fd: RawFd, max_entries: u32, id: u32) -> Result<Channel> {
        let epoll = sys::epoll_create().map_err(|e| log::failed(e.with(What::EpollCreate)))?;
        let memory = map_ring(epoll.as_raw_fd(), map_fd, max_entries, RING_TOKEN)?;
        log::info(format_args!("ring buffer on map {id}: {max_entries} bytes"));
        let pause = Pause { from: Cell::new(NONE), to: Cell::new(NONE) };
        // The first rate window starts now.
        let mut health = Tracker::default();
        health.current.at = Moment::coarse();
        Ok(Channel {
            memory,
            state: ReadState::default(),
            pause,
            wakeups: 0,
            events: [libc::epoll_event { events: 0, u64: 0 }; 2],
            epoll,
            counts: None,
            caller_dropped: 0,
            health,
        })
    }

    /// Reads perfbuf.bpf.h's output counts map `counts` for the figures
    /// (see [`crate::Builder::output_counts`]).
    pub(crate) fn set_output_counts(&mut self, counts: BorrowedFd<'_>) -> Result<()> {
        self.counts = Some(CountsMap::open(counts)?);
        Ok(())
    }

    /// What perfbuf.bpf.h counted on every CPU, if given its map.
    pub(crate) fn output_counts(&self) -> Option<Result<Vec<OutputCounts>>> {
        self.counts.as_ref().map(CountsMap::read)
    }

    /// Counts `n` records the caller read and dropped by its own policy.
    pub(crate) fn count_dropped(&mut self, n: u64) {
        self.caller_dropped = self.caller_dropped.saturating_add(n);
    }

    /// Bytes waiting in the ring now.
    fn pending(&self) -> u64 {
        let pending = self.producer_pos().wrapping_sub(self.memory.consumer().load(Ordering::Acquire));
        pending.min(self.memory.size())
    }

    fn snapshot(&self, at: Moment) -> Snapshot {
        let s = &self.state.stats;
        Snapshot { at, records: s.records, bytes: s.bytes, wakeups: self.wakeups }
    }

    /// The ring's health, as a perf ring's ([`RingHealth`]'s `cpu` is -1:
    /// one ring for every CPU). Its losses are what perfbuf.bpf.h counted
    /// refused (and what a pause dropped), so sizing from evidence needs
    /// its counts.
    pub(crate) fn health(&self) -> Result<RingHealth> {
        let now = Moment::coarse();
        let (records_per_sec, bytes_per_sec, wakeups_per_sec) = self.health.rates(self.snapshot(now));
        let failed = self.refused()?.map_or(0, |(_, failed)| failed);
        let s = &self.state.stats;
        let needed =
            self.health.needed(failed + self.state.dropped, s.bytes.checked_div(s.records).unwrap_or(0));
        let pending = self.pending();
        Ok(RingHealth {
            cpu: -1,
            online: true,
            pending_bytes: pending,
            peak_pending_bytes: self.health.peak_pending.max(pending),
            data_size: self.memory.size(),
            records_per_sec,
            bytes_per_sec,
            wakeups_per_sec,
            since_last_record: self.health.last_record.map(|t| now.since(t)),
            needed_bytes: needed,
            suggested_pages: pages_for(needed, cpu::page_size()),
            replaced: 0,
        })
    }

    /// perfbuf.bpf.h's output calls and refusals over every CPU, if given
    /// its map.
    fn refused(&self) -> Result<Option<(u64, u64)>> {
        let Some(counts) = &self.counts else { return Ok(None) };
        let all = counts.read()?;
        Ok(Some(all.iter().fold((0, 0), |(calls, failed), c| (calls + c.calls, failed + c.failed))))
    }

    /// The epoll fd.
    pub(crate) fn epoll_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Waits up to `timeout_ms` (-1: forever) for records and reads them;
    /// returns 1 when the ring was read, 0 when the timeout passed. After a
    /// wake-up from another thread, fails with ECANCELED (the ring, if
    /// signalled in the same wait, read first).
    pub(crate) fn poll<S: Sink>(&mut self, handler: &mut Keyed<'_, S>, timeout_ms: i32) -> Result<usize> {
        let (ready, woken) = self.wait_events(timeout_ms)?;
        if ready {
            self.read(handler)?;
        }
        woken_fails(woken)?;
        Ok(usize::from(ready))
    }

    /// Reads the ring without waiting (at most 2^31 - 1 records); returns
    /// how many records the sink got.
    pub(crate) fn read<S: Sink>(&mut self, handler: &mut Keyed<'_, S>) -> Result<usize> {
        let read = self.read_begins(CALL_LIMIT);
        let flow = handler.sink.take(Records::ring_buffer(read)).into_flow();
        if let Some(len) = self.state.too_long.take() {
            return Err(log::failed(Error::new(libc::E2BIG, What::RingBufRecordTooLong(len))));
        }
        crate::reader::halted(flow)?;
        Ok(self.state.read as usize)
    }

    /// What every read does first: the health's figures; then the read.
    fn read_begins(&mut self, limit: u64) -> RingRead<'_> {
        let now = Moment::coarse();
        self.health.drain_begins(self.pending(), now);
        if now.since(self.health.current.at) >= RATE_WINDOW {
            let snap = self.snapshot(now);
            self.health.rotate(snap);
        }
        RingRead { memory: &self.memory, state: &mut self.state, pause: &self.pause, limit }
    }

    /// Reads into `out` the records that fit whole (see
    /// [`crate::reader::batch_read`]); one entry stays free for the report
    /// of a pause window's losses. Returns the entries appended.
    pub(crate) fn read_batch(&mut self, out: &mut BatchBuf<'_>) -> Result<usize> {
        if out.entries_left() < 2 {
            return Err(log::invalid("a batch read of a ring buffer with fewer than 2 entries free"));
        }
        let before = out.len();
        let (mut bytes, mut entries) = (0usize, 1usize);
        let (fit, bad) = self.memory.count_fitting(|len| {
            let fits = out.fits(len, bytes, entries);
            bytes += (len + 7) & !7;
            entries += 1;
            fits
        });
        if fit == 0 && !bad {
            return match out.too_small() {
                Some(e) => Err(e),
                None => Ok(0),
            };
        }
        let out = core::cell::RefCell::new(out);
        let flow = self.read_begins(fit).samples(
            |data| out.borrow_mut().push_sample(crate::NO_CPU, data),
            |n| out.borrow_mut().push_lost(crate::NO_CPU, n),
        );
        let out = out.into_inner();
        self.count_dropped(out.take_overflowed());
        crate::reader::halted(flow)?;
        Ok(out.len() - before)
    }

    /// Waits up to `timeout_ms` (-1: forever) for the ring to signal;
    /// returns whether it did. ECANCELED after a wake-up from another
    /// thread.
    pub(crate) fn wait(&mut self, timeout_ms: i32) -> Result<bool> {
        let (ready, woken) = self.wait_events(timeout_ms)?;
        woken_fails(woken)?;
        Ok(ready)
    }

    /// One epoll wait: whether the ring signalled, and the wake-up token
    /// if another thread woke the wait.
    fn wait_events(&mut self, timeout_ms: i32) -> Result<(bool, Option<u64>)> {
        let cnt = sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, 2, timeout_ms)?;
        let (mut ready, mut woken) = (false, None);
        for i in 0..cnt {
            let token = self.events[i].u64; // a copy: the struct is packed
            if token & WAKE_TAG != 0 {
                woken = Some(token);
            } else {
                self.wakeups += 1;
                ready = true;
            }
        }
        Ok((ready, woken))
    }

    /// The final drain: reads the ring, reporting what was dropped while
    /// paused once the read has passed it. Returns the number reported
    /// lost by this read.
    pub(crate) fn drain_final<S: Sink>(&mut self, handler: &mut Keyed<'_, S>) -> Result<u64> {
        let before = self.state.reported;
        self.read(handler)?;
        Ok(self.state.reported - before)
    }

    /// From now on, records reserved are dropped (counted lost) instead of
    /// delivered, until [`Self::resume`]; those reserved before are still
    /// delivered. A pause after a resume whose window the reads have not
    /// passed yet reopens that window (what was reserved in between is
    /// dropped too, and counted).
    pub(crate) fn pause(&self) {
        if self.pause.from.get() == NONE {
            self.pause.from.set(self.producer_pos());
        }
        self.pause.to.set(NONE);
    }

    /// Records reserved from now on are delivered again.
    pub(crate) fn resume(&self) {
        if self.pause.from.get() != NONE && self.pause.to.get() == NONE {
            self.pause.to.set(self.producer_pos());
        }
    }

    fn producer_pos(&self) -> u64 {
        self.memory.producer().load(Ordering::Acquire)
    }

    /// The ring's figures, as a perf ring's (`cpu` -1).
    /// The ring's figures: every record is a sample; `lost` is what a
    /// pause dropped; with perfbuf.bpf.h's counts, `produced` and
    /// `output_failed` are every CPU's (a full ring refuses the output,
    /// and the kernel counts nothing).
    pub(crate) fn figures(&self) -> Result<RingStats> {
        let s = &self.state;
        let counts = self.refused()?;
        Ok(RingStats {
            cpu: -1,
            produced: counts.map(|(calls, _)| calls),
            samples: s.stats.records,
            dropped: self.caller_dropped,
            output_failed: counts.map_or(0, |(_, failed)| failed),
            records: s.stats.records,
            bytes: s.stats.bytes,
            lost: s.dropped,
            lost_unreported: s.dropped - s.reported,
            wakeups: self.wakeups,
            pending_bytes: self.pending(),
            data_size: self.memory.size(),
            resyncs: s.stats.resyncs,
            skipped_bytes: s.stats.skipped_bytes,
            ..RingStats::default()
        })
    }
}

/// ECANCELED after a wake-up from another thread (its token cleared).
fn woken_fails(woken: Option<u64>) -> Result<()> {
    match woken {
        Some(token) => {
            clear_wake(token);
            Err(Error::from_errno(libc::ECANCELED))
        }
        None => Ok(()),
    }
}
