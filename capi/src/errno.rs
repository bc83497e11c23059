//! The calling thread's `errno`, which only the C library sets.

use core::ffi::c_int;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(value: c_int) {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = value };
}

/// The calling thread's `errno`.
pub(crate) fn get_errno() -> c_int {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}
