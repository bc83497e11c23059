//! What a `struct perf_buffer *` from this library points to, and the
//! checks every call makes before using one.
//!
//! A program linked against both libbpf and libperfbuf can end up passing
//! a handle of one library to the other (link order decides which library
//! a name binds to). A libbpf `struct perf_buffer` starts with its
//! `event_cb` function pointer; ours starts with [`MAGIC`], whose top bits
//! make it a non-canonical address on every 64-bit target Linux runs on,
//! so it can never equal a function pointer or NULL. Reading that first
//! word stays inside either object, and a handle without it is refused
//! with EINVAL and a message instead of being used.

use super::callbacks::CCallbacks;
use crate::error::{Error, Result};
use crate::fallible;
use crate::log;
use crate::reader::Reader;
use crate::reader::waker::WakeFd;
use core::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, Ordering};

use super::abi::perf_buffer;

/// "PERFBUF1": not a canonical address, so no libbpf handle starts with it.
const MAGIC: u64 = 0x5045_5246_4255_4631;

/// The object behind a handle.
#[repr(C)]
pub(crate) struct Handle {
    /// [`MAGIC`] while the handle lives; cleared when it is freed.
    magic: AtomicU64,
    /// Reachable without touching the reader, so `perfbuf_wake` may run
    /// while another thread is inside `perf_buffer__poll` (which holds the
    /// reader mutably).
    pub(crate) waker: WakeFd,
    reader: UnsafeCell<Reader<CCallbacks>>,
}

/// Boxes a new reader into a handle, or NULL with errno set (ENOMEM if the
/// handle cannot be allocated; the reader is then torn down).
pub(crate) fn into_handle(result: Result<Reader<CCallbacks>>) -> *mut perf_buffer {
    let boxed = result.and_then(|reader| {
        fallible::boxed(Handle {
            magic: AtomicU64::new(MAGIC),
            waker: WakeFd::borrowing(reader.epoll_fd()),
            reader: UnsafeCell::new(reader),
        })
    });
    match boxed {
        Ok(handle) => Box::into_raw(handle).cast(),
        Err(e) => null_with(&e),
    }
}

/// A constructor's failure, as libbpf reports it: NULL with errno set
/// (and the error's text kept for `perfbuf_last_error`).
pub(crate) fn null_with<T>(e: &Error) -> *mut T {
    log::remember(e);
    crate::error::set_errno(e.errno());
    core::ptr::null_mut()
}

/// The handle behind `pb`: EINVAL for NULL and for anything this library
/// did not make (a libbpf `struct perf_buffer`, a freed handle).
///
/// # Safety
/// `pb` is a live handle (see the ffi module docs): NULL, one of ours, or
/// a libbpf handle (at least 8 readable bytes).
pub(crate) unsafe fn handle<'a>(pb: *const perf_buffer) -> Result<&'a Handle> {
    if pb.is_null() {
        return Err(Error::INVAL);
    }
    // SAFETY: a non-NULL live handle is readable for at least its first 8
    // bytes, ours or libbpf's (contract); `magic` is our first field.
    let magic = unsafe { &*pb.cast::<AtomicU64>() }.load(Ordering::Relaxed);
    if magic != MAGIC {
        return Err(log::invalid(
            "this perf_buffer was not made by libperfbuf (a libbpf handle? link -lperfbuf before -lbpf, \
             or use only perfbuf_* names)",
        ));
    }
    // SAFETY: the magic says this is a Box<Handle> from into_handle.
    Ok(unsafe { &*pb.cast::<Handle>() })
}

/// # Safety
/// As for [`handle`], and no other call except `perfbuf_wake` runs on it
/// concurrently (libbpf's threading contract). The C API's `const` on some
/// handle arguments is libbpf's; the reader may still change inside.
pub(crate) unsafe fn reader_mut<'a>(pb: *const perf_buffer) -> Result<&'a mut Reader<CCallbacks>> {
    // SAFETY: per the contract, this is the only reference to the reader.
    unsafe { handle(pb).map(|h| &mut *h.reader.get()) }
}

/// # Safety
/// As for [`reader_mut`].
pub(crate) unsafe fn reader_ref<'a>(pb: *const perf_buffer) -> Result<&'a Reader<CCallbacks>> {
    // SAFETY: per the contract, nothing mutates the reader meanwhile.
    unsafe { handle(pb).map(|h| &*h.reader.get()) }
}

/// Frees a handle of ours; refuses (with a message) anything else.
///
/// # Safety
/// `pb` is a live handle; it is dangling afterwards.
pub(crate) unsafe fn free(pb: *mut perf_buffer) {
    // SAFETY: per this function's contract.
    if let Ok(h) = unsafe { handle(pb) } {
        h.magic.store(0, Ordering::Relaxed);
        // SAFETY: checked to be a Box<Handle> from into_handle, not freed.
        drop(unsafe { Box::from_raw(pb.cast::<Handle>()) });
    }
}
