//! The `perfbuf_*` extensions of a buffer: its own constructor, wake-ups
//! from other threads, pause/resume, overwritable snapshots, figures.

use super::abi::{
    perf_buffer, perf_buffer_lost_fn, perf_buffer_sample_fn, perfbuf_opts, perfbuf_print_fn,
    perfbuf_ring_health, perfbuf_ring_stats,
};
use super::buffer::{into_handle, reader_mut, reader_ref, waker};
use super::callbacks::CCallbacks;
use super::ffi::{out_sz, ret_errno, sized_in, write_sized};
use super::libbpf::libbpf_builder;
use super::{opts, print};
use core::ffi::{c_char, c_int, c_void};
use perfbuf::libbpf_compat as compat;
use perfbuf::{Builder, Result};

/// The builder for `perfbuf_new`'s options.
///
/// # Safety
/// With `cpu_cnt > 0`, a non-NULL `cpus` holds `cpu_cnt` ints.
unsafe fn ext_builder(map_fd: c_int, page_cnt: usize, o: opts::ExtOpts) -> Result<Builder<'static>> {
    let mut b = compat::builder(map_fd)
        .pages(page_cnt)
        .wakeup(o.wakeup)
        .adaptive(o.adaptive)
        .count_lost(o.count_lost)
        .hotplug(o.hotplug)
        .keep_slots(o.keep_slots);
    if o.output_counts_fd != 0 {
        // SAFETY: the caller's fd is open for the constructor's call (its
        // contract); the reader keeps a duplicate, never this borrow.
        b = b.output_counts(unsafe { std::os::fd::BorrowedFd::borrow_raw(o.output_counts_fd) });
    }
    if let Some(d) = o.max_delay {
        b = b.max_delay(d);
    }
    if o.overwrite {
        b = b.overwrite();
    }
    if o.cpu_cnt > 0 {
        if o.cpus == 0 {
            return Err(print::invalid("perfbuf_opts: cpu_cnt > 0 needs cpus"));
        }
        // SAFETY: per this function's contract, `cpus` holds `cpu_cnt` ints.
        let list = unsafe { core::slice::from_raw_parts(o.cpus as *const c_int, o.cpu_cnt as usize) };
        b = compat::with_cpus(b, compat::collect(list.len(), list.iter().copied())?);
    }
    Ok(b)
}

/// Creates a perf buffer like `perf_buffer__new`, with perfbuf's options:
/// batched wakeups with a bounded delay, overwritable rings, a CPU subset,
/// the fast mode (`PERFBUF_F_ADAPTIVE`). `opts` may be NULL (then this is
/// `perf_buffer__new` with no opts, environment variables included).
///
/// Batching (`wakeup_events > 1` or `wakeup_bytes > 0`) asks the kernel to
/// wake the reader less often; a timer in the epoll set makes `poll` (and
/// any loop waiting on `perf_buffer__epoll_fd`) drain every ring holding
/// data at least every `max_delay_ms`, so no record waits longer.
///
/// `map_fd` may also be a `BPF_MAP_TYPE_RINGBUF` (unlike
/// `perf_buffer__new`, which refuses it as libbpf does): the same
/// callbacks get its records, with `cpu` -1 (a ring buffer is one ring for
/// all CPUs), each sample's data exactly as the program wrote it (no
/// padding), and `lost_cb` only for records dropped while
/// `perfbuf_pause`d (the kernel counts no losses of a ring buffer: a full
/// ring fails the program's output). Such a buffer has one ring (index 0);
/// `page_cnt`, `wakeup_*`, `max_delay_ms` and the fast mode are ignored,
/// `PERFBUF_F_OVERWRITE` and `cpus` fail with EINVAL, and the calls about
/// per-CPU perf events and rings (`perfbuf_buffer_fd`, `perfbuf_buffer`,
/// `perfbuf_snapshot`, `perfbuf_ring_peek`..., `perfbuf_consume_batch`)
/// with -EOPNOTSUPP.
///
/// Returns a handle, or NULL with `errno` (EINVAL for bad options, with a
/// message saying which; see `perfbuf_last_error`).
///
/// # Safety
/// As `perf_buffer__new`; `opts` is NULL or a `struct perfbuf_opts` readable
/// for `opts->sz` bytes whose `cpus` holds `cpu_cnt` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_new(
    map_fd: c_int,
    page_cnt: usize,
    sample_cb: perf_buffer_sample_fn,
    lost_cb: perf_buffer_lost_fn,
    ctx: *mut c_void,
    opts: *const perfbuf_opts,
) -> *mut perf_buffer {
    // SAFETY: per this function's contract.
    let bytes = unsafe { sized_in(opts.cast()) };
    // SAFETY: the callbacks' contract is this function's.
    let callbacks = unsafe { CCallbacks::parsed(sample_cb, lost_cb, ctx) };
    into_handle(bytes.and_then(|bytes| {
        let builder = match bytes {
            None => libbpf_builder(map_fd, page_cnt, 1)?,
            // SAFETY: per this function's contract.
            Some(bytes) => unsafe { ext_builder(map_fd, page_cnt, opts::ext_opts(Some(bytes))?) }?,
        };
        compat::accepting_ring_buffers(builder).build_with(callbacks)
    }))
}

/// Wakes a thread blocked in `perf_buffer__poll` on this buffer: that poll
/// (or the next one, if none is in progress) returns `-ECANCELED` after
/// draining any rings signalled in the same wait. The only call that may run
/// concurrently with the others on the same buffer. Returns 0 or -errno.
///
/// # Safety
/// `pb` is a live handle, not freed before this call returns.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_wake(pb: *const perf_buffer) -> c_int {
    // SAFETY: per this function's contract; only the waker is touched.
    ret_errno(unsafe { waker(pb) }.and_then(|w| w.wake()).map(|()| 0))
}

/// Pauses the kernel's output into every ring (`PERF_EVENT_IOC_PAUSE_OUTPUT`),
/// the fast mode's spill rings included: records produced meanwhile are
/// dropped and reported later as lost. A ring buffer, which the kernel
/// cannot pause, has its reader drop the records reserved until
/// `perfbuf_resume` instead, reported lost once read past.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_pause(pb: *mut perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_ref(pb) }.and_then(|r| r.pause()).map(|()| 0))
}

/// Resumes output after `perfbuf_pause`.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_resume(pb: *mut perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_ref(pb) }.and_then(|r| r.resume()).map(|()| 0))
}

/// Reads overwritable ring `buf_idx` (`PERFBUF_F_OVERWRITE`): pauses its
/// output, delivers the records written since the previous read, oldest
/// first, through the sample/lost callbacks, and resumes. Bytes overwritten
/// before they could be read are counted in `overwritten_bytes` of
/// `perfbuf_ring_stats`. Returns the number of records, or -EINVAL for a
/// bad index or a forward ring.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_snapshot(pb: *mut perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| r.snapshot(buf_idx)).map(|n| n as c_int))
}

/// The final drain, once the producers have stopped: reads every ring to
/// its head (an ordered buffer flushes what it holds), then hands the lost
/// callback (`event_cb`: a `PERF_RECORD_LOST` made here, id 0, no
/// `sample_id`) one report per ring of what the kernel counted lost and
/// has not yet written into it as a LOST record, so nothing goes
/// unreported for want of a later record. Only rings whose events count
/// their losses have such a count (`PERFBUF_F_COUNT_LOST`, an event set's
/// rings; Linux 6.0+); elsewhere this is `perf_buffer__consume`. A LOST
/// record the kernel writes afterwards is reduced by what was reported
/// here (dropped when it reports nothing more). Sets `*lost` (if not NULL)
/// to the records reported lost by that last step. Returns 0 or -errno
/// (a callback's stop value as `perf_buffer__consume` returns it).
///
/// # Safety
/// `pb` is a live handle; `lost` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_drain_final(pb: *mut perf_buffer, lost: *mut u64) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| r.drain_final()).map(|n| {
        if !lost.is_null() {
            // SAFETY: `lost` is writable (contract).
            unsafe { lost.write(n) };
        }
        0
    }))
}

/// The CPU id ring `buf_idx` reads, or -EINVAL; -1 for a ring buffer's
/// ring (no CPU: the callbacks get -1 too).
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_buffer_cpu(pb: *const perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_ref(pb) }.and_then(|r| r.ring_cpu(buf_idx)).map(|c| c as c_int))
}

/// Fills `*stats` with ring `buf_idx`'s figures: records, bytes, lost,
/// wakeups, the current fill level, recovery counters, the fast mode's
/// state. Set `stats->sz = sizeof(*stats)` first; only that many bytes are
/// written. Returns 0 or -EINVAL (NULL, bad index, `sz` below 16).
///
/// # Safety
/// `pb` is a live handle; `stats` is NULL or writable for `stats->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_ring_stats(
    pb: *const perf_buffer,
    buf_idx: usize,
    stats: *mut perfbuf_ring_stats,
) -> c_int {
    // SAFETY: per this function's contract.
    let figures = unsafe { reader_ref(pb) }.and_then(|r| r.stats(buf_idx));
    ret_errno(figures.and_then(|f| {
        // SAFETY: `stats` is NULL or starts with a readable size_t.
        let sz = unsafe { out_sz(stats.cast(), 16) }?;
        let c = perfbuf_ring_stats {
            sz,
            cpu: f.cpu,
            reserved: 0,
            records: f.records,
            bytes: f.bytes,
            lost: f.lost,
            wakeups: f.wakeups,
            pending_bytes: f.pending_bytes,
            data_size: f.data_size,
            resyncs: f.resyncs,
            skipped_bytes: f.skipped_bytes,
            malformed: f.malformed,
            overwritten_bytes: f.overwritten_bytes,
            batched: f.batched.into(),
            batch_switches: f.batch_switches,
            spill_size: f.spill_size,
            lost_unreported: f.lost_unreported,
            produced: f.produced.unwrap_or(0),
            produced_known: f.produced.is_some().into(),
            samples: f.samples,
            delivered: f.delivered(),
            output_failed: f.output_failed,
            dropped: f.dropped,
            lost_total: f.lost_total(),
        };
        // SAFETY: the caller's struct is writable for `sz` bytes.
        unsafe { write_sized(stats, &c, sz) };
        Ok(0)
    }))
}

/// Fills `*health` with ring `buf_idx`'s health: backlog now and its peak,
/// records, bytes and wake-ups per second, time since its last record, and
/// the smallest ring that would have held what it had to hold (see
/// README, "Health and ring sizes"). Set `health->sz = sizeof(*health)`
/// first; only that many bytes are written. Returns 0 or -EINVAL (NULL,
/// bad index, `sz` below 16).
///
/// # Safety
/// `pb` is a live handle; `health` is NULL or writable for `health->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_ring_health(
    pb: *const perf_buffer,
    buf_idx: usize,
    health: *mut perfbuf_ring_health,
) -> c_int {
    // SAFETY: per this function's contract.
    let figures = unsafe { reader_ref(pb) }.and_then(|r| r.health(buf_idx));
    ret_errno(figures.and_then(|h| {
        // SAFETY: `health` is NULL or starts with a readable size_t.
        let sz = unsafe { out_sz(health.cast(), 16) }?;
        let c = perfbuf_ring_health {
            sz,
            cpu: h.cpu,
            online: h.online.into(),
            pending_bytes: h.pending_bytes,
            peak_pending_bytes: h.peak_pending_bytes,
            data_size: h.data_size,
            records_per_sec: h.records_per_sec,
            bytes_per_sec: h.bytes_per_sec,
            wakeups_per_sec: h.wakeups_per_sec,
            ns_since_last_record: h
                .since_last_record
                .map_or(-1, |d| d.as_nanos().min(i64::MAX as u128) as i64),
            needed_bytes: h.needed_bytes,
            suggested_pages: h.suggested_pages as u64,
            replaced: h.replaced,
        };
        // SAFETY: the caller's struct is writable for `sz` bytes.
        unsafe { write_sized(health, &c, sz) };
        Ok(0)
    }))
}

/// Counts `n` samples of ring `buf_idx` the caller read and then dropped by
/// its own policy (a filter, a full queue downstream): they move from
/// `delivered` to `dropped` in `perfbuf_ring_stats`, so the loss identity
/// still adds up. Call it between polls (not from a callback). Returns 0
/// or -EINVAL (NULL, bad index).
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_count_dropped(pb: *mut perf_buffer, buf_idx: usize, n: u64) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| r.count_dropped(buf_idx, n)).map(|()| 0))
}

/// The text of the last error a `perfbuf_*` or `perf_buffer__*` call of
/// this thread returned: what failed, the errno's name and text, and a
/// hint at the fix when there is one (e.g. "failed to open perf buffer
/// event on cpu #0: Permission denied (EACCES); run as root, or grant
/// CAP_BPF and CAP_PERFMON ..."). An empty string before any error. The
/// string is this thread's and valid until its next call of this function.
#[unsafe(no_mangle)]
pub extern "C" fn perfbuf_last_error() -> *const c_char {
    print::last_error_text()
}

/// Sends libperfbuf's messages to `print` with `ctx` from now on, as
/// libbpf's `libbpf_set_print`: every level reaches it, whatever
/// `PERFBUF_LOG` says; NULL silences them all. Returns the previous
/// printer, which may be passed back here to restore it (the first call
/// returns the built-in one, which prints warnings to stderr).
///
/// # Safety
/// `print` is NULL or safe to call with `ctx` from any thread that uses
/// libperfbuf, until it is replaced.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_set_print(print: perfbuf_print_fn, ctx: *mut c_void) -> perfbuf_print_fn {
    print::set_printer(print, ctx)
}

/// The library's version, e.g. `"0.1.0"`: a static string. It tells that
/// libperfbuf is loaded, not that a given handle is libperfbuf's: a
/// `perfbuf_*` call on a handle libbpf made returns -EINVAL.
#[unsafe(no_mangle)]
pub extern "C" fn perfbuf_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Test builds only (feature `fault-injection`): makes the `nth` next call
/// of failure point `point` (`"perf_event_open"`, `"mmap"`, `"ioctl"`,
/// `"epoll_create"`, `"epoll_ctl"`, `"map_update"`, `"eventfd"`,
/// `"timerfd"`, `"alloc"`) fail with `err`. `nth = 0` disarms. Returns 0 or
/// -EINVAL.
///
/// # Safety
/// `point` is NULL or a NUL-terminated string.
#[cfg(feature = "fault-injection")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_fault_arm(point: *const c_char, nth: u32, err: c_int) -> c_int {
    // SAFETY: NULL or a C string, per this function's contract.
    let point = unsafe { point.as_ref().map(|p| core::ffi::CStr::from_ptr(p)) };
    let point = point.and_then(|p| p.to_str().ok()).ok_or(perfbuf::Error::INVAL);
    ret_errno(point.and_then(|p| compat::fault::arm(p, nth, err)).map(|()| 0))
}

/// Test builds only (feature `fault-injection`): 1 while a point armed by
/// `perfbuf_fault_arm` has not fired yet, else 0.
#[cfg(feature = "fault-injection")]
#[unsafe(no_mangle)]
pub extern "C" fn perfbuf_fault_armed() -> c_int {
    c_int::from(compat::fault::armed())
}

/// Test builds only (feature `fault-injection`): the library sees `list`
/// (`"0,2-3"`; `""` for none) as the online CPUs; NULL restores the
/// machine's. Returns 0 or -EINVAL.
///
/// # Safety
/// `list` is NULL or a NUL-terminated string.
#[cfg(feature = "fault-injection")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_fault_online_cpus(list: *const c_char) -> c_int {
    // SAFETY: NULL or a C string, per this function's contract.
    let list = unsafe { list.as_ref().map(|p| core::ffi::CStr::from_ptr(p)) };
    let list = list.map(|l| l.to_str().map_err(|_| perfbuf::Error::INVAL)).transpose();
    ret_errno(list.and_then(compat::fault::set_online_cpus).map(|()| 0))
}
