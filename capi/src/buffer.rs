//! What a `struct perf_buffer *` of this library is: a handle holding a
//! [`perfbuf::Reader`] whose sink is the caller's callbacks, and beside it
//! the waker `perfbuf_wake` may use while another thread polls.

use super::abi::perf_buffer;
use super::callbacks::CCallbacks;
use super::ffi::null_with;
use super::handle::{Handle, Kind};
use perfbuf::Result;
use perfbuf::libbpf_compat::{BorrowedWaker, borrowed_waker};

/// The reader behind every `struct perf_buffer *` of this library.
pub(crate) type Buffer = perfbuf::Reader<'static, CCallbacks>;

type BufferHandle = Handle<Buffer, BorrowedWaker>;

impl Kind for Buffer {
    /// "PERFBUF1".
    const MAGIC: u64 = 0x5045_5246_4255_4631;
    const NOT_OURS: &'static str = "this perf_buffer was not made by libperfbuf (a libbpf handle? link -lperfbuf \
                                    before -lbpf, or use only perfbuf_* names)";
}

/// Boxes a new reader into a handle, or NULL with errno set (ENOMEM if the
/// handle cannot be allocated; the reader is then torn down).
pub(crate) fn into_handle(result: Result<Buffer>) -> *mut perf_buffer {
    let boxed = result.and_then(|mut reader| {
        // SAFETY: the waker lives in the reader's handle and is used only
        // while the handle lives (`perfbuf_wake`'s contract).
        let waker = unsafe { borrowed_waker(&mut reader) };
        BufferHandle::into_raw(reader, waker)
    });
    match boxed {
        Ok(handle) => handle,
        Err(e) => null_with(&e),
    }
}

/// # Safety
/// `pb` is a live handle (NULL, ours, or libbpf's), and no other call
/// except `perfbuf_wake` runs on it concurrently (libbpf's threading
/// contract).
pub(crate) unsafe fn reader_mut<'a>(pb: *const perf_buffer) -> Result<&'a mut Buffer> {
    // SAFETY: per this function's contract.
    unsafe { BufferHandle::value_mut(pb) }
}

/// # Safety
/// As for [`reader_mut`].
pub(crate) unsafe fn reader_ref<'a>(pb: *const perf_buffer) -> Result<&'a Buffer> {
    // SAFETY: per this function's contract.
    unsafe { BufferHandle::value_ref(pb) }
}

/// The waker of `pb`, which other calls may use meanwhile.
///
/// # Safety
/// `pb` is a live handle, not freed before the waker's use returns.
pub(crate) unsafe fn waker<'a>(pb: *const perf_buffer) -> Result<&'a BorrowedWaker> {
    // SAFETY: per this function's contract.
    unsafe { BufferHandle::shared(pb) }
}

/// Frees a handle of ours (the reader tears its rings down as libbpf's
/// `perf_buffer__free` does); refuses (with a message) anything else.
///
/// # Safety
/// `pb` is a live handle; it is dangling afterwards.
pub(crate) unsafe fn free(pb: *mut perf_buffer) {
    // SAFETY: per this function's contract.
    drop(unsafe { BufferHandle::take(pb) });
}
