//! The reader: one perf event and ring per CPU, an epoll set over them,
//! and libbpf's poll/consume semantics, plus the extensions: bounded-delay
//! batching (a timerfd in the epoll set), overwritable rings, pause and
//! resume, the record-by-record cursor, batches, ordered reading and the
//! opt-in fast mode (see `crate::adaptive`). Generic over where records go
//! ([`Handler`]); every face reaches it through the public
//! [`crate::Reader`] and its [`sink::Sink`], so every face (the Rust API,
//! event sets, the C library) runs this code.

pub mod batch;
pub mod batch_read;
pub mod config;
pub mod cpu_buf;
pub mod deliver;
pub mod health;
pub mod hotplug;
pub mod lost;
pub mod order;
pub mod output_counts;
pub mod sink;
pub mod stats;
pub mod ticker;
pub mod wait;
pub mod waker;

use crate::adaptive::claim::Claim;
use crate::adaptive::{self, Adaptive, TimerAction};
use crate::error::{Error, Result, What};
use crate::kernel::clock::Moment;
use crate::kernel::fallible;
use crate::kernel::quiesce;
use crate::kernel::sys::{self, AttrSource};
use crate::kernel::{
    BPF_MAP_TYPE_PERF_EVENT_ARRAY, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_ENABLE, PERF_FORMAT_LOST,
};
use crate::kernel::{PERF_EVENT_IOC_PAUSE_OUTPUT, PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_TID};
use crate::kernel::{PERF_SAMPLE_CPU, PERF_SAMPLE_ID, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TIME, cpu};
use crate::log;
use crate::ring::record::{self, LostRecord, Record};
use crate::ring::{PerfRing, Stop};
use batch::Batch;
use config::{CpuSelection, Options};
use core::ops::ControlFlow;
use cpu_buf::CpuBuf;
use deliver::{Flow, Halt, Handler};
use health::{RATE_WINDOW, RingHealth, Snapshot};
use hotplug::{HOTPLUG_TOKEN, Hotplug};
use lost::{KernelLost, LostTally};
use order::{KeySource, Order, OrderBy, OrderStats};
use output_counts::{CountsMap, OutputCounts};
use stats::RingStats;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;
use ticker::{TIMER_TOKEN, Ticker};
use waker::{WAKE_TAG, clear_wake};

/// A ring mapped by someone else, for [`RingSet::over_rings`]: its CPU, the
/// event that owns it, the mapping, and the tally of what the events
/// writing there lost (if they count it).
pub type OwnedRing = (i32, OwnedFd, PerfRing, Option<LostTally>);

/// `map_fd` of a reader without a map (over an event set's rings).
const NO_MAP: RawFd = -1;

/// A set of per-CPU perf rings read through one epoll instance.
pub struct RingSet<H> {
    map_fd: RawFd,
    handler: H,
    bufs: Vec<CpuBuf>,
    events: Vec<libc::epoll_event>,
    /// The delay timer: always ticking with `max_delay` batching, while a
    /// ring is batched in the fast mode.
    timer: Option<Ticker>,
    order: Option<Order>,
    adaptive: Option<Adaptive>,
    /// The attr's `sample_type` (where `PERF_SAMPLE_TIME` sits).
    sample_type: u64,
    /// Whether records other than samples end with a `sample_id` trailer
    /// of `sample_type`'s fields (an event set's rings).
    sample_id_all: bool,
    /// Counts polls, so that a ring drained twice in one is counted once.
    round: u64,
    /// A drain of the last poll or consume read a ring to its head (libbpf
    /// leaves errno at ENOENT then; the C face mirrors that).
    reached_head: bool,
    /// The process that opened the reader: a forked child's copy still
    /// frees as libbpf would, and voids the parent's claim on the map.
    owner_pid: i32,
    claim: Option<Claim>,
    /// Drop leaves the map's slots and their events as they are.
    keep_slots: bool,
    /// perfbuf.bpf.h's output counts, when the caller gave the map.
    counts: Option<CountsMap>,
    /// CPUs coming and going are served (perfbuf's own API). Boxed: cold,
    /// and a reader over a ring buffer sits beside this set in an enum.
    hotplug: Option<Box<Hotplug>>,
    /// The coarse clock when the current poll or consume began.
    clock: Moment,
    /// When the rings' rate windows last began.
    window_at: Moment,
    /// Some ring's CPU went offline with records left, or waits to hand
    /// over to a fresh event: polls look at those rings.
    stale: bool,
    /// The ring a batch read starts with: the one the last left records in.
    batch_next: usize,
    epoll: OwnedFd,
}

impl<H: Handler> RingSet<H> {
    /// Opens the reader in libbpf's order; on any failure everything
    /// already set up is torn down (as `perf_buffer__free` would) and the
    /// first error is returned.
    pub fn open(opts: Options, handler: H) -> Result<RingSet<H>> {
        let plan = opts.plan()?;
        let map_fd = opts.map_fd;
        let (max_entries, map_id) = checked_map(map_fd)?;
        let page_size = cpu::page_size();
        if opts.pages.checked_mul(page_size).and_then(|s| s.checked_add(page_size)).is_none() {
            let e = Error::new(libc::EINVAL, What::PageCountOverflow(opts.pages));
            log::warn(format_args!("{e}"));
            return Err(e);
        }
        let epoll = sys::epoll_create().map_err(|e| log::failed(e.with(What::EpollCreate)))?;
        let skip_offline = !matches!(opts.cpus, CpuSelection::Explicit(_));
        // CPUs read whenever online: a subset's, or every possible one.
        let wanted = match (&opts.cpus, plan.hotplug) {
            (CpuSelection::Subset(list), true) => Some(list.clone()),
            (CpuSelection::AllOnline, true) => Some(hotplug::wanted_cpus(None, max_entries)?),
            _ => None,
        };
        let slots: Vec<(i32, i32)> = match opts.cpus {
            CpuSelection::Explicit(pairs) => pairs,
            CpuSelection::Subset(list) => fallible::collect(list.len(), list.iter().map(|&c| (c, c)))?,
            CpuSelection::AllOnline => {
                let mut n = cpu::possible_cpu_count()?;
                if max_entries != 0 && (max_entries as usize) < n {
                    n = max_entries as usize;
                }
                fallible::collect(n, (0..n as i32).map(|c| (c, c)))?
            }
        };
        // Room for the fast mode's spill-ring owners too.
        let mut reader =
            RingSet::empty(map_fd, handler, epoll, slots.len(), 2 * slots.len(), plan.sample_type)?;
        let attr = match (&plan.attr, opts.attr) {
            (Some(a), _) => AttrSource::Built(a),
            (None, config::AttrChoice::Caller(attr, _)) => AttrSource::Caller(attr),
            (None, _) => return Err(Error::INVAL),
        };
        let online = cpu::online_mask().map_err(|e| log::failed(e.with(What::OnlineCpus)))?;
        for &(cpu, map_key) in &slots {
            let is_online = usize::try_from(cpu).ok().and_then(|c| online.get(c)).copied().unwrap_or(false);
            if skip_offline && !is_online {
                log::debug(format_args!("skipping offline or absent cpu #{cpu}"));
                continue;
            }
            reader.add_cpu(cpu, map_key, attr, opts.pages, page_size, opts.overwrite)?;
        }
        reader.keep_slots = opts.keep_slots;
        if plan.attr.is_some_and(|a| a.read_format == PERF_FORMAT_LOST) {
            for buf in &mut reader.bufs {
                buf.kernel_lost = KernelLost::Own;
            }
        }
        if let Some(map) = opts.counts_map {
            // SAFETY: the caller's fd, open for the call (Options' contract);
            // CountsMap keeps a duplicate.
            let map = unsafe { std::os::fd::BorrowedFd::borrow_raw(map) };
            reader.counts = Some(CountsMap::open(map)?);
        }
        if let (Some(wanted), Some(attr)) = (wanted, plan.attr) {
            let opener = hotplug::Opener::Event { attr, pages: opts.pages, overwrite: opts.overwrite };
            reader.hotplug = Some(fallible::boxed(Hotplug::new(reader.epoll.as_raw_fd(), opener, wanted)?)?);
        }
        if let Some(bound) = plan.max_delay {
            // Ticking at half the bound keeps a record's wait, tick plus the
            // reader's own wake-up, within the bound.
            reader.timer = Some(Ticker::new(reader.epoll.as_raw_fd(), bound / 2)?);
        }
        // The slots are this reader's now: a fast mode opened earlier on
        // the same map must leave them alone.
        reader.claim = map_id.and_then(Claim::take);
        if plan.adaptive {
            reader.set_up_fast_mode();
        }
        reader.log_summary(map_id, opts.pages, &plan, opts.overwrite);
        Ok(reader)
    }

    /// A reader over rings mapped by someone else (an event set's): no map
    /// slots to fill, no fast mode; records other than samples end with a
    /// `sample_id` trailer. `sample_type` is what every record of
    /// the rings starts with (for ordering by time); `max_delay` bounds a
    /// batching set's wake-ups.
    pub fn over_rings(
        rings: Vec<OwnedRing>,
        handler: H,
        sample_type: u64,
        max_delay: Option<Duration>,
    ) -> Result<RingSet<H>> {
        let epoll = sys::epoll_create().map_err(|e| log::failed(e.with(What::EpollCreate)))?;
        let mut reader = RingSet::empty(NO_MAP, handler, epoll, rings.len(), rings.len(), sample_type)?;
        reader.sample_id_all = true;
        for (cpu, fd, ring, tally) in rings {
            let (index, raw) = (reader.bufs.len(), fd.as_raw_fd());
            let mut buf = CpuBuf::new(cpu, cpu, fd, ring, false);
            buf.kernel_lost = tally.map_or(KernelLost::Unknown, KernelLost::Tally);
            buf.health.current.at = reader.window_at;
            reader.bufs.push(buf);
            sys::epoll_add(reader.epoll.as_raw_fd(), raw, index as u64)
                .map_err(|e| log::failed(e.with(What::EpollAdd(cpu, raw))))?;
        }
        if let Some(bound) = max_delay {
            reader.timer = Some(Ticker::new(reader.epoll.as_raw_fd(), bound / 2)?);
        }
        Ok(reader)
    }

    /// Serves CPUs that come and go for a reader over rings it did not
    /// open: `source` gives the ring of each CPU of `wanted` that comes
    /// online or back.
    pub fn watch_cpus(&mut self, source: Box<dyn hotplug::RingSource>, wanted: Vec<i32>) -> Result<()> {
        let opener = hotplug::Opener::Source(source);
        self.hotplug = Some(fallible::boxed(Hotplug::new(self.epoll.as_raw_fd(), opener, wanted)?)?);
        Ok(())
    }

    /// A reader with no rings yet: room for `rings` of them and for
    /// `fds` ring fds in one epoll wait (plus the wake and timer tokens).
    fn empty(
        map_fd: RawFd,
        handler: H,
        epoll: OwnedFd,
        rings: usize,
        fds: usize,
        sample_type: u64,
    ) -> Result<RingSet<H>> {
        Ok(RingSet {
            map_fd,
            handler,
            events: fallible::collect(fds + 2, core::iter::repeat(libc::epoll_event { events: 0, u64: 0 }))?,
            bufs: fallible::vec_with_capacity(rings)?,
            timer: None,
            order: None,
            adaptive: None,
            sample_type,
            sample_id_all: false,
            round: 0,
            reached_head: false,
            owner_pid: sys::getpid(),
            claim: None,
            keep_slots: false,
            counts: None,
            hotplug: None,
            clock: Moment::coarse(),
            window_at: Moment::coarse(),
            stale: false,
            batch_next: 0,
            epoll,
        })
    }

    /// Says at info level what the reader was set up with.
    fn log_summary(&self, map_id: Option<u32>, pages: usize, plan: &config::Plan, overwrite: bool) {
        let id = map_id.map_or(-1, i64::from);
        let rings = self.bufs.len();
        let mode = match (overwrite, self.adaptive.is_some()) {
            (true, _) => ", overwritable",
            (false, true) => ", fast mode",
            (false, false) => "",
        };
        let bound = Bound(plan.max_delay);
        match plan.attr.map(|a| (a.wakeup, a.has(crate::kernel::ATTR_FLAG_WATERMARK))) {
            None => log::info(format_args!(
                "perf buffer on map {id}: {rings} rings of {pages} pages, the caller's attr{mode}"
            )),
            Some((n, true)) => log::info(format_args!(
                "perf buffer on map {id}: {rings} rings of {pages} pages, a wake-up every {n} bytes{bound}{mode}"
            )),
            Some((n, false)) => log::info(format_args!(
                "perf buffer on map {id}: {rings} rings of {pages} pages, a wake-up every {n} records{bound}{mode}"
            )),
        }
    }

    /// Opens, maps and enables one CPU's event, then publishes it in the map
    /// and the epoll set (libbpf's steps c–h). The buffer is stored before
    /// the map update so that a failure there still deletes the key on
    /// teardown, as libbpf does.
    fn add_cpu(
        &mut self,
        cpu: i32,
        map_key: i32,
        attr: AttrSource<'_>,
        pages: usize,
        page_size: usize,
        overwrite: bool,
    ) -> Result<()> {
        let fd = sys::perf_event_open(attr, cpu).map_err(|e| log::failed(e.with(What::OpenEvent(cpu))))?;
        let ring = PerfRing::map(fd.as_fd(), page_size, pages, !overwrite).map_err(|e| {
            let _ = sys::perf_ioctl(fd.as_fd(), PERF_EVENT_IOC_DISABLE, 0);
            log::failed(e.with(What::MapRing(cpu)))
        })?;
        if let Err(e) = sys::perf_ioctl(fd.as_fd(), PERF_EVENT_IOC_ENABLE, 0) {
            drop(ring);
            let _ = sys::perf_ioctl(fd.as_fd(), PERF_EVENT_IOC_DISABLE, 0);
            return Err(log::failed(e.with(What::EnableEvent(cpu))));
        }
        let perf_fd = fd.as_raw_fd();
        let index = self.bufs.len();
        let mut buf = CpuBuf::new(cpu, map_key, fd, ring, overwrite);
        buf.health.current.at = self.window_at;
        self.bufs.push(buf);
        sys::map_update_u32(self.map_fd, map_key as u32, perf_fd as u32)
            .map_err(|e| log::failed(e.with(What::SetSlot(cpu, map_key, perf_fd))))?;
        sys::epoll_add(self.epoll.as_raw_fd(), perf_fd, index as u64)
            .map_err(|e| log::failed(e.with(What::EpollAdd(cpu, perf_fd))))
    }

    /// The opt-in fast mode: its timer first (a reader that cannot have
    /// one stays libbpf's), then each CPU's events. Never an error: what
    /// cannot be had is done without.
    fn set_up_fast_mode(&mut self) {
        match Ticker::new(self.epoll.as_raw_fd(), Duration::ZERO) {
            Ok(t) => self.timer = Some(t),
            Err(e) => {
                log::debug(format_args!("no fast mode: no timer: {e}"));
                return;
            }
        }
        let claim = self.claim.clone();
        self.adaptive = Adaptive::setup(&self.bufs, self.epoll.as_raw_fd(), claim);
        if self.adaptive.is_none() {
            self.timer = None;
        }
    }

    /// The epoll fd over all rings.
    pub fn epoll_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Number of rings actually set up.
    pub fn buffer_cnt(&self) -> usize {
        self.bufs.len()
    }

    /// The handler records go to.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// The handler records go to, to change.
    pub fn handler_mut(&mut self) -> &mut H {
        &mut self.handler
    }

    fn buf(&self, idx: usize) -> Result<&CpuBuf> {
        self.bufs.get(idx).ok_or(Error::new(libc::EINVAL, What::RingIndex(idx)))
    }

    /// The CPU ring `idx` reads.
    pub fn cpu_of(&self, idx: usize) -> Result<i32> {
        self.buf(idx).map(|b| b.cpu)
    }

    /// Ring `idx`'s event, for a caller of its own: in the fast mode the
    /// ring's slot points at it again, for good, so the caller's ioctls
    /// and epoll see what libbpf would show them.
    pub fn event_fd(&mut self, idx: usize) -> Result<RawFd> {
        self.buf(idx)?;
        self.stand_down(idx);
        Ok(self.bufs[idx].fd.as_raw_fd())
    }

    /// Ring `idx`'s caller ring, for a reader of its own (see [`Self::event_fd`]).
    pub fn raw_ring(&mut self, idx: usize) -> Result<&PerfRing> {
        self.buf(idx)?;
        self.stand_down(idx);
        Ok(self.bufs[idx].rings.main())
    }

    /// Ring `idx` for the record-level API (see [`Self::event_fd`]).
    pub fn cpu_buf(&mut self, idx: usize) -> Result<&mut CpuBuf> {
        self.buf(idx)?;
        self.stand_down(idx);
        Ok(&mut self.bufs[idx])
    }

    fn stand_down(&mut self, idx: usize) {
        let Some(a) = &mut self.adaptive else { return };
        let action = a.stand_down(idx, &mut self.bufs[idx], self.map_fd);
        let hand_over = a.left_written_spill(idx, &self.bufs[idx]);
        self.timer_action(action);
        if hand_over {
            self.hand_over_spill(idx);
        }
    }

    /// The spill ring a stood-down ring left holds records older than any
    /// its caller's ring gets from now on, and a caller that reads that
    /// ring itself may never poll again: once no BPF program can still be
    /// writing there, they go to the callbacks now, with what the spill
    /// ring owes as a lost record, and the spill ring is released. (Left
    /// to the next poll or consume if a callback stops the read.) The
    /// caller's ring fills meanwhile, unread: the wait is one task switch
    /// on the ring's CPU where the kernel allows, not a grace period (see
    /// [`quiesce`]).
    fn hand_over_spill(&mut self, idx: usize) {
        quiesce::wait_for_writers_on([self.bufs[idx].cpu], adaptive::QUIET_AFTER);
        let RingSet { bufs, handler, adaptive, .. } = self;
        let buf = &mut bufs[idx];
        let (cpu, mut stats) = (buf.cpu, buf.stats);
        let ret =
            buf.rings.drain_spill(&mut stats, |ring, head, stats| handler.drain(ring, head, cpu, stats));
        if ret.is_continue()
            && buf.rings.spill().is_some_and(|s| s.pending_bytes() == 0)
            && let Some(a) = adaptive
        {
            a.release(idx, buf);
            if let Some(lost) = buf.rings.take_owed() {
                let _ = handler.deliver(cpu, LostRecord::new(lost).bytes(), &mut stats);
            }
        }
        buf.stats = stats;
    }

    /// Drains ring `idx` (libbpf's `perf_buffer__process_records`). A
    /// handler's `Done` stops this ring quietly. An overwritable ring is
    /// read as a snapshot instead.
    fn process_records(&mut self, idx: usize) -> Result<()> {
        if self.order.is_some() {
            return self.order_round(false).map(drop);
        }
        let buf = &mut self.bufs[idx];
        buf.publish();
        if buf.overwrite_prev_head.is_some() {
            return self.snapshot(idx).map(drop);
        }
        if !buf.rings.has_pending() {
            // An empty ring (most of them in a consume over many): nothing
            // to deliver or decide, and none of the ring's other state to
            // touch — the scan's cost is its memory traffic.
            self.reached_head = true;
            return Ok(());
        }
        if let Some(a) = &mut self.adaptive {
            a.before_drain(idx, &mut self.bufs[idx], self.map_fd);
        }
        let RingSet { bufs, handler, adaptive, map_fd, clock, .. } = self;
        let buf = &mut bufs[idx];
        let pending = buf.rings.pending_bytes();
        buf.health.drain_begins(pending, *clock);
        // Count in a local the callbacks cannot see, so the counters stay in
        // registers across the indirect calls; store them once per drain.
        let (cpu, mut stats) = (buf.cpu, buf.stats);
        let mut ret = match buf.rings.take_owed() {
            Some(lost) => handler.deliver(cpu, LostRecord::new(lost).bytes(), &mut stats).map_break(Stop::By),
            None => ControlFlow::Continue(()),
        };
        if ret.is_continue() {
            let to = buf.slot_move(*map_fd);
            let size = buf.rings.current().data_size() as u64;
            ret = buf.rings.drain_watched(
                &mut stats,
                |ring, head, stats| handler.drain(ring, head, cpu, stats),
                |chunk, before, now| match adaptive {
                    Some(a) => a.between_chunks(idx, chunk, before, now, size, to),
                    None => chunk,
                },
            );
        }
        self.drain_ends(idx, stats, ret)
    }

    /// After a drain of ring `idx`: its counters stored once, its health
    /// noted, and a ring read to its head handed over to its successor.
    fn drain_ends(&mut self, idx: usize, stats: crate::ring::record::DispatchStats, ret: Flow) -> Result<()> {
        let buf = &mut self.bufs[idx];
        buf.stats = stats;
        buf.health.drain_ends(stats.lost, || {
            let all = buf.rings.figures();
            all.bytes.checked_div(all.records).unwrap_or(0)
        });
        self.reached_head |= ret.is_continue();
        if self.bufs[idx].successor.is_some() && ret.is_continue() {
            self.promote(idx);
        }
        halted(ret)
    }

    /// Whether a drain of the last poll or consume call read a ring to its
    /// head (and so was not stopped by a callback).
    pub fn reached_head(&self) -> bool {
        self.reached_head
    }

    /// Waits up to `timeout_ms` (-1 forever) for rings the kernel
    /// signalled, drains each, and returns how many were drained (libbpf's
    /// `perf_buffer__poll`). A tick of our own timer drains every ring
    /// holding data; one that finds nothing goes back to waiting, so that
    /// 0 still means the timeout passed. After a wake-up from another
    /// thread, fails with ECANCELED (rings signalled in the same wait are
    /// drained first).
    pub fn poll(&mut self, timeout_ms: i32) -> Result<usize> {
        self.reached_head = false;
        if self.order.is_some() {
            return self.poll_ordered(timeout_ms);
        }
        // Only a wait that our own tick ended can need a second one, so
        // the clock is read only while the timer ticks.
        let mut start = None;
        let mut wait_ms = timeout_ms;
        loop {
            if self.timer.as_ref().is_some_and(Ticker::ticking) {
                start.get_or_insert_with(Moment::now);
            }
            if let Some(ret) = self.poll_once(wait_ms) {
                return ret;
            }
            wait_ms = match timeout_left(*start.get_or_insert_with(Moment::now), timeout_ms) {
                Some(left) if timeout_ms != 0 => epoll_ms(left),
                _ => return Ok(0),
            };
        }
    }

    /// One epoll wait and the drains it calls for; `None` when only our own
    /// timer fired and there was nothing to drain.
    fn poll_once(&mut self, timeout_ms: i32) -> Option<Result<usize>> {
        // libbpf passes the ring count (so 0 rings gives EINVAL); our own
        // timer, wake and spill fds need room too.
        let max = match (self.bufs.len(), &self.adaptive) {
            (0, _) => 0,
            (n, None) => n + 1,
            (n, Some(_)) => 2 * n + 1,
        } + usize::from(self.timer.is_some())
            + usize::from(self.hotplug.is_some());
        let cnt = match sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, max, timeout_ms) {
            Ok(cnt) => cnt,
            Err(e) => return Some(Err(e)),
        };
        self.round += 1;
        self.clock = Moment::coarse();
        // How long the drains take, while the fast mode batches.
        let timed = self.adaptive.as_ref().is_some_and(Adaptive::any_batched).then(Moment::now);
        let (mut drained, mut flush, mut woken) = (0, false, None);
        let mut hotplug = false;
        for i in 0..cnt {
            let token = self.events[i].u64; // a copy: the struct is packed
            match token {
                TIMER_TOKEN => flush = true,
                HOTPLUG_TOKEN => hotplug = true,
                token if token & WAKE_TAG != 0 => woken = Some(token),
                token => {
                    let idx = token as usize;
                    // A ring and its spill ring share a token: one drain
                    // reads both, and counts once.
                    if self.bufs[idx].drained_round == self.round {
                        continue;
                    }
                    self.bufs[idx].wakeups += 1;
                    if let Err(e) = self.drain_counted(idx) {
                        return Some(Err(warn_processing(e)));
                    }
                    drained += 1;
                }
            }
        }
        if hotplug {
            self.serve_hotplug();
        }
        self.recheck_cpus();
        if self.stale {
            let before = self.bufs.iter().map(|b| b.rings.records_read()).sum::<u64>();
            self.serve_stale();
            drained += usize::from(self.bufs.iter().map(|b| b.rings.records_read()).sum::<u64>() > before);
        }
        // Batched rings may hold records that woke nobody: every poll reads
        // them, and the timer only has to cover the time between polls.
        let batched = self.adaptive.as_ref().is_some_and(Adaptive::any_batched);
        if flush || batched {
            if flush && let Some(timer) = &mut self.timer {
                timer.read(Moment::now());
            }
            for idx in 0..self.bufs.len() {
                let buf = &self.bufs[idx];
                if !buf.rings.has_pending()
                    || buf.overwrite_prev_head.is_some()
                    || buf.drained_round == self.round
                {
                    continue;
                }
                if let Err(e) = self.drain_counted(idx) {
                    return Some(Err(warn_processing(e)));
                }
                drained += 1;
            }
        }
        // A tick that ended this wait is where the next period starts
        // already: no re-arming (a syscall) for it.
        self.end_read(true, flush, timed);
        if let Some(token) = woken {
            clear_wake(token);
            return Some(Err(Error::from_errno(libc::ECANCELED)));
        }
        if cnt > 0 && drained == 0 {
            return None;
        }
        Some(Ok(drained))
    }

    /// Drains ring `idx` once in this poll round.
    fn drain_counted(&mut self, idx: usize) -> Result<()> {
        self.bufs[idx].drained_round = self.round;
        self.process_records(idx)
    }

    /// Ends a read of every ring: lets the fast mode take its decisions and
    /// start or stop its timer, and clears a tick that fired. `in_poll`:
    /// poll just read every batched ring, so while batched the next tick
    /// may start a period later (re-armed at most every half tick, and not
    /// when a tick woke this poll: the next period starts at it already),
    /// and a tick it waited on is already read (`ticked`). `timed`: when
    /// the drains began, if they were timed.
    fn end_read(&mut self, in_poll: bool, ticked: bool, timed: Option<Moment>) {
        if health::ENABLED && self.clock.since(self.window_at) >= RATE_WINDOW {
            self.rotate_windows();
        }
        if let Some(adaptive) = &mut self.adaptive {
            let spent = timed.map(Moment::elapsed);
            let action = adaptive.observe(Moment::coarse(), spent, &mut self.bufs, self.map_fd);
            if action == TimerAction::Keep
                && in_poll
                && !ticked
                && let Some(t) = &mut self.timer
                && t.ticking()
                && t.since().elapsed() >= adaptive::TICK / 2
            {
                // Pushed back only while it ticks: a stopped timer stays
                // stopped until a ring is batched again.
                let _ = t.arm(adaptive::TICK);
            }
            self.timer_action(action);
        }
        if !in_poll && let Some(timer) = &mut self.timer {
            timer.clear();
        }
    }

    /// Starts every ring's next rate window (once a second, from a read).
    #[cold]
    fn rotate_windows(&mut self) {
        self.window_at = self.clock;
        for buf in &mut self.bufs {
            let all = buf.rings.figures();
            let now =
                Snapshot { at: self.clock, records: all.records, bytes: all.bytes, wakeups: buf.wakeups };
            buf.health.rotate(now);
        }
    }

    /// Before a read outside a poll: the clock, and CPUs that came or went.
    fn begin_read(&mut self) {
        self.clock = Moment::coarse();
        if self.hotplug.is_some() {
            self.recheck_socket();
            self.recheck_cpus();
            if self.stale {
                self.serve_stale();
            }
        }
    }

    /// Starts or stops the fast mode's timer.
    fn timer_action(&mut self, action: TimerAction) {
        let period = match action {
            TimerAction::Keep => return,
            TimerAction::Arm => adaptive::TICK,
            TimerAction::Disarm => Duration::ZERO,
        };
        if let Some(t) = &mut self.timer
            && let Err(e) = t.arm(period)
        {
            log::warn(format_args!(
                "cannot {} the fast mode's timer: {e}",
                if period.is_zero() { "stop" } else { "start" }
            ));
        }
    }

    /// Ring `idx`'s figures.
    pub fn figures(&self, idx: usize) -> Result<RingStats> {
        let buf = self.buf(idx)?;
        let output = match &self.counts {
            Some(c) => Some(c.read_cpu(buf.cpu)?),
            None => None,
        };
        let mut figures = buf.figures(self.counted_lost(idx), output);
        if let Some(adaptive) = &self.adaptive {
            (figures.batched, figures.batch_switches) = adaptive.state(idx);
        }
        Ok(figures)
    }

    /// Ring `idx`'s health: backlog now and at its peak, rates over the
    /// last second, time since its last record, and the ring size the
    /// load seen so far needed (see [`RingHealth`]).
    pub fn health(&self, idx: usize) -> Result<RingHealth> {
        let buf = self.buf(idx)?;
        let now = Moment::coarse();
        let all = buf.rings.figures();
        let snap = Snapshot { at: now, records: all.records, bytes: all.bytes, wakeups: buf.wakeups };
        let (records_per_sec, bytes_per_sec, wakeups_per_sec) = buf.health.rates(snap);
        let lost = buf.stats.lost + buf.unreported_of(self.counted_lost(idx));
        let pending = buf.rings.pending_bytes();
        let mean = all.bytes.checked_div(all.records).unwrap_or(0);
        let needed = buf.health.needed(lost, mean);
        Ok(RingHealth {
            cpu: buf.cpu,
            online: buf.online,
            pending_bytes: pending,
            peak_pending_bytes: buf.health.peak_pending.max(pending),
            data_size: buf.rings.main().data_size() as u64,
            records_per_sec,
            bytes_per_sec,
            wakeups_per_sec,
            since_last_record: buf.health.last_record.map(|t| now.since(t)),
            needed_bytes: needed,
            suggested_pages: health::pages_for(needed, cpu::page_size()),
            replaced: buf.replaced,
        })
    }

    /// Counts `n` samples of ring `idx` the caller read and dropped by its
    /// own policy: the figures' `dropped` bucket.
    pub fn count_dropped(&mut self, idx: usize, n: u64) -> Result<()> {
        self.buf(idx)?;
        self.bufs[idx].dropped = self.bufs[idx].dropped.saturating_add(n);
        Ok(())
    }

    /// What perfbuf.bpf.h's output wrappers counted on every CPU (indexed
    /// by CPU id), if the reader was given their map.
    pub fn output_counts(&self) -> Option<Result<Vec<OutputCounts>>> {
        self.counts.as_ref().map(CountsMap::read)
    }

    /// Whether the reader serves CPUs coming and going, and how it hears
    /// of them (`Some(true)`: the kernel's uevents; `Some(false)`: a timer).
    #[cfg(test)]
    pub fn watches_cpus(&self) -> Option<bool> {
        self.hotplug.as_deref().map(Hotplug::has_uevents)
    }

    /// Reports, for every ring whose events count their losses (see
    /// [`RingStats::lost`]), what the kernel counted and no LOST record
    /// reported yet: one lost report per such ring through the handler
    /// (a raw handler gets a `PERF_RECORD_LOST` made here, id 0, no
    /// `sample_id` trailer). A LOST record the kernel writes later for the
    /// same losses is reduced by what was reported here (dropped if it
    /// reports nothing more; a batch still carries it whole), so no loss
    /// is reported or counted twice. Returns the number of records
    /// reported lost. A handler that stops the read stops this too.
    pub fn report_unwritten_lost(&mut self) -> Result<u64> {
        let mut reported = 0;
        for idx in 0..self.bufs.len() {
            let counted = self.counted_lost(idx);
            let RingSet { bufs, handler, .. } = self;
            let buf = &mut bufs[idx];
            let lost = buf.unreported_of(counted);
            if lost == 0 {
                continue;
            }
            let mut stats = buf.stats;
            // This report is not one the credit covers, nor a record read.
            let (credit, others) = (core::mem::take(&mut stats.lost_credit), stats.others);
            let ret = handler.deliver(buf.cpu, LostRecord::new(lost).bytes(), &mut stats);
            (stats.lost_credit, stats.others) = (credit + lost, others);
            buf.stats = stats;
            reported += lost;
            match ret {
                ControlFlow::Continue(()) | ControlFlow::Break(Halt::Done) => {}
                ControlFlow::Break(halt) => return Err(halt_error(halt)),
            }
        }
        Ok(reported)
    }

    /// What ring `idx`'s writers lost so far as the kernel counts it: the
    /// caller's event's (or an event set's) count, plus, in the fast mode,
    /// its own events' (released spill rings' included). `None` when the
    /// caller's event does not count (libbpf's attr, Linux < 6.0).
    fn counted_lost(&self, idx: usize) -> Option<u64> {
        let own = self.bufs[idx].counted_lost()?;
        match &self.adaptive {
            Some(fast) => fast.counted_lost(idx).map(|n| own + n),
            None => Some(own),
        }
    }

    /// The final drain: every ring read to its head (an ordered reader
    /// flushes every record it holds), then what the kernel counted lost
    /// and has not written into a ring yet reported
    /// ([`Self::report_unwritten_lost`]). Call it once the producers have
    /// stopped. Returns the number of records reported lost by that last
    /// step.
    pub fn drain_final(&mut self) -> Result<u64> {
        self.reached_head = false;
        if self.order.is_some() {
            self.order_round(true)?;
        } else {
            self.consume()?;
        }
        self.report_unwritten_lost()
    }

    /// Turns on ordered delivery: from now on poll and consume deliver
    /// records from all rings in key order (see [`crate::reader::order`]).
    /// `PERF_SAMPLE_TIME` keys need an attr that samples TIME. The fast
    /// mode stands down for good: the ordered reader reads the caller's
    /// rings, and takes no decisions.
    pub fn set_order(&mut self, key: OrderBy, idle_wait: Duration) -> Result<()> {
        let key = match key {
            OrderBy::RawPrefix => KeySource::RawPrefix,
            OrderBy::Handler => KeySource::Handler,
            OrderBy::SampleTime => {
                if self.sample_type & PERF_SAMPLE_TIME == 0 {
                    return Err(log::invalid("ordering by PERF_SAMPLE_TIME needs an attr that samples TIME"));
                }
                let before = [PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_TID]
                    .iter()
                    .filter(|&&b| self.sample_type & b != 0)
                    .count();
                // With sample_id_all, TIME in the trailer is followed by
                // ID, STREAM_ID, CPU and IDENTIFIER (each if sampled).
                let after = [PERF_SAMPLE_ID, PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER]
                    .iter()
                    .filter(|&&b| self.sample_type & b != 0)
                    .count();
                let trailer = self.sample_id_all.then_some(8 + 8 * after);
                KeySource::SampleTime { sample: 8 + 8 * before, trailer }
            }
        };
        for buf in &mut self.bufs {
            buf.publish();
        }
        if let Some(mut adaptive) = self.adaptive.take() {
            let action = adaptive.stand_down_all(&mut self.bufs, self.map_fd);
            self.timer_action(action);
            self.timer_action(TimerAction::Disarm);
            // No BPF program still writes a spill ring when it is read.
            let spilled = self.bufs.iter().filter(|b| b.rings.spill().is_some()).map(|b| b.cpu);
            quiesce::wait_for_writers_on(spilled, adaptive::QUIET_AFTER);
            // What the spill rings hold is older than anything in the
            // caller's rings: delivered first, through the callbacks.
            for idx in 0..self.bufs.len() {
                if self.bufs[idx].rings.has_pending() {
                    self.process_records(idx)?;
                }
            }
            self.adaptive = Some(adaptive);
        }
        self.order = Some(Order::new(key, idle_wait, self.bufs.len()));
        Ok(())
    }

    /// The ordered reader's counters, if ordering is on.
    pub fn order_stats(&self) -> Option<OrderStats> {
        self.order.as_ref().map(Order::stats)
    }

    /// Delivers every indexed record in key order regardless of the horizon
    /// (at shutdown, or when the caller knows no earlier record can come).
    pub fn flush_ordered(&mut self) -> Result<usize> {
        if self.order.is_none() {
            return Err(log::invalid("ordered reading is off"));
        }
        self.order_round(true)
    }

    fn order_round(&mut self, flush: bool) -> Result<usize> {
        self.clock = Moment::coarse();
        let RingSet { bufs, handler, order, clock, .. } = self;
        let order = order.as_mut().ok_or(Error::INVAL)?;
        let found: Vec<u64> = bufs.iter().map(|b| b.rings.pending_bytes()).collect();
        for (buf, &pending) in bufs.iter_mut().zip(&found) {
            buf.health.drain_begins(pending, *clock);
        }
        let ret = order.round(bufs, handler, flush).map_err(halt_error);
        for buf in bufs.iter_mut() {
            let all = buf.rings.figures();
            buf.health.drain_ends(buf.stats.lost, || all.bytes.checked_div(all.records).unwrap_or(0));
        }
        if self.stale {
            let waiting = |r: &Self| r.bufs.iter().filter(|b| b.successor.is_some()).count();
            let before = waiting(self);
            self.serve_stale();
            // A flush reads the fresh rings that took over just now too.
            if flush && ret.is_ok() && waiting(self) < before {
                return Ok(ret? + self.order_round(true)?);
            }
        }
        ret
    }

    /// Ordered poll: rounds until something is delivered or `timeout_ms`
    /// passes, waiting on epoll in between; while records are held back by
    /// the horizon, waits at most the idle bound so idle rings stop counting.
    fn poll_ordered(&mut self, timeout_ms: i32) -> Result<usize> {
        let start = Moment::now();
        loop {
            let n = self.order_round(false)?;
            if n > 0 {
                return Ok(n);
            }
            // Past the timeout, a reader serving CPUs that come and go
            // still looks (without waiting) for their news.
            let left = timeout_left(start, timeout_ms);
            if left.is_none() && self.hotplug.is_none() {
                return Ok(0);
            }
            let order = self.order.as_ref().ok_or(Error::INVAL)?;
            let wait = match left {
                Some(left) if order.has_pending() => left.min(order.idle_wait()),
                Some(left) => left,
                None => Duration::ZERO,
            };
            let max = self.events.len();
            let cnt = sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, max, epoll_ms(wait))?;
            for i in 0..cnt {
                let token = self.events[i].u64; // a copy: the struct is packed
                match token {
                    token if token & WAKE_TAG != 0 => {
                        clear_wake(token);
                        return Err(Error::from_errno(libc::ECANCELED));
                    }
                    TIMER_TOKEN => {
                        if let Some(timer) = &mut self.timer {
                            timer.read(Moment::now());
                        }
                    }
                    HOTPLUG_TOKEN => self.serve_hotplug(),
                    idx => self.bufs[idx as usize].wakeups += 1,
                }
            }
            if left.is_none() {
                return Ok(0);
            }
        }
    }

    /// Drains every ring, handing `sink` runs of whole records contiguous in
    /// memory (see [`PerfRing::drain_spans`]): zero-copy except a record
    /// that wraps the ring's end. A sink's `Break(v)` stops the read and
    /// is returned. Returns the number of records read.
    pub fn consume_batch<F>(&mut self, mut sink: F) -> Result<usize, BatchStop>
    where
        F: FnMut(&Batch<'_>) -> ControlFlow<i32>,
    {
        self.begin_read();
        let mut total: u64 = 0;
        for idx in 0..self.bufs.len() {
            if self.bufs[idx].overwrite_prev_head.is_some() {
                continue;
            }
            if let Some(a) = &mut self.adaptive
                && self.bufs[idx].rings.has_pending()
            {
                a.before_drain(idx, &mut self.bufs[idx], self.map_fd);
            }
            let RingSet { bufs, adaptive, map_fd, .. } = self;
            let buf = &mut bufs[idx];
            buf.publish();
            let (cpu, mut stats) = (buf.cpu, buf.stats);
            let before = buf.rings.records_read();
            if let Some(lost) = buf.rings.take_owed() {
                stats.lost += lost;
                stats.others += 1;
                buf.stats = stats;
                total += 1;
                let made = LostRecord::new(lost);
                let batch = Batch { cpu, bytes: made.bytes(), samples: 0, others: 1 };
                if let ControlFlow::Break(v) = sink(&batch) {
                    return Err(BatchStop::Sink(v));
                }
            }
            // Records other than samples seen since the last run was sent
            // (both closures need it: a Cell, not two &mut).
            let others = core::cell::Cell::new(0usize);
            let (to, size) = (buf.slot_move(*map_fd), buf.rings.current().data_size() as u64);
            let ret = buf.rings.drain_watched(
                &mut stats,
                |ring, head, stats| {
                    ring.drain_spans_until(
                        head,
                        |rec| {
                            others.set(others.get() + 1);
                            stats.others += 1;
                            if let Record::Lost { lost } = record::parse(rec) {
                                deliver::take_lost(lost, stats);
                            }
                        },
                        |run, records| {
                            let others = others.replace(0);
                            sink(&Batch { cpu, bytes: run, samples: records - others, others })
                        },
                    )
                },
                |chunk, before, now| match adaptive {
                    Some(a) => a.between_chunks(idx, chunk, before, now, size, to),
                    None => chunk,
                },
            );
            buf.stats = stats;
            total += buf.rings.records_read() - before;
            match ret {
                ControlFlow::Continue(()) => {}
                ControlFlow::Break(Stop::By(v)) => return Err(BatchStop::Sink(v)),
                ControlFlow::Break(Stop::NoMemory) => return Err(BatchStop::Error(record_copy_failed())),
            }
        }
        self.end_read(false, false, None);
        Ok(total.min(i32::MAX as u64) as usize)
    }

    /// Publishes ring `idx`'s read position (the record-level API's end of
    /// a read), which ends a read as consume does.
    pub fn publish(&mut self, idx: usize) -> Result<()> {
        self.cpu_buf(idx)?.publish();
        self.end_read(false, false, None);
        Ok(())
    }

    /// Drains every ring in index order (libbpf's `perf_buffer__consume`).
    pub fn consume(&mut self) -> Result<()> {
        self.reached_head = false;
        self.begin_read();
        if self.order.is_some() {
            return self.order_round(false).map(drop);
        }
        for idx in 0..self.bufs.len() {
            self.process_records(idx).inspect_err(|e| {
                log::warn(format_args!(
                    "perf_buffer: failed to process records in buffer #{idx}: {}",
                    e.code()
                ));
            })?;
        }
        // A caller waiting on the epoll fd itself is here after a tick.
        self.end_read(false, false, None);
        Ok(())
    }

    /// Drains ring `idx` (libbpf's `perf_buffer__consume_buffer`); like
    /// consume, it ends a read (a caller draining ring by ring in its own
    /// loop must not be left with a ticking timer).
    pub fn consume_buffer(&mut self, idx: usize) -> Result<()> {
        self.reached_head = false;
        self.clock = Moment::coarse();
        self.buf(idx)?;
        let ret = self.process_records(idx);
        self.end_read(false, false, None);
        ret
    }

    /// Pauses (`true`) or resumes the kernel's output into every ring,
    /// spill rings included. While paused, the kernel drops records and
    /// counts them as lost.
    pub fn set_paused(&self, paused: bool) -> Result<()> {
        if let Some(a) = &self.adaptive {
            a.note_paused(paused);
        }
        let fast = self.adaptive.iter().flat_map(Adaptive::spill_owners);
        for fd in self.bufs.iter().map(|b| b.fd.as_fd()).chain(fast) {
            sys::perf_ioctl(fd, PERF_EVENT_IOC_PAUSE_OUTPUT, paused.into())?;
        }
        Ok(())
    }

    /// Reads overwritable ring `idx`: pauses its output, delivers the records
    /// written since the last snapshot oldest first, resumes. Returns the
    /// number of records delivered. EINVAL for a forward ring.
    pub fn snapshot(&mut self, idx: usize) -> Result<usize> {
        let RingSet { bufs, handler, .. } = self;
        let buf = bufs.get_mut(idx).ok_or(Error::new(libc::EINVAL, What::RingIndex(idx)))?;
        let Some(mut prev) = buf.overwrite_prev_head else {
            return Err(Error::invalid("not an overwritable ring"));
        };
        sys::perf_ioctl(buf.fd.as_fd(), PERF_EVENT_IOC_PAUSE_OUTPUT, 1)?;
        let (cpu, stats) = (buf.cpu, &mut buf.stats);
        let mut delivered = 0;
        let mut bytes = 0u64;
        let overwritten = buf.rings.main_mut().snapshot_backward(&mut prev, |rec| {
            let _ = handler.deliver(cpu, rec, stats);
            delivered += 1;
            bytes += rec.len() as u64;
        });
        buf.rings.main_mut().count_read(delivered as u64, bytes);
        buf.overwrite_prev_head = Some(prev);
        buf.overwritten_bytes += overwritten;
        sys::perf_ioctl(buf.fd.as_fd(), PERF_EVENT_IOC_PAUSE_OUTPUT, 0)?;
        Ok(delivered)
    }
}

impl<H> Drop for RingSet<H> {
    /// libbpf's `perf_buffer__free` order: each ring, then the epoll fd. A
    /// forked child's copy does the same (libbpf's child deletes the
    /// slots too), and tells the parent its claim on the map is void.
    fn drop(&mut self) {
        if sys::getpid() != self.owner_pid
            && let Some(claim) = &self.claim
        {
            claim.void_all();
        }
        for buf in self.bufs.drain(..) {
            buf.teardown(self.map_fd, self.keep_slots);
        }
    }
}

/// A delay bound in a message: nothing without one.
struct Bound(Option<Duration>);

impl core::fmt::Display for Bound {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(d) => write!(f, ", each delivered within {d:?}"),
            None => Ok(()),
        }
    }
}

/// Why `consume_batch` stopped early.
pub enum BatchStop {
    /// The sink said so, with this value.
    Sink(i32),
    /// The read failed.
    Error(Error),
}

/// The error a drain's outcome means: `Done` stops a ring quietly.
pub(crate) fn halted(flow: Flow) -> Result<()> {
    match flow {
        ControlFlow::Continue(()) | ControlFlow::Break(Stop::By(Halt::Done)) => Ok(()),
        ControlFlow::Break(Stop::By(halt)) => Err(halt_error(halt)),
        ControlFlow::Break(Stop::NoMemory) => Err(record_copy_failed()),
    }
}

fn halt_error(halt: Halt) -> Error {
    match halt {
        Halt::Done => Error::stopped(0),
        Halt::Code(v) => Error::stopped(v),
        Halt::Unknown(t) => Error::unknown_record(t),
    }
}

/// A wrapped record could not be copied (libbpf stops with
/// `LIBBPF_PERF_EVENT_ERROR` then).
fn record_copy_failed() -> Error {
    Error::new(libc::ENOMEM, What::RecordCopy)
}

fn warn_processing(e: Error) -> Error {
    log::warn(format_args!("error while processing records: {}", e.code()));
    e
}

/// libbpf's best-effort map check: returns `max_entries` (0 when unknown)
/// and the map's id (`None` when unknown).
fn checked_map(map_fd: RawFd) -> Result<(u32, Option<u32>)> {
    match sys::map_info(map_fd) {
        Ok(info) if info.map_type != BPF_MAP_TYPE_PERF_EVENT_ARRAY => {
            Err(log::failed(Error::new(libc::EINVAL, What::NotPerfEventArray(info.map_type))))
        }
        Ok(info) => Ok((info.max_entries, Some(info.id))),
        Err(e) if e.errno() == libc::EINVAL => {
            log::debug(format_args!(
                "failed to get map info for FD {map_fd}; API not supported? Ignoring..."
            ));
            Ok((0, None))
        }
        Err(e) => Err(log::failed(e.with(What::MapInfo(map_fd)))),
    }
}

/// What is left of `timeout_ms` (negative: forever) since `start`;
/// `None` once it has passed.
pub(crate) fn timeout_left(start: Moment, timeout_ms: i32) -> Option<Duration> {
    if timeout_ms < 0 {
        return Some(Duration::MAX);
    }
    Duration::from_millis(timeout_ms as u64).checked_sub(start.elapsed()).filter(|d| !d.is_zero())
}

/// A duration as an epoll timeout: whole ms rounded up, -1 for forever.
pub(crate) fn epoll_ms(d: Duration) -> i32 {
    if d == Duration::MAX {
        return -1;
    }
    d.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32
}

#[cfg(test)]
mod accounting_tests;
#[cfg(test)]
mod hotplug_tests;
#[cfg(test)]
mod tests;
