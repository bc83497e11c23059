//! Every system call the library makes, as small safe wrappers.
//!
//! Each returns the kernel's errno as [`Errno`] on failure, so callers can
//! pass it on to C exactly as libbpf does.

use crate::error::{Errno, Result};
use crate::kernel::PerfEventAttr;
use core::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;

/// `BPF_MAP_TYPE_PERF_EVENT_ARRAY`.
pub const BPF_MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
/// `PERF_EVENT_IOC_ENABLE`.
pub const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
/// `PERF_EVENT_IOC_DISABLE`.
pub const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
/// `PERF_EVENT_IOC_SET_OUTPUT`: send this event's records to another
/// event's ring (same CPU; the argument is that event's fd).
pub const PERF_EVENT_IOC_SET_OUTPUT: libc::c_ulong = 0x2405;
/// `PERF_FLAG_FD_CLOEXEC`.
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;

/// Fails here when a test armed this point (feature `fault-injection`).
#[inline(always)]
pub(crate) fn fault(point: &str) -> Result<()> {
    #[cfg(feature = "fault-injection")]
    crate::fault::check(point)?;
    let _ = point;
    Ok(())
}

fn check(ret: libc::c_long) -> Result<libc::c_long> {
    if ret < 0 { Err(Errno::last()) } else { Ok(ret) }
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
    fault("map_update")?;
    let mut attr = MapElemAttr {
        map_fd: map_fd as u32,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: &value as *const u32 as u64,
        flags: 0,
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// `bpf_map_delete_elem(map_fd, &key)`.
pub fn map_delete_u32(map_fd: RawFd, key: u32) -> Result<()> {
    let mut attr =
        MapElemAttr { map_fd: map_fd as u32, _pad: 0, key: &key as *const u32 as u64, value: 0, flags: 0 };
    bpf(BPF_MAP_DELETE_ELEM, &mut attr).map(drop)
}

/// The fields of `struct bpf_map_info` we use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfo {
    /// `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    /// `max_entries`.
    pub max_entries: u32,
    /// The map's name.
    pub name: String,
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
    let mut info = BpfMapInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: map_fd as u32,
        info_len: size_of::<BpfMapInfo>() as u32,
        info: &mut info as *mut BpfMapInfo as u64,
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let len = info.name.iter().position(|&b| b == 0).unwrap_or(info.name.len());
    Ok(MapInfo {
        map_type: info.map_type,
        max_entries: info.max_entries,
        name: String::from_utf8_lossy(&info.name[..len]).into_owned(),
    })
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
/// constructor call (the FFI layer's contract), never dereferenced by us.
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

/// `perf_event_open(attr, pid = -1, cpu, group_fd = -1, PERF_FLAG_FD_CLOEXEC)`.
pub fn perf_event_open(attr: AttrSource<'_>, cpu: i32) -> Result<OwnedFd> {
    fault("perf_event_open")?;
    let ptr = match attr {
        AttrSource::Built(a) => a as *const PerfEventAttr as *const c_void,
        AttrSource::Caller(CallerAttr(p)) => p,
    };
    // SAFETY: `ptr` is a readable attr (ours, or the caller's per the
    // CallerAttr contract); the kernel only reads it.
    let fd = check(unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            ptr,
            -1 as libc::c_int,
            cpu,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    })?;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `ioctl(fd, request, arg)` for the perf ioctls that take an integer.
pub fn perf_ioctl(fd: &OwnedFd, request: libc::c_ulong, arg: libc::c_ulong) -> Result<()> {
    fault("ioctl")?;
    // SAFETY: the perf ioctls we issue take an integer argument, not a pointer.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request, arg) } as libc::c_long).map(drop)
}

/// `epoll_create1(EPOLL_CLOEXEC)`.
pub fn epoll_create() -> Result<OwnedFd> {
    fault("epoll_create")?;
    // SAFETY: no pointers involved.
    let fd = check(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) } as libc::c_long)?;
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `epoll_ctl(EPOLL_CTL_ADD)` for level-triggered `EPOLLIN` with `data` as the token.
pub fn epoll_add(epfd: &OwnedFd, fd: RawFd, data: u64) -> Result<()> {
    epoll_add_raw(epfd.as_raw_fd(), fd, data)
}

/// [`epoll_add`] on an epoll fd known by number (from another thread).
pub fn epoll_add_raw(epfd: RawFd, fd: RawFd, data: u64) -> Result<()> {
    fault("epoll_ctl")?;
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: data };
    // SAFETY: `ev` is a valid epoll_event the kernel reads.
    check(unsafe { libc::epoll_ctl(epfd, libc::EPOLL_CTL_ADD, fd, &mut ev) } as libc::c_long).map(drop)
}

/// `epoll_wait` into `events[..max]`; returns the number of ready entries.
/// `max == 0` is passed through, so the kernel's EINVAL reaches the caller.
pub fn epoll_wait(
    epfd: RawFd,
    events: &mut [libc::epoll_event],
    max: usize,
    timeout_ms: i32,
) -> Result<usize> {
    let max = max.min(events.len()).min(i32::MAX as usize) as i32;
    // SAFETY: the kernel writes at most `max` ≤ events.len() entries.
    let n = check(unsafe { libc::epoll_wait(epfd, events.as_mut_ptr(), max, timeout_ms) } as libc::c_long)?;
    Ok(n as usize)
}

/// `eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)`.
pub fn eventfd() -> Result<OwnedFd> {
    fault("eventfd")?;
    // SAFETY: no pointers involved.
    let fd = check(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) } as libc::c_long)?;
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// A non-blocking `CLOCK_MONOTONIC` timerfd, not armed.
pub fn timerfd() -> Result<OwnedFd> {
    fault("timerfd")?;
    // SAFETY: no pointers involved.
    let fd =
        check(
            unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) }
                as libc::c_long,
        )?;
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Makes a timerfd fire every `period` from now, or never again if `period`
/// is zero; either way expirations not yet read are dropped.
pub fn arm_timer(fd: &OwnedFd, period: std::time::Duration) -> Result<()> {
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
    // SAFETY: writes 8 bytes from a live u64.
    check(unsafe { libc::write(fd, (&value as *const u64).cast(), 8) } as libc::c_long).map(drop)
}

/// The records a perf event opened with `PERF_FORMAT_LOST` (and no other
/// `read_format` bit) failed to write over its life: `read()` returns
/// `{ value, lost }`.
pub fn read_lost(fd: &OwnedFd) -> Result<u64> {
    let mut values = [0u64; 2];
    // SAFETY: reads at most 16 bytes into a live [u64; 2].
    let n = check(unsafe { libc::read(fd.as_raw_fd(), values.as_mut_ptr().cast(), 16) } as libc::c_long)?;
    if n == 16 { Ok(values[1]) } else { Err(Errno(libc::EIO)) }
}

/// Whether this kernel takes `PERF_FORMAT_LOST` (6.0 and later), probed
/// once with a BPF output event on the calling thread, closed at once.
pub fn format_lost_supported() -> bool {
    static SUPPORTED: once_cell::sync::OnceCell<bool> = once_cell::sync::OnceCell::new();
    *SUPPORTED.get_or_init(|| {
        let mut attr = PerfEventAttr::bpf_output(1);
        attr.read_format = crate::kernel::PERF_FORMAT_LOST;
        attr.flags |= crate::kernel::ATTR_FLAG_DISABLED;
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
        if fd < 0 {
            return false;
        }
        // SAFETY: the kernel returned a new fd that nothing else owns.
        drop(unsafe { OwnedFd::from_raw_fd(fd as RawFd) });
        true
    })
}

/// Reads (and so resets) an eventfd or timerfd counter; 0 if none pending.
pub fn read_u64(fd: RawFd) -> u64 {
    let mut value = 0u64;
    // SAFETY: reads at most 8 bytes into a live u64.
    let n = unsafe { libc::read(fd, (&mut value as *mut u64).cast(), 8) };
    if n == 8 { value } else { 0 }
}

/// Maps `len` bytes of a perf fd, shared; read-write unless `read_only`.
pub fn mmap_perf(fd: RawFd, len: usize, read_only: bool) -> Result<memmap2::MmapRaw> {
    fault("mmap")?;
    let mut opts = memmap2::MmapOptions::new();
    opts.len(len);
    if read_only { opts.map_raw_read_only(fd) } else { opts.map_raw(fd) }
        .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))
}
