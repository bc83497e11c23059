//! A fake kernel for unit tests: perf events with rings in heap memory, a
//! `PERF_EVENT_ARRAY` map, epoll, timerfds, eventfds and a clock that
//! moves only when told, installed per thread. Every wrapper in
//! [`super::sys`] (and the clock and CPU lists) asks it first, so the
//! reader and the adaptive policy run on it without root, and a test
//! drives the producer side with [`FakeKernel::emit`].
//!
//! It models what the code under test relies on, as the kernel does it
//! (`kernel/events/ring_buffer.c`, `core.c`, `kernel/trace/bpf_trace.c`):
//! - a write goes to the ring of the event in the map slot, or of the
//!   event that one was redirected to with `PERF_EVENT_IOC_SET_OUTPUT`;
//!   an empty slot refuses it (ENOENT), a disabled event too (EOPNOTSUPP);
//! - a full or paused ring refuses it (ENOSPC) and counts it lost, both in
//!   the ring (reported by a `PERF_RECORD_LOST` before the next record
//!   written there) and in the writing event (`PERF_FORMAT_LOST`);
//! - every `wakeup_events` samples written into a ring (counted per ring,
//!   by the writing event's setting) make it readable once: epoll reports
//!   it to the first of its fds polled, as `perf_poll` clears `rb->poll`;
//! - timers expire as the fake clock passes their period; eventfds and
//!   timerfds stay readable until read;
//! - each object gets a real fd number (from an eventfd), so `OwnedFd`s
//!   close cleanly; a map slot keeps its event alive after its fd closes.

use super::clock::Moment;
use super::sys::{AttrSource, MapInfo, Mapping};
use super::{
    ATTR_FLAG_DISABLED, ATTR_FLAG_WATERMARK, BPF_MAP_TYPE_PERCPU_ARRAY, BPF_MAP_TYPE_PERF_EVENT_ARRAY,
    PERF_FORMAT_LOST,
};

use crate::error::{Error, Result};
use core::sync::atomic::{AtomicU64, Ordering};
use std::cell::RefCell;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

thread_local! {
    static FAKE: RefCell<Option<FakeKernel>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's fake kernel; `None` when none is installed.
pub fn with<R>(f: impl FnOnce(&mut FakeKernel) -> R) -> Option<R> {
    FAKE.with(|k| k.borrow_mut().as_mut().map(f))
}

/// Installs `kernel` for this thread until the guard drops.
pub fn install(kernel: FakeKernel) -> Installed {
    FAKE.with(|k| *k.borrow_mut() = Some(kernel));
    Installed(())
}

/// Removes the fake kernel when dropped.
pub struct Installed(());

impl Drop for Installed {
    fn drop(&mut self) {
        FAKE.with(|k| *k.borrow_mut() = None);
    }
}

/// Heap memory laid out like a perf mapping, shared by the fake kernel
/// (which writes records and the head) and the ring under test.
pub struct Memory {
    ptr: *mut u64,
    words: usize,
}

// SAFETY: tests use a Memory from the one thread its fake kernel lives on;
// the Arc only lets the ring and the kernel share ownership.
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    fn new(bytes: usize) -> Memory {
        let words = bytes.div_ceil(8);
        let boxed: Box<[u64]> = vec![0u64; words].into_boxed_slice();
        Memory { ptr: Box::into_raw(boxed).cast(), words }
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr.cast()
    }

    fn word(&self, byte_offset: usize) -> &AtomicU64 {
        assert!(byte_offset % 8 == 0 && byte_offset / 8 < self.words);
        // SAFETY: in bounds and aligned (checked above); the ring under test
        // reads this word through atomics too.
        unsafe { AtomicU64::from_ptr(self.ptr.add(byte_offset / 8)) }
    }

    fn write(&self, byte_offset: usize, bytes: &[u8]) {
        assert!(byte_offset + bytes.len() <= self.words * 8);
        // SAFETY: in bounds (checked above); the ring under test does not
        // read these bytes until the head is published past them.
        unsafe {
            core::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.cast::<u8>().add(byte_offset),
                bytes.len(),
            )
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `words` came from the boxed slice made in `new`.
        drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(self.ptr, self.words)) });
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Obj {
    Event(usize),
    Map(usize),
    Epoll(usize),
    Timer(usize),
    EventFd(usize),
    /// A `NETLINK_KOBJECT_UEVENT` socket: CPU changes queued for it.
    Uevents(usize),
}

/// A fake perf event.
#[derive(Debug)]
pub struct Event {
    /// The fd it was opened as.
    pub fd: RawFd,
    /// The CPU it counts on.
    pub cpu: i32,
    /// Its `wakeup_events`.
    pub wakeup: u32,
    watermark: bool,
    /// Whether it is enabled.
    pub enabled: bool,
    format_lost: bool,
    rb: Option<usize>,
    output: Option<usize>,
    /// Writes it could not make (its `PERF_FORMAT_LOST` count).
    pub lost_samples: u64,
    /// Records it wrote.
    pub written: u64,
    /// Its CPU went offline after it was opened: the kernel never puts it
    /// back on the CPU.
    pub dead: bool,
}

struct Rb {
    mem: Arc<Memory>,
    page_size: usize,
    data_size: usize,
    lost: u64,
    events: u32,
    bytes: u64,
    poll: bool,
    paused: bool,
}

impl Rb {
    fn head(&self) -> u64 {
        self.mem.word(super::MMAP_PAGE_DATA_HEAD).load(Ordering::Relaxed)
    }

    fn tail(&self) -> u64 {
        self.mem.word(super::MMAP_PAGE_DATA_TAIL).load(Ordering::Acquire)
    }

    fn put(&mut self, rec: &[u8]) {
        let head = self.head();
        let start = (head as usize) & (self.data_size - 1);
        let first = rec.len().min(self.data_size - start);
        self.mem.write(self.page_size + start, &rec[..first]);
        self.mem.write(self.page_size, &rec[first..]);
        self.mem.word(super::MMAP_PAGE_DATA_HEAD).store(head + rec.len() as u64, Ordering::Release);
    }
}

struct Map {
    id: u32,
    map_type: u32,
    max_entries: u32,
    value_size: u32,
    slots: HashMap<u32, usize>,
    /// A one-entry per-CPU array's value on each possible CPU.
    percpu: Vec<Vec<u8>>,
}

struct Timer {
    period: Duration,
    next: Option<Moment>,
    expirations: u64,
}

/// The fake kernel of one test thread.
pub struct FakeKernel {
    now: Moment,
    online: Vec<bool>,
    fds: HashMap<RawFd, Obj>,
    /// Every event ever opened, by id.
    pub events: Vec<Event>,
    rbs: Vec<Rb>,
    maps: Vec<Map>,
    epolls: Vec<Vec<(RawFd, Obj, u64)>>,
    timers: Vec<Timer>,
    eventfds: Vec<u64>,
    /// CPU changes (cpu, online) each uevent socket has not read yet.
    uevents: Vec<Vec<(i32, bool)>>,
    /// Uevent sockets can be opened (false: as in a network namespace
    /// the kernel sends none to).
    pub uevents_allowed: bool,
    /// `PERF_FORMAT_LOST` is accepted (Linux ≥ 6.0).
    pub format_lost: bool,
    /// What `getpid` returns.
    pub pid: i32,
    /// At most this many fake objects may be open at once (EMFILE beyond).
    pub fd_limit: usize,
    /// The `eventfd-id` of each fd handed out (see [`Self::is_open`]).
    eventfd_twins: RefCell<HashMap<RawFd, OwnedFd>>,
    /// Injected failures: (call, calls to let pass first, errno).
    failures: Vec<(&'static str, u32, i32)>,
    /// Calls made, by name.
    pub calls: HashMap<&'static str, u64>,
}

const PAGE: usize = 4096;

impl FakeKernel {
    /// A kernel with `cpus` online CPUs, `PERF_FORMAT_LOST`, the clock at 1 s.
    pub fn new(cpus: usize) -> FakeKernel {
        FakeKernel {
            now: Moment::from_nanos(1_000_000_000),
            online: vec![true; cpus],
            fds: HashMap::new(),
            events: Vec::new(),
            rbs: Vec::new(),
            maps: Vec::new(),
            epolls: Vec::new(),
            timers: Vec::new(),
            eventfds: Vec::new(),
            uevents: Vec::new(),
            uevents_allowed: true,
            format_lost: true,
            pid: 1000,
            fd_limit: usize::MAX,
            failures: Vec::new(),
            eventfd_twins: RefCell::new(HashMap::new()),
            calls: HashMap::new(),
        }
    }

    // ---- what tests drive ------------------------------------------------

    /// A `PERF_EVENT_ARRAY` map with `max_entries` slots.
    pub fn create_map(&mut self, max_entries: u32) -> OwnedFd {
        let fd = self.real_fd();
        // Ids unique across tests: claims on maps are per process.
        static NEXT_ID: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(1_000_000);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let map = Map {
            id,
            map_type: BPF_MAP_TYPE_PERF_EVENT_ARRAY,
            max_entries,
            value_size: 4,
            slots: HashMap::new(),
            percpu: Vec::new(),
        };
        self.maps.push(map);
        self.fds.insert(fd.as_raw_fd(), Obj::Map(self.maps.len() - 1));
        fd
    }

    /// A one-entry `BPF_MAP_TYPE_PERCPU_ARRAY` of `value_size` bytes:
    /// perfbuf.bpf.h's output counts map.
    pub fn create_percpu_array(&mut self, value_size: u32) -> OwnedFd {
        let fd = self.create_map(1);
        let m = self.maps.len() - 1;
        let cpus = self.possible_cpus();
        let map = &mut self.maps[m];
        map.map_type = BPF_MAP_TYPE_PERCPU_ARRAY;
        map.value_size = value_size;
        map.percpu = vec![vec![0u8; value_size as usize]; cpus];
        fd
    }

    /// [`Self::emit`] through perfbuf.bpf.h's output wrapper: the call and
    /// its failure are counted in `counts_fd` (a map from
    /// [`Self::create_percpu_array`]) on `cpu`, as the wrapper counts them.
    pub fn emit_counted(&mut self, map_fd: RawFd, counts_fd: RawFd, cpu: i32, data: &[u8]) -> i32 {
        let ret = self.emit(map_fd, cpu, data);
        let Some(&Obj::Map(m)) = self.fds.get(&counts_fd) else { return ret };
        let value = &mut self.maps[m].percpu[cpu as usize];
        let mut bump = |field: usize| {
            let at = field * 8;
            let n = u64::from_ne_bytes(value[at..at + 8].try_into().expect("8 bytes")) + 1;
            value[at..at + 8].copy_from_slice(&n.to_ne_bytes());
        };
        bump(0);
        if ret != 0 {
            bump(1);
        }
        match -ret {
            libc::ENOSPC => bump(2),
            libc::ENOENT | libc::EOPNOTSUPP => bump(3),
            _ => {}
        }
        ret
    }

    /// Moves the clock forward.
    pub fn advance(&mut self, d: Duration) {
        self.now = self.now + d;
    }

    /// Makes the `nth` next call of `call` (1 = the next) fail with `errno`.
    pub fn fail(&mut self, call: &'static str, nth: u32, errno: i32) {
        self.failures.push((call, nth, errno));
    }

    /// Takes a CPU offline or brings it back, as the kernel does: an event
    /// on a CPU going offline is left dead (off its CPU for good: writes
    /// fail with EOPNOTSUPP and `PERF_EVENT_IOC_ENABLE` does not revive
    /// it), what its ring holds stays readable, and a hotplug watcher
    /// ([`Self::uevent_socket`]) hears of the change.
    pub fn set_online(&mut self, cpu: usize, online: bool) {
        if self.online[cpu] == online {
            return;
        }
        self.online[cpu] = online;
        if !online {
            for e in self.events.iter_mut().filter(|e| e.cpu == cpu as i32) {
                e.dead = true;
            }
        }
        for queue in &mut self.uevents {
            queue.push((cpu as i32, online));
        }
    }

    /// A BPF program on `cpu` calls `bpf_perf_event_output(ctx, map,
    /// BPF_F_CURRENT_CPU, data, len)`: returns 0 or the helper's -errno.
    pub fn emit(&mut self, map_fd: RawFd, cpu: i32, data: &[u8]) -> i32 {
        assert!(self.online[cpu as usize], "no BPF program runs on offline cpu {cpu}");
        let Some(&Obj::Map(m)) = self.fds.get(&map_fd) else { return -libc::EBADF };
        let Some(&ev) = self.maps[m].slots.get(&(cpu as u32)) else { return -libc::ENOENT };
        let e = &self.events[ev];
        if e.cpu != cpu || !e.enabled || e.dead {
            return -libc::EOPNOTSUPP;
        }
        let Some(rb) = self.rb_of(ev) else { return -libc::ENOSPC };
        // header, u32 size, data padded so that size + data end on 8
        let raw = (data.len() + 4).next_multiple_of(8) - 4;
        let size = 8 + 4 + raw;
        let lost = self.rbs[rb].lost;
        let need = size + if lost > 0 { 24 } else { 0 };
        let r = &mut self.rbs[rb];
        let free = r.data_size as u64 - r.head().wrapping_sub(r.tail());
        if r.paused || (need as u64) > free {
            r.lost += 1;
            self.events[ev].lost_samples += 1;
            return -libc::ENOSPC;
        }
        if lost > 0 {
            let mut rec = vec![0u8; 24];
            rec[..4].copy_from_slice(&super::PERF_RECORD_LOST.to_ne_bytes());
            rec[6..8].copy_from_slice(&24u16.to_ne_bytes());
            rec[8..16].copy_from_slice(&(ev as u64).to_ne_bytes());
            rec[16..24].copy_from_slice(&lost.to_ne_bytes());
            r.put(&rec);
            r.lost = 0;
        }
        let mut rec = vec![0u8; size];
        rec[..4].copy_from_slice(&super::PERF_RECORD_SAMPLE.to_ne_bytes());
        rec[6..8].copy_from_slice(&(size as u16).to_ne_bytes());
        rec[8..12].copy_from_slice(&(raw as u32).to_ne_bytes());
        rec[12..12 + data.len()].copy_from_slice(data);
        r.put(&rec);
        self.events[ev].written += 1;
        let e = &self.events[ev];
        let r = &mut self.rbs[rb];
        if e.watermark {
            r.bytes += size as u64;
            if r.bytes >= u64::from(e.wakeup.max(1)) {
                r.bytes = 0;
                r.poll = true;
            }
        } else if e.wakeup > 0 {
            r.events += 1;
            if r.events >= e.wakeup {
                r.events -= e.wakeup;
                r.poll = true;
            }
        }
        0
    }

    /// `n` calls of [`Self::emit`] with `len`-byte samples whose first 8
    /// bytes count up from `first`; returns how many were refused.
    pub fn emit_n(&mut self, map_fd: RawFd, cpu: i32, n: u64, len: usize, first: u64) -> u64 {
        let mut data = vec![0u8; len.max(8)];
        let mut refused = 0;
        for i in 0..n {
            data[..8].copy_from_slice(&(first + i).to_ne_bytes());
            refused += u64::from(self.emit(map_fd, cpu, &data[..len.max(8)]) != 0);
        }
        refused
    }

    /// The fd of the event slot `key` of the map points at, if any.
    pub fn slot(&self, map_fd: RawFd, key: u32) -> Option<RawFd> {
        let Some(&Obj::Map(m)) = self.fds.get(&map_fd) else { return None };
        self.maps[m].slots.get(&key).map(|&ev| self.events[ev].fd)
    }

    /// The event opened as `fd`.
    pub fn event(&self, fd: RawFd) -> Option<&Event> {
        match self.fds.get(&fd) {
            Some(&Obj::Event(e)) => Some(&self.events[e]),
            _ => None,
        }
    }

    /// Sets the `PERF_FORMAT_LOST` count of the event opened as `fd`.
    pub fn set_lost_samples(&mut self, fd: RawFd, lost: u64) {
        if let Some(&Obj::Event(e)) = self.fds.get(&fd) {
            self.events[e].lost_samples = lost;
        }
    }

    /// What the open fake objects are (for a failing test's message).
    pub fn open_object_kinds(&self) -> Vec<String> {
        self.fds
            .iter()
            .filter(|&(&fd, _)| self.is_open(fd))
            .map(|(&fd, o)| {
                let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).map(|p| p.display().to_string());
                let twin = self.eventfd_twins.borrow().get(&fd).map(|t| eventfd_id(t.as_raw_fd()));
                format!("{fd}: {o:?} (eventfd-id {:?}, its twin's {twin:?}; {link:?})", eventfd_id(fd))
            })
            .collect()
    }

    /// Fake objects open now (fds our fake handed out and nobody closed).
    pub fn open_objects(&self) -> usize {
        self.fds.keys().filter(|&&fd| self.is_open(fd)).count()
    }

    // ---- internals ------------------------------------------------------------

    fn real_fd(&mut self) -> OwnedFd {
        // SAFETY: no pointers involved.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0, "eventfd for a fake object");
        // SAFETY: a new fd nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let twin = fd.try_clone().expect("dup of a fake object's eventfd");
        self.eventfd_twins.borrow_mut().insert(fd.as_raw_fd(), twin);
        fd
    }

    /// Whether the fake object handed out as `fd` is still open: its fd is,
    /// and is still that eventfd. Tests on other threads open eventfds too,
    /// and may get both the number of one closed here and its eventfd-id
    /// (the kernel reuses freed ids), so the fake keeps a twin (a dup) of
    /// each object's eventfd while it may be open: its id stays taken, and
    /// the fd still has it only if it is the same eventfd.
    fn is_open(&self, fd: RawFd) -> bool {
        // SAFETY: F_GETFD takes no pointer.
        let open = unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 };
        let mut twins = self.eventfd_twins.borrow_mut();
        let Some(twin) = twins.get(&fd) else { return open };
        let same = open && eventfd_id(fd).is_some_and(|id| Some(id) == eventfd_id(twin.as_raw_fd()));
        if !same {
            twins.remove(&fd); // closed for good: its id may go
        }
        same
    }

    fn check(&mut self, call: &'static str) -> Result<()> {
        *self.calls.entry(call).or_default() += 1;
        if let Some(i) = self.failures.iter().position(|f| f.0 == call) {
            self.failures[i].1 -= 1;
            if self.failures[i].1 == 0 {
                let errno = self.failures.remove(i).2;
                return Err(Error::from_errno(errno));
            }
        }
        Ok(())
    }

    fn new_object(&mut self, call: &'static str, obj: impl FnOnce(&mut Self) -> Obj) -> Result<OwnedFd> {
        self.check(call)?;
        if self.open_objects() >= self.fd_limit {
            return Err(Error::from_errno(libc::EMFILE));
        }
        let fd = self.real_fd();
        let obj = obj(self);
        self.fds.insert(fd.as_raw_fd(), obj);
        Ok(fd)
    }

    fn event_id(&self, fd: RawFd) -> Result<usize> {
        match self.fds.get(&fd) {
            Some(&Obj::Event(e)) if self.is_open(fd) => Ok(e),
            _ => Err(Error::from_errno(libc::EBADF)),
        }
    }

    /// The ring `ev` writes into.
    fn rb_of(&self, ev: usize) -> Option<usize> {
        match self.events[ev].output {
            Some(out) => self.events[out].rb,
            None => self.events[ev].rb,
        }
    }

    fn tick_timers(&mut self) {
        let now = self.now;
        for t in &mut self.timers {
            if let Some(next) = t.next
                && next <= now
            {
                let periods = now.since(next).as_nanos() / t.period.as_nanos().max(1);
                t.expirations += 1 + periods as u64;
                t.next = Some(next + t.period * (periods as u32 + 1));
            }
        }
    }

    fn ready(&mut self, obj: Obj) -> bool {
        match obj {
            Obj::Event(e) => match self.rb_of(e) {
                Some(rb) => core::mem::take(&mut self.rbs[rb].poll),
                None => false,
            },
            Obj::Timer(t) => self.timers[t].expirations > 0,
            Obj::EventFd(e) => self.eventfds[e] > 0,
            Obj::Uevents(u) => !self.uevents[u].is_empty(),
            Obj::Map(_) | Obj::Epoll(_) => false,
        }
    }

    // ---- the system calls --------------------------------------------------

    pub fn now(&mut self) -> Moment {
        self.now
    }

    pub fn online_mask(&mut self) -> Result<Vec<bool>> {
        Ok(self.online.clone())
    }

    pub fn possible_cpus(&mut self) -> usize {
        self.online.len()
    }

    pub fn getpid(&mut self) -> i32 {
        self.pid
    }

    pub fn format_lost_supported(&mut self) -> bool {
        self.format_lost
    }

    pub fn perf_event_open(&mut self, attr: AttrSource<'_>, cpu: i32) -> Result<OwnedFd> {
        let AttrSource::Built(attr) = attr else { return Err(Error::INVAL) };
        if !usize::try_from(cpu).ok().and_then(|c| self.online.get(c)).copied().unwrap_or(false) {
            self.check("perf_event_open")?;
            return Err(Error::from_errno(libc::ENODEV));
        }
        if attr.read_format & PERF_FORMAT_LOST != 0 && !self.format_lost {
            self.check("perf_event_open")?;
            return Err(Error::INVAL);
        }
        let id = self.events.len();
        let fd = self.new_object("perf_event_open", |_| Obj::Event(id))?;
        self.events.push(Event {
            fd: fd.as_raw_fd(),
            cpu,
            wakeup: attr.wakeup,
            watermark: attr.flags & ATTR_FLAG_WATERMARK != 0,
            enabled: attr.flags & ATTR_FLAG_DISABLED == 0,
            format_lost: attr.read_format & PERF_FORMAT_LOST != 0,
            rb: None,
            output: None,
            lost_samples: 0,
            written: 0,
            dead: false,
        });
        Ok(fd)
    }

    pub fn mmap_perf(&mut self, fd: RawFd, len: usize, _read_only: bool) -> Result<Mapping> {
        self.check("mmap")?;
        let ev = self.event_id(fd)?;
        let data_size = len.checked_sub(PAGE).filter(|d| d.is_power_of_two()).ok_or(Error::INVAL)?;
        if self.events[ev].rb.is_some() || self.events[ev].output.is_some() {
            return Err(Error::INVAL);
        }
        let mem = Arc::new(Memory::new(len));
        self.rbs.push(Rb {
            mem: mem.clone(),
            page_size: PAGE,
            data_size,
            lost: 0,
            events: 0,
            bytes: 0,
            poll: false,
            paused: false,
        });
        self.events[ev].rb = Some(self.rbs.len() - 1);
        Ok(Mapping::Fake(mem))
    }

    pub fn perf_ioctl(&mut self, fd: RawFd, request: u64, arg: u64) -> Result<()> {
        self.check("ioctl")?;
        let ev = self.event_id(fd)?;
        match request {
            super::PERF_EVENT_IOC_ENABLE => self.events[ev].enabled = true,
            super::PERF_EVENT_IOC_DISABLE => self.events[ev].enabled = false,
            super::PERF_EVENT_IOC_PAUSE_OUTPUT => {
                let rb = self.rb_of(ev).ok_or(Error::INVAL)?;
                self.rbs[rb].paused = arg != 0;
            }
            super::PERF_EVENT_IOC_SET_OUTPUT => {
                let target = self.event_id(arg as RawFd)?;
                let ok = self.events[target].rb.is_some()
                    && self.events[target].cpu == self.events[ev].cpu
                    && self.events[ev].rb.is_none();
                if !ok {
                    return Err(Error::INVAL);
                }
                self.events[ev].output = Some(target);
            }
            _ => return Err(Error::from_errno(libc::ENOTTY)),
        }
        Ok(())
    }

    pub fn wait_for_writers(&mut self) {
        *self.calls.entry("wait_for_writers").or_default() += 1;
    }

    pub fn read_lost(&mut self, fd: RawFd) -> Result<u64> {
        let ev = self.event_id(fd)?;
        let e = &self.events[ev];
        if e.format_lost { Ok(e.lost_samples) } else { Err(Error::from_errno(libc::EIO)) }
    }

    pub fn map_update(&mut self, map_fd: RawFd, key: u32, value: u32) -> Result<()> {
        self.check("map_update")?;
        let Some(&Obj::Map(m)) = self.fds.get(&map_fd) else { return Err(Error::from_errno(libc::EBADF)) };
        if key >= self.maps[m].max_entries {
            return Err(Error::from_errno(libc::E2BIG));
        }
        let ev = self.event_id(value as RawFd)?;
        self.maps[m].slots.insert(key, ev);
        Ok(())
    }

    pub fn map_delete(&mut self, map_fd: RawFd, key: u32) -> Result<()> {
        let Some(&Obj::Map(m)) = self.fds.get(&map_fd) else { return Err(Error::from_errno(libc::EBADF)) };
        self.maps[m].slots.remove(&key).map(drop).ok_or(Error::from_errno(libc::ENOENT))
    }

    pub fn dup(&mut self, fd: RawFd) -> Result<OwnedFd> {
        let obj = *self.fds.get(&fd).ok_or(Error::from_errno(libc::EBADF))?;
        let copy = self.real_fd();
        self.fds.insert(copy.as_raw_fd(), obj);
        Ok(copy)
    }

    pub fn map_lookup(&mut self, map_fd: RawFd, key: u32, value: &mut [u8]) -> Result<()> {
        let Some(&Obj::Map(m)) = self.fds.get(&map_fd) else { return Err(Error::from_errno(libc::EBADF)) };
        let map = &self.maps[m];
        if map.map_type != BPF_MAP_TYPE_PERCPU_ARRAY || key >= map.max_entries {
            return Err(Error::from_errno(libc::ENOENT));
        }
        let stride = (map.value_size as usize).next_multiple_of(8);
        if value.len() < stride * map.percpu.len() {
            return Err(Error::from_errno(libc::EFAULT));
        }
        for (i, v) in map.percpu.iter().enumerate() {
            value[i * stride..i * stride + v.len()].copy_from_slice(v);
        }
        Ok(())
    }

    pub fn map_info(&mut self, map_fd: RawFd) -> Result<MapInfo> {
        match self.fds.get(&map_fd) {
            Some(&Obj::Map(m)) => Ok(MapInfo {
                map_type: self.maps[m].map_type,
                id: self.maps[m].id,
                max_entries: self.maps[m].max_entries,
                key_size: 4,
                value_size: self.maps[m].value_size,
            }),
            Some(_) => Err(Error::INVAL),
            None => Err(Error::from_errno(libc::EBADF)),
        }
    }

    pub fn epoll_create(&mut self) -> Result<OwnedFd> {
        self.new_object("epoll_create", |k| {
            k.epolls.push(Vec::new());
            Obj::Epoll(k.epolls.len() - 1)
        })
    }

    pub fn epoll_add(&mut self, epfd: RawFd, fd: RawFd, token: u64) -> Result<()> {
        self.check("epoll_ctl")?;
        let Some(&Obj::Epoll(e)) = self.fds.get(&epfd) else { return Err(Error::from_errno(libc::EBADF)) };
        let obj = *self.fds.get(&fd).ok_or(Error::from_errno(libc::EBADF))?;
        if self.epolls[e].iter().any(|&(f, o, _)| f == fd && o == obj) {
            return Err(Error::from_errno(libc::EEXIST));
        }
        self.epolls[e].push((fd, obj, token));
        Ok(())
    }

    pub fn epoll_del(&mut self, epfd: RawFd, fd: RawFd) -> Result<()> {
        let Some(&Obj::Epoll(e)) = self.fds.get(&epfd) else { return Err(Error::from_errno(libc::EBADF)) };
        let before = self.epolls[e].len();
        self.epolls[e].retain(|&(f, _, _)| f != fd);
        if self.epolls[e].len() == before { Err(Error::from_errno(libc::ENOENT)) } else { Ok(()) }
    }

    pub fn epoll_wait(
        &mut self,
        epfd: RawFd,
        out: &mut [libc::epoll_event],
        timeout_ms: i32,
    ) -> Result<usize> {
        let Some(&Obj::Epoll(e)) = self.fds.get(&epfd) else { return Err(Error::from_errno(libc::EBADF)) };
        if out.is_empty() {
            return Err(Error::INVAL);
        }
        *self.calls.entry("epoll_wait").or_default() += 1;
        let deadline = (timeout_ms >= 0).then(|| self.now + Duration::from_millis(timeout_ms as u64));
        loop {
            self.tick_timers();
            let mut n = 0;
            // An entry whose fd was closed is gone from the set, as in epoll.
            let entries: Vec<_> =
                self.epolls[e].iter().copied().filter(|&(fd, _, _)| self.is_open(fd)).collect();
            for (_, obj, token) in entries {
                if n < out.len() && self.ready(obj) {
                    out[n] = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
                    n += 1;
                }
            }
            if n > 0 {
                return Ok(n);
            }
            // Nothing ready: sleep until the next timer expiry or the timeout.
            let next_timer = self.epolls[e]
                .iter()
                .filter_map(|&(_, obj, _)| match obj {
                    Obj::Timer(t) => self.timers[t].next,
                    _ => None,
                })
                .min();
            let wake = match (next_timer, deadline) {
                (Some(t), Some(d)) => t.min(d),
                (Some(t), None) => t,
                (None, Some(d)) => d,
                (None, None) => return Err(Error::from_errno(libc::EDEADLK)), // would block forever
            };
            if wake <= self.now {
                return Ok(0);
            }
            self.now = wake;
        }
    }

    pub fn eventfd(&mut self) -> Result<OwnedFd> {
        self.new_object("eventfd", |k| {
            k.eventfds.push(0);
            Obj::EventFd(k.eventfds.len() - 1)
        })
    }

    pub fn uevent_socket(&mut self) -> Result<OwnedFd> {
        if !self.uevents_allowed {
            self.check("uevent_socket")?;
            return Err(Error::from_errno(libc::EPERM));
        }
        self.new_object("uevent_socket", |k| {
            k.uevents.push(Vec::new());
            Obj::Uevents(k.uevents.len() - 1)
        })
    }

    /// The CPU changes queued for the uevent socket `fd`, taken.
    pub fn read_uevents(&mut self, fd: RawFd) -> Result<Vec<(i32, bool)>> {
        match self.fds.get(&fd) {
            Some(&Obj::Uevents(u)) => Ok(core::mem::take(&mut self.uevents[u])),
            _ => Err(Error::from_errno(libc::EBADF)),
        }
    }

    pub fn timerfd(&mut self) -> Result<OwnedFd> {
        self.new_object("timerfd", |k| {
            k.timers.push(Timer { period: Duration::ZERO, next: None, expirations: 0 });
            Obj::Timer(k.timers.len() - 1)
        })
    }

    pub fn arm_timer(&mut self, fd: RawFd, period: Duration) -> Result<()> {
        let Some(&Obj::Timer(t)) = self.fds.get(&fd) else { return Err(Error::from_errno(libc::EBADF)) };
        let next = (!period.is_zero()).then(|| self.now + period);
        self.timers[t] = Timer { period, next, expirations: 0 };
        Ok(())
    }

    pub fn write_u64(&mut self, fd: RawFd, value: u64) -> Result<()> {
        let Some(&Obj::EventFd(e)) = self.fds.get(&fd) else { return Err(Error::from_errno(libc::EBADF)) };
        self.eventfds[e] += value;
        Ok(())
    }

    pub fn read_u64(&mut self, fd: RawFd) -> u64 {
        *self.calls.entry("read").or_default() += 1;
        self.tick_timers();
        match self.fds.get(&fd) {
            Some(&Obj::Timer(t)) => core::mem::take(&mut self.timers[t].expirations),
            Some(&Obj::EventFd(e)) => core::mem::take(&mut self.eventfds[e]),
            _ => 0,
        }
    }
}

/// The kernel's id of the eventfd open as `fd` (`eventfd-id` in its
/// fdinfo, Linux 5.16+): no other open eventfd has it, but a closed one's
/// id is given to the next eventfd made.
fn eventfd_id(fd: RawFd) -> Option<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines().find_map(|l| l.strip_prefix("eventfd-id:")).and_then(|v| v.trim().parse().ok())
}
