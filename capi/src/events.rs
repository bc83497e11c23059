//! The C face of event sets: `perfbuf_events_*`. A set is an opaque
//! `struct perfbuf_events *`; its rings are read through a `struct
//! perf_buffer *` from `perfbuf_events_reader`, with every `perfbuf_*`
//! and `perf_buffer__*` reading function.

#![allow(non_camel_case_types, reason = "C names")]

use super::abi::{perf_buffer, perf_buffer_event_fn, perf_event_attr, perf_event_header};
use super::buffer::{Buffer, into_handle};
use super::callbacks::CCallbacks;
use super::decode::{
    c_decode_attr, decode_to_c, perf_event_attr_bytes, perfbuf_decode_attr, perfbuf_sample, record_bytes,
};
use super::ffi::{check_tail, null_with, out_sz, ret_errno, sized_in, write_sized};
use super::handle::{Handle, Kind};
use super::print;
use core::ffi::{CStr, c_char, c_int, c_void};
use perfbuf::events::format::Value;
use perfbuf::events::{Event, EventId, EventKind, EventSet, Sideband};
use perfbuf::{Error, PerfEventAttr, Result, Wakeup};
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

/// An event set (opaque): perf events on every CPU sharing one ring per
/// CPU. Made by `perfbuf_events_new`, freed by `perfbuf_events_free`.
pub struct perfbuf_events {
    _private: [u8; 0],
}

/// `perfbuf_events_opts.flags`: no rings (samples go nowhere unless a BPF
/// program attached to the events handles them: a profiler's case).
pub const PERFBUF_EVENTS_NO_RINGS: u32 = 1;
/// `perfbuf_events_opts.flags`: with `pids`, follow the children they
/// create after the events are added.
pub const PERFBUF_EVENTS_INHERIT: u32 = 2;

/// Options of `perfbuf_events_new` (set `sz = sizeof(struct
/// perfbuf_events_opts)`; NULL for the defaults).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct perfbuf_events_opts {
    /// Size of the caller's struct.
    pub sz: usize,
    /// With `cpu_cnt > 0`: only these CPUs (default: every online CPU);
    /// offline ones are skipped, and none online is ENODEV.
    pub cpus: *const c_int,
    /// Number of entries in `cpus`.
    pub cpu_cnt: c_int,
    /// Number of entries in `pids`.
    pub pid_cnt: c_int,
    /// With `pid_cnt > 0`: watch these processes (default: every task).
    pub pids: *const c_int,
    /// With `cgroup_cnt > 0`: watch the tasks of these cgroup (v2)
    /// directories and their descendants.
    pub cgroups: *const *const c_char,
    /// Number of entries in `cgroups`.
    pub cgroup_cnt: c_int,
    /// Wake the reader after this many samples (0 or 1: every sample).
    pub wakeup_events: u32,
    /// Data pages of each CPU's ring, a power of two (0: 8).
    pub page_cnt: usize,
    /// Or after this many bytes (non-zero overrides `wakeup_events`).
    pub wakeup_bytes: u32,
    /// With batching, no sample waits longer than this to be read (0: 10 ms).
    pub max_delay_ms: u32,
    /// `PERFBUF_EVENTS_*` bits.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// What every event added without its own attr (every kind but
    /// `PERFBUF_EVENT_RAW`) takes from this attr, or NULL: `sample_type`
    /// bits (added), the `exclude_*` flags, `inherit`, `sample_regs_user`,
    /// `sample_stack_user`, `sample_max_stack`, and for software and
    /// hardware events given no `period`, its `sample_period` (or with
    /// `freq`, `sample_freq`, and then their samples carry
    /// `PERF_SAMPLE_PERIOD`). Its `size` says how much is read. (Added
    /// after `reserved`: older callers' smaller `sz` gives none.)
    pub default_attr: *const perf_event_attr,
}

/// The `perfbuf_events_opts.flags` bits that name side-band records
/// (`PERFBUF_EVENTS_SB_*`: [`Sideband`]'s bits, two up).
const SB_FLAGS: u32 = Sideband::ALL.bits() << 2;

/// The side-band records the flags ask for.
fn sideband_of_flags(flags: u32) -> Sideband {
    Sideband::from_bits((flags & SB_FLAGS) >> 2).unwrap_or(Sideband::NONE)
}

/// `perfbuf_event_desc.kind`: a software event (`config` = `PERF_COUNT_SW_*`).
pub const PERFBUF_EVENT_SOFTWARE: u32 = 1;
/// `perfbuf_event_desc.kind`: a hardware event (`config` = `PERF_COUNT_HW_*`).
pub const PERFBUF_EVENT_HARDWARE: u32 = 2;
/// `perfbuf_event_desc.kind`: a tracepoint (`name` = `"subsystem:name"`).
pub const PERFBUF_EVENT_TRACEPOINT: u32 = 3;
/// `perfbuf_event_desc.kind`: a kprobe (`name` = the kernel function,
/// `offset` into it).
pub const PERFBUF_EVENT_KPROBE: u32 = 4;
/// `perfbuf_event_desc.kind`: a uprobe (`name` = the binary's path,
/// `symbol` = the function and `offset` bytes into it, or `symbol` NULL
/// and `offset` = a file offset).
pub const PERFBUF_EVENT_UPROBE: u32 = 5;
/// `perfbuf_event_desc.kind`: the caller's `attr`.
pub const PERFBUF_EVENT_RAW: u32 = 6;

/// `perfbuf_event_desc.flags`: a return probe (kretprobe, uretprobe).
pub const PERFBUF_EVENT_F_RETPROBE: u32 = 1;
/// `perfbuf_event_desc.flags`: a hardware event falls back to the
/// software event `fallback_config` where it cannot be opened (EOPNOTSUPP,
/// ENOENT, ENODEV, EINVAL, EACCES); `perfbuf_events_info` tells.
pub const PERFBUF_EVENT_F_FALLBACK: u32 = 2;
/// `perfbuf_event_desc.flags`: `period` is a frequency in Hz (the kernel
/// adjusts the period; `PERF_SAMPLE_PERIOD` is added, so that each sample
/// says what it stands for).
pub const PERFBUF_EVENT_F_FREQ: u32 = 4;
/// `perfbuf_event_desc.flags`: a counter group's leader.
pub const PERFBUF_EVENT_F_GROUP_LEADER: u32 = 8;
/// `perfbuf_event_desc.flags`: a member of the group of event `leader`.
pub const PERFBUF_EVENT_F_MEMBER: u32 = 16;
/// `perfbuf_event_desc.flags`: enabled as it is added (a failure to
/// enable fails the add, with nothing left open).
pub const PERFBUF_EVENT_F_ENABLED: u32 = 32;
const EVENT_FLAGS: u32 = 63;

/// An event to add with `perfbuf_events_add` (set `sz`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct perfbuf_event_desc {
    /// Size of the caller's struct.
    pub sz: usize,
    /// `PERFBUF_EVENT_*` kind.
    pub kind: u32,
    /// `PERFBUF_EVENT_F_*` bits.
    pub flags: u32,
    /// Software and hardware events: `PERF_COUNT_SW_*` / `PERF_COUNT_HW_*`.
    pub config: u64,
    /// With `PERFBUF_EVENT_F_FALLBACK`: the software event to open
    /// instead (`PERF_COUNT_SW_CPU_CLOCK` is 0).
    pub fallback_config: u64,
    /// Tracepoint `"subsystem:name"`, kprobe function, or uprobe binary.
    pub name: *const c_char,
    /// Uprobe: the function (NULL: `offset` is a file offset).
    pub symbol: *const c_char,
    /// Kprobe, and uprobe with `symbol`: bytes into the function (an
    /// instruction's first byte; past a uprobe's function end: -EINVAL).
    /// Uprobe without `symbol`: the file offset. A return probe goes at the
    /// function's entry: a uretprobe with `symbol` and an offset is -EINVAL
    /// (the probed program would crash); without `symbol`, `offset` must be
    /// a function's first byte.
    pub offset: u64,
    /// Uprobe: file offset of a USDT semaphore (0: none).
    pub ref_ctr_offset: u64,
    /// A sample every `period` occurrences, or `period` Hz with
    /// `PERFBUF_EVENT_F_FREQ`; 0: the kind's default (tracing events
    /// sample every hit; software and hardware events only count).
    pub period: u64,
    /// More `PERF_SAMPLE_*` bits beyond the set's own (`IDENTIFIER | IP |
    /// TID | TIME | CPU`; tracing events add `RAW`).
    pub sample_type: u64,
    /// An ftrace filter for tracing events, or NULL.
    pub filter: *const c_char,
    /// `PERFBUF_EVENT_RAW`: the attr (its `size` says how much is read).
    pub attr: *const perf_event_attr,
    /// With `PERFBUF_EVENT_F_MEMBER`: the leader's id.
    pub leader: c_int,
    /// Reserved, 0.
    pub reserved: c_int,
    /// Kprobes and uprobes: fetch arguments in the kernel's dynamic-event
    /// syntax (`"fd=%di:s32 path=+0(%si):string ret=$retval:s64"`), or
    /// NULL. With arguments the probe is made through tracefs
    /// (`kprobe_events`, `uprobe_events`) in a group `perfbuf_<pid>_<pidns>_<n>`
    /// and opened as its tracepoint: `perfbuf_events_field` decodes the
    /// values by name. It is deleted with its event or set, and the next
    /// set deletes the groups of processes that are gone. A definition the
    /// kernel rejects is -EINVAL, with the kernel's complaint in
    /// `perfbuf_last_error`. Without arguments tracefs is not written.
    /// (Added after `reserved`: callers with an older header pass a
    /// smaller `sz` and get none.)
    pub args: *const c_char,
}

/// What `perfbuf_events_info` reports (set `sz`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct perfbuf_event_info {
    /// Size of the caller's struct.
    pub sz: usize,
    /// The `PERFBUF_EVENT_*` kind opened: `PERFBUF_EVENT_SOFTWARE` for a
    /// hardware event that fell back.
    pub kind: u32,
    /// `perf_event_attr.type` as opened.
    pub attr_type: u32,
    /// `perf_event_attr.config` as opened.
    pub config: u64,
    /// The hardware event's errno when it fell back to software, else 0.
    pub fallback_errno: c_int,
    /// Kernel events open for it (CPUs × targets).
    pub instances: u32,
    /// Its samples' `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// CPUs it is open on.
    pub cpu_cnt: u32,
    /// 1 if enabled.
    pub enabled: u32,
    /// 1 if a BPF program is attached.
    pub bpf_attached: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// For an event on a tracepoint (a tracepoint, a probe with arguments,
    /// a raw tracepoint attr): how many BPF programs others attached to the
    /// tracepoint. The kernel runs them on every hit, and where one returns
    /// 0 it drops the hit for every perf event on the tracepoint, this
    /// set's included: its samples vanish. Each is also warned about once
    /// (`perfbuf_set_print`); `perfbuf_events_bpf_progs` names them.
    /// (Added after `reserved`: older callers' smaller `sz` gets none.)
    pub other_bpf_progs: u32,
    /// The first of them's id (0: none).
    pub other_bpf_prog_id: u32,
}

/// A BPF program on an event's tracepoint (`perfbuf_events_bpf_progs`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct perfbuf_bpf_prog {
    /// Its id (`bpftool prog show id ID`).
    pub id: u32,
    /// 1 if this set attached it (`perfbuf_events_attach_bpf`).
    pub ours: u32,
    /// The name it was loaded with, NUL-terminated; empty when the kernel
    /// would not say (reading it needs CAP_SYS_ADMIN).
    pub name: [c_char; 16],
}

/// Times of a `perfbuf_events_read` (set `sz`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct perfbuf_counts {
    /// Size of the caller's struct.
    pub sz: usize,
    /// Nanoseconds the event was enabled (summed over CPUs and targets).
    pub time_enabled: u64,
    /// Nanoseconds it was counting (less when the PMU was shared).
    pub time_running: u64,
}

/// One count of a `perfbuf_events_read`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct perfbuf_count {
    /// The event counted.
    pub event: c_int,
    /// Reserved, 0.
    pub reserved: c_int,
    /// Its raw count.
    pub value: u64,
}

/// `perfbuf_field.kind`: a signed integer in `i`.
pub const PERFBUF_FIELD_INT: u32 = 1;
/// `perfbuf_field.kind`: an unsigned integer (or pointer) in `u`.
pub const PERFBUF_FIELD_UINT: u32 = 2;
/// `perfbuf_field.kind`: a string, `len` bytes at `data` (cut at the
/// first NUL, which `len` excludes; not necessarily NUL-terminated).
pub const PERFBUF_FIELD_STR: u32 = 3;
/// `perfbuf_field.kind`: bytes of an array or struct, `len` at `data`.
pub const PERFBUF_FIELD_BYTES: u32 = 4;

/// A tracepoint field decoded by `perfbuf_events_field` (set `sz`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct perfbuf_field {
    /// Size of the caller's struct.
    pub sz: usize,
    /// `PERFBUF_FIELD_*`.
    pub kind: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// `PERFBUF_FIELD_INT`: the value.
    pub i: i64,
    /// `PERFBUF_FIELD_UINT`: the value.
    pub u: u64,
    /// `PERFBUF_FIELD_STR` / `_BYTES`: the data, inside the raw record.
    pub data: *const c_void,
    /// `PERFBUF_FIELD_STR` / `_BYTES`: its length.
    pub len: usize,
}

impl Kind for EventSet {
    /// "PERFEVS1".
    const MAGIC: u64 = 0x5045_5246_4556_5331;
    const NOT_OURS: &'static str = "not a perfbuf_events set (freed?)";
}

/// # Safety
/// `set` is NULL or a pointer from `perfbuf_events_new`, not yet freed,
/// and no other call uses it concurrently.
pub(crate) unsafe fn set_mut<'a>(set: *mut perfbuf_events) -> Result<&'a mut EventSet> {
    // SAFETY: per this function's contract.
    unsafe { Handle::<EventSet>::value_mut(set) }
}

/// # Safety
/// As for [`set_mut`].
pub(crate) unsafe fn set_ref<'a>(set: *const perfbuf_events) -> Result<&'a EventSet> {
    // SAFETY: per this function's contract.
    unsafe { Handle::<EventSet>::value_ref(set) }
}

/// The caller's struct, zero-extended to ours (older headers) or checked
/// to have zeros beyond it (newer ones).
///
/// # Safety
/// `ptr` is NULL or a `T`-like struct starting with `size_t sz`, readable
/// for `sz` bytes; every field of `T` is valid when all-zero.
unsafe fn read_struct<T: Copy>(ptr: *const c_void, what: &'static str) -> Result<Option<T>> {
    // SAFETY: per this function's contract.
    let Some(bytes) = (unsafe { sized_in(ptr) })? else { return Ok(None) };
    check_tail(bytes, size_of::<T>(), what)?;
    // SAFETY: all-zero is a valid T (contract: integers and raw pointers).
    let mut value: T = unsafe { core::mem::zeroed() };
    let n = bytes.len().min(size_of::<T>());
    // SAFETY: `value` is a whole T and `bytes` holds n <= size_of::<T>() bytes.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut value as *mut T).cast::<u8>(), n) };
    Ok(Some(value))
}

/// A NUL-terminated string argument.
///
/// # Safety
/// `s` is NULL or NUL-terminated.
unsafe fn c_str<'a>(s: *const c_char, what: &'static str) -> Result<&'a str> {
    // SAFETY: per this function's contract.
    let s = unsafe { s.as_ref().map(|p| CStr::from_ptr(p)) }.ok_or_else(|| print::invalid(what))?;
    s.to_str().map_err(|_| print::invalid(what))
}

/// `n` elements at `ptr` (none for `n <= 0`).
///
/// # Safety
/// With `n > 0`, `ptr` is NULL or holds `n` elements.
unsafe fn list<'a, T>(ptr: *const T, n: c_int, what: &'static str) -> Result<&'a [T]> {
    if n <= 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(print::invalid(what));
    }
    // SAFETY: non-NULL with n elements (contract).
    Ok(unsafe { core::slice::from_raw_parts(ptr, n as usize) })
}

/// Opens an event set: one ring per CPU (unless `PERFBUF_EVENTS_NO_RINGS`),
/// no events yet. Returns NULL with errno on failure (ENODEV: none of the
/// CPUs is online), with nothing left open.
///
/// # Safety
/// `opts` is NULL or a `struct perfbuf_events_opts` readable for
/// `opts->sz` bytes whose arrays hold their counts of entries (strings
/// NUL-terminated), and whose `default_attr` is NULL or readable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_new(opts: *const perfbuf_events_opts) -> *mut perfbuf_events {
    // SAFETY: per this function's contract.
    let built = unsafe { builder_of(opts) }.and_then(|b| b.build()).and_then(|set| Handle::into_raw(set, ()));
    built.unwrap_or_else(|e| null_with(&e))
}

/// # Safety
/// As for [`perfbuf_events_new`].
unsafe fn builder_of(opts: *const perfbuf_events_opts) -> Result<perfbuf::events::EventSetBuilder> {
    let mut b = EventSet::builder();
    // SAFETY: per the caller's contract; the struct is ints and pointers.
    let Some(o) =
        (unsafe { read_struct::<perfbuf_events_opts>(opts.cast(), "perfbuf_events_opts: bad size") })?
    else {
        return Ok(b);
    };
    let known = PERFBUF_EVENTS_NO_RINGS | PERFBUF_EVENTS_INHERIT | SB_FLAGS;
    if o.flags & !known != 0 || o.reserved != 0 {
        return Err(print::invalid("perfbuf_events_opts: unknown flags"));
    }
    // SAFETY: per the caller's contract, each array holds its count.
    let (cpus, pids, cgroups) = unsafe {
        (
            list(o.cpus, o.cpu_cnt, "perfbuf_events_opts: cpu_cnt > 0 needs cpus")?,
            list(o.pids, o.pid_cnt, "perfbuf_events_opts: pid_cnt > 0 needs pids")?,
            list(o.cgroups, o.cgroup_cnt, "perfbuf_events_opts: cgroup_cnt > 0 needs cgroups")?,
        )
    };
    if !cpus.is_empty() {
        if cpus.iter().any(|&c| c < 0) {
            return Err(print::invalid("perfbuf_events_opts: a negative CPU"));
        }
        b = b.cpus(&cpus.iter().map(|&c| c as u32).collect::<Vec<_>>());
    }
    for &pid in pids {
        b = b.pid(pid);
    }
    for &dir in cgroups {
        // SAFETY: per the caller's contract, each entry is a C string.
        let dir = unsafe { c_str(dir, "perfbuf_events_opts: a NULL cgroup") }?;
        b = b.cgroup(OsStr::from_bytes(dir.as_bytes()));
    }
    let pages = match (o.flags & PERFBUF_EVENTS_NO_RINGS != 0, o.page_cnt) {
        (true, _) => 0,
        (false, 0) => 8,
        (false, n) => n,
    };
    b = b.pages(pages).inherit(o.flags & PERFBUF_EVENTS_INHERIT != 0);
    b = b.sideband(sideband_of_flags(o.flags));
    b = b.wakeup(match (o.wakeup_events, o.wakeup_bytes) {
        (_, n) if n > 0 => Wakeup::Bytes(n),
        (0 | 1, _) => Wakeup::EveryRecord,
        (n, _) => Wakeup::Records(n),
    });
    if !o.default_attr.is_null() {
        // SAFETY: per the caller's contract, a readable attr.
        b = b.default_attr(unsafe { attr_of(o.default_attr) }?);
    }
    if o.max_delay_ms > super::opts::MAX_MAX_DELAY_MS {
        return Err(print::invalid("perfbuf_events_opts: max_delay_ms is above 60000"));
    }
    if o.max_delay_ms > 0 {
        b = b.max_delay(Duration::from_millis(o.max_delay_ms.into()));
    }
    Ok(b)
}

/// Frees a set: detaches programs, closes every event and ring (a reader
/// from `perfbuf_events_reader` keeps its rings until freed itself).
///
/// # Safety
/// `set` is NULL or a live set; it is dangling afterwards.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_free(set: *mut perfbuf_events) {
    // SAFETY: per this function's contract.
    drop(unsafe { Handle::<EventSet>::take(set) });
}

/// The event `desc` describes, in Rust terms.
///
/// # Safety
/// `desc`'s strings are NULL or NUL-terminated; its `attr` is NULL or a
/// readable `struct perf_event_attr`.
unsafe fn event_of(desc: &perfbuf_event_desc) -> Result<Event> {
    if desc.flags & !EVENT_FLAGS != 0 || desc.reserved != 0 {
        return Err(print::invalid("perfbuf_event_desc: unknown flags"));
    }
    let retprobe = desc.flags & PERFBUF_EVENT_F_RETPROBE != 0;
    // SAFETY: per this function's contract.
    let name = || unsafe { c_str(desc.name, "perfbuf_event_desc: this kind needs a name") };
    let mut event = match desc.kind {
        PERFBUF_EVENT_SOFTWARE => Event::software(desc.config),
        PERFBUF_EVENT_HARDWARE if desc.flags & PERFBUF_EVENT_F_FALLBACK != 0 => {
            Event::hardware(desc.config).or_software(desc.fallback_config)
        }
        PERFBUF_EVENT_HARDWARE => Event::hardware(desc.config),
        PERFBUF_EVENT_TRACEPOINT => Event::tracepoint(name()?),
        PERFBUF_EVENT_KPROBE if retprobe => Event::kretprobe(name()?).offset(desc.offset),
        PERFBUF_EVENT_KPROBE => Event::kprobe(name()?).offset(desc.offset),
        PERFBUF_EVENT_UPROBE => {
            let path = OsStr::from_bytes(name()?.as_bytes());
            let probe = if desc.symbol.is_null() {
                if retprobe {
                    Event::uretprobe_at(path, desc.offset)
                } else {
                    Event::uprobe_at(path, desc.offset)
                }
            } else {
                // SAFETY: per this function's contract.
                let symbol = unsafe { c_str(desc.symbol, "perfbuf_event_desc: bad symbol") }?;
                let probe =
                    if retprobe { Event::uretprobe(path, symbol) } else { Event::uprobe(path, symbol) };
                probe.offset(desc.offset)
            };
            probe.ref_ctr_offset(desc.ref_ctr_offset)
        }
        // SAFETY: per this function's contract.
        PERFBUF_EVENT_RAW => Event::raw(unsafe { attr_of(desc.attr) }?),
        _ => return Err(print::invalid("perfbuf_event_desc: unknown kind")),
    };
    match (desc.period, desc.flags & PERFBUF_EVENT_F_FREQ != 0) {
        (0, true) => return Err(print::invalid("perfbuf_event_desc: a frequency of 0")),
        (0, false) => {}
        (hz, true) => event = event.frequency(hz),
        (n, false) => event = event.period(n),
    }
    event = event.sample(desc.sample_type);
    if !desc.filter.is_null() {
        // SAFETY: per this function's contract.
        event = event.filter(unsafe { c_str(desc.filter, "perfbuf_event_desc: bad filter") }?);
    }
    if desc.flags & PERFBUF_EVENT_F_GROUP_LEADER != 0 {
        event = event.group_leader();
    }
    if desc.flags & PERFBUF_EVENT_F_MEMBER != 0 {
        event = event.member_of(event_id(desc.leader)?);
    }
    if desc.flags & PERFBUF_EVENT_F_ENABLED != 0 {
        event = event.enabled();
    }
    if !desc.args.is_null() {
        // SAFETY: per this function's contract.
        event = event.args(unsafe { c_str(desc.args, "perfbuf_event_desc: bad args") }?);
    }
    Ok(event)
}

/// The caller's attr, as much as its `size` says (zero-extended).
///
/// # Safety
/// `attr` is NULL or a readable `struct perf_event_attr`.
unsafe fn attr_of(attr: *const perf_event_attr) -> Result<PerfEventAttr> {
    // SAFETY: per this function's contract.
    let bytes = unsafe { perf_event_attr_bytes(attr) }?;
    let mut out = PerfEventAttr::default();
    let n = bytes.len().min(size_of::<PerfEventAttr>());
    // SAFETY: `out` is a whole PerfEventAttr (plain integers) and `bytes`
    // holds n <= its size bytes.
    unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), (&mut out as *mut PerfEventAttr).cast(), n) };
    Ok(out)
}

/// Changes the ftrace filter of tracing event `ev` (NULL clears it). The
/// kernel sets a perf event's filter once, so the event is opened again
/// on every CPU and target and takes the old one's place (if enabled, a
/// hit while CPUs switch is not seen). Returns 0, or -errno with nothing
/// changed (EINVAL: the kernel refused the filter; EBUSY: the event has a
/// BPF program or is in a counter group).
///
/// # Safety
/// `set` is NULL or a live set; `filter` is NULL or NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_set_filter(
    set: *mut perfbuf_events,
    ev: c_int,
    filter: *const c_char,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_mut(set) }?;
        let filter = match filter.is_null() {
            true => None,
            // SAFETY: per this function's contract.
            false => Some(unsafe { c_str(filter, "perfbuf_events_set_filter: a filter that is not UTF-8") }?),
        };
        set.set_filter(event_id(ev)?, filter).map(|()| 0)
    })())
}

fn event_id(ev: c_int) -> Result<EventId> {
    u32::try_from(ev).map(EventId::from_raw).map_err(|_| print::invalid("a negative event id"))
}

/// Adds an event to the set: opened on every CPU and target, disabled,
/// its samples going to each CPU's ring. Returns its id (>= 0), or
/// -errno with nothing left open (ENOENT: no such tracepoint, symbol or
/// binary, or no `kprobe_events` for a kprobe with arguments; EOPNOTSUPP:
/// the kernel lacks the PMU, e.g. kprobes without CONFIG_KPROBES; EINVAL:
/// a bad filter, or arguments the kernel rejects; `perfbuf_last_error`
/// names the event, and gives the kernel's complaint).
///
/// # Safety
/// `set` is NULL or a live set; `desc` is NULL or a `struct
/// perfbuf_event_desc` readable for `desc->sz` bytes with NULL or
/// NUL-terminated strings and a NULL or readable `attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_add(
    set: *mut perfbuf_events,
    desc: *const perfbuf_event_desc,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_mut(set) }?;
        // SAFETY: per this function's contract; the struct is ints and pointers.
        let desc = unsafe { read_struct::<perfbuf_event_desc>(desc.cast(), "perfbuf_event_desc: bad size") }?
            .ok_or(Error::INVAL)?;
        // SAFETY: per this function's contract.
        let event = unsafe { event_of(&desc) }?;
        Ok(set.add(&event)?.get() as c_int)
    })())
}

/// Removes event `ev` (EBUSY for a group leader that still has members).
///
/// # Safety
/// `set` is NULL or a live set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_remove(set: *mut perfbuf_events, ev: c_int) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { set_mut(set) }.and_then(|s| s.remove(event_id(ev)?)).map(|()| 0))
}

/// Enables event `ev` on every CPU and target (-1: every event). On
/// failure, what this call enabled is disabled again.
///
/// # Safety
/// `set` is NULL or a live set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_enable(set: *mut perfbuf_events, ev: c_int) -> c_int {
    // SAFETY: per this function's contract.
    let set = unsafe { set_mut(set) };
    ret_errno(set.and_then(|s| if ev == -1 { s.enable_all() } else { s.enable(event_id(ev)?) }).map(|()| 0))
}

/// Disables event `ev` (-1: every event).
///
/// # Safety
/// `set` is NULL or a live set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_disable(set: *mut perfbuf_events, ev: c_int) -> c_int {
    // SAFETY: per this function's contract.
    let set = unsafe { set_mut(set) };
    ret_errno(set.and_then(|s| if ev == -1 { s.disable_all() } else { s.disable(event_id(ev)?) }).map(|()| 0))
}

/// Attaches BPF program `prog_fd` to event `ev` on every CPU and target
/// (a BPF link each; `PERF_EVENT_IOC_SET_BPF` before Linux 5.15). Attach
/// before `perfbuf_events_enable`. Returns 0 or -errno with no link left
/// (EINVAL: the program's type does not suit the event; EEXIST: one is
/// attached already).
///
/// # Safety
/// `set` is NULL or a live set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_attach_bpf(
    set: *mut perfbuf_events,
    ev: c_int,
    prog_fd: c_int,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_mut(set) }?;
        if prog_fd < 0 {
            return Err(Error::invalid("a negative program fd").with_errno(libc::EBADF));
        }
        // SAFETY: the fd is the caller's, open for this call (the kernel
        // checks it is a BPF program).
        let prog = unsafe { BorrowedFd::borrow_raw(prog_fd) };
        set.attach_bpf(event_id(ev)?, prog).map(|()| 0)
    })())
}

/// Fills `*info` (set `info->sz` first) with what was opened for `ev`.
///
/// # Safety
/// `set` is NULL or a live set; `info` is NULL or writable for `info->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_info(
    set: *const perfbuf_events,
    ev: c_int,
    info: *mut perfbuf_event_info,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let (set, sz) = unsafe { (set_ref(set)?, out_sz(info.cast(), size_of::<usize>())?) };
        let i = set.info(event_id(ev)?)?;
        let value = perfbuf_event_info {
            sz,
            kind: match i.kind {
                EventKind::Software => PERFBUF_EVENT_SOFTWARE,
                EventKind::Hardware => PERFBUF_EVENT_HARDWARE,
                EventKind::Tracepoint => PERFBUF_EVENT_TRACEPOINT,
                EventKind::Kprobe => PERFBUF_EVENT_KPROBE,
                EventKind::Uprobe => PERFBUF_EVENT_UPROBE,
                _ => PERFBUF_EVENT_RAW,
            },
            attr_type: i.type_,
            config: i.config,
            fallback_errno: i.fallback.map_or(0, |e| e.errno()),
            instances: i.instances as u32,
            sample_type: i.sample_type,
            cpu_cnt: i.cpus.len() as u32,
            enabled: i.enabled.into(),
            bpf_attached: i.bpf_attached.into(),
            reserved: 0,
            other_bpf_progs: i.bpf_programs.iter().filter(|p| !p.ours).count() as u32,
            other_bpf_prog_id: i.bpf_programs.iter().find(|p| !p.ours).map_or(0, |p| p.id),
        };
        // SAFETY: `info` is writable for `sz` bytes (contract).
        unsafe { write_sized(info, &value, sz) };
        Ok(0)
    })())
}

/// The fd of kernel event `idx` of `ev` (0 <= idx < `info.instances`; CPU
/// by CPU, each CPU's targets in order), for the caller's own ioctls. The
/// set keeps owning it.
///
/// # Safety
/// `set` is NULL or a live set.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_fd(set: *const perfbuf_events, ev: c_int, idx: usize) -> c_int {
    // SAFETY: per this function's contract.
    ret_errno(unsafe { set_ref(set) }.and_then(|s| s.instance_fd(event_id(ev)?, idx)))
}

/// Writes the BPF programs the kernel runs on every hit of event `ev`'s
/// tracepoint (none for events not on a tracepoint) to `progs` (at most
/// `cnt`); returns how many there are. Those this set did not attach may
/// drop its samples (see `perfbuf_event_info.other_bpf_progs`).
///
/// # Safety
/// `set` is NULL or a live set; `progs` is NULL or writable for `cnt` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_bpf_progs(
    set: *const perfbuf_events,
    ev: c_int,
    progs: *mut perfbuf_bpf_prog,
    cnt: usize,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_ref(set) }?;
        let list = set.info(event_id(ev)?)?.bpf_programs;
        if !progs.is_null() {
            for (i, p) in list.iter().take(cnt).enumerate() {
                let mut out = perfbuf_bpf_prog { id: p.id, ours: p.ours.into(), name: [0; 16] };
                // Cut to 15 bytes: the kernel's names are, and the last stays NUL.
                for (to, &from) in out.name.iter_mut().zip(p.name.as_bytes().iter().take(15)) {
                    *to = from as c_char;
                }
                // SAFETY: `progs` is writable for `cnt` > i entries (contract).
                unsafe { progs.add(i).write(out) };
            }
        }
        Ok(list.len() as c_int)
    })())
}

/// Writes the set's CPUs (`offline` = 0) or the offline CPUs it skipped
/// (`offline` = 1) to `cpus` (at most `cnt`); returns how many there are.
///
/// # Safety
/// `set` is NULL or a live set; `cpus` is NULL or writable for `cnt` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_cpus(
    set: *const perfbuf_events,
    offline: c_int,
    cpus: *mut c_int,
    cnt: usize,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_ref(set) }?;
        let list = if offline != 0 { set.offline_cpus().to_vec() } else { set.cpus() };
        if !cpus.is_null() {
            for (i, &c) in list.iter().take(cnt).enumerate() {
                // SAFETY: `cpus` is writable for `cnt` > i ints (contract).
                unsafe { cpus.add(i).write(c as c_int) };
            }
        }
        Ok(list.len() as c_int)
    })())
}

/// Reads event `ev`'s counts on `cpu` (-1: summed over every CPU and
/// target): times into `*times` (set `times->sz`; may be NULL), counts
/// into `values` (at most `cnt`: the event, then a group leader's members
/// in the order they were added). Returns how many counts there are.
///
/// # Safety
/// `set` is NULL or a live set; `times` is NULL or writable for
/// `times->sz` bytes; `values` is NULL or writable for `cnt` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_read(
    set: *const perfbuf_events,
    ev: c_int,
    cpu: c_int,
    times: *mut perfbuf_counts,
    values: *mut perfbuf_count,
    cnt: usize,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_ref(set) }?;
        let id = event_id(ev)?;
        let counts = match cpu {
            -1 => set.read(id)?,
            c if c >= 0 => set.read_cpu(id, c as u32)?,
            _ => return Err(print::invalid("cpu is -1 or a CPU id")),
        };
        if !times.is_null() {
            // SAFETY: per this function's contract.
            let sz = unsafe { out_sz(times.cast(), size_of::<usize>()) }?;
            let value =
                perfbuf_counts { sz, time_enabled: counts.time_enabled, time_running: counts.time_running };
            // SAFETY: `times` is writable for `sz` bytes (contract).
            unsafe { write_sized(times, &value, sz) };
        }
        if !values.is_null() {
            for (i, &(event, value)) in counts.values.iter().take(cnt).enumerate() {
                let c = perfbuf_count { event: event.get() as c_int, reserved: 0, value };
                // SAFETY: `values` is writable for `cnt` > i entries (contract).
                unsafe { values.add(i).write(c) };
            }
        }
        Ok(counts.values.len() as c_int)
    })())
}

/// A reader of the set's rings: a `struct perf_buffer *` for every
/// `perfbuf_*` / `perf_buffer__*` reading function (poll, consume, batch,
/// `perfbuf_set_order` with `PERFBUF_ORDER_SAMPLE_TIME`, stats...), freed
/// with `perfbuf_free`. `event_cb` gets each record whole; decode it with
/// `perfbuf_events_decode` (or read the set with
/// `perfbuf_events_decoded_reader`, whose callback gets every record
/// decoded). Once per set (EBUSY after); EINVAL for a set without rings.
/// Returns NULL with errno on failure.
///
/// # Safety
/// `set` is NULL or a live set; `event_cb` and `ctx` as for
/// `perf_buffer__new_raw`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_reader(
    set: *mut perfbuf_events,
    event_cb: perf_buffer_event_fn,
    ctx: *mut c_void,
) -> *mut perf_buffer {
    // SAFETY: the callbacks' contract is this function's.
    let callbacks = unsafe { CCallbacks::raw(event_cb, ctx) };
    into_handle((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_mut(set) }?;
        if event_cb.is_none() {
            return Err(print::invalid("perfbuf_events_reader needs an event_cb"));
        }
        reader_of(set, callbacks)
    })())
}

/// The reader of `set`'s rings, delivering to `callbacks`.
pub(crate) fn reader_of(set: &mut EventSet, callbacks: CCallbacks) -> Result<Buffer> {
    set.reader_with(callbacks).map_err(|e| match e.errno() {
        // A set without rings, said in the C header's words.
        libc::EINVAL => Error::invalid("the event set has no rings (made with PERFBUF_EVENTS_NO_RINGS)"),
        _ => e,
    })
}

/// Decodes record `rec` (`rec_len` readable bytes) of the set's rings
/// into `*out` (set `out->sz`; see `perfbuf_decode`), with the layout of
/// the event it came from. Returns that event's id (>= 0), -ENOENT for a
/// record of no event in the set (removed meanwhile), or another -errno
/// as `perfbuf_decode`. A `PERF_RECORD_LOST` comes back as the id of the
/// event whose records did not fit (the kernel writes the loss with that
/// event's id), with `out->lost` the number lost; -ENOENT if it is of no
/// event (removed since, or a report `perfbuf_drain_final` made, id 0),
/// with only `record_type`, `misc`, `size`, `lost_id` and `lost` set in
/// `*out` (`perfbuf_ring_stats` counts every loss either way). Event ids are dense: 0, 1, 2... in the
/// order of successful adds, never reused (a removed id stays a gap).
///
/// # Safety
/// `set` is NULL or a live set; `rec` is NULL or readable for `rec_len`
/// bytes; `out` is NULL or writable for `out->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_decode(
    set: *const perfbuf_events,
    rec: *const perf_event_header,
    rec_len: usize,
    out: *mut perfbuf_sample,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let (set, rec) = unsafe { (set_ref(set)?, record_bytes(rec, rec_len)?) };
        let decoder = set.decoder();
        // SAFETY: `sz` is out's first field (contract).
        let sz = unsafe { out_sz(out.cast(), super::decode::SAMPLE_MIN_SZ) };
        let Some(event) = decoder.event_of(rec) else {
            // A loss keeps its count even when no event is left to name.
            if let Some(value) = sz.ok().and_then(|sz| super::decode::lost_only(rec, sz)) {
                // SAFETY: `out` is writable for `out->sz` = `value.sz` bytes.
                unsafe { write_sized(out, &value, value.sz) };
            }
            return Err(Error::from_errno(libc::ENOENT));
        };
        let layout = set.decode_attr(event)?;
        let (value, ret) = decode_to_c(Ok(rec), Ok(layout), sz);
        if let Some(value) = value {
            // SAFETY: `out` is writable for `out->sz` = `value.sz` bytes.
            unsafe { write_sized(out, &value, value.sz) };
        }
        ret.map(|_| event.get() as c_int)
    })())
}

/// Fills `*out` (set `out->sz`) with the record layout of event `ev`, for
/// `perfbuf_decode`.
///
/// # Safety
/// `set` is NULL or a live set; `out` is NULL or writable for `out->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_decode_attr(
    set: *const perfbuf_events,
    ev: c_int,
    out: *mut perfbuf_decode_attr,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let (set, sz) = unsafe { (set_ref(set)?, out_sz(out.cast(), size_of::<usize>())?) };
        let value = c_decode_attr(&set.decode_attr(event_id(ev)?)?, sz);
        // SAFETY: `out` is writable for `sz` bytes (contract).
        unsafe { write_sized(out, &value, sz) };
        Ok(0)
    })())
}

/// Decodes field `name` of tracepoint event `ev` from a sample's raw data
/// (`perfbuf_sample.raw` / `raw_size`) into `*out` (set `out->sz`), by
/// the tracepoint's format file. Returns 0, -ENOENT (no such field, or
/// `ev` is not a tracepoint) or -EBADMSG (the data is too short for it).
///
/// # Safety
/// `set` is NULL or a live set; `raw` is NULL or readable for `raw_size`
/// bytes; `name` is NULL or NUL-terminated; `out` is NULL or writable for
/// `out->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_field(
    set: *const perfbuf_events,
    ev: c_int,
    raw: *const c_void,
    raw_size: usize,
    name: *const c_char,
    out: *mut perfbuf_field,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let (set, sz, name) = unsafe {
            (
                set_ref(set)?,
                out_sz(out.cast(), size_of::<usize>())?,
                c_str(name, "perfbuf_events_field: NULL name")?,
            )
        };
        if raw.is_null() {
            return Err(Error::INVAL);
        }
        // SAFETY: non-NULL and readable for raw_size bytes (contract).
        let raw = unsafe { core::slice::from_raw_parts(raw.cast::<u8>(), raw_size) };
        let format = set.format(event_id(ev)?)?.ok_or(Error::from_errno(libc::ENOENT))?;
        let field = format.field(name).ok_or(Error::from_errno(libc::ENOENT))?;
        let value = field.decode(raw).map_err(|_| Error::from_errno(libc::EBADMSG))?;
        let mut f = perfbuf_field { sz, kind: 0, reserved: 0, i: 0, u: 0, data: core::ptr::null(), len: 0 };
        match value {
            Value::Signed(v) => (f.kind, f.i) = (PERFBUF_FIELD_INT, v),
            Value::Unsigned(v) => (f.kind, f.u) = (PERFBUF_FIELD_UINT, v),
            Value::Str(b) => (f.kind, f.data, f.len) = (PERFBUF_FIELD_STR, b.as_ptr().cast(), b.len()),
            Value::Bytes(b) => (f.kind, f.data, f.len) = (PERFBUF_FIELD_BYTES, b.as_ptr().cast(), b.len()),
        }
        // SAFETY: `out` is writable for `sz` bytes (contract).
        unsafe { write_sized(out, &f, sz) };
        Ok(0)
    })())
}

/// Copies the name of field `idx` of tracepoint event `ev` into `buf`
/// (`len` bytes, NUL-terminated, cut to fit), counting only the event's own
/// fields (not the `common_*` ones), in the order of its format file: with
/// `idx` from 0 until it returns -ENOENT a caller lists them all, as the
/// format the set parsed. Returns the name's length (a result `>= len`
/// means it was cut), -ENOENT past the last field or when `ev` is not a
/// tracepoint, or -EINVAL.
///
/// # Safety
/// `set` is NULL or a live set; with `len > 0`, `buf` is NULL or writable
/// for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_field_name(
    set: *const perfbuf_events,
    ev: c_int,
    idx: usize,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let set = unsafe { set_ref(set)? };
        if buf.is_null() && len > 0 {
            return Err(print::invalid("perfbuf_events_field_name: NULL buf"));
        }
        let format = set.format(event_id(ev)?)?.ok_or(Error::from_errno(libc::ENOENT))?;
        let name = format.event_fields().get(idx).ok_or(Error::from_errno(libc::ENOENT))?.name().as_bytes();
        if len > 0 {
            let n = name.len().min(len - 1);
            // SAFETY: `buf` is writable for `len > n` bytes (contract).
            let out = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), n + 1) };
            out[..n].copy_from_slice(&name[..n]);
            out[n] = 0;
        }
        c_int::try_from(name.len()).map_err(|_| Error::INVAL)
    })())
}

const _: () = {
    assert!(size_of::<perfbuf_events_opts>() == 80);
    assert!(size_of::<perfbuf_event_desc>() == 112);
};
