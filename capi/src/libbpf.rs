//! libbpf's ten `perf_buffer__*` functions.
//!
//! Where libbpf would crash (NULL handle or out-pointers, negative index,
//! NULL `cpus`/`map_keys` with a positive `cpu_cnt`), these return `-EINVAL`
//! (or NULL with `errno = EINVAL`) instead.

use super::abi::{
    perf_buffer, perf_buffer_event_fn, perf_buffer_lost_fn, perf_buffer_opts, perf_buffer_raw_opts,
    perf_buffer_sample_fn, perf_event_attr,
};
use super::buffer::{self, Buffer, into_handle, reader_mut, reader_ref};
use super::callbacks::CCallbacks;
use super::ffi::{ret_errno, set_errno, sized_in};
use super::{opts, print};
use core::ffi::{c_int, c_void};
use perfbuf::libbpf_compat::{self as compat, CallerAttr};
use perfbuf::{Builder, Error, Result, Wakeup};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// The builder for `perf_buffer__new` (and `perfbuf_new` without opts):
/// libbpf's sample period, or what the environment of an unchanged program
/// asks for (`PERFBUF_WAKEUP_EVENTS` / `PERFBUF_MAX_DELAY_MS` batching, the
/// `PERFBUF_ADAPTIVE=1` fast mode, `PERFBUF_HOTPLUG=1` for CPUs that come
/// and go).
pub(crate) fn libbpf_builder(map_fd: c_int, page_cnt: usize, sample_period: u32) -> Result<Builder<'static>> {
    let env = opts::env_batching(
        std::env::var("PERFBUF_WAKEUP_EVENTS").ok().as_deref(),
        std::env::var("PERFBUF_MAX_DELAY_MS").ok().as_deref(),
    )?;
    let fast = opts::env_adaptive(std::env::var("PERFBUF_ADAPTIVE").ok().as_deref())?;
    // libbpf reads the CPUs online at creation, for good: CPUs that come
    // and go are served only on request (or by the fast mode).
    let hotplug = opts::env_switch(
        "PERFBUF_HOTPLUG",
        "bad PERFBUF_HOTPLUG",
        std::env::var("PERFBUF_HOTPLUG").ok().as_deref(),
    )?;
    let b = compat::builder(map_fd).pages(page_cnt).hotplug(hotplug);
    Ok(match env {
        Some(env) => {
            let b = b.wakeup(Wakeup::Records(env.wakeup_events));
            match env.max_delay {
                Some(d) => b.max_delay(d),
                None => b,
            }
        }
        // A caller that chose its wake-up period (libbpf 1.2's
        // sample_period) gets exactly that.
        None if sample_period > 1 => b.wakeup(Wakeup::Records(sample_period)),
        None => b.adaptive(fast),
    })
}

/// libbpf's side effect of a drain that read a ring to its head: its
/// `perf_event_read_simple` returns `libbpf_err(LIBBPF_PERF_EVENT_CONT)`,
/// which leaves errno at ENOENT on success.
fn drained<T>(reader: &mut Buffer, read: impl FnOnce(&mut Buffer) -> Result<T>) -> Result<T> {
    let result = read(reader);
    if result.is_ok() && compat::reached_head(reader) {
        set_errno(libc::ENOENT);
    }
    result
}

/// Creates a perf buffer over the `BPF_MAP_TYPE_PERF_EVENT_ARRAY` `map_fd`:
/// one `page_cnt`-page ring per online CPU (a power of two), registered in
/// the map under the CPU id. `sample_cb` receives each sample, `lost_cb`
/// each count of records the kernel dropped; either may be NULL.
///
/// Returns a new handle, or NULL with `errno` set (EINVAL for a bad
/// `page_cnt`, `opts` or map type, EBADF for a bad `map_fd`, or the error of
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
    // SAFETY: the same contract.
    unsafe { new(map_fd, page_cnt, sample_cb, lost_cb, ctx, opts) }
}

/// `perf_buffer__new`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__new`.
#[inline]
pub(crate) unsafe fn new(
    map_fd: c_int,
    page_cnt: usize,
    sample_cb: perf_buffer_sample_fn,
    lost_cb: perf_buffer_lost_fn,
    ctx: *mut c_void,
    opts: *const perf_buffer_opts,
) -> *mut perf_buffer {
    // SAFETY: per this function's contract.
    let period = unsafe { sized_in(opts.cast()) }.and_then(opts::sample_period);
    // SAFETY: the callbacks' contract is this function's.
    let callbacks = unsafe { CCallbacks::parsed(sample_cb, lost_cb, ctx) };
    into_handle(period.and_then(|p| libbpf_builder(map_fd, page_cnt, p)?.build_with(callbacks)))
}

/// The `(cpu, map_key)` pairs of raw opts with `cpu_cnt > 0`.
///
/// # Safety
/// With `cpu_cnt > 0`, non-NULL `cpus` and `map_keys` hold `cpu_cnt` ints.
unsafe fn raw_cpu_keys(o: opts::RawOpts) -> Result<Vec<(i32, i32)>> {
    if o.cpus == 0 || o.map_keys == 0 {
        return Err(print::invalid("perf_buffer_raw_opts: cpu_cnt > 0 needs cpus and map_keys"));
    }
    let n = o.cpu_cnt as usize;
    // SAFETY: per this function's contract; both are non-NULL.
    let (cpus, keys) = unsafe {
        (
            core::slice::from_raw_parts(o.cpus as *const c_int, n),
            core::slice::from_raw_parts(o.map_keys as *const c_int, n),
        )
    };
    compat::collect(n, cpus.iter().copied().zip(keys.iter().copied()))
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
    // SAFETY: the same contract.
    unsafe { new_raw(map_fd, page_cnt, attr, event_cb, ctx, opts) }
}

/// `perf_buffer__new_raw`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__new_raw`.
#[inline]
pub(crate) unsafe fn new_raw(
    map_fd: c_int,
    page_cnt: usize,
    attr: *mut perf_event_attr,
    event_cb: perf_buffer_event_fn,
    ctx: *mut c_void,
    opts: *const perf_buffer_raw_opts,
) -> *mut perf_buffer {
    if attr.is_null() {
        return into_handle(Err(Error::INVAL));
    }
    // SAFETY: per this function's contract.
    let fields = unsafe { sized_in(opts.cast()) }.and_then(opts::raw_opts);
    // SAFETY: a perf_event_attr is at least 64 bytes (PERF_ATTR_SIZE_VER0)
    // and `sample_type` sits at offset 24; the caller promised it readable.
    let sample_type = unsafe { attr.cast::<u8>().add(24).cast::<u64>().read_unaligned() };
    // SAFETY: `attr` is non-NULL and readable for this call.
    let caller_attr = unsafe { CallerAttr::new(attr.cast_const().cast()) };
    // SAFETY: the callback's contract is this function's.
    let callbacks = unsafe { CCallbacks::raw(event_cb, ctx) };
    into_handle(fields.and_then(|o| {
        let b = compat::with_caller_attr(compat::builder(map_fd).pages(page_cnt), caller_attr, sample_type);
        // SAFETY: per this function's contract.
        let b = if o.cpu_cnt > 0 { compat::with_cpu_keys(b, unsafe { raw_cpu_keys(o) }?) } else { b };
        b.build_with(callbacks)
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
    // SAFETY: the same contract.
    unsafe { free(pb) }
}

/// `perf_buffer__free`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__free`.
#[inline]
pub(crate) unsafe fn free(pb: *mut perf_buffer) {
    // libbpf's IS_ERR_OR_NULL: the top 4095 addresses encode errors.
    if pb.is_null() || pb as usize >= (-4095isize) as usize {
        return;
    }
    // SAFETY: a live, non-NULL handle (contract).
    unsafe { buffer::free(pb) }
}

/// The epoll fd over all rings (owned by the buffer), or -EINVAL for NULL.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__epoll_fd(pb: *const perf_buffer) -> c_int {
    // SAFETY: the same contract.
    unsafe { epoll_fd(pb) }
}

/// `perf_buffer__epoll_fd`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__epoll_fd`.
#[inline]
pub(crate) unsafe fn epoll_fd(pb: *const perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_ref(pb) }.map(|r| r.as_raw_fd()))
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
    // SAFETY: the same contract.
    unsafe { poll(pb, timeout_ms) }
}

/// `perf_buffer__poll`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__poll`.
#[inline]
pub(crate) unsafe fn poll(pb: *mut perf_buffer, timeout_ms: c_int) -> c_int {
    // Negative: forever, as epoll_wait has it.
    let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| drained(r, |r| r.poll(timeout))).map(|n| n as c_int))
}

/// Drains every ring without waiting. Returns 0, or the first error.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__consume(pb: *mut perf_buffer) -> c_int {
    // SAFETY: the same contract.
    unsafe { consume(pb) }
}

/// `perf_buffer__consume`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__consume`.
#[inline]
pub(crate) unsafe fn consume(pb: *mut perf_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| drained(r, |r| r.consume())).map(|()| 0))
}

/// Drains ring `buf_idx` without waiting. Returns 0 (also when empty), the
/// callback's stop value, or -EINVAL for a bad index.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__consume_buffer(pb: *mut perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: the same contract.
    unsafe { consume_buffer(pb, buf_idx) }
}

/// `perf_buffer__consume_buffer`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__consume_buffer`.
#[inline]
pub(crate) unsafe fn consume_buffer(pb: *mut perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| drained(r, |r| r.consume_ring(buf_idx))).map(|()| 0))
}

/// Number of rings set up (online CPUs, bounded by the map's size), or 0
/// with `errno = EINVAL` for NULL.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__buffer_cnt(pb: *const perf_buffer) -> usize {
    // SAFETY: the same contract.
    unsafe { buffer_cnt(pb) }
}

/// `perf_buffer__buffer_cnt`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__buffer_cnt`.
#[inline]
pub(crate) unsafe fn buffer_cnt(pb: *const perf_buffer) -> usize {
    // SAFETY: per this function's contract.
    match unsafe { reader_ref(pb) } {
        Ok(r) => r.rings(),
        Err(e) => {
            print::remember(&e);
            set_errno(e.errno());
            0
        }
    }
}

/// The perf event fd of ring `buf_idx` (owned by the buffer), or -EINVAL.
/// In the fast mode, the ring's map slot points at this event again from
/// now on, so the caller's ioctls and epoll see libbpf's behaviour.
///
/// # Safety
/// `pb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perf_buffer__buffer_fd(pb: *const perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: the same contract.
    unsafe { buffer_fd(pb, buf_idx) }
}

/// `perf_buffer__buffer_fd`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__buffer_fd`.
#[inline]
pub(crate) unsafe fn buffer_fd(pb: *const perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { reader_mut(pb) }.and_then(|r| r.ring_event(buf_idx).map(|fd| fd.as_raw_fd())))
}

/// The raw region of ring `buf_idx`: `*buf` = start of the mmap (the
/// kernel's `struct perf_event_mmap_page`, data follows one page later) and
/// `*buf_size` = size of the data area only. Returns 0, or -EINVAL for a
/// NULL argument or an index out of range (negative included); outputs are
/// untouched on error. In the fast mode, every record from now on is
/// written in this region.
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
    // SAFETY: the same contract.
    unsafe { buffer(pb, buf_idx, buf, buf_size) }
}

/// `perf_buffer__buffer`, for both its names (an exported name called from inside the
/// library would bind through the PLT, possibly to libbpf's).
///
/// # Safety
/// As for `perf_buffer__buffer`.
#[inline]
pub(crate) unsafe fn buffer(
    pb: *mut perf_buffer,
    buf_idx: c_int,
    buf: *mut *mut c_void,
    buf_size: *mut usize,
) -> c_int {
    // SAFETY: valid for writes or NULL, per this function's contract.
    let outs = unsafe { buf.as_mut().zip(buf_size.as_mut()) }.ok_or(Error::INVAL);
    // SAFETY: per this function's contract.
    let reader = unsafe { reader_mut(pb) };
    ret_errno(reader.and_then(|r| {
        let idx = usize::try_from(buf_idx).map_err(|_| Error::INVAL)?;
        let (buf, buf_size) = outs?;
        let (base, data_size) = compat::ring_region(r, idx)?;
        *buf = base.cast();
        *buf_size = data_size;
        Ok(0)
    }))
}
