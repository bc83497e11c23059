//! The C ABI shared with libbpf: option structs, callback types, the
//! opaque handle, and the kernel's perf structures we read or build.
//!
//! The libbpf-compatible types are declared in `include/perfbuf.h` by hand
//! (guarded so the header can sit beside `<bpf/libbpf.h>`); the layouts
//! here are pinned by compile-time assertions against libbpf 1.x.

#![allow(non_camel_case_types, reason = "these are the C names libbpf callers use")]

use core::ffi::{c_char, c_int, c_void};
use core::mem::{offset_of, size_of};

/// Opaque handle returned by `perf_buffer__new` and `perf_buffer__new_raw`.
pub struct perf_buffer {
    _private: [u8; 0],
}

/// Opaque here: the kernel's `struct perf_event_attr` as the caller laid it
/// out (raw mode passes it through to `perf_event_open` untouched).
pub struct perf_event_attr {
    _private: [u8; 0],
}

/// Called for each `PERF_RECORD_SAMPLE`: `(ctx, cpu, data, size)`.
pub type perf_buffer_sample_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, cpu: c_int, data: *mut c_void, size: u32)>;

/// Called for each `PERF_RECORD_LOST`: `(ctx, cpu, lost_count)`.
pub type perf_buffer_lost_fn = Option<unsafe extern "C" fn(ctx: *mut c_void, cpu: c_int, cnt: u64)>;

/// Raw-mode callback: `(ctx, cpu, header) -> enum bpf_perf_event_ret`.
pub type perf_buffer_event_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, cpu: c_int, event: *mut perf_event_header) -> c_int>;

/// `enum bpf_perf_event_ret`: stop, success.
pub const LIBBPF_PERF_EVENT_DONE: c_int = 0;
/// `enum bpf_perf_event_ret`: keep going.
pub const LIBBPF_PERF_EVENT_CONT: c_int = -2;

/// libbpf ≥ 1.2 `struct perf_buffer_opts` (1.0/1.1 callers pass `sz = 8`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct perf_buffer_opts {
    /// Size of the caller's struct, for forward/backward compatibility.
    pub sz: usize,
    /// Wake up the reader every this many samples (0 means 1).
    pub sample_period: u32,
    _pad: u32,
}

/// libbpf 1.x `struct perf_buffer_raw_opts`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perf_buffer_raw_opts {
    /// Size of the caller's struct.
    pub sz: usize,
    /// Number of entries in `cpus` and `map_keys`; 0 means all CPUs.
    pub cpu_cnt: c_int,
    /// CPU ids to open events on.
    pub cpus: *mut c_int,
    /// Map keys to store each CPU's perf event fd under.
    pub map_keys: *mut c_int,
}

/// The kernel's `struct perf_event_header`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct perf_event_header {
    /// `PERF_RECORD_*`.
    pub type_: u32,
    /// Record-specific flags.
    pub misc: u16,
    /// Size of the whole record, header included.
    pub size: u16,
}

// Pin the layouts libbpf 1.x callers were compiled against (LP64).
const _: () = {
    assert!(size_of::<perf_buffer_opts>() == 16);
    assert!(offset_of!(perf_buffer_opts, sample_period) == 8);
    assert!(size_of::<perf_buffer_raw_opts>() == 32);
    assert!(offset_of!(perf_buffer_raw_opts, cpu_cnt) == 8);
    assert!(offset_of!(perf_buffer_raw_opts, cpus) == 16);
    assert!(offset_of!(perf_buffer_raw_opts, map_keys) == 24);
    assert!(size_of::<perf_event_header>() == 8);
};

/// `perfbuf_opts.flags`: overwritable rings. The kernel writes backward
/// into read-only rings and overwrites the oldest records; read them with
/// `perfbuf_snapshot` (or `perf_buffer__consume`), which pauses output
/// around the read and delivers what was written since the last read.
pub const PERFBUF_F_OVERWRITE: u32 = 1;

/// `perfbuf_opts.flags`: the fast mode (adaptive wake-ups; what
/// `PERFBUF_ADAPTIVE=1` turns on for `perf_buffer__new`). While a CPU's
/// rate is high, the kernel wakes the reader only when a quarter of a
/// spill ring is full, and a timer delivers the rest within about 1 ms. Needs
/// per-record wake-ups and forward rings. See README for the callers it
/// does not suit.
pub const PERFBUF_F_ADAPTIVE: u32 = 2;

/// `perfbuf_opts.flags`: exact lost figures. Each CPU's event counts the
/// records it could not write (`PERF_FORMAT_LOST`, Linux 6.0+; without it
/// nothing changes), so `lost` in `perfbuf_ring_stats` includes what the
/// kernel has not yet written as a `PERF_RECORD_LOST`, and
/// `perfbuf_drain_final` reports it. A `read()` of `perf_buffer__buffer_fd`
/// then returns 16 bytes (count, lost) instead of libbpf's 8, which is why
/// it is not the default. With `PERFBUF_F_ADAPTIVE` the fast mode's own
/// events' losses count too.
pub const PERFBUF_F_COUNT_LOST: u32 = 4;

/// `perfbuf_opts.flags`: read only the CPUs online now, for good, as
/// libbpf does. Without it, `perfbuf_new` serves CPUs that come and go: a
/// CPU that comes online gets its event, ring and map slot within a second
/// (the kernel's uevent wakes `perf_buffer__poll`; `perf_buffer__buffer_cnt`
/// grows), a CPU that goes offline has its ring read and kept, and one that
/// comes back gets a fresh event (the kernel leaves the old one dead:
/// outputs on that CPU fail with `-EOPNOTSUPP` until then). Behind
/// `perf_buffer__new` that is libbpf's way unless `PERFBUF_HOTPLUG=1` or the
/// fast mode asks for it.
pub const PERFBUF_F_NO_HOTPLUG: u32 = 8;

/// `perfbuf_opts.flags`: `perfbuf_free` leaves the map's slots and their
/// events as they are (cilium/ebpf's Close) instead of deleting them
/// (libbpf's): a newer buffer's slots on the same map survive an older
/// buffer's free. A slot left behind fails BPF output with `-ENOSPC`
/// until a reader replaces it.
pub const PERFBUF_F_KEEP_SLOTS: u32 = 16;

/// Options of `perfbuf_new` (set `sz = sizeof(struct perfbuf_opts)`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfbuf_opts {
    /// Size of the caller's struct, for forward/backward compatibility.
    pub sz: usize,
    /// Wake the reader after this many samples (0 or 1: every sample).
    pub wakeup_events: u32,
    /// Or after this many bytes (non-zero overrides `wakeup_events`).
    pub wakeup_bytes: u32,
    /// With batching, `poll` drains whatever is pending at least this
    /// often, so no record waits longer (0: 10 ms).
    pub max_delay_ms: u32,
    /// `PERFBUF_F_*` bits.
    pub flags: u32,
    /// With `cpu_cnt > 0`: read only these CPUs (map key = CPU id);
    /// offline or absent ones are skipped, see `perfbuf_buffer_cpu`.
    pub cpus: *const c_int,
    /// Number of entries in `cpus`.
    pub cpu_cnt: c_int,
    /// Reserved, 0 (where an older header's struct ended, padding).
    pub reserved: c_int,
    /// The `PERFBUF_OUTPUT_COUNTS` map (`perfbuf.bpf.h`) the BPF program
    /// sends through, for `produced` and `output_failed` in
    /// `perfbuf_ring_stats` (0: none). Checked by `perfbuf_new` (EINVAL for
    /// another kind of map); the buffer keeps a duplicate.
    pub output_counts_fd: c_int,
    /// Reserved, 0.
    pub reserved2: c_int,
}

const _: () = {
    assert!(size_of::<perfbuf_opts>() == 48);
    assert!(offset_of!(perfbuf_opts, cpus) == 24);
    assert!(offset_of!(perfbuf_opts, cpu_cnt) == 32);
    assert!(offset_of!(perfbuf_opts, output_counts_fd) == 40);
};

/// Per-ring figures from `perfbuf_ring_stats` (set `sz` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct perfbuf_ring_stats {
    /// Size of the caller's struct; fields beyond it are not written.
    pub sz: usize,
    /// The CPU this ring reads.
    pub cpu: c_int,
    /// Reserved, 0.
    pub reserved: c_int,
    /// Records read from the ring (samples, lost reports and any other
    /// type), plus the lost reports libperfbuf delivers for a ring the
    /// kernel no longer writes to (the fast mode): one per lost callback.
    pub records: u64,
    /// Bytes of those records, headers included.
    pub bytes: u64,
    /// Records lost so far: what the `PERF_RECORD_LOST` records read from
    /// the ring reported (and the lost reports libperfbuf made), plus,
    /// where the ring's events count their losses (an event set's rings,
    /// a buffer made with `PERFBUF_F_COUNT_LOST`, on Linux 6.0+), what the
    /// kernel counted and has not yet written as a LOST record: exact at
    /// any moment. Elsewhere only what was reported (libbpf's figure).
    pub lost: u64,
    /// Times epoll reported the ring ready.
    pub wakeups: u64,
    /// Bytes waiting in the ring now (drain the fullest ring first).
    pub pending_bytes: u64,
    /// Size of the data area.
    pub data_size: u64,
    /// Times the reader skipped to the head after an inconsistent ring state.
    pub resyncs: u64,
    /// Bytes skipped doing so.
    pub skipped_bytes: u64,
    /// SAMPLE/LOST records too short for their fields, skipped.
    pub malformed: u64,
    /// Overwritable rings: bytes overwritten before they were read.
    pub overwritten_bytes: u64,
    /// 1 while the ring has batched wake-ups (the fast mode, see README),
    /// else 0.
    pub batched: u64,
    /// Times the ring switched to batched wake-ups.
    pub batch_switches: u64,
    /// Size of the data area of the spill ring the fast mode gave this CPU
    /// (0: none; see README, the fast mode).
    pub spill_size: u64,
    /// The part of `lost` no lost report has told the callbacks about yet
    /// (0 where the kernel's count is not known); `perfbuf_drain_final`
    /// reports it.
    pub lost_unreported: u64,
    /// The loss identity (README, "Lost counts"): once the ring is read to
    /// its head, `produced = delivered + lost_total`, where `lost_total =
    /// lost + output_failed + dropped`. `produced` is known (and
    /// `produced_known` 1) only with `perfbuf_opts.output_counts_fd`.
    pub produced: u64,
    /// 1 when `produced` and `output_failed` come from perfbuf.bpf.h's
    /// counts, else 0.
    pub produced_known: u64,
    /// Samples read: `records` less lost reports and other record types.
    pub samples: u64,
    /// `samples - dropped`: what reached the caller and was kept.
    pub delivered: u64,
    /// Outputs on this CPU the helper refused that no kernel figure counts
    /// (an empty slot, an event left dead by a CPU that came back):
    /// perfbuf.bpf.h's counts; a full ring's refusals are in `lost`.
    pub output_failed: u64,
    /// Samples the caller read and dropped by its own policy
    /// (`perfbuf_count_dropped`).
    pub dropped: u64,
    /// `lost + output_failed + dropped`: every loss, each in one bucket.
    pub lost_total: u64,
}

/// How one ring is doing, from `perfbuf_ring_health` (set `sz` before the
/// call). Cheap: the reader keeps these as it reads.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct perfbuf_ring_health {
    /// Size of the caller's struct; fields beyond it are not written.
    pub sz: usize,
    /// The CPU this ring reads.
    pub cpu: c_int,
    /// 1 while the CPU is online as the reader last saw it (a ring whose
    /// CPU went offline is kept, and read, until it comes back).
    pub online: c_int,
    /// Bytes waiting in the ring now (the backlog).
    pub pending_bytes: u64,
    /// The most bytes the reader found waiting (the fill high-water mark).
    pub peak_pending_bytes: u64,
    /// Size of the ring's data area.
    pub data_size: u64,
    /// Records, bytes and wake-ups per second over the last second (or
    /// since the reader last looked, if longer).
    pub records_per_sec: f64,
    /// Bytes per second (see `records_per_sec`).
    pub bytes_per_sec: f64,
    /// Wake-ups per second (see `records_per_sec`).
    pub wakeups_per_sec: f64,
    /// Nanoseconds since the reader last found records in the ring (-1:
    /// never).
    pub ns_since_last_record: i64,
    /// The backlog a ring losing nothing would have held: the peak, plus
    /// the bytes of the records lost meanwhile (at the ring's mean size).
    pub needed_bytes: u64,
    /// The smallest ring (data pages, a power of two) holding
    /// `needed_bytes`: the page count to build with for this load.
    pub suggested_pages: u64,
    /// Times the CPU came back online and the ring got a fresh event.
    pub replaced: u64,
}

/// Key function of the ordered reader: the timestamp (or any ordered key)
/// of a whole record. Called once per record, on the polling thread.
pub type perfbuf_key_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, cpu: c_int, record: *const perf_event_header) -> u64>;

/// `perfbuf_order_opts.flags`: key = the record's `PERF_SAMPLE_TIME` field
/// (raw mode with an attr whose `sample_type` has `PERF_SAMPLE_TIME`).
pub const PERFBUF_ORDER_SAMPLE_TIME: u32 = 1;

/// Options of `perfbuf_set_order` (set `sz = sizeof(struct perfbuf_order_opts)`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfbuf_order_opts {
    /// Size of the caller's struct.
    pub sz: usize,
    /// The key of each record; NULL (and no flag): the first 8 bytes of the
    /// sample's data, native endian (e.g. a `bpf_ktime_get_ns()` the BPF
    /// program wrote first).
    pub key_fn: perfbuf_key_fn,
    /// Passed to `key_fn`.
    pub key_ctx: *mut c_void,
    /// `PERFBUF_ORDER_*` bits.
    pub flags: u32,
    /// How long a ring that makes no progress may hold delivery back
    /// (0: 10 ms). Records from it that arrive later than that are
    /// delivered at once and counted as late.
    pub idle_wait_ms: u32,
}

const _: () = assert!(size_of::<perfbuf_order_opts>() == 32);

/// Counters of the ordered reader (set `sz` before `perfbuf_order_stats`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct perfbuf_order_stats {
    /// Size of the caller's struct; fields beyond it are not written.
    pub sz: usize,
    /// Records delivered.
    pub delivered: u64,
    /// Records delivered with a key older than one delivered before them.
    pub late: u64,
    /// Records indexed but held back now.
    pub pending: u64,
    /// Most records ever held back at once.
    pub max_pending: u64,
}

/// A run of whole records of one CPU, contiguous in memory, handed to a
/// `perfbuf_batch_fn`. Zero-copy into the ring, except a record that wraps
/// the ring's end, which comes alone in a copy. Valid during the call.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfbuf_batch {
    /// The CPU whose ring this is.
    pub cpu: c_int,
    /// Reserved, 0.
    pub reserved: u32,
    /// `len` bytes of records, each starting with a `struct
    /// perf_event_header` whose `size` libperfbuf checked: walk them with
    /// `perfbuf_batch_next`.
    pub records: *const c_void,
    /// Bytes at `records`.
    pub len: usize,
    /// Records in the run: `samples + others`.
    pub samples: usize,
    /// Records other than `PERF_RECORD_SAMPLE` (LOST, ...): when 0, a
    /// consumer that only counts need not walk the run.
    pub others: usize,
}

/// Receives one run of records. Return 0 to go on, anything else to stop
/// after this run.
pub type perfbuf_batch_fn =
    Option<unsafe extern "C" fn(ctx: *mut c_void, batch: *const perfbuf_batch) -> c_int>;

/// `perfbuf_print_fn` levels, libbpf's values (`LIBBPF_WARN`, ...).
pub const PERFBUF_WARN: c_int = 0;
/// Information on what a buffer was set up with.
pub const PERFBUF_INFO: c_int = 1;
/// Details: the fast mode's decisions, skipped CPUs.
pub const PERFBUF_DEBUG: c_int = 2;

/// Receives libperfbuf's messages: a level (`PERFBUF_WARN`, `_INFO`,
/// `_DEBUG`), the message (NUL-terminated, without a newline, valid during
/// the call) and the `ctx` given to `perfbuf_set_print`.
pub type perfbuf_print_fn = Option<unsafe extern "C" fn(level: c_int, msg: *const c_char, ctx: *mut c_void)>;

/// One record or loss report of a batch read (`perfbuf_read_batch`),
/// 24 bytes. A sample's bytes are `size` bytes at `offset` of the batch's
/// data; a loss report has `lost` > 0 and `size` 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct perfbuf_batch_entry {
    /// The CPU whose ring held it; `UINT32_MAX` (-1) for a BPF ring buffer.
    pub cpu: u32,
    /// The sample's size as the sample callback would get it (a perf
    /// ring's raw data, padded by the kernel); 0 for a loss report.
    pub size: u32,
    /// Where the sample's bytes start in `data` (a multiple of 8).
    pub offset: u64,
    /// Records lost (a loss report), else 0.
    pub lost: u64,
}

const _: () = assert!(size_of::<perfbuf_batch_entry>() == 24);
const _: () = assert!(offset_of!(perfbuf_batch_entry, size) == 4);
const _: () = assert!(offset_of!(perfbuf_batch_entry, offset) == 8);
const _: () = assert!(offset_of!(perfbuf_batch_entry, lost) == 16);
// The Rust API's entry, which a batch read fills in place.
const _: () = assert!(size_of::<perfbuf::BatchEntry>() == 24);
const _: () = assert!(align_of::<perfbuf::BatchEntry>() == align_of::<perfbuf_batch_entry>());
const _: () = assert!(offset_of!(perfbuf::BatchEntry, cpu) == 0);
const _: () = assert!(offset_of!(perfbuf::BatchEntry, size) == 4);
const _: () = assert!(offset_of!(perfbuf::BatchEntry, offset) == 8);
const _: () = assert!(offset_of!(perfbuf::BatchEntry, lost) == 16);

/// The caller's buffers of a batch read (`perfbuf_read_batch`,
/// `perfbuf_poll_batch`), and what the read put there.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfbuf_read_batch {
    /// `sizeof(struct perfbuf_read_batch)`.
    pub sz: usize,
    /// In: where the samples' bytes go (each at an 8-aligned offset).
    pub data: *mut c_void,
    /// In: bytes at `data`.
    pub data_size: usize,
    /// In: where the entries go (8-aligned), one per sample or loss report.
    pub entries: *mut perfbuf_batch_entry,
    /// In: entries at `entries` (at least 2).
    pub entry_cnt: usize,
    /// Out: bytes of `data` used.
    pub data_used: usize,
    /// Out: after -EMSGSIZE, the data size the next record needs (it stays
    /// in its ring until a read has that much); else 0.
    pub needed: usize,
}

const _: () = assert!(size_of::<perfbuf_read_batch>() == 56);
