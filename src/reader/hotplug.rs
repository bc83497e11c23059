//! CPUs that come and go while a reader runs (perfbuf's own API; behind
//! libbpf's names only on request, since libbpf reads the CPUs online at
//! creation, for good).
//!
//! What the kernel does (measured on Linux 6.18): a BPF output on a CPU
//! whose slot is empty fails with `-ENOENT`, so a CPU that comes online
//! after the reader was built is read only once it has an event, ring and
//! slot of its own. A CPU that goes offline leaves its event dead: what its
//! ring holds stays readable, but after the CPU comes back every output
//! there fails with `-EOPNOTSUPP` (the event is never put back on the CPU;
//! `PERF_EVENT_IOC_ENABLE` returns 0 and changes nothing), while a fresh
//! event in the slot works at once. So the reader drains a ring whose CPU
//! went offline and keeps it, and when the CPU is back replaces its event
//! and ring; outputs refused in between are counted only by perfbuf.bpf.h
//! (`RingStats::output_failed`).
//!
//! The kernel announces each change in a uevent (see
//! [`crate::kernel::uevent`]), which wakes the reader within the poll it
//! is waiting in; where no uevent can be had, a timer compares the online
//! mask every [`CHECK_EVERY`]. Polls also compare it once a second, in
//! case a uevent was lost.

use super::cpu_buf::{CpuBuf, Successor};
use super::deliver::Handler;
use super::lost::KernelLost;
use super::ticker::Ticker;
use super::{OwnedRing, RingSet};
use crate::error::{Error, Result, What};
use crate::kernel::clock::Moment;
use crate::kernel::sys::{self, AttrSource};
use crate::kernel::uevent;
use crate::kernel::{PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_ENABLE, PERF_FORMAT_LOST, PerfEventAttr, cpu};
use crate::log;
use crate::ring::PerfRing;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::Duration;

/// epoll token of the uevent socket or the fallback timer.
pub const HOTPLUG_TOKEN: u64 = 1 << 61;
/// Without uevents, the online mask is compared this often.
pub const CHECK_EVERY: Duration = Duration::from_millis(500);
/// Polls compare the online mask at most this often (a lost uevent).
pub const RECHECK_EVERY: Duration = Duration::from_secs(1);
/// Reads outside a poll look at the uevent socket at most this often.
pub const SOCKET_EVERY: Duration = Duration::from_millis(4);

/// Where the ring of a CPU that comes online comes from.
pub enum Opener {
    /// The reader's own BPF output event (a perf buffer), put in the
    /// map's slot for the CPU.
    Event { attr: PerfEventAttr, pages: usize, overwrite: bool },
    /// Whoever opened the reader's rings (an event set).
    Source(Box<dyn RingSource>),
}

/// The rings of CPUs that come and go, for a reader over rings it did not
/// open (an event set's).
pub trait RingSource: Send {
    /// `cpu`'s ring, with every event that writes there opened and enabled
    /// as the others are. Asked again for a CPU that came back: the
    /// events it had before are dead.
    fn open_cpu(&mut self, cpu: i32) -> Result<OwnedRing>;

    /// `cpu` went offline (its events are dead from now on).
    fn cpu_gone(&mut self, _cpu: i32) {}
}

/// What a reader needs to give a CPU that comes online its ring.
pub struct Hotplug {
    opener: Opener,
    /// The CPUs read whenever they are online (map key = CPU id).
    wanted: Vec<i32>,
    /// The kernel's CPU uevents, or else a timer.
    socket: Option<OwnedFd>,
    ticker: Option<Ticker>,
    checked_at: Moment,
    /// When a read outside a poll last looked at the socket.
    socket_at: Moment,
}

impl Hotplug {
    /// Watches CPU changes for a reader whose epoll is `epoll`: a uevent
    /// socket, or a timer where none can be had.
    pub fn new(epoll: i32, opener: Opener, wanted: Vec<i32>) -> Result<Hotplug> {
        let (socket, ticker) = match uevent::cpu_socket() {
            Ok(fd) => {
                sys::epoll_add(epoll, fd.as_raw_fd(), HOTPLUG_TOKEN)?;
                (Some(fd), None)
            }
            Err(e) => {
                log::debug(format_args!(
                    "no CPU uevents ({e}): the online CPUs are compared every {CHECK_EVERY:?}"
                ));
                (None, Some(Ticker::with_token(epoll, CHECK_EVERY, HOTPLUG_TOKEN)?))
            }
        };
        let now = Moment::coarse();
        Ok(Hotplug { opener, wanted, socket, ticker, checked_at: now, socket_at: now })
    }

    /// Whether the kernel's uevents tell of changes (else a timer does).
    #[cfg(test)]
    pub fn has_uevents(&self) -> bool {
        self.socket.is_some()
    }
}

impl<H: Handler> RingSet<H> {
    /// The uevent socket or the timer woke a wait: acts on what changed.
    pub(super) fn serve_hotplug(&mut self) {
        let Some(h) = &mut self.hotplug else { return };
        if let Some(t) = &mut h.ticker {
            t.read(Moment::now());
        }
        let changes = match &h.socket {
            Some(fd) => uevent::read_cpu_changes(fd.as_fd()),
            None => Err(Error::from_errno(libc::ENODATA)),
        };
        match changes {
            Ok(changes) => {
                for (cpu, online) in changes {
                    self.cpu_changed(cpu, online);
                }
            }
            // Missed uevents (ENOBUFS), or no socket: the mask says.
            Err(_) => self.compare_online(),
        }
    }

    /// From polls and consumes: compares the online mask once a second, in
    /// case a uevent was lost (one clock comparison otherwise).
    #[inline(always)]
    pub(super) fn recheck_cpus(&mut self) {
        if let Some(h) = &self.hotplug
            && self.clock.since(h.checked_at) >= RECHECK_EVERY
        {
            self.compare_online();
        }
    }

    /// From reads outside a poll (a caller's own loop on the epoll fd,
    /// which a pending uevent keeps readable): reads the uevent socket, at
    /// most every [`SOCKET_EVERY`].
    pub(super) fn recheck_socket(&mut self) {
        if let Some(h) = &mut self.hotplug
            && h.socket.is_some()
            && self.clock.since(h.socket_at) >= SOCKET_EVERY
        {
            h.socket_at = self.clock;
            self.serve_hotplug();
        }
    }

    /// Acts on every difference between the online mask and the rings.
    fn compare_online(&mut self) {
        let Some(h) = &mut self.hotplug else { return };
        h.checked_at = Moment::coarse();
        let mask = match cpu::online_mask() {
            Ok(m) => m,
            Err(e) => {
                log::debug(format_args!("cannot read the online CPUs: {e}"));
                return;
            }
        };
        let wanted = h.wanted.clone();
        for cpu in wanted {
            let online = usize::try_from(cpu).ok().and_then(|c| mask.get(c)).copied().unwrap_or(false);
            self.cpu_changed(cpu, online);
        }
    }

    /// CPU `cpu` is now online or not: a ring for a new CPU, a drained and
    /// kept ring for one going, a fresh event for one coming back.
    fn cpu_changed(&mut self, cpu: i32, online: bool) {
        let Some(h) = &self.hotplug else { return };
        if !h.wanted.contains(&cpu) {
            return;
        }
        let idx = self.bufs.iter().position(|b| b.cpu == cpu);
        let done = match (idx, online) {
            (Some(i), false) if self.bufs[i].online => {
                self.cpu_went_offline(i);
                Ok(())
            }
            (Some(i), true) if !self.bufs[i].online => self.cpu_came_back(i),
            (None, true) => self.cpu_came_online(cpu),
            _ => Ok(()),
        };
        if let Err(e) = done {
            // Tried again at the next comparison of the online mask.
            log::warn(format_args!("{}", e.with(What::Hotplug(cpu))));
        }
    }

    /// Ring `idx`'s CPU went offline: its event is dead from now on. What
    /// the ring holds is read now (and by later polls, if a callback stops
    /// the read); the ring stays until the CPU comes back.
    fn cpu_went_offline(&mut self, idx: usize) {
        self.bufs[idx].online = false;
        if let Some(Opener::Source(source)) = self.hotplug.as_deref_mut().map(|h| &mut h.opener) {
            source.cpu_gone(self.bufs[idx].cpu);
        }
        let _ = self.process_records(idx);
        self.retire_fast_events(idx);
        self.stale = true;
        log::info(format_args!(
            "cpu #{} went offline: its ring is read and kept until the cpu comes back",
            self.bufs[idx].cpu
        ));
    }

    /// The fast mode's events of ring `idx`, dead with its CPU, go once
    /// its spill ring is read (tried again by later polls otherwise).
    fn retire_fast_events(&mut self, idx: usize) -> bool {
        let RingSet { adaptive, bufs, .. } = self;
        adaptive.as_mut().is_none_or(|a| a.cpu_gone(idx, &mut bufs[idx]))
    }

    /// Ring `idx`'s CPU is back: its old event stays dead in the kernel,
    /// so a fresh event and ring take its slot at once; the old ring is
    /// read to its end before the new one takes its place.
    fn cpu_came_back(&mut self, idx: usize) -> Result<()> {
        // An ordered reader delivers what it holds first (as a flush does):
        // the old ring's records are older than any the fresh one gets.
        let _ = match self.order {
            Some(_) => self.order_round(true).map(drop),
            None => self.process_records(idx),
        };
        if !self.retire_fast_events(idx) {
            return Err(Error::from_errno(libc::EAGAIN));
        }
        let cpu = self.bufs[idx].cpu;
        let new = self.open_ring(cpu)?;
        let raw = new.fd.as_raw_fd();
        if self.owns_slots() {
            sys::map_update_u32(self.map_fd, self.bufs[idx].map_key as u32, raw as u32)
                .map_err(|e| e.with(What::SetSlot(cpu, self.bufs[idx].map_key, raw)))?;
        }
        sys::epoll_add(self.epoll.as_raw_fd(), raw, idx as u64)
            .map_err(|e| e.with(What::EpollAdd(cpu, raw)))?;
        let buf = &mut self.bufs[idx];
        buf.successor = Some(new);
        buf.online = true;
        buf.replaced += 1;
        let refused =
            self.counts.as_ref().and_then(|c| c.read_cpu(cpu).ok()).map(|c| c.failed_uncounted_perf());
        log::info(format_args!(
            "cpu #{cpu} came back online: the kernel leaves its old event dead, so a fresh event and ring take \
             slot {}{}",
            self.bufs[idx].map_key,
            match refused {
                Some(n) => format!(" (outputs refused on cpu #{cpu} so far, counted by perfbuf.bpf.h: {n})"),
                None => String::new(),
            }
        ));
        self.promote(idx);
        Ok(())
    }

    /// A CPU the reader never had is online: its event, ring and slot.
    fn cpu_came_online(&mut self, cpu: i32) -> Result<()> {
        let new = self.open_ring(cpu)?;
        let idx = self.bufs.len();
        self.grow_wait_list(idx + 1)?;
        let overwrite = matches!(
            self.hotplug.as_deref(),
            Some(Hotplug { opener: Opener::Event { overwrite: true, .. }, .. })
        );
        let mut buf = CpuBuf::new(cpu, cpu, new.fd, new.ring, overwrite);
        buf.kernel_lost = new.lost;
        buf.health.current.at = Moment::coarse();
        let raw = buf.fd.as_raw_fd();
        if self.owns_slots() {
            sys::map_update_u32(self.map_fd, cpu as u32, raw as u32)
                .map_err(|e| e.with(What::SetSlot(cpu, cpu, raw)))?;
        }
        sys::epoll_add(self.epoll.as_raw_fd(), raw, idx as u64)
            .map_err(|e| e.with(What::EpollAdd(cpu, raw)))?;
        self.bufs.push(buf);
        if let Some(order) = &mut self.order {
            order.grow(self.bufs.len());
        }
        if let Some(a) = &mut self.adaptive {
            a.set_up_again(idx, &self.bufs[idx]);
        }
        log::info(format_args!("cpu #{cpu} came online: reading it (ring #{idx}, slot {cpu})"));
        Ok(())
    }

    /// Room in epoll's output for `rings` rings, their spill rings and the
    /// reader's own fds.
    fn grow_wait_list(&mut self, rings: usize) -> Result<()> {
        let want = 2 * rings + 3;
        let have = self.events.len();
        if have < want {
            crate::kernel::fallible::reserve(&mut self.events, want - have)?;
            self.events.resize(want, libc::epoll_event { events: 0, u64: 0 });
        }
        Ok(())
    }

    /// `cpu`'s new ring: an enabled event of the reader's own with its
    /// ring mapped, or the source's.
    fn open_ring(&mut self, cpu: i32) -> Result<Successor> {
        match &mut self.hotplug.as_mut().ok_or(Error::INVAL)?.opener {
            Opener::Event { attr, pages, overwrite } => {
                let fd = sys::perf_event_open(AttrSource::Built(attr), cpu)
                    .map_err(|e| e.with(What::OpenEvent(cpu)))?;
                let ring = PerfRing::map(fd.as_fd(), cpu::page_size(), *pages, !*overwrite)
                    .map_err(|e| e.with(What::MapRing(cpu)))?;
                sys::perf_ioctl(fd.as_fd(), PERF_EVENT_IOC_ENABLE, 0)
                    .map_err(|e| e.with(What::EnableEvent(cpu)))?;
                let lost =
                    if attr.read_format == PERF_FORMAT_LOST { KernelLost::Own } else { KernelLost::Unknown };
                Ok(Successor { fd, ring, lost })
            }
            Opener::Source(source) => {
                let (_, fd, ring, tally) = source.open_cpu(cpu)?;
                Ok(Successor { fd, ring, lost: tally.map_or(KernelLost::Unknown, KernelLost::Tally) })
            }
        }
    }

    /// Whether this reader may write its map's slots (it has a map, and no
    /// newer reader of this process took them).
    fn owns_slots(&self) -> bool {
        self.map_fd >= 0 && self.claim.as_ref().is_none_or(|c| c.held())
    }

    /// Puts ring `idx`'s successor in place once the old ring is read to
    /// its end (and, when ordering, none of its records waits): the old
    /// event's lost count stays in the figures, then it and its ring go.
    pub(super) fn promote(&mut self, idx: usize) {
        let buf = &self.bufs[idx];
        if buf.successor.is_none()
            || buf.rings.main().pending_bytes() > 0
            || self.order.as_ref().is_some_and(|o| !o.holds_nothing_of(idx))
        {
            return;
        }
        let RingSet { bufs, order, adaptive, epoll, .. } = self;
        let buf = &mut bufs[idx];
        let Some(next) = buf.successor.take() else { return };
        let old_fd = core::mem::replace(&mut buf.fd, next.fd);
        // What the old events lost stays counted; the new ones count anew.
        buf.retired_lost += buf.kernel_lost.read(old_fd.as_fd()).unwrap_or(0);
        buf.kernel_lost = next.lost;
        let old_ring = buf.rings.replace_main(next.ring);
        // The mapping keeps the old file open: out of epoll explicitly.
        let _ = sys::epoll_del(epoll.as_raw_fd(), old_fd.as_raw_fd());
        drop(old_ring);
        let _ = sys::perf_ioctl(old_fd.as_fd(), PERF_EVENT_IOC_DISABLE, 0);
        drop(old_fd);
        if let Some(order) = order {
            order.restart(idx);
        }
        if let Some(a) = adaptive {
            a.set_up_again(idx, buf);
        }
    }

    /// Reads what rings of CPUs gone offline still hold (they get no
    /// wake-ups), retires their fast events, promotes successors; clears
    /// `stale` once nothing is left to do.
    pub(super) fn serve_stale(&mut self) {
        let mut left = false;
        for idx in 0..self.bufs.len() {
            let buf = &self.bufs[idx];
            if buf.online && buf.successor.is_none() {
                continue;
            }
            // (An ordered reader's rounds read every ring themselves.)
            if buf.rings.has_pending() && self.order.is_none() {
                let _ = self.process_records(idx);
            }
            if !self.bufs[idx].online && !self.retire_fast_events(idx) {
                left = true;
            }
            self.promote(idx);
            let buf = &self.bufs[idx];
            left |= buf.successor.is_some() || (!buf.online && buf.rings.has_pending());
        }
        self.stale = left;
    }
}

/// The CPUs a reader reads whenever they are online: `wanted`, or every
/// possible CPU below the map's size (`max_entries`, 0: unknown).
pub fn wanted_cpus(subset: Option<&[i32]>, max_entries: u32) -> Result<Vec<i32>> {
    if let Some(list) = subset {
        return Ok(list.to_vec());
    }
    let possible = cpu::possible_mask()?;
    Ok((0..possible.len())
        .filter(|&c| possible[c] && (max_entries == 0 || c < max_entries as usize))
        .map(|c| c as i32)
        .collect())
}
