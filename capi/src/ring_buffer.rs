//! libbpf's ring buffer API (`ring_buffer__*`, and libbpf 1.3/1.5's
//! `ring_buffer__ring`, `ring__*`, `*__consume_n`), as short shims over
//! the public [`perfbuf::RingBuffer`].
//!
//! Return values and errno are libbpf 1.x's: constructors return NULL and
//! set errno; the others return a negative errno value and set errno, or
//! the negative value a callback returned (which stopped the read, its
//! record consumed); counts are capped at `INT_MAX`; success leaves errno
//! alone. Where libbpf would crash (a NULL handle, a NULL `sample_cb` when
//! a record arrives), these return -EINVAL (NULL and EINVAL for pointers,
//! 0 and EINVAL for positions) or drop the record instead.
//!
//! `PERFBUF_ADAPTIVE=1` in the environment opts `ring_buffer__new`'s ring
//! buffers in to the fast mode ([`perfbuf::ringbuf`]'s `Builder::fast`),
//! as it does `perf_buffer__new`'s perf buffers; by default they read as
//! libbpf's.
//!
//! Handles start with a magic word that no libbpf object starts with (its
//! `struct ring_buffer` starts with a heap pointer, its `struct ring` with
//! a function pointer), so a handle of the other library, met when link
//! order splits the names between the two, is refused with EINVAL and a
//! message instead of being used.

#![allow(non_camel_case_types, reason = "these are the C names libbpf callers use")]

use super::ffi::{check_tail, null_with, ret_errno, set_errno, sized_in};
use super::handle::{Handle, Kind};
use super::opts::env_adaptive;
use super::print;
use core::ffi::{c_int, c_uint, c_ulong, c_void};
use core::ops::ControlFlow;
use perfbuf::libbpf_compat::reserve;
use perfbuf::{Error, Result, RingBuffer};
use std::os::fd::AsRawFd;
use std::time::Duration;

/// Opaque handle returned by `ring_buffer__new`.
pub struct ring_buffer {
    _private: [u8; 0],
}

/// Opaque: one map of a `ring_buffer` (libbpf ≥ 1.3's `struct ring`),
/// from `ring_buffer__ring`; it lives as long as its ring buffer.
pub struct ring {
    _private: [u8; 0],
}

/// Called for each record: `(ctx, data, size)`; a negative return stops
/// the read and is returned by it.
pub type ring_buffer_sample_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, data: *mut c_void, size: usize) -> c_int>;

/// libbpf 1.x `struct ring_buffer_opts`: its size only.
#[repr(C)]
pub struct ring_buffer_opts {
    /// Size of the caller's struct, for forward/backward compatibility.
    pub sz: usize,
}

/// What a `struct ring_buffer *` holds.
struct RbState {
    rb: RingBuffer<'static>,
    /// One per map, boxed so that `ring_buffer__ring`'s pointers stay put
    /// while maps are added (a Vec of the handles would move them).
    #[allow(clippy::vec_box, reason = "the boxes' addresses are handed to C")]
    rings: Vec<Box<Handle<RingOf>>>,
}

impl Kind for RbState {
    /// "PERFRBUF": not a canonical address, so no libbpf object starts
    /// with it (its `struct ring_buffer` starts with a heap pointer).
    const MAGIC: u64 = 0x5045_5246_5242_5546;
    const NOT_OURS: &'static str =
        "this ring_buffer was not made by libperfbuf (a libbpf handle? link -lperfbuf before -lbpf)";
}

impl Drop for RbState {
    /// Its `struct ring` pointers are refused from now on.
    fn drop(&mut self) {
        self.rings.iter().for_each(|r| r.retire());
    }
}

/// What a `struct ring *` holds: which map of which ring buffer.
struct RingOf {
    owner: *mut RbState,
    idx: usize,
}

impl Kind for RingOf {
    /// "PERFRING" (libbpf's `struct ring` starts with a function pointer).
    const MAGIC: u64 = 0x5045_5246_5249_4E47;
    const NOT_OURS: &'static str =
        "this ring was not made by libperfbuf (from libbpf's ring_buffer__ring? link -lperfbuf before -lbpf)";
}

/// The caller's callback and context.
struct CSample {
    cb: ring_buffer_sample_fn,
    ctx: *mut c_void,
}

// SAFETY: libbpf's contract, which callers of this API follow: a ring
// buffer is used by one thread at a time, and its callbacks, with their
// ctx, are called on whichever thread reads it. Moving the pair between
// threads is what such a caller does with libbpf.
unsafe impl Send for CSample {}

impl CSample {
    fn call(&self, data: &[u8]) -> ControlFlow<i32> {
        let Some(cb) = self.cb else {
            return ControlFlow::Continue(()); // libbpf would crash: dropped
        };
        // SAFETY: the caller's callback with its ctx, as registered (the
        // contract of ring_buffer__new/add); `data` is valid for the call
        // and, as in libbpf, not to be written through.
        let ret = unsafe { cb(self.ctx, data.as_ptr().cast_mut().cast(), data.len()) };
        if ret < 0 { ControlFlow::Break(ret) } else { ControlFlow::Continue(()) }
    }
}

/// Adds `map_fd` to `rb` with the C callback, and its `struct ring`.
fn add_map(h: &mut RbState, map_fd: c_int, cb: ring_buffer_sample_fn, ctx: *mut c_void) -> Result<()> {
    reserve(&mut h.rings, 1)?;
    let owner: *mut RbState = h;
    let ring = Handle::boxed(RingOf { owner, idx: h.rb.rings() }, ())?;
    let sample = CSample { cb, ctx };
    // SAFETY: the C caller keeps map_fd open while the ring buffer lives,
    // as libbpf requires of it (libbpf keeps the number, not a dup).
    unsafe { h.rb.add_raw_fd(map_fd, move |data: &[u8]| sample.call(data)) }?;
    h.rings.push(ring);
    Ok(())
}

/// Creates a ring buffer reading the `BPF_MAP_TYPE_RINGBUF` `map_fd`:
/// each record goes to `sample_cb(ctx, data, size)`. Add more maps with
/// `ring_buffer__add`.
///
/// Returns a new handle, or NULL with `errno` set: EINVAL for bad `opts` or
/// a map of another type, the kernel's error for an fd that is not a BPF
/// object (EBADFD for one that is not open), or that of the failing
/// system call. Free it with `ring_buffer__free`.
///
/// # Safety
/// `opts` is NULL or a `struct ring_buffer_opts` readable for `opts->sz`
/// bytes; `sample_cb` is callable with `ctx` while the ring buffer lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring_buffer__new(
    map_fd: c_int,
    sample_cb: ring_buffer_sample_fn,
    ctx: *mut c_void,
    opts: *const ring_buffer_opts,
) -> *mut ring_buffer {
    // SAFETY: per this function's contract.
    let opts = unsafe { sized_in(opts.cast()) };
    let built = opts
        .and_then(|o| o.map_or(Ok(()), |b| check_tail(b, size_of::<ring_buffer_opts>(), "ring_buffer_opts")))
        .and_then(|()| env_adaptive(std::env::var("PERFBUF_ADAPTIVE").ok().as_deref()))
        .and_then(|fast| {
            let mut rb = RingBuffer::new()?;
            rb.set_fast(fast);
            Handle::into_raw(RbState { rb, rings: Vec::new() }, ())
        });
    let rb = match built {
        Ok(rb) => rb,
        Err(e) => return null_with(&e),
    };
    // SAFETY: the handle just made, used by this call alone; its rings
    // point at its state, which stays where it is for good.
    if let Err(e) = unsafe { handle(rb) }.and_then(|h| add_map(h, map_fd, sample_cb, ctx)) {
        // SAFETY: the live handle just made; freed once.
        drop(unsafe { Handle::<RbState>::take(rb) });
        return null_with(&e);
    }
    rb
}

/// The handle behind `rb`: EINVAL for NULL and for anything this library
/// did not make (a libbpf `struct ring_buffer`, a freed handle).
///
/// # Safety
/// `rb` is NULL, a live handle of ours, or a libbpf ring buffer (at least
/// 8 readable bytes); no other call uses it concurrently.
unsafe fn handle<'a>(rb: *const ring_buffer) -> Result<&'a mut RbState> {
    // SAFETY: per this function's contract.
    unsafe { Handle::<RbState>::value_mut(rb) }
}

/// The ring buffer and index behind `r`, like [`handle`].
///
/// # Safety
/// `r` is NULL, a live `struct ring *` of ours or a libbpf one; no other
/// call uses its ring buffer concurrently.
unsafe fn ring_handle<'a>(r: *const ring) -> Result<(&'a mut RingBuffer<'static>, usize)> {
    // SAFETY: per this function's contract.
    let ring = unsafe { Handle::<RingOf>::value_ref(r) }?;
    // SAFETY: a ring's handle lives in its owner's `rings`, so the owner is
    // live too; used by this call alone.
    Ok((unsafe { &mut (*ring.owner).rb }, ring.idx))
}

/// libbpf's `int` count: at most `INT_MAX`.
fn capped(n: usize) -> c_int {
    n.min(c_int::MAX as usize) as c_int
}

/// Frees the ring buffer: unmaps every map and closes the epoll fd (the
/// map fds stay the caller's). NULL and libbpf's `ERR_PTR` values are
/// ignored; so is a handle libbpf made (with a message). Must not be
/// called from a callback.
///
/// # Safety
/// `rb` is NULL or a live handle; it is dangling afterwards, and so are
/// its `struct ring` pointers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring_buffer__free(rb: *mut ring_buffer) {
    if rb.is_null() || rb as usize >= (-4095isize) as usize {
        return;
    }
    // SAFETY: per this function's contract.
    drop(unsafe { Handle::<RbState>::take(rb) });
}

/// Adds the `BPF_MAP_TYPE_RINGBUF` `map_fd`, whose records go to
/// `sample_cb(ctx, data, size)`, to the ring buffer. Returns 0, or a
/// negative errno (as `ring_buffer__new`; EEXIST for an fd already added).
///
/// # Safety
/// `rb` is a live handle; `sample_cb` is callable with `ctx` while the
/// ring buffer lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring_buffer__add(
    rb: *mut ring_buffer,
    map_fd: c_int,
    sample_cb: ring_buffer_sample_fn,
    ctx: *mut c_void,
) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle(rb) }.and_then(|h| add_map(h, map_fd, sample_cb, ctx)).map(|()| 0))
}

/// Waits up to `timeout_ms` (negative: forever, 0: not at all) for maps
/// holding records and reads them. Returns the number of records read
/// (at most `INT_MAX`; 0 on timeout), `-errno` (-EINTR on a signal, not
/// retried), or the negative value a callback returned.
///
/// # Safety
/// `rb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring_buffer__poll(rb: *mut ring_buffer, timeout_ms: c_int) -> c_int {
    let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle(rb) }.and_then(|h| h.rb.poll(timeout)).map(capped))
}

/// Reads every map without waiting. Returns the number of records read (at
/// most `INT_MAX`), or the negative value a callback returned.
///
/// # Safety
/// `rb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring_buffer__consume(rb: *mut ring_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle(rb) }.and_then(|h| h.rb.consume()).map(capped))
}

/// Reads up to `n` records without waiting, map after map (libbpf ≥ 1.5).
/// Returns the number read (at most `INT_MAX`), or the negative value a
/// callback returned.
///
/// # Safety
/// `rb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring_buffer__consume_n(rb: *mut ring_buffer, n: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle(rb) }.and_then(|h| h.rb.consume_n(n)).map(capped))
}

/// The epoll fd over all maps (owned by the ring buffer), or -EINVAL.
///
/// # Safety
/// `rb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring_buffer__epoll_fd(rb: *const ring_buffer) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { handle(rb) }.map(|h| h.rb.as_raw_fd()))
}

/// Map `idx` of the ring buffer, in the order they were added (libbpf ≥
/// 1.3), valid until `ring_buffer__free`; NULL with `errno = ERANGE` for an
/// index out of range.
///
/// # Safety
/// `rb` is a live handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring_buffer__ring(rb: *mut ring_buffer, idx: c_uint) -> *mut ring {
    // SAFETY: per this function's contract.
    match unsafe { handle(rb) } {
        Ok(h) => match h.rings.get_mut(idx as usize) {
            Some(ring) => ring.as_ptr(),
            None => null_with(&Error::from_errno(libc::ERANGE)),
        },
        Err(e) => null_with(&e),
    }
}

/// Reads one `u64` figure of a ring; 0 with `errno = EINVAL` for NULL or a
/// ring of libbpf's.
///
/// # Safety
/// `r` is a live `struct ring *`.
unsafe fn ring_figure(r: *const ring, figure: impl FnOnce(&perfbuf::ringbuf::Ring<'static>) -> u64) -> u64 {
    // SAFETY: per this function's contract.
    match unsafe { ring_handle(r) }.and_then(|(rb, idx)| rb.ring(idx).ok_or(Error::INVAL)) {
        Ok(ring) => figure(ring),
        Err(e) => {
            print::remember(&e);
            set_errno(e.errno());
            0
        }
    }
}

/// The ring's consumer position (bytes read since the map was created).
///
/// # Safety
/// `r` is a live `struct ring *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring__consumer_pos(r: *const ring) -> c_ulong {
    // SAFETY: per this function's contract.
    unsafe { ring_figure(r, |ring| ring.consumer_pos()) as c_ulong }
}

/// The ring's producer position (bytes reserved by BPF programs).
///
/// # Safety
/// `r` is a live `struct ring *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring__producer_pos(r: *const ring) -> c_ulong {
    // SAFETY: per this function's contract.
    unsafe { ring_figure(r, |ring| ring.producer_pos()) as c_ulong }
}

/// Bytes reserved but not yet read: producer minus consumer position.
///
/// # Safety
/// `r` is a live `struct ring *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring__avail_data_size(r: *const ring) -> usize {
    // SAFETY: per this function's contract.
    unsafe { ring_figure(r, |ring| ring.avail_data_size()) as usize }
}

/// The size of the ring's data area in bytes.
///
/// # Safety
/// `r` is a live `struct ring *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring__size(r: *const ring) -> usize {
    // SAFETY: per this function's contract.
    unsafe { ring_figure(r, |ring| ring.size()) as usize }
}

/// The map fd the ring was added with, or -EINVAL.
///
/// # Safety
/// `r` is a live `struct ring *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring__map_fd(r: *const ring) -> c_int {
    // SAFETY: per this function's contract.
    let ring = unsafe { ring_handle(r) }.and_then(|(rb, idx)| rb.ring(idx).ok_or(Error::INVAL));
    ret_errno(ring.map(|ring| ring.map_fd()))
}

/// Reads this map alone without waiting. Returns the number of records
/// read (at most `INT_MAX`), or the negative value a callback returned.
///
/// # Safety
/// `r` is a live `struct ring *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring__consume(r: *mut ring) -> c_int {
    // SAFETY: per this function's contract.
    let ring = unsafe { ring_handle(r) }.and_then(|(rb, idx)| rb.ring_mut(idx).ok_or(Error::INVAL));
    ret_errno(ring.and_then(|ring| ring.consume()).map(capped))
}

/// Reads up to `n` records of this map without waiting (libbpf ≥ 1.5).
/// Returns the number read, or the negative value a callback returned.
///
/// # Safety
/// `r` is a live `struct ring *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ring__consume_n(r: *mut ring, n: usize) -> c_int {
    // SAFETY: per this function's contract.
    let ring = unsafe { ring_handle(r) }.and_then(|(rb, idx)| rb.ring_mut(idx).ok_or(Error::INVAL));
    ret_errno(ring.and_then(|ring| ring.consume_n(n)).map(capped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_capped_at_int_max() {
        assert_eq!(capped(0), 0);
        assert_eq!(capped(i32::MAX as usize), i32::MAX);
        assert_eq!(capped(i32::MAX as usize + 1), i32::MAX);
        assert_eq!(capped(usize::MAX), i32::MAX);
    }

    #[test]
    fn opts_layout_is_libbpfs() {
        assert_eq!(size_of::<ring_buffer_opts>(), 8);
    }
}
