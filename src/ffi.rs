//! The exported C functions. Each is a short shim: check pointers, convert
//! arguments, call the safe core in [`crate::buffer`], map the result to
//! libbpf's conventions (NULL + errno from constructors, `-errno` with errno
//! set from the rest).
//!
//! Where libbpf would crash (NULL handle or out-pointers, negative index,
//! NULL `cpus`/`map_keys` with a positive `cpu_cnt`), these return `-EINVAL`
//! (or NULL with `errno = EINVAL`) instead.

use crate::abi::{
    PERFBUF_F_OVERWRITE, perf_buffer, perf_buffer_event_fn, perf_buffer_lost_fn, perf_buffer_opts,
    perf_buffer_raw_opts, perf_buffer_sample_fn, perf_event_attr, perfbuf_opts, perfbuf_ring_stats,
};
use crate::buffer::{Config, CpuSelection, PerfBuffer, Waker};
use crate::callbacks::Callbacks;
use crate::error::{Errno, Result, ret_errno};
use crate::fallible;
use crate::kernel::{PERF_SAMPLE_RAW, PerfEventAttr};
use crate::opts;
use crate::sys::{AttrSource, CallerAttr};
use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int, c_void};

/// Largest opts `sz` we read; libbpf's structs are a few dozen bytes, so a
/// larger value is garbage rather than a newer header.
const MAX_OPTS_SIZE: usize = 4096;

/// The caller's opts struct as bytes (`sz` long), `None` for NULL.
///
/// # Safety
/// `ptr` is NULL or points to an opts struct whose first field is `sz` and
/// which is readable for `sz` bytes.
pub(crate) unsafe fn opts_bytes<'a>(ptr: *const c_void) -> Result<Option<&'a [u8]>> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: every opts struct starts with a size_t `sz`.
    let sz = unsafe { ptr.cast::<usize>().read_unaligned() };
    if sz > MAX_OPTS_SIZE {
        crate::log::warn(format_args!("opts size ({sz}) is too large"));
        return Err(Errno::INVAL);
    }
    // SAFETY: the caller promises `sz` readable bytes (libbpf reads them too).
    Ok(Some(unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), sz) }))
}

/// What a `struct perf_buffer *` points to. The waker is reachable without
/// touching the buffer, so `perfbuf_wake` may run while another thread is
/// inside `perf_buffer__poll` (which holds the buffer mutably).
struct Handle {
    waker: Waker,
    core: UnsafeCell<PerfBuffer>,
}

/// Boxes a new buffer into a handle, or NULL with errno set (ENOMEM if the
/// handle cannot be allocated; the buffer is then torn down).
fn into_handle(result: Result<PerfBuffer>) -> *mut perf_buffer {
    let boxed = result.and_then(|pb| {
        fallible::boxed(Handle { waker: Waker::new(pb.epoll_fd()), core: UnsafeCell::new(pb) })
    });
    match boxed {
        Ok(handle) => Box::into_raw(handle).cast(),
        Err(e) => {
            e.set();
            core::ptr::null_mut()
        }
    }
}

/// # Safety
/// `pb` is a live handle (see the crate docs).
unsafe fn handle<'a>(pb: *const perf_buffer) -> Result<&'a Handle> {
    // SAFETY: a live handle is NULL or a Box<Handle> from into_handle.
    unsafe { pb.cast::<Handle>().as_ref() }.ok_or(Errno::INVAL)
}

/// # Safety
/// `pb` is a live handle, and no other call except `perfbuf_wake` runs on it
/// concurrently (libbpf's threading contract).
pub(crate) unsafe fn handle_mut<'a>(pb: *mut perf_buffer) -> Result<&'a mut PerfBuffer> {
    // SAFETY: per the contract, this is the only reference to the core.
    unsafe { handle(pb).map(|h| &mut *h.core.get()) }
}

/// # Safety
/// As for [`handle_mut`].
pub(crate) unsafe fn handle_ref<'a>(pb: *const perf_buffer) -> Result<&'a PerfBuffer> {
    // SAFETY: per the contract, nothing mutates the core meanwhile.
    unsafe { handle(pb).map(|h| &*h.core.get()) }
}

/// Creates a perf buffer over the `BPF_MAP_TYPE_PERF_EVENT_ARRAY` `map_fd`:
/// one `page_cnt`-page ring per online CPU (a power of two), registered in
/// the map under the CPU id. `sample_cb` receives each sample, `lost_cb`
/// each count of records the kernel dropped; either may be NULL.
///
/// Returns a new handle, or NULL with `errno` set (EINVAL for a bad
/// `page_cnt`, `opts` or map type, EBADFD for a bad `map_fd`, or the error of
/// the failing system call). Free it with `perf_buffer__free`.
///
/// # Safety
/// `opts` is NULL or a `struct perf_buffer_opts` readable for `opts->sz`
/// bytes; the callbacks are callable with `ctx` for the buffer's lifetime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__new(
    map_fd: c_int,
    page_cnt: usize,
    sample_cb: perf_buffer_sample_fn,
    lost_cb: perf_buffer_lost_fn,
    ctx: *mut c_void,
    opts: *const perf_buffer_opts,
) -> *mut perf_buffer {
    // SAFETY: per this function's contract.
    let opts = unsafe { opts_bytes(opts.cast()) }.and_then(opts::sample_opts);
    let env = opts::env_batching(
        std::env::var("PERFBUF_WAKEUP_EVENTS").ok().as_deref(),
        std::env::var("PERFBUF_MAX_DELAY_MS").ok().as_deref(),
    );
    let env_adaptive = opts::env_adaptive(std::env::var("PERFBUF_ADAPTIVE").ok().as_deref());
    into_handle(opts.and_then(|opts| {
        let (attr, max_delay_ms, adaptive) = match env? {
            // The opt-in for programs that cannot be rebuilt (LD_PRELOAD).
            Some(b) => (PerfEventAttr::bpf_output(b.wakeup_events), b.max_delay_ms, false),
            // A caller that chose its wake-up period (libbpf 1.2's
            // sample_period) gets exactly that.
            None => (
                PerfEventAttr::bpf_output(opts.sample_period),
                None,
                opts.sample_period <= 1 && env_adaptive?,
            ),
        };
        // SAFETY: the callbacks' contract is this function's.
        let callbacks = unsafe { Callbacks::parsed(sample_cb, lost_cb, ctx) };
        let cpus = CpuSelection::AllOnline;
        let attr = AttrSource::Built(&attr);
        let sample_type = PERF_SAMPLE_RAW;
        PerfBuffer::new(Config {
            map_fd,
            page_cnt,
            attr,
            cpus,
            callbacks,
            overwrite: false,
            max_delay_ms,
            sample_type,
            adaptive,
        })
    }))
}

/// The `(cpu, map_key)` pairs of raw opts, or all online CPUs.
///
/// # Safety
/// With `cpu_cnt > 0`, non-NULL `cpus` and `map_keys` hold `cpu_cnt` ints.
unsafe fn raw_cpu_selection(fields: opts::RawOptsFields) -> Result<CpuSelection> {
    if fields.cpu_cnt <= 0 {
        return Ok(CpuSelection::AllOnline);
    }
    if fields.cpus == 0 || fields.map_keys == 0 {
        crate::log::warn(format_args!("perf_buffer_raw_opts: cpu_cnt > 0 needs cpus and map_keys"));
        return Err(Errno::INVAL);
    }
    let n = fields.cpu_cnt as usize;
    // SAFETY: per this function's contract; both are non-NULL.
    let (cpus, keys) = unsafe {
        (
            core::slice::from_raw_parts(fields.cpus as *const c_int, n),
            core::slice::from_raw_parts(fields.map_keys as *const c_int, n),
        )
    };
    Ok(CpuSelection::Explicit(fallible::collect(n, cpus.iter().copied().zip(keys.iter().copied()))?))
}

/// Like `perf_buffer__new`, with the caller's `perf_event_attr` (used
/// verbatim for every `perf_event_open`, not retained) and one callback that
/// receives every record whole. `opts` may pick CPUs and map keys. With
/// `event_cb` NULL, samples and lost records are dropped.
///
/// Returns a new handle, or NULL with `errno` set (EINVAL for a NULL `attr`
/// and for the cases of `perf_buffer__new`).
///
/// # Safety
/// `attr` is NULL or a readable `struct perf_event_attr`; `opts` is NULL or a
/// `struct perf_buffer_raw_opts` readable for `opts->sz` bytes whose `cpus`
/// and `map_keys` hold `cpu_cnt` ints; `event_cb` is callable with `ctx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__new_raw(
    map_fd: c_int,
    page_cnt: usize,
    attr: *mut perf_event_attr,
    event_cb: perf_buffer_event_fn,
    ctx: *mut c_void,
    opts: *const perf_buffer_raw_opts,
) -> *mut perf_buffer {
    if attr.is_null() {
        return into_handle(Err(Errno::INVAL));
    }
    // SAFETY: per this function's contract.
    let fields = unsafe { opts_bytes(opts.cast()) }.and_then(opts::raw_opts);
    // SAFETY: per this function's contract.
    let cpus = fields.and_then(|f| unsafe { raw_cpu_selection(f) });
    // SAFETY: a perf_event_attr is at least 64 bytes (PERF_ATTR_SIZE_VER0)
    // and `sample_type` sits at offset 24; the caller promised it readable.
    let sample_type = unsafe { attr.cast::<u8>().add(24).cast::<u64>().read_unaligned() };
    into_handle(cpus.and_then(|cpus| {
        // SAFETY: `attr` is non-NULL and readable for this call.
        let attr = AttrSource::Caller(unsafe { CallerAttr::new(attr.cast_const().cast()) });
        // SAFETY: the callback's contract is this function's.
        let callbacks = unsafe { Callbacks::raw(event_cb, ctx) };
        PerfBuffer::new(Config {
            map_fd,
            page_cnt,
            attr,
            cpus,
            callbacks,
            overwrite: false,
            max_delay_ms: None,
            sample_type,
            adaptive: false,
        })
    }))
}

/// Frees the buffer: for each ring, deletes its map entry, unmaps it,
/// disables and closes its event; then closes the epoll fd. NULL (and
/// libbpf's `ERR_PTR` values) are ignored. Must not be called from a callback.
///
/// # Safety
/// `pb` is a live handle; it is dangling afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__free(pb: *mut perf_buffer) {
    // libbpf's IS_ERR_OR_NULL: the top 4095 addresses encode errors.
    if pb.is_null() || pb as usize >= (-4095isize) as usize {
        return;
    }
    // SAFETY: a live, non-NULL handle is a Box<Handle> from into_handle.
    drop(unsafe { Box::from_raw(pb.cast::<Handle>()) });
}

/// The epoll fd over all rings (owned by the buffer), or -EINVAL for NULL.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__epoll_fd(pb: *const perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle_ref(pb) }.map(|pb| pb.epoll_fd()))
}

/// Waits up to `timeout_ms` (-1 forever, 0 not at all) for rings the kernel
/// signalled and drains them through the callbacks.
///
/// Returns the number of rings signalled (not records; 0 on timeout), or
/// `-errno` (-EINTR on a signal, not retried), or a callback's stop value.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__poll(pb: *mut perf_buffer, timeout_ms: c_int) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle_mut(pb) }.map(|pb| pb.poll(timeout_ms)))
}

/// Drains every ring without waiting. Returns 0, or the first error.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__consume(pb: *mut perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle_mut(pb) }.map(|pb| pb.consume()))
}

/// Drains ring `buf_idx` without waiting. Returns 0 (also when empty), the
/// callback's stop value, or -EINVAL for a bad index.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__consume_buffer(pb: *mut perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle_mut(pb) }.and_then(|pb| pb.consume_buffer(buf_idx)))
}

/// Number of rings set up (online CPUs, bounded by the map's size), or 0
/// with `errno = EINVAL` for NULL.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__buffer_cnt(pb: *const perf_buffer) -> usize {
    // SAFETY: per this function's contract.
    match unsafe { handle_ref(pb) } {
        Ok(pb) => pb.buffer_cnt(),
        Err(e) => {
            e.set();
            0
        }
    }
}

/// The perf event fd of ring `buf_idx` (owned by the buffer), or -EINVAL.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__buffer_fd(pb: *const perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle_ref(pb) }.and_then(|pb| pb.buf(buf_idx)).map(|b| b.fd()))
}

/// The raw region of ring `buf_idx`: `*buf` = start of the mmap (the
/// kernel's `struct perf_event_mmap_page`, data follows one page later) and
/// `*buf_size` = size of the data area only. Returns 0, or -EINVAL for a
/// NULL argument or an index out of range (negative included); outputs are
/// untouched on error. From then on adaptive batching keeps every record in
/// this region (no spill rings; see README, adaptive wake-ups).
///
/// # Safety
/// `pb` is a live handle; `buf` and `buf_size` are valid for writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__buffer(
    pb: *mut perf_buffer,
    buf_idx: c_int,
    buf: *mut *mut c_void,
    buf_size: *mut usize,
) -> c_int {
    // SAFETY: per this function's contract.
    let ring = unsafe { handle_ref(pb) }
        .and_then(|pb| pb.raw_ring(usize::try_from(buf_idx).map_err(|_| Errno::INVAL)?));
    // SAFETY: valid for writes or NULL, per this function's contract.
    let outs = unsafe { buf.as_mut().zip(buf_size.as_mut()) }.ok_or(Errno::INVAL);
    ret_errno(ring.and_then(|ring| {
        let (buf, buf_size) = outs?;
        *buf = ring.base().cast();
        *buf_size = ring.data_size();
        Ok(0)
    }))
}

/// Creates a perf buffer like `perf_buffer__new`, with perfbuf's options:
/// batched wakeups with a bounded delay, overwritable rings, a CPU subset.
/// `opts` may be NULL (then this is `perf_buffer__new` with no opts).
///
/// Batching (`wakeup_events > 1` or `wakeup_bytes > 0`) asks the kernel to
/// wake the reader less often; a timer in the epoll set makes `poll` (and
/// any loop waiting on `perf_buffer__epoll_fd`) drain every ring holding
/// data at least every `max_delay_ms`, so no record waits longer.
///
/// Returns a handle, or NULL with `errno` (EINVAL for bad options).
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
    let opts = unsafe { opts_bytes(opts.cast()) }.and_then(opts::ext_opts);
    into_handle(opts.and_then(|o| {
        let cpus = if o.cpu_cnt > 0 && o.cpus != 0 {
            // SAFETY: per this function's contract, `cpus` holds `cpu_cnt` ints.
            let list = unsafe { core::slice::from_raw_parts(o.cpus as *const c_int, o.cpu_cnt as usize) };
            CpuSelection::Subset(fallible::collect(list.len(), list.iter().copied())?)
        } else if o.cpu_cnt > 0 {
            return Err(Errno::INVAL);
        } else {
            CpuSelection::AllOnline
        };
        let b = o.batching;
        let overwrite = o.flags & PERFBUF_F_OVERWRITE != 0;
        let attr = PerfEventAttr::bpf_output_ext(b.wakeup_events, b.wakeup_bytes, overwrite);
        // SAFETY: the callbacks' contract is this function's.
        let callbacks = unsafe { Callbacks::parsed(sample_cb, lost_cb, ctx) };
        let attr = AttrSource::Built(&attr);
        let max_delay_ms = b.max_delay_ms;
        let sample_type = PERF_SAMPLE_RAW;
        PerfBuffer::new(Config {
            map_fd,
            page_cnt,
            attr,
            cpus,
            callbacks,
            overwrite,
            max_delay_ms,
            sample_type,
            adaptive: false,
        })
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
    ret_errno(unsafe { handle(pb) }.and_then(|h| h.waker.wake()).map(|()| 0))
}

/// Pauses the kernel's output into every ring (`PERF_EVENT_IOC_PAUSE_OUTPUT`):
/// records produced meanwhile are dropped and reported later as lost.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_pause(pb: *mut perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle_ref(pb) }.and_then(|pb| pb.set_paused(true)).map(|()| 0))
}

/// Resumes output after `perfbuf_pause`.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_resume(pb: *mut perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle_ref(pb) }.and_then(|pb| pb.set_paused(false)).map(|()| 0))
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
    ret_errno(unsafe { handle_mut(pb) }.and_then(|pb| pb.snapshot(buf_idx)).map(|n| n as c_int))
}

/// The CPU id ring `buf_idx` reads, or -EINVAL.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_buffer_cpu(pb: *const perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle_ref(pb) }.and_then(|pb| pb.buf(buf_idx)).map(|b| b.cpu()))
}

/// Fills `*stats` with ring `buf_idx`'s figures: records, bytes, lost,
/// wakeups, the current fill level, recovery counters. Set `stats->sz =
/// sizeof(*stats)` first; only that many bytes are written. Returns 0 or
/// -EINVAL (NULL, bad index, `sz` below 16).
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
    let figures = unsafe { handle_ref(pb) }.and_then(|pb| pb.figures(buf_idx));
    ret_errno(figures.and_then(|f| {
        // SAFETY: `stats` is NULL or starts with a readable size_t.
        let sz = unsafe { stats.cast::<usize>().as_ref() }.copied().ok_or(Errno::INVAL)?;
        if sz < 16 {
            return Err(Errno::INVAL);
        }
        let full = perfbuf_ring_stats { sz, ..f };
        let n = sz.min(size_of::<perfbuf_ring_stats>());
        // SAFETY: the caller's struct is writable for `sz` ≥ n bytes.
        unsafe {
            core::ptr::copy_nonoverlapping((&full as *const perfbuf_ring_stats).cast::<u8>(), stats.cast(), n)
        };
        Ok(0)
    }))
}

/// The library's version, e.g. `"0.1.0"`: a static string. Also a cheap way
/// to check, with `dlsym`, that libperfbuf (not libbpf) is loaded.
#[unsafe(no_mangle)]
pub extern "C" fn perfbuf_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// Test builds only (feature `fault-injection`): makes the `nth` next call
/// of failure point `point` (`"perf_event_open"`, `"mmap"`, `"ioctl"`,
/// `"epoll_create"`, `"epoll_ctl"`, `"map_update"`, `"eventfd"`,
/// `"timerfd"`) fail with `err`. `nth = 0` disarms. Returns 0 or -EINVAL.
///
/// # Safety
/// `point` is NULL or a NUL-terminated string.
#[cfg(feature = "fault-injection")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_fault_arm(point: *const c_char, nth: u32, err: c_int) -> c_int {
    // SAFETY: NULL or a C string, per this function's contract.
    let point = unsafe { point.as_ref().map(|p| core::ffi::CStr::from_ptr(p)) };
    let point = point.and_then(|p| p.to_str().ok()).ok_or(Errno::INVAL);
    ret_errno(point.and_then(|p| crate::fault::arm(p, nth, err)).map(|()| 0))
}
