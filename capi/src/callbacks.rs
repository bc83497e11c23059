//! The one place that calls the caller's C function pointers: the sample,
//! lost and raw-event callbacks of a buffer (its [`Sink`]), the ordered
//! reader's key function, and the batch callback.

use super::abi::{
    LIBBPF_PERF_EVENT_CONT, LIBBPF_PERF_EVENT_DONE, perf_buffer_event_fn, perf_buffer_lost_fn,
    perf_buffer_sample_fn, perf_event_header, perfbuf_batch, perfbuf_batch_fn,
};
use core::ffi::{c_int, c_void};
use core::ops::ControlFlow;
use perfbuf::Batch;
use perfbuf::sink::{Records, Sink, Stop, Taken};

type RawEventFn = unsafe extern "C" fn(*mut c_void, c_int, *mut perf_event_header) -> c_int;
/// A decoded reader's work for one whole record of a CPU's ring: decode
/// it and call the caller's callback, returning its answer.
pub(crate) type DecodedFn = Box<dyn FnMut(u32, &[u8]) -> c_int>;
pub(crate) type KeyFn = unsafe extern "C" fn(*mut c_void, c_int, *const perf_event_header) -> u64;

/// Which callbacks a buffer delivers to.
#[derive(Clone, Copy)]
enum Kind {
    /// `perf_buffer__new`: samples and lost counts, parsed for the caller.
    Parsed { sample: perf_buffer_sample_fn, lost: perf_buffer_lost_fn },
    /// `perf_buffer__new_raw` with an `event_cb`: every record as is.
    Raw { event: RawEventFn },
    /// `perfbuf_events_decoded_reader`: every record finished by the
    /// set's decoder (`CCallbacks::decoded`).
    Decoded,
}

/// The C library's sink: the caller's callbacks plus the `ctx` they get.
pub(crate) struct CCallbacks {
    kind: Kind,
    ctx: *mut c_void,
    /// The ordered reader's key function and its ctx.
    key: Option<(KeyFn, *mut c_void)>,
    /// With [`Kind::Decoded`]: what each record goes through.
    decoded: Option<DecodedFn>,
}

// SAFETY: the callbacks and ctx belong to the caller, who moves the buffer
// between threads only as libbpf allows (one thread at a time); we never call
// them concurrently ourselves.
unsafe impl Send for CCallbacks {}

impl CCallbacks {
    /// Callbacks for `perf_buffer__new`; either may be absent.
    ///
    /// # Safety
    /// Each present function must be safe to call with `ctx`, any CPU id,
    /// and a record pointer valid for the duration of the call, for as
    /// long as the buffer lives.
    pub(crate) unsafe fn parsed(
        sample: perf_buffer_sample_fn,
        lost: perf_buffer_lost_fn,
        ctx: *mut c_void,
    ) -> Self {
        CCallbacks { kind: Kind::Parsed { sample, lost }, ctx, key: None, decoded: None }
    }

    /// Callbacks for `perf_buffer__new_raw`; without an `event_cb` samples and
    /// lost records are dropped, as in libbpf.
    ///
    /// # Safety
    /// As for [`CCallbacks::parsed`].
    pub(crate) unsafe fn raw(event: perf_buffer_event_fn, ctx: *mut c_void) -> Self {
        let kind = match event {
            Some(event) => Kind::Raw { event },
            None => Kind::Parsed { sample: None, lost: None },
        };
        CCallbacks { kind, ctx, key: None, decoded: None }
    }

    /// The callbacks of `perfbuf_events_decoded_reader`: `f` decodes each
    /// record and calls the caller's callback with it.
    pub(crate) fn decoded(f: DecodedFn) -> Self {
        CCallbacks { kind: Kind::Decoded, ctx: core::ptr::null_mut(), key: None, decoded: Some(f) }
    }

    /// The ordered reader's key function, from now on.
    ///
    /// # Safety
    /// `f` must be safe to call with `ctx`, any CPU id and a whole record
    /// valid for the duration of the call, for as long as the buffer lives.
    pub(crate) unsafe fn set_key(&mut self, f: KeyFn, ctx: *mut c_void) {
        self.key = Some((f, ctx));
    }
}

/// A raw callback's `enum bpf_perf_event_ret`, as a drain's flow.
#[inline(always)]
fn flow_of(ret: c_int) -> ControlFlow<Stop> {
    match ret {
        LIBBPF_PERF_EVENT_CONT => ControlFlow::Continue(()),
        LIBBPF_PERF_EVENT_DONE => ControlFlow::Break(Stop::Ring),
        v => ControlFlow::Break(Stop::Read(v)),
    }
}

impl Sink for CCallbacks {
    /// The callbacks are matched once, outside the reader's loop, so the
    /// common case (a sample callback) runs with the callback and ctx in
    /// registers.
    #[inline(always)]
    fn take(&mut self, records: Records<'_>) -> Taken {
        let ctx = self.ctx;
        // A perf ring's records always have their CPU.
        let cpu = records.cpu().map_or(-1, |c| c as c_int);
        let lost_of = |lost: perf_buffer_lost_fn| {
            move |n| {
                if let Some(cb) = lost {
                    // SAFETY: per the constructor's contract.
                    unsafe { cb(ctx, cpu, n) }
                }
            }
        };
        match self.kind {
            Kind::Parsed { sample: Some(cb), lost } => records.samples(
                // SAFETY: per the constructor's contract; `data` lies in the
                // record, valid until the callback returns. The pointer is
                // mut only because libbpf's typedef says so.
                move |data| unsafe { cb(ctx, cpu, data.as_ptr().cast_mut().cast(), data.len() as u32) },
                lost_of(lost),
            ),
            Kind::Parsed { sample: None, lost } => records.samples(|_| {}, lost_of(lost)),
            Kind::Raw { event } => records.each(move |rec| {
                // SAFETY: per the constructor's contract; `rec` stays valid and
                // unchanged until the callback returns. The header pointer is
                // mut only because libbpf's typedef says so: records are
                // read-only.
                flow_of(unsafe { event(ctx, cpu, rec.as_ptr().cast_mut().cast()) })
            }),
            Kind::Decoded => {
                let cpu = cpu as u32;
                match &mut self.decoded {
                    Some(f) => records.each(|rec| flow_of(f(cpu, rec))),
                    None => records.each(|_| ControlFlow::Continue(())),
                }
            }
        }
    }

    fn order_key(&mut self, cpu: u32, rec: &[u8]) -> u64 {
        match self.key {
            // SAFETY: per `set_key`'s contract; `rec` is valid for the call.
            Some((f, ctx)) => unsafe { f(ctx, cpu as c_int, rec.as_ptr().cast()) },
            None => 0,
        }
    }
}

/// A batch as `struct perfbuf_batch`, handed to the caller's `batch_fn`:
/// returns its verdict (0 goes on).
///
/// # Safety
/// `f` is safe to call with `ctx` and a batch valid for the call.
pub(crate) unsafe fn call_batch_fn(
    f: perfbuf_batch_fn,
    ctx: *mut c_void,
    batch: &Batch<'_>,
) -> ControlFlow<c_int> {
    let c = perfbuf_batch {
        cpu: batch.cpu,
        reserved: 0,
        records: batch.bytes.as_ptr().cast(),
        len: batch.bytes.len(),
        samples: batch.samples,
        others: batch.others,
    };
    let Some(f) = f else { return ControlFlow::Break(-libc::EINVAL) };
    // SAFETY: per this function's contract; the run lives until it returns.
    match unsafe { f(ctx, &c) } {
        0 => ControlFlow::Continue(()),
        v => ControlFlow::Break(v),
    }
}
