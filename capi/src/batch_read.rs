//! C entry points of batch reads: what the rings hold, copied into the
//! caller's buffers in one call (a byte buffer and an array of fixed-size
//! entries), for callers whose per-record calls cost more than the
//! records (Python's ctypes, Go's cgo). The callbacks do not run.

use super::abi::{perf_buffer, perfbuf_read_batch};
use super::buffer::reader_mut;
use super::ffi::ret_errno;
use super::print;
use core::ffi::c_int;
use core::mem::size_of;
use perfbuf::{BatchBuf, BatchEntry, Error, Result};
use std::time::Duration;

/// Copies into `b`'s buffers what the rings hold, as far as it fits,
/// without waiting: each sample's bytes at an 8-aligned offset of
/// `b->data`, and one entry per sample or loss report, in order per CPU
/// (a ring buffer's: in the order written, CPU `UINT32_MAX`). A record
/// that does not fit stays in its ring for the next read, which starts
/// with that ring: nothing is consumed that is not delivered, and
/// `perfbuf_ring_stats` counts what was read as a consume would. The
/// sample and lost callbacks do not run (a reader made for batch reads
/// may pass no-op callbacks); do not mix with `perf_buffer__poll`, whose
/// drains call them: wait with `perfbuf_poll_batch` instead.
///
/// Sets `b->data_used` and `b->needed`; returns the number of entries
/// filled (0: nothing waiting), or -errno with errno set: -EMSGSIZE when
/// the next record alone is larger than `b->data_size` (`b->needed` says
/// how large a buffer it needs), -EINVAL for NULL, a `b->sz` smaller than
/// the struct, fewer than 2 entries or more than `INT_MAX`, misaligned
/// entries, or an ordered reader, -EOPNOTSUPP for an event set's rings.
///
/// # Safety
/// `pb` is a live handle; `b` is NULL or points to a `struct
/// perfbuf_read_batch` whose `data` is writable for `data_size` bytes and
/// `entries` for `entry_cnt` entries, neither used by anything else during
/// the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_read_batch(pb: *mut perf_buffer, b: *mut perfbuf_read_batch) -> c_int {
    // SAFETY: per this function's contract.
    unsafe { read_into(pb, b, None) }
}

/// `perfbuf_read_batch`; when it finds nothing, waits up to `timeout_ms`
/// (-1: forever, 0: not at all) for a ring to signal and reads again,
/// until something is read (returns the entries) or the time is up
/// (returns 0). -ECANCELED after `perfbuf_wake`; other returns as
/// `perfbuf_read_batch`'s.
///
/// # Safety
/// As for `perfbuf_read_batch`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_poll_batch(
    pb: *mut perf_buffer,
    b: *mut perfbuf_read_batch,
    timeout_ms: c_int,
) -> c_int {
    let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    // SAFETY: per this function's contract.
    unsafe { read_into(pb, b, Some(timeout)) }
}

/// Reads into `b`: without waiting (`wait` None), or polling up to the
/// timeout it holds (None inside: forever).
///
/// # Safety
/// As for `perfbuf_read_batch`.
unsafe fn read_into(
    pb: *mut perf_buffer,
    b: *mut perfbuf_read_batch,
    wait: Option<Option<Duration>>,
) -> c_int {
    // SAFETY: NULL or a readable struct (contract); its sz is checked below.
    let Some(req) = (unsafe { b.as_mut() }) else { return ret_errno(Err(Error::INVAL)) };
    // SAFETY: per this function's contract.
    let reader = match unsafe { reader_mut(pb) } {
        Ok(r) => r,
        Err(e) => return ret_errno(Err(e)),
    };
    // SAFETY: the buffers are the caller's, writable and ours during the
    // call (contract); `buffers` checked their pointers.
    let (data, entries) = match unsafe { buffers(req) } {
        Ok(both) => both,
        Err(e) => return ret_errno(Err(e)),
    };
    let mut out = BatchBuf::new(data, entries);
    let read = match wait {
        None => reader.read_batch(&mut out),
        Some(timeout) => reader.poll_batch(timeout, &mut out),
    };
    (req.data_used, req.needed) = (out.bytes_used(), out.needed().unwrap_or(0));
    ret_errno(read.map(|n| n as c_int))
}

/// The caller's data and entries as slices, after checking `req`.
///
/// # Safety
/// `req.data` is writable for `req.data_size` bytes and `req.entries` for
/// `req.entry_cnt` entries, used by nothing else while the slices live.
unsafe fn buffers<'b>(req: &mut perfbuf_read_batch) -> Result<(&'b mut [u8], &'b mut [BatchEntry])> {
    if req.sz < size_of::<perfbuf_read_batch>() {
        return Err(print::invalid("struct perfbuf_read_batch: sz is too small"));
    }
    (req.data_used, req.needed) = (0, 0);
    // `struct perfbuf_batch_entry` is `BatchEntry`'s layout (abi.rs).
    let entries = req.entries.cast::<BatchEntry>();
    if req.entry_cnt < 2 || req.entry_cnt > c_int::MAX as usize || entries.is_null() || !entries.is_aligned()
    {
        return Err(print::invalid(
            "struct perfbuf_read_batch: entries must be non-NULL, 8-aligned, 2 to INT_MAX of them",
        ));
    }
    if req.data.is_null() && req.data_size > 0 {
        return Err(print::invalid("struct perfbuf_read_batch: data is NULL"));
    }
    let data = match req.data_size {
        0 => &mut [][..],
        // SAFETY: non-NULL and writable for data_size bytes (contract).
        n => unsafe { core::slice::from_raw_parts_mut(req.data.cast::<u8>(), n) },
    };
    // SAFETY: non-NULL, aligned, writable for entry_cnt entries (contract);
    // `perfbuf_batch_entry` and `BatchEntry` have one layout (asserted in
    // abi.rs), and every bit pattern is a valid one.
    let entries = unsafe { core::slice::from_raw_parts_mut(entries, req.entry_cnt) };
    Ok((data, entries))
}
