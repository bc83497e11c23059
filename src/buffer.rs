//! `PerfBuffer`: the safe core behind the C handle. One perf event and ring
//! per CPU, an epoll set over them, and libbpf's poll/consume semantics,
//! plus the extensions: bounded-delay batching (a timerfd in the epoll set),
//! overwritable rings, pause/resume, wake-ups from other threads, and
//! adaptive wake-ups under libbpf's default attr (see [`crate::adaptive`]).

use crate::abi::LIBBPF_PERF_EVENT_CONT;
use crate::adaptive::{self, Adaptive, Timer};
use crate::callbacks::{Callbacks, DispatchStats};
use crate::clock::Coarse;
use crate::cpu;
use crate::error::{Errno, Result, libbpf_err};
use crate::fallible;
use crate::kernel::{PERF_EVENT_IOC_PAUSE_OUTPUT, PERF_FORMAT_LOST, PerfEventAttr};
use crate::log;
use crate::order::{KeySource, Order, OrderStats};
use crate::record::{self, Record};
use crate::ring::{At, PerfRing};
use crate::sys::{
    self, AttrSource, BPF_MAP_TYPE_PERF_EVENT_ARRAY, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_ENABLE,
};
use core::ffi::c_int;
use core::sync::atomic::{AtomicBool, Ordering};
use once_cell::sync::OnceCell;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// epoll token of the timerfd (ring tokens are their indexes).
const TIMER_TOKEN: u64 = 1 << 63;
/// epoll token of the wake-up eventfd: this bit, or'ed with the fd (the
/// waker lives outside the buffer, so poll learns the fd from the token).
const WAKE_TAG: u64 = 1 << 62;

/// Which CPUs get a buffer.
pub enum CpuSelection {
    /// Every online CPU below the possible count (and below the map's
    /// `max_entries`); map key = CPU id. Offline CPUs are skipped.
    AllOnline,
    /// These CPUs, map key = CPU id; offline or absent ones are skipped.
    Subset(Vec<c_int>),
    /// Exactly these `(cpu, map_key)` pairs, in order; none is skipped.
    Explicit(Vec<(c_int, c_int)>),
}

/// Everything a constructor needs.
pub struct Config<'a> {
    /// The `BPF_MAP_TYPE_PERF_EVENT_ARRAY` (borrowed, never closed).
    pub map_fd: RawFd,
    /// Data pages per CPU; a power of two.
    pub page_cnt: usize,
    /// The event to open on each CPU.
    pub attr: AttrSource<'a>,
    /// Which CPUs.
    pub cpus: CpuSelection,
    /// Where records go.
    pub callbacks: Callbacks,
    /// Map the rings read-only: the attr must ask for `write_backward`.
    pub overwrite: bool,
    /// Drain whatever is pending at least this often (batching).
    pub max_delay_ms: Option<u32>,
    /// The attr's `sample_type` (decides where PERF_SAMPLE_TIME sits).
    pub sample_type: u64,
    /// The attr is libbpf's default: batch wake-ups while rates are high.
    pub adaptive: bool,
}

/// One CPU's event and ring.
pub struct CpuBuf {
    cpu: c_int,
    map_key: c_int,
    fd: OwnedFd,
    ring: PerfRing,
    stats: DispatchStats,
    /// Times epoll reported this ring.
    wakeups: u64,
    /// Overwritable rings: the head seen by the previous snapshot.
    overwrite_prev_head: Option<u64>,
    /// Overwritable rings: bytes overwritten before they could be read.
    overwritten_bytes: u64,
    /// Record-level API: read position ahead of the published tail.
    cursor: Option<u64>,
    /// Adaptive wake-ups: the larger ring of the batching event, once it
    /// has one (see [`crate::adaptive`]).
    spill: Option<PerfRing>,
    /// The map slot points at the spill ring's event now.
    spill_current: bool,
    /// Lost records the kernel will not report in a ring (see
    /// [`crate::adaptive`]), delivered before the next records read.
    owed_lost: u64,
    /// Lost reports delivered for `owed_lost`: the figures count them with
    /// the records read, as the ring would have held them.
    lost_reports_made: u64,
}

impl CpuBuf {
    /// The CPU this buffer reads.
    pub fn cpu(&self) -> c_int {
        self.cpu
    }

    /// The key of this ring's slot in the map.
    pub fn map_key(&self) -> c_int {
        self.map_key
    }

    /// The perf event fd.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The perf event (the caller's).
    pub fn event(&self) -> &OwnedFd {
        &self.fd
    }

    /// The ring.
    pub fn ring(&self) -> &PerfRing {
        &self.ring
    }

    /// The spill ring, once adaptive batching made one.
    pub fn spill_ring(&self) -> Option<&PerfRing> {
        self.spill.as_ref()
    }

    /// Adds lost records to deliver before the next records read.
    pub(crate) fn owe_lost(&mut self, lost: u64) {
        self.owed_lost += lost;
    }

    /// Whether a read would deliver anything.
    pub fn has_pending(&self) -> bool {
        self.owed_lost > 0 || self.pending_bytes() > 0
    }

    /// The owed lost records, if any, now being delivered (see
    /// [`Self::owe_lost`]).
    fn take_owed(&mut self) -> Option<u64> {
        let lost = core::mem::take(&mut self.owed_lost);
        (lost > 0).then(|| {
            self.lost_reports_made += 1;
            lost
        })
    }

    /// Drains this CPU's rings with `drain(ring, head, stats)` in the order
    /// their records were written: the ring the map slot left, then the one
    /// it points at. The newer ring's head is loaded before the older ring
    /// is read, so a record the older ring got just before a switch is read
    /// before any the newer one got after it. `go_on` is the value with
    /// which `drain` says it read everything. Each ring counts the lost
    /// records reported in it (what `drain` added to `stats.lost`).
    fn drain_rings<F>(&mut self, go_on: c_int, stats: &mut DispatchStats, mut drain: F) -> c_int
    where
        F: FnMut(&mut PerfRing, u64, &mut DispatchStats) -> c_int,
    {
        let mut drain_one = |ring: &mut PerfRing, head: u64| {
            // An empty ring costs two loads: no drain set up, no tail store.
            if head == ring.load_tail() {
                return go_on;
            }
            let before = stats.lost;
            let ret = drain(ring, head, stats);
            ring.count_lost(stats.lost - before);
            ret
        };
        let (older, newer) = match &mut self.spill {
            None => {
                let head = self.ring.load_head();
                return drain_one(&mut self.ring, head);
            }
            Some(spill) if self.spill_current => (&mut self.ring, spill),
            Some(spill) => (spill, &mut self.ring),
        };
        let head = newer.load_head();
        let ret = drain_one(older, older.load_head());
        if ret != go_on {
            return ret;
        }
        drain_one(newer, head)
    }

    /// A buffer over a heap ring, for tests of code above the ring.
    #[cfg(test)]
    pub(crate) fn for_test(cpu: c_int, ring: PerfRing) -> CpuBuf {
        let fd = std::fs::File::open("/dev/null").expect("/dev/null").into();
        CpuBuf {
            cpu,
            map_key: cpu,
            fd,
            ring,
            stats: DispatchStats::default(),
            wakeups: 0,
            overwrite_prev_head: None,
            overwritten_bytes: 0,
            cursor: None,
            spill: None,
            spill_current: false,
            owed_lost: 0,
            lost_reports_made: 0,
        }
    }

    /// Gives this CPU the spill ring of its batching event.
    pub(crate) fn set_spill(&mut self, ring: PerfRing) {
        self.spill = Some(ring);
    }

    /// Records now go to the spill ring (`true`) or to the caller's.
    pub(crate) fn set_spill_current(&mut self, current: bool) {
        self.spill_current = current && self.spill.is_some();
    }

    /// Records read from this CPU's rings.
    pub fn records_read(&self) -> u64 {
        self.ring.stats().records + self.spill.as_ref().map_or(0, |s| s.stats().records)
    }

    /// Bytes waiting in this CPU's rings.
    pub fn pending_bytes(&self) -> u64 {
        self.ring.pending_bytes() + self.spill.as_ref().map_or(0, PerfRing::pending_bytes)
    }

    pub(crate) fn ring_mut(&mut self) -> &mut PerfRing {
        &mut self.ring
    }

    /// Hands the owed lost records, if any, to the callbacks (the ordered
    /// reader's way; see [`Self::owe_lost`]).
    pub(crate) fn dispatch_owed(&mut self, callbacks: &Callbacks) -> c_int {
        self.take_owed().map_or(LIBBPF_PERF_EVENT_CONT, |lost| {
            callbacks.dispatch(self.cpu, record::LostRecord::new(lost).bytes(), &mut self.stats)
        })
    }

    /// Hands the `size`-byte record at `pos` to the callbacks.
    pub(crate) fn dispatch_at(&mut self, callbacks: &Callbacks, cpu: c_int, pos: u64, size: usize) -> c_int {
        let ret = match self.ring.record_at(pos, pos.wrapping_add(size as u64)) {
            At::Record(rec) => callbacks.dispatch(cpu, rec, &mut self.stats),
            _ => return LIBBPF_PERF_EVENT_CONT,
        };
        self.ring.count_read(1, size as u64);
        ret
    }

    /// The next record at the cursor, without consuming it (`None` when
    /// the ring is empty). An inconsistent ring state skips to the head.
    pub fn peek(&mut self) -> Result<Option<&[u8]>> {
        let head = self.ring.load_head();
        let pos = self.cursor.unwrap_or_else(|| self.ring.load_tail());
        // Decide first, then borrow the record (the checks need &mut ring).
        match self.ring.record_at(pos, head) {
            At::Record(_) => {}
            At::End => return Ok(None),
            At::NoMemory => return Err(Errno::NOMEM),
            At::Corrupt => {
                self.ring.note_skipped(pos, head);
                self.cursor = Some(head);
                return Ok(None);
            }
        }
        match self.ring.record_at(pos, head) {
            At::Record(rec) => Ok(Some(rec)),
            _ => Ok(None),
        }
    }

    /// Moves the cursor past the next record; ENODATA when there is none.
    pub fn advance(&mut self) -> Result<()> {
        let head = self.ring.load_head();
        let pos = self.cursor.unwrap_or_else(|| self.ring.load_tail());
        match self.ring.record_at(pos, head) {
            At::Record(rec) => {
                let size = rec.len() as u64;
                self.cursor = Some(pos.wrapping_add(size));
                Ok(())
            }
            _ => Err(Errno(libc::ENODATA)),
        }
    }

    /// Publishes the cursor as the tail (release), freeing the space of
    /// every record advanced past.
    pub fn publish(&mut self) {
        if let Some(pos) = self.cursor.take() {
            self.ring.store_tail(pos);
        }
    }

    /// Current figures, in the C layout (`sz` left for the caller).
    pub fn figures(&self) -> crate::abi::perfbuf_ring_stats {
        let mut ring = self.ring.stats();
        ring.records += self.lost_reports_made;
        ring.bytes += self.lost_reports_made * record::LOST_RECORD_SIZE as u64;
        if let Some(spill) = &self.spill {
            let s = spill.stats();
            ring.records += s.records;
            ring.bytes += s.bytes;
            ring.resyncs += s.resyncs;
            ring.skipped_bytes += s.skipped_bytes;
        }
        crate::abi::perfbuf_ring_stats {
            sz: 0,
            cpu: self.cpu,
            reserved: 0,
            records: ring.records,
            bytes: ring.bytes,
            lost: self.stats.lost,
            wakeups: self.wakeups,
            pending_bytes: self.pending_bytes(),
            data_size: self.ring.data_size() as u64,
            resyncs: ring.resyncs,
            skipped_bytes: ring.skipped_bytes,
            malformed: self.stats.malformed,
            overwritten_bytes: self.overwritten_bytes,
            batched: 0,
            batch_switches: 0,
            spill_size: self.spill.as_ref().map_or(0, |s| s.data_size() as u64),
        }
    }

    /// libbpf's teardown order: forget the map entry, unmap, disable, close.
    fn teardown(self, map_fd: RawFd) {
        let CpuBuf { map_key, fd, ring, spill, .. } = self;
        let _ = sys::map_delete_u32(map_fd, map_key as u32);
        drop(spill);
        drop(ring);
        let _ = sys::perf_ioctl(&fd, PERF_EVENT_IOC_DISABLE, 0);
        drop(fd);
    }
}

/// What an ordered reader sorts by.
pub enum OrderKey {
    /// The first 8 bytes of each sample's raw data.
    RawPrefix,
    /// The record's `PERF_SAMPLE_TIME` field (raw mode).
    SampleTime,
    /// The caller's key function and its ctx.
    Callback(
        unsafe extern "C" fn(*mut core::ffi::c_void, c_int, *const core::ffi::c_void) -> u64,
        *mut core::ffi::c_void,
    ),
}

/// The part of a buffer other threads may touch: waking a blocked `poll`.
/// Kept outside [`PerfBuffer`] (which a poll holds mutably) by its owner.
pub struct Waker {
    epoll_fd: RawFd,
    eventfd: OnceCell<OwnedFd>,
}

impl Waker {
    /// A waker for the buffer whose epoll fd is `epoll_fd`; it must not
    /// outlive that buffer.
    pub fn new(epoll_fd: RawFd) -> Waker {
        Waker { epoll_fd, eventfd: OnceCell::new() }
    }

    /// Makes a `poll` in progress (or the next one) return `-ECANCELED`.
    /// Safe from any thread while the buffer lives. The eventfd is created
    /// on first use, so buffers that never wake keep libbpf's fd set.
    pub fn wake(&self) -> Result<()> {
        let efd = self.eventfd.get_or_try_init(|| {
            let efd = sys::eventfd()?;
            let epoll = self.epoll_fd;
            sys::epoll_add_raw(epoll, efd.as_raw_fd(), WAKE_TAG | efd.as_raw_fd() as u64)?;
            Ok::<_, Errno>(efd)
        })?;
        sys::write_u64(efd.as_raw_fd(), 1)
    }
}

/// A batch for `perfbuf_consume_batch`'s sink: `run`, whole records
/// contiguous in memory, `samples` of them samples and `others` not.
fn batch_of(cpu: c_int, run: &[u8], samples: usize, others: usize) -> crate::abi::perfbuf_batch {
    crate::abi::perfbuf_batch {
        cpu,
        reserved: 0,
        records: run.as_ptr().cast(),
        len: run.len(),
        samples,
        others,
    }
}

/// Consumes a wake-up: `token` is the eventfd's epoll token.
fn clear_wake(token: u64) {
    sys::read_u64((token & !WAKE_TAG) as RawFd);
}

/// What is left of a poll's `timeout_ms` begun at `start` (`Duration::MAX`
/// for a negative, unbounded timeout); `None` once it has passed.
fn timeout_left(start: Instant, timeout_ms: c_int) -> Option<Duration> {
    if timeout_ms < 0 {
        return Some(Duration::MAX);
    }
    Duration::from_millis(timeout_ms as u64).checked_sub(start.elapsed()).filter(|d| !d.is_zero())
}

/// An epoll timeout for `wait`: -1 for unbounded, else whole milliseconds
/// rounded up (at least 1, so a sub-millisecond rest does not spin).
fn epoll_ms(wait: Duration) -> c_int {
    if wait == Duration::MAX {
        return -1;
    }
    wait.as_micros().div_ceil(1000).clamp(1, c_int::MAX as u128) as c_int
}

/// The delay timer in the epoll set (max-delay batching or adaptive
/// wake-ups), and when its next tick is due, so that a tick can be cleared
/// without a syscall when none can have fired.
struct Ticker {
    fd: OwnedFd,
    /// Zero while disarmed.
    period: Duration,
    /// The start of the current period: ticks fire at `since + k * period`,
    /// and none since `since` has been read yet.
    since: Instant,
}

impl Ticker {
    /// A timerfd ticking every `period`, in `epoll` under [`TIMER_TOKEN`].
    fn new(epoll: &OwnedFd, period: Duration) -> Result<Ticker> {
        let fd = sys::timerfd()?;
        sys::epoll_add(epoll, fd.as_raw_fd(), TIMER_TOKEN)?;
        let mut ticker = Ticker { fd, period: Duration::ZERO, since: Instant::now() };
        ticker.arm(period)?;
        Ok(ticker)
    }

    /// Ticks every `period` from now on (never, for zero); a pending tick
    /// is dropped. Costs about 4 µs in a VM: it reprograms a kernel timer.
    fn arm(&mut self, period: Duration) -> Result<()> {
        sys::arm_timer(&self.fd, period)?;
        // Taken after the call, so no tick is ever due before `since +
        // period` says: at worst a tick is seen a syscall's time late.
        (self.period, self.since) = (period, Instant::now());
        Ok(())
    }

    /// Reads the ticks that fired (epoll said so, or [`Self::clear`] knows).
    fn read(&mut self, now: Instant) {
        sys::read_u64(self.fd.as_raw_fd());
        if self.ticking() {
            let periods = now.saturating_duration_since(self.since).as_nanos() / self.period.as_nanos();
            self.since += self.period * periods.min(u32::MAX as u128) as u32;
        }
    }

    /// Whether it is armed.
    fn ticking(&self) -> bool {
        !self.period.is_zero()
    }

    /// Clears a tick that fired, so a caller waiting on the epoll fd is not
    /// left with a ready fd; reads the timerfd (about 0.3 µs) only when a
    /// tick can have fired, and the clock only while ticking.
    fn clear(&mut self) {
        if !self.ticking() {
            return;
        }
        let now = Instant::now();
        if now.saturating_duration_since(self.since) >= self.period {
            self.read(now);
        }
    }
}

/// A set of per-CPU perf rings read through one epoll instance.
pub struct PerfBuffer {
    map_fd: RawFd,
    callbacks: Callbacks,
    bufs: Vec<CpuBuf>,
    events: Vec<libc::epoll_event>,
    timer: Option<Ticker>,
    order: Option<Order>,
    adaptive: Option<Adaptive>,
    /// Someone reads the caller's rings directly (`perf_buffer__buffer`, the
    /// record-level API, ordered reading): records must stay there, so
    /// adaptive batching stops using spill rings. Atomic because
    /// `perf_buffer__buffer` only has a shared reference.
    raw_readers: AtomicBool,
    /// Raw mode: the caller's attr `sample_type` (for PERF_SAMPLE_TIME keys).
    sample_type: u64,
    epoll: OwnedFd,
}

impl PerfBuffer {
    /// Builds the buffer in libbpf's order; on any failure everything
    /// already set up is torn down (as `perf_buffer__free` would) and the
    /// first error is returned.
    pub fn new(cfg: Config<'_>) -> Result<PerfBuffer> {
        let Config {
            map_fd,
            page_cnt,
            attr,
            cpus,
            callbacks,
            overwrite,
            max_delay_ms,
            sample_type,
            adaptive,
        } = cfg;
        if page_cnt == 0 || !page_cnt.is_power_of_two() {
            log::warn(format_args!("page count should be power of two, but is {page_cnt}"));
            return Err(Errno::INVAL);
        }
        let max_entries = checked_map_max_entries(map_fd)?;
        let page_size = cpu::page_size();
        if page_cnt.checked_mul(page_size).and_then(|s| s.checked_add(page_size)).is_none() {
            log::warn(format_args!("page count {page_cnt} overflows the mapping size"));
            return Err(Errno::INVAL);
        }
        let epoll = sys::epoll_create().inspect_err(|e| {
            log::warn(format_args!("failed to create epoll instance: {e}"));
        })?;
        let skip_offline = !matches!(cpus, CpuSelection::Explicit(_));
        let slots: Vec<(c_int, c_int)> = match cpus {
            CpuSelection::Explicit(pairs) => pairs,
            CpuSelection::Subset(list) => fallible::collect(list.len(), list.iter().map(|&c| (c, c)))?,
            CpuSelection::AllOnline => {
                let mut n = cpu::possible_cpu_count()?;
                if max_entries != 0 && (max_entries as usize) < n {
                    n = max_entries as usize;
                }
                fallible::collect(n, (0..n as c_int).map(|c| (c, c)))?
            }
        };
        let mut pb = PerfBuffer {
            map_fd,
            callbacks,
            // Room for every ring plus the wake and timer tokens.
            events: fallible::collect(
                slots.len() + 2,
                core::iter::repeat(libc::epoll_event { events: 0, u64: 0 }),
            )?,
            bufs: fallible::vec_with_capacity(slots.len())?,
            timer: None,
            order: None,
            adaptive: None,
            raw_readers: AtomicBool::new(false),
            sample_type,
            epoll,
        };
        // Adaptive wake-ups may move a map slot to a spill ring and back;
        // exact lost counts across such moves need every event's own count
        // of what it failed to write (see [`crate::adaptive`]).
        let adaptive = adaptive && !overwrite && max_delay_ms.is_none();
        let counted_attr = match attr {
            AttrSource::Built(a) if adaptive && sys::format_lost_supported() => {
                Some(PerfEventAttr { read_format: a.read_format | PERF_FORMAT_LOST, ..*a })
            }
            _ => None,
        };
        let attr = counted_attr.as_ref().map_or(attr, AttrSource::Built);
        let online = cpu::online_mask().inspect_err(|e| {
            log::warn(format_args!("failed to get online CPU mask: {e}"));
        })?;
        for &(cpu, map_key) in &slots {
            let is_online = usize::try_from(cpu).ok().and_then(|c| online.get(c)).copied().unwrap_or(false);
            if skip_offline && !is_online {
                log::debug(format_args!("skipping offline or absent cpu #{cpu}"));
                continue;
            }
            pb.add_cpu(cpu, map_key, attr, page_cnt, page_size, overwrite)?;
        }
        if let Some(ms) = max_delay_ms {
            // Ticking at half the bound keeps a record's wait, tick plus the
            // reader's own wake-up, within the bound.
            pb.timer = Some(Ticker::new(&pb.epoll, Duration::from_millis(ms.max(1).into()) / 2)?);
        }
        if adaptive {
            pb.adaptive = Some(Adaptive::new(pb.bufs.len(), counted_attr.is_some())?);
        }
        Ok(pb)
    }

    /// Opens, maps and enables one CPU's event, then publishes it in the map
    /// and the epoll set (libbpf's steps c–h). The buffer is stored before
    /// the map update so that a failure there still deletes the key on
    /// teardown, as libbpf does.
    fn add_cpu(
        &mut self,
        cpu: c_int,
        map_key: c_int,
        attr: AttrSource<'_>,
        page_cnt: usize,
        page_size: usize,
        overwrite: bool,
    ) -> Result<()> {
        let fd = sys::perf_event_open(attr, cpu).inspect_err(|e| {
            log::warn(format_args!("failed to open perf buffer event on cpu #{cpu}: {e}"));
        })?;
        let ring = PerfRing::map(fd.as_raw_fd(), page_size, page_cnt, !overwrite).inspect_err(|e| {
            log::warn(format_args!("failed to mmap perf buffer on cpu #{cpu}: {e}"));
            let _ = sys::perf_ioctl(&fd, PERF_EVENT_IOC_DISABLE, 0);
        })?;
        if let Err(e) = sys::perf_ioctl(&fd, PERF_EVENT_IOC_ENABLE, 0) {
            log::warn(format_args!("failed to enable perf buffer event on cpu #{cpu}: {e}"));
            drop(ring);
            let _ = sys::perf_ioctl(&fd, PERF_EVENT_IOC_DISABLE, 0);
            return Err(e);
        }
        let perf_fd = fd.as_raw_fd();
        let index = self.bufs.len();
        self.bufs.push(CpuBuf {
            cpu,
            map_key,
            fd,
            ring,
            stats: DispatchStats::default(),
            wakeups: 0,
            overwrite_prev_head: overwrite.then_some(0),
            overwritten_bytes: 0,
            cursor: None,
            spill: None,
            spill_current: false,
            owed_lost: 0,
            lost_reports_made: 0,
        });
        sys::map_update_u32(self.map_fd, map_key as u32, perf_fd as u32).inspect_err(|e| {
            log::warn(format_args!("failed to set cpu #{cpu}, key {map_key} -> perf FD {perf_fd}: {e}"));
        })?;
        sys::epoll_add(&self.epoll, perf_fd, index as u64).inspect_err(|e| {
            log::warn(format_args!("failed to epoll_ctl cpu #{cpu} perf FD {perf_fd}: {e}"));
        })
    }

    /// The epoll fd over all rings.
    pub fn epoll_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Number of rings actually set up.
    pub fn buffer_cnt(&self) -> usize {
        self.bufs.len()
    }

    /// The ring at `idx`, or EINVAL past the end.
    pub fn buf(&self, idx: usize) -> Result<&CpuBuf> {
        self.bufs.get(idx).ok_or(Errno::INVAL)
    }

    /// The caller's ring at `idx` for a reader of its own
    /// (`perf_buffer__buffer`): from the next read on, records stay there.
    pub fn raw_ring(&self, idx: usize) -> Result<&PerfRing> {
        let ring = self.buf(idx)?.ring();
        self.raw_readers.store(true, Ordering::Relaxed);
        Ok(ring)
    }

    /// Drains ring `idx` (libbpf's `perf_buffer__process_records`): 0 when
    /// the batch ended normally or a handler said DONE, else the handler's
    /// value. Like libbpf, `errno` is left at ENOENT after a normal drain.
    /// An overwritable ring is read as a snapshot instead.
    fn process_records(&mut self, idx: usize) -> c_int {
        if self.order.is_some() {
            return self.order_round(false).map_or_else(|e| e, |_| 0);
        }
        self.bufs[idx].publish();
        if self.bufs[idx].overwrite_prev_head.is_some() {
            return self.snapshot(idx).map_or_else(|e| -e.0, |_| 0);
        }
        let PerfBuffer { bufs, callbacks, .. } = self;
        let buf = &mut bufs[idx];
        // Count in a local the callbacks cannot see, so the counters stay in
        // registers across the indirect calls; store them once per drain.
        let (cpu, mut stats) = (buf.cpu, buf.stats);
        let mut ret = buf.take_owed().map_or(LIBBPF_PERF_EVENT_CONT, |lost| {
            callbacks.dispatch(cpu, record::LostRecord::new(lost).bytes(), &mut stats)
        });
        if ret == LIBBPF_PERF_EVENT_CONT {
            ret = buf.drain_rings(LIBBPF_PERF_EVENT_CONT, &mut stats, |ring, head, stats| {
                callbacks.drain_ring(ring, head, cpu, stats)
            });
        }
        let ret = libbpf_err(ret);
        buf.stats = stats;
        if ret == LIBBPF_PERF_EVENT_CONT { 0 } else { ret }
    }

    /// Waits up to `timeout_ms` for rings the kernel signalled, drains each,
    /// and returns how many were drained (libbpf's `perf_buffer__poll`).
    /// With a max-delay timer, a timer tick drains every ring holding data;
    /// a tick that finds nothing goes back to waiting, so that 0 still means
    /// the timeout passed. After [`Waker::wake`], returns `-ECANCELED` (rings
    /// signalled in the same wait are drained first).
    pub fn poll(&mut self, timeout_ms: c_int) -> c_int {
        if self.order.is_some() {
            return self.poll_ordered(timeout_ms);
        }
        // Only a wait that our own tick ended can need a second one, so
        // the clock is read only while the timer ticks.
        let mut start = None;
        let mut wait_ms = timeout_ms;
        loop {
            if self.timer.as_ref().is_some_and(Ticker::ticking) {
                start.get_or_insert_with(Instant::now);
            }
            if let Some(ret) = self.poll_once(wait_ms) {
                return ret;
            }
            wait_ms = match timeout_left(*start.get_or_insert_with(Instant::now), timeout_ms) {
                Some(left) if timeout_ms != 0 => epoll_ms(left),
                _ => return 0,
            };
        }
    }

    /// One epoll wait and the drains it calls for; `None` when only our own
    /// timer fired and there was nothing to drain.
    fn poll_once(&mut self, timeout_ms: c_int) -> Option<c_int> {
        // libbpf passes the ring count (so 0 rings gives EINVAL); our own
        // timer and wake fds need room too.
        let max = match self.bufs.len() {
            0 => 0,
            n => n + 1,
        } + usize::from(self.timer.is_some());
        let cnt = match sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, max, timeout_ms) {
            Ok(cnt) => cnt,
            Err(e) => return Some(-e.0),
        };
        let (mut drained, mut flush, mut woken) = (0, false, None);
        for i in 0..cnt {
            let token = self.events[i].u64; // a copy: the struct is packed
            match token {
                TIMER_TOKEN => flush = true,
                token if token & WAKE_TAG != 0 => woken = Some(token),
                token => {
                    let idx = token as usize;
                    // A ring and its spill ring share a token: one drain
                    // reads both.
                    if self.bufs[idx].spill.is_some() && (0..i).any(|j| self.events[j].u64 == token) {
                        continue;
                    }
                    self.bufs[idx].wakeups += 1;
                    let err = self.process_records(idx);
                    if err != 0 {
                        log::warn(format_args!("error while processing records: {err}"));
                        return Some(libbpf_err(err));
                    }
                    drained += 1;
                }
            }
        }
        // Batched rings may hold records that woke nobody: every poll reads
        // them, and the timer only has to cover the time between polls.
        let batched = self.adaptive.as_ref().is_some_and(Adaptive::any_batched);
        if flush || batched {
            if flush && let Some(timer) = &mut self.timer {
                timer.read(Instant::now());
            }
            for idx in 0..self.bufs.len() {
                if !self.bufs[idx].has_pending() || self.bufs[idx].overwrite_prev_head.is_some() {
                    continue;
                }
                let err = self.process_records(idx);
                if err != 0 {
                    log::warn(format_args!("error while processing records: {err}"));
                    return Some(libbpf_err(err));
                }
                drained += 1;
            }
        }
        self.end_read(true);
        if let Some(token) = woken {
            clear_wake(token);
            return Some(libbpf_err(-libc::ECANCELED));
        }
        if cnt > 0 && drained == 0 {
            return None;
        }
        Some(drained)
    }

    /// Ends a read of every ring: lets the adaptive state move rings
    /// between per-record and batched wake-ups and start or stop the timer
    /// that bounds the delay, and clears a tick that fired. `in_poll`: poll
    /// just read every batched ring, so while batched the next tick may
    /// start a period later (re-armed at most every half tick), and a tick
    /// it waited on is already read.
    fn end_read(&mut self, in_poll: bool) {
        if let Some(adaptive) = &mut self.adaptive {
            if self.raw_readers.load(Ordering::Relaxed) {
                adaptive.forbid_spill(&mut self.bufs, self.map_fd);
            }
            let result = match adaptive.observe(Coarse::now(), &mut self.bufs, self.map_fd, &self.epoll) {
                // Pushed back only while it ticks: a stopped timer stays
                // stopped until a ring is batched again.
                Timer::Keep => match &mut self.timer {
                    Some(t) if in_poll && t.ticking() && t.since.elapsed() >= adaptive::TICK / 2 => {
                        t.arm(adaptive::TICK)
                    }
                    _ => Ok(()),
                },
                Timer::Arm => match &mut self.timer {
                    Some(timer) => timer.arm(adaptive::TICK),
                    None => Ticker::new(&self.epoll, adaptive::TICK).map(|t| self.timer = Some(t)),
                },
                Timer::Disarm => self.timer.as_mut().map_or(Ok(()), |t| t.arm(Duration::ZERO)),
            };
            if let Err(e) = result {
                // Without a timer nothing bounds the delay: wake per record again.
                log::debug(format_args!("adaptive wake-ups off: no timer: {e}"));
                adaptive.abandon(&mut self.bufs, self.map_fd);
                self.adaptive = None;
            }
        }
        if !in_poll && let Some(timer) = &mut self.timer {
            timer.clear();
        }
    }

    /// Ring `idx`'s figures in the C layout (`sz` left for the caller).
    pub fn figures(&self, idx: usize) -> Result<crate::abi::perfbuf_ring_stats> {
        let mut figures = self.buf(idx)?.figures();
        if let Some(adaptive) = &self.adaptive {
            let (batched, switches) = adaptive.state(idx);
            figures.batched = batched.into();
            figures.batch_switches = switches;
        }
        Ok(figures)
    }

    /// Turns on ordered delivery: from now on poll and consume deliver
    /// records from all rings in key order (see [`crate::order`]).
    /// `PERF_SAMPLE_TIME` keys need an attr that samples TIME.
    pub fn set_order(&mut self, key: OrderKey, idle_wait: std::time::Duration) -> Result<()> {
        let key = match key {
            OrderKey::RawPrefix => KeySource::RawPrefix,
            OrderKey::Callback(f, ctx) => KeySource::Callback(f, ctx),
            OrderKey::SampleTime => {
                const IP: u64 = 1 << 0;
                const TID: u64 = 1 << 1;
                const TIME: u64 = 1 << 2;
                const IDENTIFIER: u64 = 1 << 16;
                if self.sample_type & TIME == 0 {
                    log::warn(format_args!("ordering by PERF_SAMPLE_TIME needs an attr that samples TIME"));
                    return Err(Errno::INVAL);
                }
                let before = [IDENTIFIER, IP, TID].iter().filter(|&&b| self.sample_type & b != 0).count();
                KeySource::SampleTime(8 + 8 * before)
            }
        };
        for buf in &mut self.bufs {
            buf.publish();
        }
        // The ordered reader reads the caller's rings: records go there
        // from now on, and what spill rings hold is delivered first.
        *self.raw_readers.get_mut() = true;
        if let Some(adaptive) = &mut self.adaptive {
            adaptive.forbid_spill(&mut self.bufs, self.map_fd);
            for idx in 0..self.bufs.len() {
                if self.bufs[idx].spill.as_ref().is_some_and(|s| s.pending_bytes() > 0) {
                    let err = self.process_records(idx);
                    if err < 0 {
                        return Err(Errno(-err));
                    }
                }
            }
        }
        // The ordered reader takes no adaptive decisions (it never ends a
        // read the way poll and consume do), so rings go back to waking
        // per record for good and the timer stops: a batched ring would
        // otherwise stay batched, and the timer tick, for the buffer's life.
        if let Some(mut adaptive) = self.adaptive.take() {
            adaptive.abandon(&mut self.bufs, self.map_fd);
            if let Some(Err(e)) = self.timer.as_mut().map(|t| t.arm(Duration::ZERO)) {
                log::warn(format_args!("cannot stop the adaptive timer: {e}"));
            }
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
    pub fn flush_ordered(&mut self) -> Result<c_int> {
        if self.order.is_none() {
            return Err(Errno::INVAL);
        }
        self.order_round(true).map(|n| n as c_int).or_else(|e| Ok(libbpf_err(e)))
    }

    fn order_round(&mut self, flush: bool) -> std::result::Result<usize, c_int> {
        let PerfBuffer { bufs, callbacks, order, .. } = self;
        order.as_mut().expect("ordered mode").round(bufs, callbacks, flush)
    }

    /// Ordered poll: rounds until something is delivered or `timeout_ms`
    /// passes, waiting on epoll in between; while records are held back by
    /// the horizon, waits at most the idle bound so idle rings stop counting.
    fn poll_ordered(&mut self, timeout_ms: c_int) -> c_int {
        let start = Instant::now();
        loop {
            match self.order_round(false) {
                Err(e) => return libbpf_err(e),
                Ok(n) if n > 0 => return n as c_int,
                Ok(_) => {}
            }
            let Some(left) = timeout_left(start, timeout_ms) else { return 0 };
            let order = self.order.as_ref().expect("ordered mode");
            let wait = if order.has_pending() { left.min(order.idle_wait()) } else { left };
            let wait_ms = epoll_ms(wait);
            let max = self.events.len();
            let cnt = match sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, max, wait_ms) {
                Ok(cnt) => cnt,
                Err(e) => return -e.0,
            };
            for i in 0..cnt {
                let token = self.events[i].u64; // a copy: the struct is packed
                match token {
                    token if token & WAKE_TAG != 0 => {
                        clear_wake(token);
                        return libbpf_err(-libc::ECANCELED);
                    }
                    TIMER_TOKEN => {
                        if let Some(timer) = &mut self.timer {
                            timer.read(Instant::now());
                        }
                    }
                    idx => self.bufs[idx as usize].wakeups += 1,
                }
            }
        }
    }

    /// Drains every ring, handing `sink` runs of whole records contiguous in
    /// memory (see [`PerfRing::drain_spans`]) with their CPU and counts:
    /// zero-copy except a record that wraps the ring's end. `sink` returns 0
    /// to go on. Returns the number of records, or the sink's stop value.
    pub fn consume_batch<F: FnMut(&crate::abi::perfbuf_batch) -> c_int>(&mut self, mut sink: F) -> c_int {
        let mut total: u64 = 0;
        for buf in &mut self.bufs {
            if buf.overwrite_prev_head.is_some() {
                continue;
            }
            buf.publish();
            let (cpu, mut stats) = (buf.cpu, buf.stats);
            let before = buf.records_read();
            if let Some(lost) = buf.take_owed() {
                stats.lost += lost;
                buf.stats = stats;
                total += 1;
                let ret = sink(&batch_of(cpu, record::LostRecord::new(lost).bytes(), 0, 1));
                if ret != 0 {
                    return ret;
                }
            }
            // Records other than samples seen since the last run was sent
            // (both closures need it: a Cell, not two &mut).
            let others = core::cell::Cell::new(0usize);
            let ret = buf.drain_rings(0, &mut stats, |ring, head, stats| {
                ring.drain_spans_until(
                    head,
                    |rec| {
                        others.set(others.get() + 1);
                        if let Record::Lost { lost } = record::parse(rec) {
                            stats.lost += lost;
                        }
                    },
                    |run, records| sink(&batch_of(cpu, run, records - others.get(), others.replace(0))),
                )
            });
            buf.stats = stats;
            total += buf.records_read() - before;
            if ret != 0 {
                return ret;
            }
        }
        self.end_read(false);
        total.min(c_int::MAX as u64) as c_int
    }

    /// Publishes ring `idx`'s read position (the record-level API's end of a
    /// read), which ends a read as consume does.
    pub fn publish(&mut self, idx: usize) -> Result<()> {
        self.buf_mut(idx)?.publish();
        self.end_read(false);
        Ok(())
    }

    /// Mutable access to ring `idx` for the record-level API, which reads
    /// the caller's ring: from the next read on, records stay there.
    pub fn buf_mut(&mut self, idx: usize) -> Result<&mut CpuBuf> {
        *self.raw_readers.get_mut() = true;
        self.bufs.get_mut(idx).ok_or(Errno::INVAL)
    }

    /// Drains every ring in index order (libbpf's `perf_buffer__consume`).
    pub fn consume(&mut self) -> c_int {
        if self.order.is_some() {
            return self.order_round(false).map_or_else(libbpf_err, |_| 0);
        }
        for idx in 0..self.bufs.len() {
            let err = self.process_records(idx);
            if err != 0 {
                log::warn(format_args!("perf_buffer: failed to process records in buffer #{idx}: {err}"));
                return libbpf_err(err);
            }
        }
        // A caller waiting on the epoll fd itself is here after a tick.
        self.end_read(false);
        0
    }

    /// Drains ring `idx` (libbpf's `perf_buffer__consume_buffer`).
    pub fn consume_buffer(&mut self, idx: usize) -> Result<c_int> {
        self.buf(idx)?;
        Ok(self.process_records(idx))
    }

    /// Pauses (`true`) or resumes the kernel's output into every ring.
    /// While paused, the kernel drops records and counts them as lost.
    pub fn set_paused(&self, paused: bool) -> Result<()> {
        for buf in &self.bufs {
            sys::perf_ioctl(&buf.fd, PERF_EVENT_IOC_PAUSE_OUTPUT as libc::c_ulong, paused.into())?;
        }
        for fd in self.adaptive.iter().flat_map(Adaptive::spill_fds) {
            sys::perf_ioctl(fd, PERF_EVENT_IOC_PAUSE_OUTPUT as libc::c_ulong, paused.into())?;
        }
        Ok(())
    }

    /// Reads overwritable ring `idx`: pauses its output, delivers the records
    /// written since the last snapshot oldest first, resumes. Returns the
    /// number of records delivered. EINVAL for a forward ring.
    pub fn snapshot(&mut self, idx: usize) -> Result<usize> {
        let PerfBuffer { bufs, callbacks, .. } = self;
        let buf = bufs.get_mut(idx).ok_or(Errno::INVAL)?;
        let Some(mut prev) = buf.overwrite_prev_head else { return Err(Errno::INVAL) };
        sys::perf_ioctl(&buf.fd, PERF_EVENT_IOC_PAUSE_OUTPUT as libc::c_ulong, 1)?;
        let (cpu, stats) = (buf.cpu, &mut buf.stats);
        let mut delivered = 0;
        let mut bytes = 0u64;
        let overwritten = buf.ring.snapshot_backward(&mut prev, |rec| {
            callbacks.dispatch(cpu, rec, stats);
            delivered += 1;
            bytes += rec.len() as u64;
        });
        buf.ring.count_read(delivered as u64, bytes);
        buf.overwrite_prev_head = Some(prev);
        buf.overwritten_bytes += overwritten;
        sys::perf_ioctl(&buf.fd, PERF_EVENT_IOC_PAUSE_OUTPUT as libc::c_ulong, 0)?;
        Ok(delivered)
    }
}

impl Drop for PerfBuffer {
    /// libbpf's `perf_buffer__free` order: each ring, then the epoll fd.
    fn drop(&mut self) {
        for buf in self.bufs.drain(..) {
            buf.teardown(self.map_fd);
        }
    }
}

/// libbpf's best-effort map check: returns `max_entries` (0 when unknown).
fn checked_map_max_entries(map_fd: RawFd) -> Result<u32> {
    match sys::map_info(map_fd) {
        Ok(info) if info.map_type != BPF_MAP_TYPE_PERF_EVENT_ARRAY => {
            log::warn(format_args!("map '{}' should be BPF_MAP_TYPE_PERF_EVENT_ARRAY", info.name));
            Err(Errno::INVAL)
        }
        Ok(info) => Ok(info.max_entries),
        Err(Errno::INVAL) => {
            log::debug(format_args!(
                "failed to get map info for FD {map_fd}; API not supported? Ignoring..."
            ));
            Ok(0)
        }
        Err(e) => {
            log::warn(format_args!("failed to get map info for map FD {map_fd}: {e}"));
            Err(e)
        }
    }
}
