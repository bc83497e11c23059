//! Every system call the library makes, as small safe wrappers returning
//! the kernel's errno as an [`Error`] (so the C face can pass it on
//! exactly as libbpf does).
//!
//! Two seams sit in front of the kernel: the `fault-injection` feature
//! makes a chosen call fail ([`super::fault`]), and test builds route every call
//! to the calling thread's fake kernel when one is installed
//! (`super::fake`), so the reader and the adaptive policy are tested
//! without root.

use super::{PerfEventAttr, fault};
use crate::error::{Error, Result};
use core::ffi::c_void;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// Runs `$call` on the calling thread's fake kernel, if a test installed
/// one, and returns its result.
macro_rules! faked {
    ($k:ident => $call:expr) => {
        #[cfg(test)]
        if let Some(r) = super::fake::with(|$k| $call) {
            return r;
        }
    };
}

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

fn check(ret: libc::c_long) -> Result<libc::c_long> {
    if ret < 0 { Err(Error::last_os()) } else { Ok(ret) }
}

/// Takes ownership of a new fd the kernel returned.
fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: callers pass a fresh, non-negative fd that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// `bpf(2)` with a command-specific attribute struct.
fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> Result<libc::c_long> {
    // SAFETY: `attr` is a live, initialised #[repr(C)] struct of the size we
    // pass; the kernel reads (and for info, writes through) only that range.
    check(unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T as *mut c_void, size_of::<T>()) })
}

#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// `bpf_map_update_elem(map_fd, &key, &value, BPF_ANY)` for 4-byte keys/values.
pub fn map_update_u32(map_fd: RawFd, key: u32, value: u32) -> Result<()> {
    fault::at("map_update")?;
    faked!(k => k.map_update(map_fd, key, value));
    let mut attr = MapElemAttr {
        map_fd: map_fd as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0,
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// `bpf_map_lookup_elem(map_fd, &key, value)` for a 4-byte key: the kernel
/// writes the whole value (for a per-CPU map, one 8-aligned value per
/// possible CPU), so `value` must be at least that long.
pub fn map_lookup(map_fd: RawFd, key: u32, value: &mut [u8]) -> Result<()> {
    faked!(k => k.map_lookup(map_fd, key, value));
    let mut attr = MapElemAttr {
        map_fd: map_fd as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: value.as_mut_ptr() as u64,
        flags: 0,
    };
    bpf(BPF_MAP_LOOKUP_ELEM, &mut attr).map(drop)
}

/// A duplicate of `fd` (close-on-exec), to keep an fd the caller lent.
pub fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd> {
    faked!(k => k.dup(fd.as_raw_fd()));
    fd.try_clone_to_owned().map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EBADF)))
}

/// `bpf_map_delete_elem(map_fd, &key)`.
pub fn map_delete_u32(map_fd: RawFd, key: u32) -> Result<()> {
    faked!(k => k.map_delete(map_fd, key));
    let mut attr =
        MapElemAttr { map_fd: map_fd as u32, _pad: 0, key: &key as *const u32 as u64, value: 0, flags: 0 };
    bpf(BPF_MAP_DELETE_ELEM, &mut attr).map(drop)
}

/// The fields of `struct bpf_map_info` we use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapInfo {
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// The map's id (unique while it lives).
    pub id: u32,
    /// `max_entries`.
    pub max_entries: u32,
    /// `key_size`.
    pub key_size: u32,
    /// `value_size`.
    pub value_size: u32,
}

/// `struct bpf_map_info` (uapi, 80 bytes at Linux 6.x); only the prefix is read.
#[repr(C)]
#[derive(Default)]
struct BpfMapInfo {
    map_type: u32,
    id: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    name: [u8; 16],
    rest: [u64; 6],
}

#[repr(C)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a map fd.
pub fn map_info(map_fd: RawFd) -> Result<MapInfo> {
    faked!(k => k.map_info(map_fd));
    let mut info = BpfMapInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: map_fd as u32,
        info_len: size_of::<BpfMapInfo>() as u32,
        info: &mut info as *mut BpfMapInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(MapInfo {
        map_type: info.map_type,
        id: info.id,
        max_entries: info.max_entries,
        key_size: info.key_size,
        value_size: info.value_size,
    })
}

const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
/// The most programs the kernel attaches to one tracepoint (`BPF_TRACE_MAX_PROGS`).
const BPF_TRACE_MAX_PROGS: usize = 64;

/// `PERF_EVENT_IOC_QUERY_BPF` on a tracepoint's perf event: the ids of the
/// BPF programs the kernel runs on every hit of the tracepoint, whichever
/// perf event attached them (EINVAL for an event of another type, EPERM
/// without CAP_PERFMON).
pub fn perf_query_bpf(fd: BorrowedFd<'_>) -> Result<Vec<u32>> {
    // struct perf_event_query_bpf { __u32 ids_len; __u32 prog_cnt; __u32 ids[]; }
    let mut query = [0u32; 2 + BPF_TRACE_MAX_PROGS];
    query[0] = BPF_TRACE_MAX_PROGS as u32;
    // SAFETY: the kernel reads ids_len, then writes prog_cnt and at most
    // ids_len ids: all within `query`, which outlives the call.
    let ret = unsafe {
        libc::ioctl(fd.as_raw_fd(), super::PERF_EVENT_IOC_QUERY_BPF as libc::c_ulong, query.as_mut_ptr())
    };
    check(ret as libc::c_long)?;
    let count = (query[1] as usize).min(BPF_TRACE_MAX_PROGS);
    Ok(query[2..2 + count].to_vec())
}

#[repr(C)]
struct GetFdByIdAttr {
    id: u32,
    next_id: u32,
    open_flags: u32,
}

/// `BPF_PROG_GET_FD_BY_ID` (CAP_SYS_ADMIN): a program by its id.
pub fn bpf_prog_fd_by_id(id: u32) -> Result<OwnedFd> {
    let mut attr = GetFdByIdAttr { id, next_id: 0, open_flags: 0 };
    bpf(BPF_PROG_GET_FD_BY_ID, &mut attr).map(owned)
}

/// The fields of `struct bpf_prog_info` we use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgInfo {
    /// `BPF_PROG_TYPE_*`.
    pub prog_type: u32,
    /// The program's id (unique while it lives).
    pub id: u32,
    /// The name it was loaded with (up to 15 bytes; empty if none).
    pub name: String,
}

/// The prefix of `struct bpf_prog_info` up to its name (Linux 4.15).
#[repr(C)]
#[derive(Default)]
struct BpfProgInfo {
    prog_type: u32,
    id: u32,
    tag: [u8; 8],
    jited_prog_len: u32,
    xlated_prog_len: u32,
    jited_prog_insns: u64,
    xlated_prog_insns: u64,
    load_time: u64,
    created_by_uid: u32,
    nr_map_ids: u32,
    map_ids: u64,
    name: [u8; 16],
}

/// `BPF_OBJ_GET_INFO_BY_FD` on a program fd.
pub fn bpf_prog_info(prog: BorrowedFd<'_>) -> Result<ProgInfo> {
    let mut info = BpfProgInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: prog.as_raw_fd() as u32,
        info_len: size_of::<BpfProgInfo>() as u32,
        info: &mut info as *mut BpfProgInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let len = info.name.iter().position(|&b| b == 0).unwrap_or(info.name.len());
    let name = String::from_utf8_lossy(&info.name[..len]).into_owned();
    Ok(ProgInfo { prog_type: info.prog_type, id: info.id, name })
}

/// Where the attr for `perf_event_open` comes from.
#[derive(Clone, Copy)]
pub enum AttrSource<'a> {
    /// One we built.
    Built(&'a PerfEventAttr),
    /// The caller's, passed through verbatim (raw mode).
    Caller(CallerAttr),
}

/// A caller's `struct perf_event_attr *`, valid for the duration of the
/// constructor call (the C face's contract), never dereferenced by us.
#[derive(Clone, Copy)]
pub struct CallerAttr(*const c_void);

impl CallerAttr {
    /// # Safety
    /// `ptr` must point to a readable `struct perf_event_attr` of the size
    /// its `size` field claims, for as long as this value is used.
    pub unsafe fn new(ptr: *const c_void) -> Self {
        CallerAttr(ptr)
    }
}

/// `perf_event_open(attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)`: an event on
/// one CPU, for every task.
pub fn perf_event_open(attr: AttrSource<'_>, cpu: i32) -> Result<OwnedFd> {
    perf_event_open_on(attr, -1, cpu, None, 0)
}

/// `perf_event_open` with a pid (or a cgroup fd with `extra_flags`
/// `PERF_FLAG_PID_CGROUP`) and a group leader.
pub fn perf_event_open_on(
    attr: AttrSource<'_>,
    pid: i32,
    cpu: i32,
    group: Option<BorrowedFd<'_>>,
    extra_flags: libc::c_ulong,
) -> Result<OwnedFd> {
    fault::at("perf_event_open")?;
    faked!(k => k.perf_event_open(attr, cpu));
    let ptr = match attr {
        AttrSource::Built(a) => a as *const PerfEventAttr as *const c_void,
        AttrSource::Caller(CallerAttr(p)) => p,
    };
    let group = group.map_or(-1, |g| g.as_raw_fd());
    // SAFETY: `ptr` points to a readable perf_event_attr (built here, or the
    // caller's per the C face's contract); the kernel only reads it.
    let fd = check(unsafe {
        libc::syscall(libc::SYS_perf_event_open, ptr, pid, cpu, group, PERF_FLAG_FD_CLOEXEC | extra_flags)
    })?;
    Ok(owned(fd))
}

/// `ioctl(fd, request, arg)` for the perf ioctls that take an integer.
pub fn perf_ioctl(fd: BorrowedFd<'_>, request: u64, arg: u64) -> Result<()> {
    // Each step of an event set can be failed on its own, or any ioctl.
    match request {
        super::PERF_EVENT_IOC_ENABLE => fault::at("enable")?,
        super::PERF_EVENT_IOC_SET_OUTPUT => fault::at("set_output")?,
        super::PERF_EVENT_IOC_SET_BPF => fault::at("attach")?,
        _ => {}
    }
    fault::at("ioctl")?;
    faked!(k => k.perf_ioctl(fd.as_raw_fd(), request, arg));
    // SAFETY: the perf ioctls we issue with this wrapper take an integer
    // argument, not a pointer.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request as libc::c_ulong, arg as libc::c_ulong) }
        as libc::c_long)
    .map(drop)
}

/// `PERF_EVENT_IOC_SET_OUTPUT`: `fd`'s records go to `target`'s ring.
pub fn perf_set_output(fd: BorrowedFd<'_>, target: BorrowedFd<'_>) -> Result<()> {
    perf_ioctl(fd, super::PERF_EVENT_IOC_SET_OUTPUT, target.as_raw_fd() as u64)
}

/// `PERF_EVENT_IOC_ID`: the kernel's id of the event, the one samples
/// carry with `PERF_SAMPLE_IDENTIFIER`.
pub fn perf_event_id(fd: BorrowedFd<'_>) -> Result<u64> {
    fault::at("event_id")?;
    fault::at("ioctl")?;
    let mut id = 0u64;
    // SAFETY: PERF_EVENT_IOC_ID writes one u64 through the pointer, which
    // points to a live u64.
    check(unsafe {
        libc::ioctl(fd.as_raw_fd(), super::PERF_EVENT_IOC_ID as libc::c_ulong, &mut id as *mut u64)
    } as libc::c_long)?;
    Ok(id)
}

/// `PERF_EVENT_IOC_SET_FILTER`: an ftrace filter on a tracing event.
pub fn perf_set_filter(fd: BorrowedFd<'_>, filter: &core::ffi::CStr) -> Result<()> {
    fault::at("set_filter")?;
    fault::at("ioctl")?;
    // SAFETY: the kernel copies the NUL-terminated string and keeps nothing.
    check(unsafe {
        libc::ioctl(fd.as_raw_fd(), super::PERF_EVENT_IOC_SET_FILTER as libc::c_ulong, filter.as_ptr())
    } as libc::c_long)
    .map(drop)
}

/// `read()` of a perf event's counts into `buf`; returns the u64 words read.
pub fn read_counts(fd: BorrowedFd<'_>, buf: &mut [u64]) -> Result<usize> {
    fault::at("read")?;
    // SAFETY: reads at most the buffer's byte length into it.
    let n = check(
        unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), size_of_val(buf)) } as libc::c_long
    )?;
    Ok(n as usize / 8)
}

#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    bpf_cookie: u64,
    _rest: [u64; 14],
}

const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_PERF_EVENT: u32 = 41;

/// `BPF_LINK_CREATE` of `prog` on perf event `target` (Linux 5.15): the
/// program runs on each of the event's samples until the link is closed.
pub fn bpf_link_perf_event(prog: BorrowedFd<'_>, target: RawFd) -> Result<OwnedFd> {
    fault::at("attach")?;
    link_create(prog, target)
}

fn link_create(prog: BorrowedFd<'_>, target: RawFd) -> Result<OwnedFd> {
    fault::at("link_create")?;
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_fd: target as u32,
        attach_type: BPF_PERF_EVENT,
        flags: 0,
        bpf_cookie: 0,
        _rest: [0; 14],
    };
    bpf(BPF_LINK_CREATE, &mut attr).map(owned)
}

/// Whether this kernel has BPF perf links: probed once, as libbpf does, by
/// a link on fd -1 (EBADF: the command and attach type are known).
pub fn bpf_perf_links_supported(prog: BorrowedFd<'_>) -> bool {
    static SUPPORTED: once_cell::sync::OnceCell<bool> = once_cell::sync::OnceCell::new();
    *SUPPORTED.get_or_init(|| match link_create(prog, -1) {
        Ok(_) => true,
        Err(e) => e.errno() == libc::EBADF,
    })
}

/// Opens a directory (a cgroup's, for `PERF_FLAG_PID_CGROUP`).
pub fn open_dir(path: &core::ffi::CStr) -> Result<OwnedFd> {
    // SAFETY: `path` is NUL-terminated; no other memory is involved.
    check(unsafe { libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) }
        as libc::c_long)
    .map(owned)
}

/// `epoll_create1(EPOLL_CLOEXEC)`.
pub fn epoll_create() -> Result<OwnedFd> {
    fault::at("epoll_create")?;
    faked!(k => k.epoll_create());
    // SAFETY: no pointers involved.
    check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) } as libc::c_long).map(owned)
}

/// `epoll_ctl(EPOLL_CTL_ADD)` for level-triggered `EPOLLIN` with `token`.
pub fn epoll_add(epfd: RawFd, fd: RawFd, token: u64) -> Result<()> {
    fault::at("epoll_ctl")?;
    faked!(k => k.epoll_add(epfd, fd, token));
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
    // SAFETY: `ev` is a valid epoll_event the kernel reads.
    check(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } as libc::c_long).map(drop)
}

/// `epoll_ctl(EPOLL_CTL_DEL)`.
pub fn epoll_del(epfd: RawFd, fd: RawFd) -> Result<()> {
    faked!(k => k.epoll_del(epfd, fd));
    // SAFETY: a NULL event is allowed for EPOLL_CTL_DEL.
    check(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_DEL, fd, core::ptr::null_mut()) } as libc::c_long)
        .map(drop)
}

/// `epoll_wait` into `events[..max]`; returns the number of ready entries.
/// `max == 0` is passed through, so the kernel's EINVAL reaches the caller.
pub fn epoll_wait(
    epfd: RawFd,
    events: &mut [libc::epoll_event],
    max: usize,
    timeout_ms: i32,
) -> Result<usize> {
    let max = max.min(events.len()).min(i32::MAX as usize);
    faked!(k => k.epoll_wait(epfd, &mut events[..max], timeout_ms));
    // SAFETY: the kernel writes at most `max` ≤ events.len() entries.
    let n = check(
        unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), max as i32, timeout_ms) } as libc::c_long
    )?;
    Ok(n as usize)
}

/// `eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)`.
pub fn eventfd() -> Result<OwnedFd> {
    fault::at("eventfd")?;
    faked!(k => k.eventfd());
    // SAFETY: no pointers involved.
    check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) } as libc::c_long).map(owned)
}

/// A non-blocking `CLOCK_MONOTONIC` timerfd, not armed.
pub fn timerfd() -> Result<OwnedFd> {
    fault::at("timerfd")?;
    faked!(k => k.timerfd());
    // SAFETY: no pointers involved.
    let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) };
    check(fd as libc::c_long).map(owned)
}

/// Makes a timerfd fire every `period` from now, or never again if `period`
/// is zero; either way expirations not yet read are dropped.
pub fn arm_timer(fd: BorrowedFd<'_>, period: Duration) -> Result<()> {
    faked!(k => k.arm_timer(fd.as_raw_fd(), period));
    let period = libc::timespec {
        tv_sec: period.as_secs() as libc::time_t,
        tv_nsec: period.subsec_nanos() as libc::c_long,
    };
    let spec = libc::itimerspec { it_interval: period, it_value: period };
    // SAFETY: `spec` is a valid itimerspec; the old value is not requested.
    check(unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, core::ptr::null_mut()) } as libc::c_long)
        .map(drop)
}

/// Writes a u64 to an eventfd (adds to its counter).
pub fn write_u64(fd: RawFd, value: u64) -> Result<()> {
    faked!(k => k.write_u64(fd, value));
    // SAFETY: writes 8 bytes from a live u64.
    check(unsafe { libc::write(fd, (&value as *const u64).cast(), 8) } as libc::c_long).map(drop)
}

/// Reads (and so resets) an eventfd or timerfd counter; 0 if none pending.
pub fn read_u64(fd: RawFd) -> u64 {
    faked!(k => k.read_u64(fd));
    let mut value = 0u64;
    // SAFETY: reads at most 8 bytes into a live u64.
    let n = unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
    if n == 8 { value } else { 0 }
}

/// The records a perf event opened with `PERF_FORMAT_LOST` (and no other
/// `read_format` bit) failed to write over its life: `read()` returns
/// `{ value, lost }`.
pub fn read_lost(fd: BorrowedFd<'_>) -> Result<u64> {
    faked!(k => k.read_lost(fd.as_raw_fd()));
    let mut values = [0u64; 2];
    // SAFETY: reads at most 16 bytes into a live [u64; 2].
    let n = check(unsafe { libc::read(fd.as_raw_fd(), values.as_mut_ptr().cast(), 16) } as libc::c_long)?;
    if n == 16 { Ok(values[1]) } else { Err(Error::from_errno(libc::EIO)) }
}

/// Waits until no BPF program that may have loaded a map slot before this
/// call is still writing: programs run inside an RCU read-side section,
/// and `membarrier(MEMBARRIER_CMD_GLOBAL)` waits for a grace period
/// (`synchronize_rcu`, a few milliseconds). Where membarrier is refused
/// (nohz_full, or filtered), sleeps `fallback` instead.
pub fn wait_for_writers(fallback: std::time::Duration) {
    faked!(k => k.wait_for_writers());
    const MEMBARRIER_CMD_GLOBAL: libc::c_long = 1;
    // SAFETY: membarrier takes two integers and touches no memory of ours.
    if unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) } != 0 {
        std::thread::sleep(fallback);
    }
}

/// Whether this kernel takes `PERF_FORMAT_LOST` (6.0 and later), probed
/// once with a disabled BPF output event of this thread, closed at once.
pub fn format_lost_supported() -> bool {
    faked!(k => k.format_lost_supported());
    static SUPPORTED: once_cell::sync::OnceCell<bool> = once_cell::sync::OnceCell::new();
    *SUPPORTED.get_or_init(|| {
        let mut attr = PerfEventAttr::bpf_output(1);
        attr.read_format = super::PERF_FORMAT_LOST;
        attr.flags |= super::ATTR_FLAG_DISABLED;
        // SAFETY: `attr` is a live, fully initialised attr the kernel only
        // reads; pid 0 / cpu -1 is this thread on any CPU.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0,
                -1,
                -1,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        fd >= 0 && {
            drop(owned(fd));
            true
        }
    })
}

/// This process's id (not cached: it changes in a forked child).
pub fn getpid() -> i32 {
    faked!(k => k.getpid());
    // SAFETY: getpid has no preconditions.
    unsafe { libc::getpid() }
}

/// A mapping of a perf event's ring: the kernel's, or a fake kernel's.
pub enum Mapping {
    /// Shared with the kernel through the perf fd.
    Kernel(#[allow(dead_code, reason = "owns the mapping; unmapped on drop")] memmap2::MmapRaw),
    /// Memory a test's fake kernel writes into.
    #[cfg(test)]
    Fake(#[allow(dead_code, reason = "owns the memory")] std::sync::Arc<super::fake::Memory>),
}

impl Mapping {
    /// Start of the mapping.
    pub fn ptr(&self) -> *mut u8 {
        match self {
            Mapping::Kernel(m) => m.as_mut_ptr(),
            #[cfg(test)]
            Mapping::Fake(m) => m.ptr(),
        }
    }
}

/// Maps `len` bytes of a perf fd, shared; read-write unless `read_only`.
pub fn mmap_perf(fd: BorrowedFd<'_>, len: usize, read_only: bool) -> Result<Mapping> {
    fault::at("mmap")?;
    faked!(k => k.mmap_perf(fd.as_raw_fd(), len, read_only));
    let mut opts = memmap2::MmapOptions::new();
    opts.len(len);
    if read_only { opts.map_raw_read_only(fd.as_raw_fd()) } else { opts.map_raw(fd.as_raw_fd()) }
        .map(Mapping::Kernel)
        .map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// Maps `len` bytes of a BPF map fd from byte `offset`, shared; read-write
/// unless `read_only` (a ring buffer's consumer page is the only part the
/// kernel lets user space map writable).
pub fn mmap_map(fd: BorrowedFd<'_>, len: usize, offset: u64, read_only: bool) -> Result<Mapping> {
    fault::at("mmap")?;
    let mut opts = memmap2::MmapOptions::new();
    opts.len(len).offset(offset);
    if read_only { opts.map_raw_read_only(fd.as_raw_fd()) } else { opts.map_raw(fd.as_raw_fd()) }
        .map(Mapping::Kernel)
        .map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// One `u64` in an anonymous `MAP_SHARED` page: a forked child shares it
/// with its parent.
pub struct SharedWord(core::ptr::NonNull<u64>);

// SAFETY: the word is only accessed as an AtomicU64.
unsafe impl Send for SharedWord {}
// SAFETY: as above.
unsafe impl Sync for SharedWord {}

impl SharedWord {
    /// The word.
    pub fn get(&self) -> &core::sync::atomic::AtomicU64 {
        // SAFETY: the page is mapped, writable and 8-aligned for as long as
        // self lives; it is only ever accessed atomically.
        unsafe { core::sync::atomic::AtomicU64::from_ptr(self.0.as_ptr()) }
    }
}

impl Drop for SharedWord {
    fn drop(&mut self) {
        // SAFETY: the page was mapped by shared_word and nothing uses it now.
        unsafe { libc::munmap(self.0.as_ptr().cast(), super::cpu::page_size()) };
    }
}

/// A zeroed [`SharedWord`].
pub fn shared_word() -> Result<SharedWord> {
    // SAFETY: an anonymous mapping; no existing memory is touched.
    let ptr = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            super::cpu::page_size(),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(Error::last_os());
    }
    core::ptr::NonNull::new(ptr.cast()).map(SharedWord).ok_or(Error::NOMEM)
}
