//! The caller's callbacks and how one record is dispatched to them
//! (libbpf's `perf_buffer__process_record`).

use crate::abi::{
    LIBBPF_PERF_EVENT_CONT, LIBBPF_PERF_EVENT_ERROR, perf_buffer_event_fn, perf_buffer_lost_fn,
    perf_buffer_sample_fn, perf_event_header,
};
use crate::kernel::PERF_RECORD_SAMPLE;
use crate::log;
use crate::record::{self, Record};
use crate::ring::{Header, PerfRing};
use core::ffi::{c_int, c_void};

/// Which callbacks a buffer delivers to.
#[derive(Clone, Copy)]
enum Handler {
    /// `perf_buffer__new`: samples and lost counts, parsed for the caller.
    Parsed { sample: perf_buffer_sample_fn, lost: perf_buffer_lost_fn },
    /// `perf_buffer__new_raw` with an `event_cb`: every record as is.
    Raw { event: unsafe extern "C" fn(*mut c_void, c_int, *mut perf_event_header) -> c_int },
}

/// The caller's callbacks plus the `ctx` they receive.
pub struct Callbacks {
    handler: Handler,
    ctx: *mut c_void,
}

// SAFETY: the callbacks and ctx belong to the caller, who moves the buffer
// between threads only as libbpf allows (one thread at a time); we never call
// them concurrently ourselves.
unsafe impl Send for Callbacks {}

/// The common case with the fewest checks: a `PERF_RECORD_SAMPLE` whose raw
/// size fits its record. Returns the data pointer and size. The type comes
/// from `header` (a register, the same along a run of equal headers), so
/// only the raw size is read here.
#[inline(always)]
fn raw_sample(header: Header, rec: &[u8]) -> Option<(*const u8, u32)> {
    if header.type_() != PERF_RECORD_SAMPLE {
        return None;
    }
    let (head, rest) = rec.split_first_chunk::<12>()?;
    let size = u32::from_ne_bytes([head[8], head[9], head[10], head[11]]);
    (size as usize <= rest.len()).then_some((rest.as_ptr(), size))
}

/// Counts kept while dispatching (rare record types only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// Records the kernel reported lost.
    pub lost: u64,
    /// SAMPLE/LOST records too short for their fields, skipped.
    pub malformed: u64,
}

impl Callbacks {
    /// Callbacks for `perf_buffer__new`; either may be absent.
    ///
    /// # Safety
    /// Each present function must be safe to call with `ctx`, any CPU id,
    /// and a record pointer valid for the duration of the call.
    pub unsafe fn parsed(sample: perf_buffer_sample_fn, lost: perf_buffer_lost_fn, ctx: *mut c_void) -> Self {
        Callbacks { handler: Handler::Parsed { sample, lost }, ctx }
    }

    /// Callbacks for `perf_buffer__new_raw`; without an `event_cb` samples and
    /// lost records are dropped, as in libbpf.
    ///
    /// # Safety
    /// As for [`Callbacks::parsed`].
    pub unsafe fn raw(event: perf_buffer_event_fn, ctx: *mut c_void) -> Self {
        let handler = match event {
            Some(event) => Handler::Raw { event },
            None => Handler::Parsed { sample: None, lost: None },
        };
        Callbacks { handler, ctx }
    }

    /// Hands one whole record to the caller; returns `bpf_perf_event_ret`.
    #[inline(always)]
    pub fn dispatch(&self, cpu: c_int, rec: &[u8], stats: &mut DispatchStats) -> c_int {
        match self.handler {
            Handler::Raw { event } => {
                // SAFETY: per the constructor's contract; `rec` stays valid and
                // unchanged until the drain returns. The header pointer is mut
                // only because libbpf's typedef says so: records are read-only.
                unsafe { event(self.ctx, cpu, rec.as_ptr().cast_mut().cast()) }
            }
            Handler::Parsed { sample, lost } => {
                if let (Some((data, size)), Some(cb)) = (raw_sample(Header::of(rec), rec), sample) {
                    // SAFETY: per the constructor's contract; `data` lies in
                    // `rec`, valid until the drain returns.
                    unsafe { cb(self.ctx, cpu, data.cast_mut().cast(), size) };
                    return LIBBPF_PERF_EVENT_CONT;
                }
                self.dispatch_parsed(cpu, rec, sample, lost, stats)
            }
        }
    }

    /// Drains `ring` into the callbacks (see [`PerfRing::drain`]). The handler
    /// is matched once, outside the loop, so the common case (a sample
    /// callback) runs with the callback and ctx held in registers.
    /// `head`: see [`PerfRing::drain_until`].
    pub fn drain_ring(&self, ring: &mut PerfRing, head: u64, cpu: c_int, stats: &mut DispatchStats) -> c_int {
        match self.handler {
            Handler::Parsed { sample: Some(cb), lost } => {
                let ctx = self.ctx;
                ring.drain_until(
                    head,
                    &mut (),
                    |(), header, rec| {
                        if let Some((data, size)) = raw_sample(header, rec) {
                            // SAFETY: per the constructor's contract; `data` lies
                            // in `rec`, valid until the drain returns.
                            unsafe { cb(ctx, cpu, data.cast_mut().cast(), size) };
                            return LIBBPF_PERF_EVENT_CONT;
                        }
                        self.dispatch_parsed(cpu, rec, Some(cb), lost, stats)
                    },
                    |()| (),
                )
            }
            _ => ring.drain_until(head, &mut (), |(), _, rec| self.dispatch(cpu, rec, stats), |()| ()),
        }
    }

    /// Everything but a well-formed sample with a callback. Never inlined:
    /// kept out of the drain loop, it leaves that loop its registers.
    #[cold]
    #[inline(never)]
    fn dispatch_parsed(
        &self,
        cpu: c_int,
        rec: &[u8],
        sample: perf_buffer_sample_fn,
        lost: perf_buffer_lost_fn,
        stats: &mut DispatchStats,
    ) -> c_int {
        match record::parse(rec) {
            Record::Sample { data } => {
                // Not counted here: the ring counts records and bytes
                // once per drain, keeping this path free of stores.
                if let Some(cb) = sample {
                    // SAFETY: per the constructor's contract; `data` lies in
                    // `rec`, valid until the drain returns.
                    unsafe { cb(self.ctx, cpu, data.as_ptr().cast_mut().cast(), data.len() as u32) };
                }
                LIBBPF_PERF_EVENT_CONT
            }
            Record::Lost { lost: cnt } => {
                stats.lost += cnt;
                if let Some(cb) = lost {
                    // SAFETY: per the constructor's contract.
                    unsafe { cb(self.ctx, cpu, cnt) };
                }
                LIBBPF_PERF_EVENT_CONT
            }
            Record::Other { type_ } => {
                log::warn(format_args!("unknown perf sample type {type_}"));
                LIBBPF_PERF_EVENT_ERROR
            }
            Record::Malformed => {
                stats.malformed += 1;
                LIBBPF_PERF_EVENT_CONT
            }
        }
    }
}
