//! A classic tracepoint BPF program that returns 0, attached to a
//! tracepoint through a perf event of its own (as a tool other than
//! perfbuf would): the kernel then drops every hit of the tracepoint for
//! every perf event on it. Detached and unloaded when dropped.

#![allow(dead_code, reason = "each test file uses part of it")]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `_IOW('$', 8, __u32)`.
const PERF_EVENT_IOC_SET_BPF: libc::c_ulong = 0x4004_2408;

/// A tracepoint program returning 0, attached to a tracepoint.
pub struct DropProgram {
    /// Closed first: it detaches the program.
    _event: OwnedFd,
    _prog: OwnedFd,
    /// The program's id.
    pub id: u32,
}

fn bpf(cmd: libc::c_long, attr: &mut [u8]) -> std::io::Result<libc::c_long> {
    // SAFETY: `attr` is a live buffer of the size passed; the kernel reads
    // it and, for info, writes what its pointers name (live too).
    let ret = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if ret < 0 { Err(std::io::Error::last_os_error()) } else { Ok(ret) }
}

fn put(attr: &mut [u8], at: usize, bytes: &[u8]) {
    attr[at..at + bytes.len()].copy_from_slice(bytes);
}

impl DropProgram {
    /// Loads the program as `name` (at most 15 bytes) and attaches it to
    /// `tracepoint` (`subsystem:name`) on CPU 0; it runs on every hit, on
    /// every CPU.
    pub fn attach(tracepoint: &str, name: &str) -> std::io::Result<DropProgram> {
        let (prog, id) = load(name)?;
        let (system, event) = tracepoint.split_once(':').unwrap();
        let id_file = format!("/sys/kernel/tracing/events/{system}/{event}/id");
        let config: u64 = std::fs::read_to_string(&id_file)?.trim().parse().unwrap();
        let mut pattr = [0u8; 128];
        put(&mut pattr, 0, &PERF_TYPE_TRACEPOINT.to_ne_bytes());
        put(&mut pattr, 4, &128u32.to_ne_bytes());
        put(&mut pattr, 8, &config.to_ne_bytes());
        put(&mut pattr, 16, &1u64.to_ne_bytes()); // sample_period
        // SAFETY: a perf_event_attr of the size its `size` field says.
        let fd = unsafe {
            libc::syscall(libc::SYS_perf_event_open, pattr.as_ptr(), -1, 0, -1, 8 /* CLOEXEC */)
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new fd the kernel returned, owned by nothing else.
        let event = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        // SAFETY: SET_BPF takes the program's fd by value.
        if unsafe { libc::ioctl(event.as_raw_fd(), PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd()) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(DropProgram { _event: event, _prog: prog, id })
    }
}

/// Loads the program as `name` (at most 15 bytes): its fd and id.
pub fn load(name: &str) -> std::io::Result<(OwnedFd, u32)> {
    assert!(name.len() < 16, "BPF program names have at most 15 bytes: {name}");
    // r0 = 0; exit
    let insns: [u64; 2] = [0xb7, 0x95];
    let license = c"GPL";
    let mut attr = [0u8; 128];
    put(&mut attr, 0, &BPF_PROG_TYPE_TRACEPOINT.to_ne_bytes());
    put(&mut attr, 4, &2u32.to_ne_bytes());
    put(&mut attr, 8, &(insns.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 16, &(license.as_ptr() as u64).to_ne_bytes());
    put(&mut attr, 48, name.as_bytes());
    let prog_fd = bpf(BPF_PROG_LOAD, &mut attr)?;
    // SAFETY: a new fd the kernel returned, owned by nothing else.
    let prog = unsafe { OwnedFd::from_raw_fd(prog_fd as i32) };
    let mut info = [0u8; 96];
    let mut attr = [0u8; 16];
    put(&mut attr, 0, &(prog.as_raw_fd() as u32).to_ne_bytes());
    put(&mut attr, 4, &(info.len() as u32).to_ne_bytes());
    put(&mut attr, 8, &(info.as_mut_ptr() as u64).to_ne_bytes());
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    let id = u32::from_ne_bytes(info[4..8].try_into().unwrap());
    Ok((prog, id))
}
