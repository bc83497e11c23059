//! One error type for the whole crate: a positive errno value, converted at
//! the C boundary the way libbpf's `libbpf_err` / `libbpf_err_ptr` do.

use std::fmt;

/// A positive `errno` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

/// Result of every fallible operation in the crate.
pub type Result<T> = std::result::Result<T, Errno>;

impl Errno {
    /// Invalid argument.
    pub const INVAL: Errno = Errno(libc::EINVAL);
    /// Out of memory.
    pub const NOMEM: Errno = Errno(libc::ENOMEM);

    /// The calling thread's current `errno`, as left by a failed syscall.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    }

    /// Sets the calling thread's `errno` to this value.
    pub fn set(self) {
        set_errno(self.0);
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

/// Sets `errno` for the calling thread.
pub fn set_errno(value: i32) {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = value };
}

/// Reads `errno` of the calling thread.
pub fn get_errno() -> i32 {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

/// libbpf's `libbpf_err`: a negative return value also sets `errno` to its
/// absolute value; other values pass through untouched.
pub fn libbpf_err(ret: i32) -> i32 {
    if ret < 0 {
        set_errno(ret.wrapping_neg());
    }
    ret
}

/// Converts a result to libbpf's int convention: `Ok(v)` is `v`, `Err(e)`
/// is `-e` with `errno = e`.
pub fn ret_errno(result: Result<i32>) -> i32 {
    match result {
        Ok(v) => v,
        Err(e) => libbpf_err(-e.0),
    }
}
