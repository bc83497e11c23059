//! Opening a pinned BPF map, for the examples that take one.

use std::os::fd::{FromRawFd, OwnedFd};

/// Opens a pinned map (`BPF_OBJ_GET`).
pub fn open_pinned(path: &str) -> std::io::Result<OwnedFd> {
    #[repr(C)]
    struct ObjGet {
        pathname: u64,
        bpf_fd: u32,
        file_flags: u32,
    }
    let c = std::ffi::CString::new(path)?;
    let mut attr = ObjGet { pathname: c.as_ptr() as u64, bpf_fd: 0, file_flags: 0 };
    const BPF_OBJ_GET: libc::c_long = 7;
    // SAFETY: `attr` is a valid bpf_attr prefix for BPF_OBJ_GET, `c` lives
    // across the call.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_OBJ_GET, &mut attr, size_of::<ObjGet>()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new fd nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}
