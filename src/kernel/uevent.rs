//! CPUs coming and going, as the kernel announces them: a
//! `NETLINK_KOBJECT_UEVENT` socket receives `online@/devices/system/cpu/cpuN`
//! and `offline@...` the moment a CPU changes (any user may listen), so a
//! reader learns of it without ticking. A classic BPF filter on the socket
//! drops every other uevent (disks, USB, network...) in the kernel, so the
//! socket wakes the reader only for CPUs.
//!
//! A network namespace the kernel sends no uevents to gets none; an
//! overflowing socket (`ENOBUFS`) loses some: callers also compare the
//! online mask now and then.

use crate::error::{Error, Result};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `NETLINK_KOBJECT_UEVENT`.
const NETLINK_KOBJECT_UEVENT: libc::c_int = 15;
/// The kernel's uevent multicast group (udev's own re-broadcast is 2).
const KERNEL_GROUP: u32 = 1;

/// A CPU change: the CPU and whether it is online now.
pub type CpuChange = (i32, bool);

/// A socket receiving the kernel's CPU online and offline uevents,
/// non-blocking, close-on-exec.
pub fn cpu_socket() -> Result<OwnedFd> {
    #[cfg(test)]
    if let Some(r) = super::fake::with(|k| k.uevent_socket()) {
        return r;
    }
    // SAFETY: plain integers; a new fd on success.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            NETLINK_KOBJECT_UEVENT,
        )
    };
    if fd < 0 {
        return Err(Error::last_os());
    }
    // SAFETY: a fresh fd nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let filter = cpu_filter();
    let prog = libc::sock_fprog { len: filter.len() as u16, filter: filter.as_ptr().cast_mut() };
    // SAFETY: `prog` points to `filter`, alive for the call; the kernel copies it.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_FILTER,
            (&prog as *const libc::sock_fprog).cast(),
            size_of::<libc::sock_fprog>() as libc::socklen_t,
        )
    };
    if ret != 0 {
        return Err(Error::last_os());
    }
    // SAFETY: a zeroed sockaddr_nl is valid; the fields set below are plain.
    let mut addr: libc::sockaddr_nl = unsafe { core::mem::zeroed() };
    addr.nl_family = libc::AF_NETLINK as u16;
    addr.nl_groups = KERNEL_GROUP;
    // SAFETY: `addr` is a live sockaddr_nl of the size passed.
    let ret = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_nl).cast(),
            size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if ret != 0 {
        return Err(Error::last_os());
    }
    Ok(fd)
}

/// The CPU changes waiting on the socket, oldest first (empty when none).
/// `ENOBUFS` means some were lost: compare the online mask instead.
pub fn read_cpu_changes(fd: BorrowedFd<'_>) -> Result<Vec<CpuChange>> {
    #[cfg(test)]
    if let Some(r) = super::fake::with(|k| k.read_uevents(fd.as_raw_fd())) {
        return r;
    }
    let mut changes = Vec::new();
    let mut buf = [0u8; 2048];
    loop {
        // SAFETY: receives at most the buffer's length into it.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n < 0 {
            let e = Error::last_os();
            if e.errno() == libc::EAGAIN {
                return Ok(changes);
            }
            if e.errno() == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if let Some(change) = parse(&buf[..n as usize]) {
            changes.push(change);
        }
    }
}

/// `online@/devices/system/cpu/cpu3\0ACTION=online\0...` → `(3, true)`.
fn parse(msg: &[u8]) -> Option<CpuChange> {
    let head = msg.split(|&b| b == 0).next()?;
    let head = core::str::from_utf8(head).ok()?;
    let (action, path) = head.split_once('@')?;
    let online = match action {
        "online" => true,
        "offline" => false,
        _ => return None,
    };
    let cpu = path.strip_prefix("/devices/system/cpu/cpu")?.parse().ok()?;
    Some((cpu, online))
}

/// A classic BPF socket filter passing only messages that start with
/// `online@/devices/system/cpu/c` or `offline@/devices/system/cpu/`
/// (compared as big-endian words, as `BPF_LD|BPF_W|BPF_ABS` loads them).
fn cpu_filter() -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = 0x20;
    const JEQ_K: u16 = 0x15;
    const RET_K: u16 = 0x06;
    let insn = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    let mut prog = Vec::new();
    for prefix in [b"online@/devices/system/cpu/c", b"offline@/devices/system/cpu/"] {
        let words = prefix.len() / 4;
        for (i, w) in prefix.chunks_exact(4).enumerate() {
            let word = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
            // On a mismatch, skip the rest of this block and its accept.
            let skip = 2 * (words - i - 1) + 1;
            prog.push(insn(LD_W_ABS, 0, 0, 4 * i as u32));
            prog.push(insn(JEQ_K, 0, skip as u8, word));
        }
        prog.push(insn(RET_K, 0, 0, u32::MAX));
    }
    prog.push(insn(RET_K, 0, 0, 0));
    prog
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_uevents_only() {
        assert_eq!(parse(b"online@/devices/system/cpu/cpu3\0ACTION=online\0"), Some((3, true)));
        assert_eq!(parse(b"offline@/devices/system/cpu/cpu12\0ACTION=offline\0"), Some((12, false)));
        assert_eq!(parse(b"add@/devices/system/cpu/cpu3\0"), None);
        assert_eq!(parse(b"online@/devices/system/memory/memory3\0"), None);
        assert_eq!(parse(b"online@/devices/system/cpu/cpufreq\0"), None);
        assert_eq!(parse(b""), None);
    }

    /// Runs the filter as the kernel would on `msg`: true when it passes.
    fn passes(msg: &[u8]) -> bool {
        let prog = cpu_filter();
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = prog[pc];
            match i.code {
                0x20 => {
                    let at = i.k as usize;
                    let Some(w) = msg.get(at..at + 4) else { return false };
                    a = u32::from_be_bytes([w[0], w[1], w[2], w[3]]);
                    pc += 1;
                }
                0x15 => pc += 1 + usize::from(if a == i.k { i.jt } else { i.jf }),
                0x06 => return i.k != 0,
                c => panic!("unexpected opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn the_filter_keeps_cpu_changes_and_drops_the_rest() {
        assert!(passes(b"online@/devices/system/cpu/cpu1\0ACTION=online\0"));
        assert!(passes(b"offline@/devices/system/cpu/cpu1\0ACTION=offline\0"));
        assert!(!passes(b"add@/devices/virtual/net/veth0\0"));
        assert!(!passes(b"online@/devices/system/memory/memory8\0"));
        assert!(!passes(b"change@/devices/system/cpu/cpu1\0"));
        assert!(!passes(b"onl"));
        assert!(!passes(b"libudev\0\xfe\xed\xca\xfe"));
    }
}
