//! The few bpf(2) commands `dump` needs: a map by pinned path or id, its
//! type and size, and whether its slots are taken.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

const BPF_MAP_LOOKUP_ELEM: i32 = 1;
const BPF_OBJ_GET: i32 = 7;
const BPF_MAP_GET_FD_BY_ID: i32 = 14;
const BPF_OBJ_GET_INFO_BY_FD: i32 = 15;

/// `BPF_MAP_TYPE_PERF_EVENT_ARRAY`.
pub const MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
/// `BPF_MAP_TYPE_RINGBUF`.
pub const MAP_TYPE_RINGBUF: u32 = 27;

/// What `BPF_OBJ_GET_INFO_BY_FD` tells of a map (the leading fields of
/// `struct bpf_map_info`).
#[derive(Debug, Clone)]
pub struct MapInfo {
    pub type_: u32,
    pub id: u32,
    pub max_entries: u32,
    pub name: String,
}

fn bpf(cmd: i32, attr: &mut [u64]) -> io::Result<i64> {
    // SAFETY: `attr` is a zeroed, writable buffer at least as large as the
    // union member the command reads and writes; its size is passed.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr) as u32) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r) }
}

fn owned(fd: i64) -> OwnedFd {
    // SAFETY: the kernel just returned this fd to us; nothing else owns it.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// The map pinned at `path` (`BPF_OBJ_GET`).
pub fn map_by_path(path: &str) -> io::Result<OwnedFd> {
    let c = std::ffi::CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut attr = [0u64; 4];
    attr[0] = c.as_ptr() as u64; // pathname
    bpf(BPF_OBJ_GET, &mut attr).map(owned)
}

/// The map with this id (`BPF_MAP_GET_FD_BY_ID`).
pub fn map_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut attr = [0u64; 2];
    attr[0] = id as u64; // map_id (u32), next_id
    bpf(BPF_MAP_GET_FD_BY_ID, &mut attr).map(owned)
}

/// The map's type, id, size and name.
pub fn map_info(fd: RawFd) -> io::Result<MapInfo> {
    let mut info = [0u8; 88];
    let mut attr = [0u64; 2];
    attr[0] = fd as u32 as u64 | ((info.len() as u64) << 32); // bpf_fd, info_len
    attr[1] = info.as_mut_ptr() as u64; // info
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let word = |at: usize| u32::from_ne_bytes(info[at..at + 4].try_into().expect("4 bytes"));
    let name = &info[24..40];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(MapInfo {
        type_: word(0),
        id: word(4),
        max_entries: word(16),
        name: String::from_utf8_lossy(&name[..end]).into_owned(),
    })
}

/// What a lookup of slot `key` says: `Some(true)` when it holds an event,
/// `Some(false)` when empty, `None` when the kernel does not answer
/// lookups on this map type from user space.
pub fn slot_taken(fd: RawFd, key: u32) -> io::Result<Option<bool>> {
    let key_buf = key;
    let mut value = 0u64;
    let mut attr = [0u64; 4];
    attr[0] = fd as u32 as u64; // map_fd
    attr[1] = &key_buf as *const u32 as u64; // key
    attr[2] = &mut value as *mut u64 as u64; // value
    match bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) {
        Ok(_) => Ok(Some(true)),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Some(false)),
        // ENOTSUPP (524, kernel-internal) or EOPNOTSUPP: no answer.
        Err(e) if matches!(e.raw_os_error(), Some(524) | Some(libc::EOPNOTSUPP)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Another process that holds a map open: the map and perf events alone
/// make a loader (it attached its programs and keeps the map alive); a
/// mapped perf event ring makes a reader, which gets the map's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: i32,
    pub comm: String,
    pub reads: bool,
}

/// Other processes that hold map `id` open and also have perf events
/// open: those that may own its slots. The kernel answers no lookup on a
/// perf event array from user space (ENOTSUPP), so this is what tells
/// whether someone may read the map now; a process whose perf events are
/// not mapped (`/proc/PID/maps` shows no `[perf_event]` mapping) reads no
/// ring: it holds the map, as a loader that attached and waits does.
pub fn other_holders(id: u32) -> Vec<Holder> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    let Ok(procs) = std::fs::read_dir("/proc") else { return found };
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        if holds_map_and_events(pid, id) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            found.push(Holder { pid, comm: comm.trim().to_string(), reads: maps_perf_rings(pid) });
        }
    }
    found
}

/// The other processes holding ring buffer map `id` that map some BPF
/// map's memory (the kernel's `/proc/PID/maps` does not say which map: a
/// ring buffer's reader maps its map, so these may be reading it).
pub fn ring_buffer_readers(id: u32) -> Vec<Holder> {
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    let pids = procs.flatten().filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()));
    pids.filter(|&pid| pid != me && holds_map(pid, id) && maps_bpf_maps(pid))
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            Holder { pid, comm: comm.trim().to_string(), reads: true }
        })
        .collect()
}

fn holds_map(pid: i32, id: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    let want = format!("map_id:\t{id}\n");
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|t| t.to_str() == Some("anon_inode:bpf-map"))
            && std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy()))
                .is_ok_and(|t| t.contains(&want))
    })
}

fn maps_bpf_maps(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.lines().any(|l| l.ends_with("anon_inode:bpf-map")))
}

/// Whether the process has a perf event's ring mapped.
fn maps_perf_rings(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|maps| maps.lines().any(|l| l.ends_with("anon_inode:[perf_event]")))
}

fn holds_map_and_events(pid: i32, id: u32) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    let (mut map, mut events) = (false, false);
    let want = format!("map_id:\t{id}\n");
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else { continue };
        match target.to_str() {
            Some("anon_inode:[perf_event]") => events = true,
            Some("anon_inode:bpf-map") if !map => {
                let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
                map = std::fs::read_to_string(info).is_ok_and(|t| t.contains(&want));
            }
            _ => {}
        }
        if map && events {
            return true;
        }
    }
    false
}
