//! The helpers every shim shares: reading the caller's `sz`-prefixed
//! structs by libbpf's rules, writing out structs no longer than the
//! caller's `sz`, and libbpf's return conventions (`-errno` with errno
//! set, NULL with errno).

pub(crate) use crate::errno::set_errno;
use crate::print;
use core::ffi::{c_int, c_void};
use perfbuf::{Error, Result};

/// Largest `sz` read from a caller's struct: libbpf's structs are a few
/// dozen bytes, so a larger value is garbage rather than a newer header.
pub(crate) const MAX_STRUCT_SIZE: usize = 4096;

/// The caller's `sz`-prefixed struct as its `sz` bytes; `None` for NULL.
///
/// # Safety
/// `ptr` is NULL or points to a struct whose first field is a `size_t sz`
/// and which is readable for `sz` bytes.
pub(crate) unsafe fn sized_in<'a>(ptr: *const c_void) -> Result<Option<&'a [u8]>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: a non-NULL struct starts with a readable size_t (contract).
    let sz = unsafe { ptr.cast::<usize>().read_unaligned() };
    if sz > MAX_STRUCT_SIZE {
        return Err(print::invalid("opts size is too large (garbage?)"));
    }
    // SAFETY: readable for `sz` bytes (contract; libbpf reads them too).
    Ok(Some(unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), sz) }))
}

/// libbpf's `OPTS_VALID` for a struct of which this library knows the
/// first `known` bytes: `sz` at least a `size_t`, and every byte beyond
/// the known fields 0 (a newer caller's options must be unused).
pub(crate) fn check_tail(bytes: &[u8], known: usize, what: &'static str) -> Result<()> {
    if bytes.len() < size_of::<usize>() {
        return Err(print::invalid(what));
    }
    if bytes.len() > known && bytes[known..].iter().any(|&b| b != 0) {
        return Err(print::invalid(what));
    }
    Ok(())
}

/// The `N` bytes of a field at `offset` of the caller's struct, if its
/// `sz` covers them.
pub(crate) fn field<const N: usize>(bytes: &[u8], offset: usize) -> Option<[u8; N]> {
    bytes.get(offset..offset + N).map(|s| s.try_into().expect("length checked by get"))
}

/// The `sz` a caller set in its out struct, if it is at least `min`.
///
/// # Safety
/// `out` is NULL or points to a readable `size_t`.
pub(crate) unsafe fn out_sz(out: *const usize, min: usize) -> Result<usize> {
    // SAFETY: per this function's contract.
    unsafe { out.as_ref() }.copied().filter(|&sz| sz >= min).ok_or(Error::INVAL)
}

/// Writes the first `sz` bytes of `value` (at most a whole `T`) to `out`.
///
/// # Safety
/// `out` is writable for `sz` bytes.
pub(crate) unsafe fn write_sized<T: Copy>(out: *mut T, value: &T, sz: usize) {
    let n = sz.min(size_of::<T>());
    // SAFETY: `out` is writable for sz >= n bytes (contract), `value` is a
    // whole T, so both hold n bytes.
    unsafe { core::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), out.cast::<u8>(), n) };
}

/// libbpf's `libbpf_err`: a negative return value also sets `errno` to its
/// absolute value; other values pass through untouched.
pub(crate) fn libbpf_err(ret: c_int) -> c_int {
    if ret < 0 {
        set_errno(ret.wrapping_neg());
    }
    ret
}

/// A result in libbpf's int convention: `Ok(v)` is `v`; an error is its
/// [`Error::code`] (`-errno`, or a callback's value) with errno set as
/// `libbpf_err` would. The error's text is kept for `perfbuf_last_error`.
pub(crate) fn ret_errno(result: Result<c_int>) -> c_int {
    match result {
        Ok(v) => v,
        Err(e) => {
            print::remember(&e);
            libbpf_err(e.code())
        }
    }
}

/// A constructor's failure, as libbpf reports it: NULL with errno set
/// (and the error's text kept for `perfbuf_last_error`).
pub(crate) fn null_with<T>(e: &Error) -> *mut T {
    print::remember(e);
    set_errno(e.errno());
    core::ptr::null_mut()
}
