//! Finished records of an event set, for C and the languages over it:
//! `perfbuf_events_decoded_reader` hands every record of the set's rings
//! to one callback, attributed to its event and decoded once, in Rust
//! (`perfbuf::events::Decoder`): a sample with its fields, a side-band
//! record with its own, a count of records lost, or the record whole with
//! why it is whole. No face needs to read a record's header itself.

#![allow(non_camel_case_types, reason = "C names")]

use super::abi::{perf_buffer, perf_event_header};
use super::buffer::into_handle;
use super::callbacks::CCallbacks;
use super::decode::{perfbuf_sample, record_bytes, sample_to_c};
use super::events::{perfbuf_events, set_mut, set_ref};
use super::ffi::ret_errno;
use super::print;
use super::sideband::{perfbuf_sideband, to_c as sideband_to_c};
use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use perfbuf::Error;
use perfbuf::decode::{self, DecodeError};
use perfbuf::events::{Decoder, EventRecord, Whole};
use perfbuf::libbpf_compat::boxed;

/// `perfbuf_event_record.kind`: a sample of event `event`, decoded in
/// `sample`.
pub const PERFBUF_EVENT_RECORD_SAMPLE: u32 = 1;
/// `perfbuf_event_record.kind`: the kernel dropped `lost` records
/// (`PERF_RECORD_LOST`, or samples: `PERF_RECORD_LOST_SAMPLES`); `event`
/// is the event whose write found the ring full, or -1 (none left in the
/// set, or a report `perfbuf_drain_final` made).
pub const PERFBUF_EVENT_RECORD_LOST: u32 = 2;
/// `perfbuf_event_record.kind`: a side-band record, decoded in `sideband`;
/// `event` is the event that asked for it, or -1 for the set's own
/// (`PERFBUF_EVENTS_SB_*`).
pub const PERFBUF_EVENT_RECORD_SIDEBAND: u32 = 3;
/// `perfbuf_event_record.kind`: any other record, whole at `record`:
/// `error` says why (0: a kind not decoded, such as throttling; ENOENT: of
/// no event in the set, e.g. one removed while its records were in flight;
/// EBADMSG: malformed; EOPNOTSUPP: fields the decoder does not know).
pub const PERFBUF_EVENT_RECORD_OTHER: u32 = 4;

/// One record of an event set's rings, finished: see
/// `perfbuf_events_decoded_reader`. The library fills it (`sz` is its
/// size as the library knows it: fields past a caller's own header's are
/// newer). Pointers point into the record or into structs valid only
/// during the callback.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfbuf_event_record {
    /// Size of this struct as the library fills it.
    pub sz: usize,
    /// `PERFBUF_EVENT_RECORD_*`.
    pub kind: u32,
    /// The event's id, or -1 for none.
    pub event: i32,
    /// The CPU of the ring it came from.
    pub cpu: u32,
    /// `PERFBUF_EVENT_RECORD_OTHER`: why it is whole (an errno, or 0).
    pub error: i32,
    /// `header.type` (`PERF_RECORD_*`).
    pub record_type: u32,
    /// `header.misc`.
    pub misc: u16,
    /// `header.size`: bytes at `record`.
    pub size: u16,
    /// `PERFBUF_EVENT_RECORD_LOST`: how many were lost.
    pub lost: u64,
    /// The record whole, header included.
    pub record: *const perf_event_header,
    /// `PERFBUF_EVENT_RECORD_SAMPLE`: its fields (NULL otherwise).
    pub sample: *const perfbuf_sample,
    /// `PERFBUF_EVENT_RECORD_SIDEBAND`: its fields (NULL otherwise).
    pub sideband: *const perfbuf_sideband,
}

const _: () = {
    assert!(size_of::<perfbuf_event_record>() == 64);
    assert!(offset_of!(perfbuf_event_record, lost) == 32);
    assert!(offset_of!(perfbuf_event_record, sideband) == 56);
};

/// Called with each finished record; returns an `enum
/// bpf_perf_event_ret`, as `perf_buffer__new_raw`'s `event_cb` does
/// (`LIBBPF_PERF_EVENT_CONT` goes on, `LIBBPF_PERF_EVENT_DONE` stops this
/// ring for now, another value stops the read and is returned).
pub type perfbuf_event_record_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, rec: *const perfbuf_event_record) -> c_int>;

/// A reader of the set's rings, like `perfbuf_events_reader`, whose
/// `record_fn` gets every record finished: attributed to its event and
/// decoded (see `struct perfbuf_event_record`), so a caller never reads a
/// record's header. Its pointers are valid until `record_fn` returns.
/// `record_fn` runs on the polling thread with no lock of the set held
/// (it may call `perfbuf_events_field` and the like). Once per set (EBUSY
/// after, also after `perfbuf_events_reader`); EINVAL for a set without
/// rings. Returns NULL with errno on failure.
///
/// # Safety
/// `set` is NULL or a live set; `record_fn` is NULL or callable with
/// `ctx` and a record valid for the call, for as long as the reader lives.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_decoded_reader(
    set: *mut perfbuf_events,
    record_fn: perfbuf_event_record_fn,
    ctx: *mut c_void,
) -> *mut perf_buffer {
    into_handle((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_mut(set) }?;
        let Some(f) = record_fn else {
            return Err(print::invalid("perfbuf_events_decoded_reader needs a record_fn"));
        };
        let decoder = set.decoder();
        // SAFETY: per this function's contract, `f` is callable with `ctx`
        // and a record valid for the call while the reader lives.
        let each = boxed(move |cpu, rec: &[u8]| unsafe { deliver(f, ctx, &decoder, cpu, rec) })?;
        super::events::reader_of(set, CCallbacks::decoded(each))
    })())
}

/// Hands `rec`, a whole record of the set's rings (`rec_len` readable
/// bytes, 8-aligned) that the caller read some other way
/// (`perfbuf_ring_peek`, a copy, a test's own bytes), to `record_fn`
/// finished as `perfbuf_events_decoded_reader` would, as a record of
/// `cpu`'s ring. Returns `record_fn`'s answer, or -EINVAL without calling
/// it (a NULL argument, a record shorter than its header says).
///
/// # Safety
/// `set` is NULL or a live set; `rec` is NULL or readable for `rec_len`
/// bytes; `record_fn` is NULL or callable with `ctx` and a record valid
/// for the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_decode_record(
    set: *const perfbuf_events,
    cpu: u32,
    rec: *const perf_event_header,
    rec_len: usize,
    record_fn: perfbuf_event_record_fn,
    ctx: *mut c_void,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let (set, rec) = unsafe { (set_ref(set)?, record_bytes(rec, rec_len)?) };
        let Some(f) = record_fn else {
            return Err(print::invalid("perfbuf_events_decode_record needs a record_fn"));
        };
        let size = decode::header(rec).map_or(0, |h| usize::from(h.size));
        if size < size_of::<perf_event_header>() || size > rec.len() {
            return Err(print::invalid(
                "perfbuf_events_decode_record: rec_len is shorter than the record's header.size",
            ));
        }
        // SAFETY: per this function's contract.
        Ok(unsafe { deliver(f, ctx, &set.decoder(), cpu, &rec[..size]) })
    })())
}

/// What a C record callback gets, built without a pointer to itself.
struct Finished {
    record: perfbuf_event_record,
    sample: Option<perfbuf_sample>,
    sideband: Option<perfbuf_sideband>,
}

/// Decodes `rec`, a whole record of `cpu`'s ring, and hands it to `f`
/// (after the decoder's lock is released). Returns `f`'s answer.
///
/// # Safety
/// `f` is callable with `ctx` and a record valid for the call.
#[inline(never)]
unsafe fn deliver(
    f: unsafe extern "C" fn(*mut c_void, *const perfbuf_event_record) -> c_int,
    ctx: *mut c_void,
    decoder: &Decoder,
    cpu: u32,
    rec: &[u8],
) -> c_int {
    let mut out = decoder.decode(cpu, rec, |r| finish(r, cpu, rec));
    if out.record.kind == PERFBUF_EVENT_RECORD_OTHER {
        out.record.error = match decoder.why_whole(rec) {
            Whole::NoEvent => libc::ENOENT,
            Whole::Undecodable(e) => errno_of(&e),
            _ => 0,
        };
    }
    if let Some(s) = &out.sample {
        out.record.sample = s;
    }
    if let Some(s) = &out.sideband {
        out.record.sideband = s;
    }
    // SAFETY: per this function's contract; `out` and the record it
    // points into live until `f` returns.
    unsafe { f(ctx, &out.record) }
}

/// A decoded record as C structs (pointers into `rec`).
fn finish(r: EventRecord<'_>, cpu: u32, rec: &[u8]) -> Finished {
    let header = decode::header(rec).unwrap_or_default();
    let mut out = Finished {
        record: perfbuf_event_record {
            sz: size_of::<perfbuf_event_record>(),
            kind: PERFBUF_EVENT_RECORD_OTHER,
            event: -1,
            cpu,
            error: 0,
            record_type: header.type_,
            misc: header.misc,
            size: header.size,
            lost: 0,
            record: rec.as_ptr().cast(),
            sample: core::ptr::null(),
            sideband: core::ptr::null(),
        },
        sample: None,
        sideband: None,
    };
    let id = |e: Option<perfbuf::events::EventId>| e.map_or(-1, |e| e.get() as i32);
    match r {
        EventRecord::Sample(s) => {
            (out.record.kind, out.record.event) = (PERFBUF_EVENT_RECORD_SAMPLE, s.event.get() as i32);
            out.sample = Some(sample_to_c(header, &s.sample, size_of::<perfbuf_sample>()));
        }
        EventRecord::Lost { event, lost, .. } => {
            (out.record.kind, out.record.event, out.record.lost) =
                (PERFBUF_EVENT_RECORD_LOST, id(event), lost);
        }
        EventRecord::Sideband { event, record, .. } => {
            if let Ok(mut sb) = sideband_to_c(&record, size_of::<perfbuf_sideband>()) {
                sb.event = id(event);
                (out.record.kind, out.record.event) = (PERFBUF_EVENT_RECORD_SIDEBAND, id(event));
                out.sideband = Some(sb);
            }
        }
        EventRecord::Other { event, .. } => out.record.event = id(event),
        _ => {}
    }
    out
}

/// The errno of a record that did not decode (as `perfbuf_decode` has it).
fn errno_of(e: &DecodeError) -> c_int {
    Error::errno(&super::decode::errno_of(e))
}
