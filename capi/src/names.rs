//! libbpf's ten functions under `perfbuf_` names (calling the code behind
//! the libbpf names directly, never through the exported symbols).
//!
//! A program linked with both `-lbpf` and `-lperfbuf` gets libbpf's names
//! from whichever library the linker saw first (and with `--as-needed`
//! may not load libperfbuf at all). These names exist only here, so a
//! program that uses them runs on libperfbuf whatever the link order;
//! they call the same code as the libbpf names. `perfbuf_new` (in the
//! extensions) stands for `perf_buffer__new`: with NULL opts it is exactly
//! that, and its `wakeup_events` is libbpf 1.2's `sample_period`.

use super::abi::{perf_buffer, perf_buffer_event_fn, perf_buffer_raw_opts, perf_event_attr};
use super::libbpf;
use core::ffi::{c_int, c_void};

/// `perf_buffer__new_raw` under a name only libperfbuf has.
///
/// # Safety
/// As for `perf_buffer__new_raw`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_new_raw(
    map_fd: c_int,
    page_cnt: usize,
    attr: *mut perf_event_attr,
    event_cb: perf_buffer_event_fn,
    ctx: *mut c_void,
    opts: *const perf_buffer_raw_opts,
) -> *mut perf_buffer {
    // SAFETY: the same contract.
    unsafe { libbpf::new_raw(map_fd, page_cnt, attr, event_cb, ctx, opts) }
}

/// `perf_buffer__free` under a name only libperfbuf has. A handle libbpf
/// made is refused (left alone) with a message, not freed.
///
/// # Safety
/// As for `perf_buffer__free`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_free(pb: *mut perf_buffer) {
    // SAFETY: the same contract.
    unsafe { libbpf::free(pb) }
}

/// `perf_buffer__epoll_fd` under a name only libperfbuf has.
///
/// # Safety
/// As for `perf_buffer__epoll_fd`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_epoll_fd(pb: *const perf_buffer) -> c_int {
    // SAFETY: the same contract.
    unsafe { libbpf::epoll_fd(pb) }
}

/// `perf_buffer__poll` under a name only libperfbuf has.
///
/// # Safety
/// As for `perf_buffer__poll`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_poll(pb: *mut perf_buffer, timeout_ms: c_int) -> c_int {
    // SAFETY: the same contract.
    unsafe { libbpf::poll(pb, timeout_ms) }
}

/// `perf_buffer__consume` under a name only libperfbuf has.
///
/// # Safety
/// As for `perf_buffer__consume`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_consume(pb: *mut perf_buffer) -> c_int {
    // SAFETY: the same contract.
    unsafe { libbpf::consume(pb) }
}

/// `perf_buffer__consume_buffer` under a name only libperfbuf has.
///
/// # Safety
/// As for `perf_buffer__consume_buffer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_consume_buffer(pb: *mut perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: the same contract.
    unsafe { libbpf::consume_buffer(pb, buf_idx) }
}

/// `perf_buffer__buffer_cnt` under a name only libperfbuf has.
///
/// # Safety
/// As for `perf_buffer__buffer_cnt`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_buffer_cnt(pb: *const perf_buffer) -> usize {
    // SAFETY: the same contract.
    unsafe { libbpf::buffer_cnt(pb) }
}

/// `perf_buffer__buffer_fd` under a name only libperfbuf has.
///
/// # Safety
/// As for `perf_buffer__buffer_fd`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_buffer_fd(pb: *const perf_buffer, buf_idx: usize) -> c_int {
    // SAFETY: the same contract.
    unsafe { libbpf::buffer_fd(pb, buf_idx) }
}

/// `perf_buffer__buffer` under a name only libperfbuf has.
///
/// # Safety
/// As for `perf_buffer__buffer`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_buffer(
    pb: *mut perf_buffer,
    buf_idx: c_int,
    buf: *mut *mut c_void,
    buf_size: *mut usize,
) -> c_int {
    // SAFETY: the same contract.
    unsafe { libbpf::buffer(pb, buf_idx, buf, buf_size) }
}
