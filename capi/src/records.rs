//! C entry points of the record-level ring API and the ordered reader.
//!
//! Record-level: `perfbuf_ring_peek` shows the next record of one ring
//! without consuming it, `perfbuf_ring_advance` moves past it, and
//! `perfbuf_ring_publish` frees the space of everything advanced past
//! (a release store of `data_tail`), when the caller is done with it.
//!
//! Ordered: `perfbuf_set_order` makes `perf_buffer__poll` / `__consume`
//! deliver records of all CPUs in timestamp order through the usual callbacks.

use super::abi::{
    PERFBUF_ORDER_SAMPLE_TIME, perf_buffer, perf_event_header, perfbuf_batch_fn, perfbuf_order_opts,
    perfbuf_order_stats,
};
use super::buffer::{reader_mut, reader_ref};
use super::callbacks::{KeyFn, call_batch_fn};
use super::ffi::{out_sz, ret_errno, sized_in, write_sized};
use super::opts;
use core::ffi::{c_int, c_void};
use core::ops::ControlFlow;
use perfbuf::{Error, OrderKey};
use std::time::Duration;

/// Shows the next record of ring `buf_idx` without consuming it:
/// `*record` points at its `struct perf_event_header` and `*size` is its
/// size, contiguous even when it wraps the ring's end (then it is a copy).
/// Returns 1 with a record, 0 when the ring is empty, or -errno (EINVAL for
/// NULL or a bad index). The pointer stays valid until this ring's next
/// peek, advance-and-publish, or drain; in-ring records stay valid until
/// the tail is published past them.
///
/// An inconsistent control page (e.g. a tail published wrongly by another
/// reader) makes the ring skip to its head; `perfbuf_ring_stats` counts it.
///
/// # Safety
/// `pb` is a live handle; `record` and `size` are valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_ring_peek(
    pb: *mut perf_buffer,
    buf_idx: usize,
    record: *mut *const perf_event_header,
    size: *mut usize,
) -> c_int {
    // SAFETY: valid for writes or NULL, per this function's contract.
    let outs = unsafe { record.as_mut().zip(size.as_mut()) }.ok_or(Error::INVAL);
    // SAFETY: per this function's contract.
    let ring = unsafe { reader_mut(pb) }.and_then(|r| r.ring(buf_idx));
    ret_errno(ring.and_then(|mut ring| {
        let (record, size) = outs?;
        Ok(match ring.peek()? {
            Some(rec) => {
                *record = rec.as_ptr().cast();
                *size = rec.len();
                1
            }
            None => 0,
        })
    }))
}

/// Moves ring `buf_idx`'s read position past its next record (the space is
/// not freed until `perfbuf_ring_publish`). Returns 0, or -ENODATA when
/// there is no record, -EINVAL for a bad argument.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_ring_advance(pb: *mut perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| r.ring(buf_idx)?.advance()).map(|()| 0))
}

/// Publishes ring `buf_idx`'s read position as `data_tail` (a release
/// store): the kernel may now reuse the space of every record advanced
/// past. Returns 0 or -EINVAL.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_ring_publish(pb: *mut perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| r.ring(buf_idx)?.publish()).map(|()| 0))
}

/// Turns on ordered delivery for the whole buffer: from now on
/// `perf_buffer__poll` and `perf_buffer__consume` (and `consume_buffer`)
/// deliver the records of all CPUs in key order through the usual callbacks.
/// A record is delivered once no ring can still produce an earlier one:
/// every ring has shown a newer key, or has made no progress for
/// `idle_wait_ms`. Records stay in their rings until delivered (memory is
/// bounded by the rings). In this mode poll returns the number of records
/// delivered. `opts` may be NULL (key = first 8 bytes of each sample).
/// Returns 0 or -EINVAL.
///
/// # Safety
/// `pb` is a live handle; `opts` is NULL or readable for `opts->sz` bytes;
/// `key_fn` is callable with `key_ctx` for the buffer's lifetime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_set_order(pb: *mut perf_buffer, opts: *const perfbuf_order_opts) -> c_int {
    // SAFETY: per this function's contract.
    let fields = unsafe { sized_in(opts.cast()) }.and_then(opts::order_opts);
    // SAFETY: per this function's contract.
    let reader = unsafe { reader_mut(pb) };
    ret_errno(fields.and_then(|f| {
        let reader = reader?;
        let by = if f.key_fn != 0 {
            // SAFETY: a non-zero key_fn is the caller's function pointer of
            // type perfbuf_key_fn, callable with key_ctx (contract).
            unsafe {
                let key = core::mem::transmute::<usize, KeyFn>(f.key_fn);
                reader.sink_mut().set_key(key, f.key_ctx as *mut c_void);
            }
            OrderKey::Sink
        } else if f.flags & PERFBUF_ORDER_SAMPLE_TIME != 0 {
            OrderKey::SampleTime
        } else {
            OrderKey::RawPrefix
        };
        reader.set_order(by, Duration::from_millis(f.idle_wait_ms.into())).map(|()| 0)
    }))
}

/// In ordered mode, delivers every record already in the rings in key
/// order, ignoring the horizon (use at shutdown). Returns the number of
/// records delivered, or -EINVAL when ordering is off.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_ordered_flush(pb: *mut perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| r.flush_ordered()).map(|n| n as c_int))
}

/// Fills `*stats` with the ordered reader's counters (set `stats->sz`
/// first). Returns 0, or -EINVAL when ordering is off or an argument is bad.
///
/// # Safety
/// `pb` is a live handle; `stats` is NULL or writable for `stats->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_order_stats(
    pb: *const perf_buffer,
    stats: *mut perfbuf_order_stats,
) -> c_int {
    // SAFETY: per this function's contract.
    let s = unsafe { reader_ref(pb) }.and_then(|r| r.order_stats().ok_or(Error::INVAL));
    ret_errno(s.and_then(|s| {
        // SAFETY: `stats` is NULL or starts with a readable size_t.
        let sz = unsafe { out_sz(stats.cast(), 16) }?;
        let c = perfbuf_order_stats {
            sz,
            delivered: s.delivered,
            late: s.late,
            pending: s.pending,
            max_pending: s.max_pending,
        };
        // SAFETY: the caller's struct is writable for `sz` bytes.
        unsafe { write_sized(stats, &c, sz) };
        Ok(0)
    }))
}

/// Drains every ring like `perf_buffer__consume`, but hands `batch_fn`
/// runs of whole records, contiguous in memory and zero-copy (except a
/// record that wraps the ring's end), instead of one callback per record.
/// Walk a run with `perfbuf_batch_next`; `perfbuf_sample_raw` gives a
/// sample's data. Each ring's tail is published once, after its last run.
/// `batch_fn` returns 0 to go on; any other value stops after that run and
/// is returned. Returns the number of records, or -EINVAL for NULL.
///
/// # Safety
/// `pb` is a live handle; `batch_fn` is callable with `ctx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_consume_batch(
    pb: *mut perf_buffer,
    batch_fn: perfbuf_batch_fn,
    ctx: *mut c_void,
) -> c_int {
    if batch_fn.is_none() {
        return ret_errno(Err(Error::INVAL));
    }
    // SAFETY: per this function's contract.
    let reader = match unsafe { reader_mut(pb) } {
        Ok(r) => r,
        Err(e) => return ret_errno(Err(e)),
    };
    let mut verdict = 0;
    // SAFETY: `batch_fn` is callable with `ctx`; a run lives until it returns.
    let read = reader.consume_batch(|batch| match unsafe { call_batch_fn(batch_fn, ctx, batch) } {
        ControlFlow::Continue(()) => ControlFlow::Continue(()),
        ControlFlow::Break(v) => {
            verdict = v;
            ControlFlow::Break(())
        }
    });
    match read {
        // The batch function's verdict, as it returned it.
        Ok(_) if verdict != 0 => verdict,
        Ok(n) => n as c_int,
        Err(e) => ret_errno(Err(e)),
    }
}
