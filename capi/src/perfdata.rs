//! The perf.data writer's C face: a file for an event set's events (with
//! its side-band event and the processes already running) or for a BPF
//! output perf buffer, fed by a reader's rings run by run, finished by
//! `perfbuf_perfdata_close`. Short shims over `perfbuf::perfdata`.

#![allow(non_camel_case_types, reason = "C names")]

use crate::abi::perf_buffer;
use crate::buffer::reader_mut;
use crate::events::{perfbuf_events, set_mut};
use crate::ffi::{null_with, ret_errno};
use crate::handle::{Handle, Kind};
use crate::print;
use core::ffi::{CStr, c_char, c_int};
use perfbuf::perfdata::{self, PerfDataWriter};
use perfbuf::{Error, ErrorKind, PerfEventAttr, Result};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

/// A perf.data file being written (opaque). Made by
/// `perfbuf_perfdata_new_events` or `perfbuf_perfdata_new_bpf_output`,
/// finished and freed by `perfbuf_perfdata_close`.
pub struct perfbuf_perfdata {
    _private: [u8; 0],
}

impl Kind for PerfDataWriter {
    /// "PERFDAT1".
    const MAGIC: u64 = 0x5045_5246_4441_5431;
    const NOT_OURS: &'static str = "not a perfbuf_perfdata writer (freed?)";
}

/// A writer error as the C face reports it: logged (with the file's
/// path, which `perfbuf_last_error` cannot hold), its errno kept. A
/// wake-up ending a poll is not a failure to log.
fn c_error(e: perfdata::Error) -> Error {
    if !matches!(&e, perfdata::Error::Read(r) if r.kind() == ErrorKind::Cancelled) {
        print::warn(format_args!("{e}"));
    }
    match e {
        perfdata::Error::Read(e) => e,
        other => Error::from_errno(other.errno()),
    }
}

/// # Safety
/// `w` is NULL or a live writer used by no other call concurrently.
unsafe fn writer_mut<'a>(w: *mut perfbuf_perfdata) -> Result<&'a mut PerfDataWriter> {
    // SAFETY: per this function's contract.
    unsafe { Handle::<PerfDataWriter>::value_mut(w) }
}

/// # Safety
/// `path` is NULL or NUL-terminated.
unsafe fn path_of<'a>(path: *const c_char) -> Result<&'a OsStr> {
    // SAFETY: per this function's contract.
    let p =
        unsafe { path.as_ref().map(|p| CStr::from_ptr(p)) }.ok_or_else(|| print::invalid("a NULL path"))?;
    Ok(OsStr::from_bytes(p.to_bytes()))
}

fn boxed(writer: core::result::Result<PerfDataWriter, perfdata::Error>) -> *mut perfbuf_perfdata {
    let handle = writer.map_err(c_error).and_then(|writer| Handle::into_raw(writer, ()));
    handle.unwrap_or_else(|e| null_with(&e))
}

/// Creates (or truncates) `path` as a perf.data file of `set`'s events:
/// adds to the set, enabled, a dummy event asking the kernel for COMM,
/// FORK, EXIT and MMAP2 records, and writes COMM and MMAP2 records from
/// /proc for the tasks the set watches, as `perf record` does. Events
/// added to the set later join the file when it is closed (a file whose
/// writer was killed describes only the events of its start: perf skips
/// the others' samples). Returns NULL with errno on failure (the message,
/// with the path, goes to the log).
///
/// # Safety
/// `path` is NULL or NUL-terminated; `set` is NULL or a live set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_perfdata_new_events(
    path: *const c_char,
    set: *mut perfbuf_events,
) -> *mut perfbuf_perfdata {
    // SAFETY: per this function's contract.
    match unsafe { path_of(path).and_then(|p| Ok((p, set_mut(set)?))) } {
        Ok((path, set)) => boxed(PerfDataWriter::for_set(path, set)),
        Err(e) => null_with(&e),
    }
}

/// Creates (or truncates) `path` as a perf.data file of a BPF output perf
/// buffer's samples (`perf_buffer__new`'s event: `PERF_COUNT_SW_BPF_OUTPUT`
/// sampling raw data). `perf script -F -ip,-sym,-dso,-symoff` shows them.
///
/// # Safety
/// `path` is NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_perfdata_new_bpf_output(path: *const c_char) -> *mut perfbuf_perfdata {
    // SAFETY: per this function's contract.
    match unsafe { path_of(path) } {
        Ok(path) => boxed(PerfDataWriter::for_bpf_output(path, PerfEventAttr::bpf_output(1))),
        Err(e) => null_with(&e),
    }
}

/// Writes every record `pb`'s rings hold now (one write per run of
/// records), then ends the round (a `FINISHED_ROUND` record, and the
/// header's data size updated: a writer killed later leaves a file perf
/// reads up to here). Returns the records written, or -errno (ENOSPC: the
/// disk is full; the message with the path goes to the log).
///
/// # Safety
/// `w` is NULL or a live writer, `pb` NULL or a live buffer, neither used
/// by another call concurrently.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_perfdata_drain(w: *mut perfbuf_perfdata, pb: *mut perf_buffer) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let (writer, reader) = unsafe { (writer_mut(w)?, reader_mut(pb)?) };
        let n = writer.drain(reader).map_err(c_error)?;
        Ok(n.min(c_int::MAX as usize) as c_int)
    })())
}

/// Waits up to `timeout_ms` (-1: forever) for rings of `pb` to hold
/// records, then `perfbuf_perfdata_drain`s. Returns the records written
/// (0: the timeout passed, or a signal came), -ECANCELED after a
/// `perfbuf_wake` (the wake-up is cleared), or -errno. The wait serves the
/// buffer's own wake-up and delay-timer fds, so a loop of polls sleeps
/// between records.
///
/// # Safety
/// As for [`perfbuf_perfdata_drain`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_perfdata_poll(
    w: *mut perfbuf_perfdata,
    pb: *mut perf_buffer,
    timeout_ms: c_int,
) -> c_int {
    // Negative: forever, as epoll_wait has it.
    let timeout = u64::try_from(timeout_ms).ok().map(Duration::from_millis);
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let (reader, writer) = unsafe { (reader_mut(pb)?, writer_mut(w)?) };
        let n = writer.poll(reader, timeout).map_err(c_error)?;
        Ok(n.min(c_int::MAX as usize) as c_int)
    })())
}

/// Finishes the file (the last round; the header features: event names,
/// machine, command line, sample times, clock, tracepoint formats; the
/// header rewritten) and frees the writer, whatever the outcome. Returns
/// 0 or -errno. NULL is a no-op returning 0.
///
/// # Safety
/// `w` is NULL or a live writer; it is dangling afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_perfdata_close(w: *mut perfbuf_perfdata) -> c_int {
    if w.is_null() {
        return 0;
    }
    // SAFETY: per this function's contract.
    let writer = unsafe { Handle::<PerfDataWriter>::take(w) };
    ret_errno(writer.and_then(|w| w.finish().map(|_| 0).map_err(c_error)))
}
