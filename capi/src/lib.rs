//! libperfbuf, the C face of perfbuf: libbpf's ten `perf_buffer__*`
//! functions ([`libbpf`]), the `perfbuf_*` extensions ([`ext`],
//! [`records`], [`decode`], [`events`]), and the only code that knows
//! errno, C structs and C function pointers. It builds `libperfbuf.so`,
//! `libperfbuf.a` and `include/perfbuf.h` (by cbindgen, in `build.rs`) from
//! the Rust core, the `perfbuf` crate, whose building blocks it reaches
//! through that crate's `c-face` feature.
//!
//! Every exported function is a short shim: check pointers, turn the
//! caller's structs into Rust values, call the reader through the same
//! [`perf_buffer::Builder`] and methods the Rust face uses, and map the result
//! to libbpf's conventions (NULL + errno from constructors, `-errno` with
//! errno set from the rest).
//!
//! # Safety vocabulary (used by every `extern "C"` function)
//! - *a live handle*: NULL, or a pointer returned by a constructor
//!   (`perf_buffer__new`, `perf_buffer__new_raw`, `perfbuf_new`) and not
//!   yet passed to `perf_buffer__free`. A pointer to a libbpf `struct
//!   perf_buffer` is also accepted and refused with EINVAL (see [`handle`]).
//! - *valid for writes*: NULL, or a pointer to writable, aligned memory of
//!   the pointee type.
//! - *callbacks*: function pointers given at construction are called with
//!   the caller's `ctx` on the thread that polls; they must not free the
//!   buffer.

#![deny(unsafe_op_in_unsafe_fn)]
// Its Rust docs are for the library's developers (the C API's are in
// perfbuf.h): they link the private modules they describe.
#![allow(rustdoc::private_intra_doc_links)]

// No panic crosses into C: release and dev builds use panic = "abort" (the
// workspace's Cargo.toml), and since Rust 1.81 a panic escaping an
// `extern "C"` function aborts rather than unwinding, whatever the profile.

// The core's modules, under the names the shims use.
use perfbuf::kernel::fallible;
use perfbuf::{error, kernel, log, perf_buffer, reader, ring};

/// Messages go to stderr by default, as libbpf's do, from the moment the
/// library is loaded (linked, `LD_PRELOAD`ed or `dlopen`ed); the Rust
/// crate alone prints nothing.
extern "C" fn print_like_libbpf() {
    log::print_to_stderr_by_default();
}

// SAFETY: .init_array holds pointers to functions the loader calls with no
// arguments at load time; `print_like_libbpf` is one, and only stores a flag.
#[used]
#[unsafe(link_section = ".init_array")]
static PRINT_LIKE_LIBBPF: extern "C" fn() = print_like_libbpf;

pub(crate) mod abi;
pub(crate) mod callbacks;
pub(crate) mod decode;
pub(crate) mod events;
pub(crate) mod ext;
pub(crate) mod handle;
pub(crate) mod libbpf;
pub(crate) mod names;
pub(crate) mod opts;
pub(crate) mod perfdata;
pub(crate) mod records;
pub(crate) mod ring_buffer;
pub(crate) mod sideband;

use crate::error::{Error, Result, set_errno};
use core::ffi::{c_int, c_void};

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
        return Err(log::invalid("opts size is too large (garbage?)"));
    }
    // SAFETY: readable for `sz` bytes (contract; libbpf reads them too).
    Ok(Some(unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), sz) }))
}

/// libbpf's `OPTS_VALID` for a struct of which this library knows the
/// first `known` bytes: `sz` at least a `size_t`, and every byte beyond
/// the known fields 0 (a newer caller's options must be unused).
pub(crate) fn check_tail(bytes: &[u8], known: usize, what: &'static str) -> Result<()> {
    if bytes.len() < size_of::<usize>() {
        return Err(log::invalid(what));
    }
    if bytes.len() > known && bytes[known..].iter().any(|&b| b != 0) {
        return Err(log::invalid(what));
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
            log::remember(&e);
            libbpf_err(e.code())
        }
    }
}

/// Internals for the fuzz targets (feature `internals`; not a stable API).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::abi::{perf_event_attr, perf_event_header};
    pub use crate::decode::{
        c_decode_attr, decode_to_c, layout_of_perf_event_attr, parse_decode_attr, perfbuf_decode,
        perfbuf_decode_attr, perfbuf_decode_attr_from, perfbuf_sample,
    };
}
