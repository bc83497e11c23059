//! The C entry points of the record decoder: `perfbuf_decode` decodes one
//! record (as `perf_buffer__new_raw`'s `event_cb` receives it) by the layout
//! its event's attr selects, `perfbuf_decode_attr_from` fills that layout
//! from a `struct perf_event_attr`. The decoding itself is the safe
//! [`perfbuf::decode`]; these shims check pointers, turn the caller's structs
//! into bytes and the result into `struct perfbuf_sample`.

#![allow(non_camel_case_types, reason = "these are the C names")]

use super::abi::{perf_event_attr, perf_event_header};
use super::ffi::{check_tail, out_sz, ret_errno, sized_in, write_sized};
use core::ffi::{c_int, c_void};
use core::mem::{offset_of, size_of};
use perfbuf::decode::{self, Body, DecodeAttr, DecodeError, ReadValues, Record, U64s};
use perfbuf::{Error, Result};

/// `perfbuf_sample.flags`: `branch_hw_idx` is valid.
pub const PERFBUF_DECODE_F_BRANCH_HW_IDX: u32 = 1;
/// `perfbuf_sample.flags`: `branch_counters` is valid (the attr has
/// `PERF_SAMPLE_BRANCH_COUNTERS`, 1 << 19 in `branch_sample_type`).
pub const PERFBUF_DECODE_F_BRANCH_COUNTERS: u32 = 2;
/// `perfbuf_sample.flags`: the READ values are a group (`read_group`).
pub const PERFBUF_DECODE_F_READ_GROUP: u32 = 4;

/// The layout of an event's records: the `perf_event_attr` fields that
/// determine it. Set `sz = sizeof(struct perfbuf_decode_attr)`; a smaller
/// `sz` (an older header) leaves the fields it lacks at 0, a larger one is
/// accepted if the bytes beyond `sample_id_all` (`reserved` included) are 0. Fill it by hand or
/// with `perfbuf_decode_attr_from`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct perfbuf_decode_attr {
    /// Size of the caller's struct (at least 8).
    pub sz: usize,
    /// `attr.sample_type`: the `PERF_SAMPLE_*` fields of each sample.
    pub sample_type: u64,
    /// `attr.read_format`: the layout of `PERF_SAMPLE_READ`.
    pub read_format: u64,
    /// `attr.sample_regs_user`: one register per bit with `PERF_SAMPLE_REGS_USER`.
    pub sample_regs_user: u64,
    /// `attr.sample_regs_intr`: one register per bit with `PERF_SAMPLE_REGS_INTR`.
    pub sample_regs_intr: u64,
    /// `attr.branch_sample_type` (`PERF_SAMPLE_BRANCH_HW_INDEX` and
    /// `PERF_SAMPLE_BRANCH_COUNTERS` change the layout).
    pub branch_sample_type: u64,
    /// `attr.sample_id_all`: non-zero if records other than samples end
    /// with a `sample_id` trailer.
    pub sample_id_all: u32,
    /// Reserved, must be 0 (makes the tail padding a field, so that an
    /// initializer zeroes it).
    pub reserved: u32,
}

/// `offsetofend(struct perfbuf_decode_attr, sample_id_all)`: bytes from
/// here on (`reserved`, and any a newer header adds) must be 0.
const DECODE_ATTR_LAST_END: usize = 52;

const _: () = {
    assert!(size_of::<perfbuf_decode_attr>() == 56);
    assert!(offset_of!(perfbuf_decode_attr, sample_id_all) + 4 == DECODE_ATTR_LAST_END);
};

/// One decoded record. Set `sz = sizeof(struct perfbuf_sample)` before
/// calling `perfbuf_decode`; only that many bytes are written.
///
/// A field is meaningful only if its `PERF_SAMPLE_*` bit is in `present`;
/// the others are 0 / NULL. Pointers point into the record passed to
/// `perfbuf_decode` and are valid as long as it is (for `perf_buffer`
/// callbacks: until the callback returns). The kernel lays every array out
/// on an 8-byte boundary of the record, so `uint64_t` pointers are aligned.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfbuf_sample {
    /// Size of the caller's struct (at least 24).
    pub sz: usize,
    /// `header.type`: `PERF_RECORD_SAMPLE`, `_LOST`, `_THROTTLE`,
    /// `_UNTHROTTLE`, `_LOST_SAMPLES` or a side-band record's (see
    /// `perfbuf_decode_sideband`).
    pub record_type: u32,
    /// `header.misc` (`PERF_RECORD_MISC_*`).
    pub misc: u16,
    /// `header.size`: bytes of the record, header included.
    pub size: u16,
    /// `PERF_SAMPLE_*` bits of the fields decoded: a sample's `sample_type`,
    /// or the `sample_id` fields of another record (0 without `sample_id_all`).
    pub present: u64,
    /// `PERFBUF_DECODE_F_*` bits.
    pub flags: u32,
    /// Reserved, 0.
    pub reserved: u32,
    /// `PERF_SAMPLE_IDENTIFIER`: the event id.
    pub identifier: u64,
    /// `PERF_SAMPLE_IP`.
    pub ip: u64,
    /// `PERF_SAMPLE_TID`: process id.
    pub pid: u32,
    /// `PERF_SAMPLE_TID`: thread id.
    pub tid: u32,
    /// `PERF_SAMPLE_TIME` (the attr's clock).
    pub time: u64,
    /// `PERF_SAMPLE_ADDR`.
    pub addr: u64,
    /// `PERF_SAMPLE_ID`: the event id (of the group leader for inherited events).
    pub id: u64,
    /// `PERF_SAMPLE_STREAM_ID`: the event id.
    pub stream_id: u64,
    /// `PERF_SAMPLE_CPU`: CPU the record was written on.
    pub cpu: u32,
    /// `PERF_SAMPLE_CPU`: reserved word after it.
    pub cpu_res: u32,
    /// `PERF_SAMPLE_PERIOD`.
    pub period: u64,
    /// `PERF_SAMPLE_READ` with `PERF_FORMAT_TOTAL_TIME_ENABLED`.
    pub read_time_enabled: u64,
    /// `PERF_SAMPLE_READ` with `PERF_FORMAT_TOTAL_TIME_RUNNING`.
    pub read_time_running: u64,
    /// `PERF_SAMPLE_READ`: the counter's value (the first counter of a group).
    pub read_value: u64,
    /// `PERF_SAMPLE_READ` with `PERF_FORMAT_ID`: its id.
    pub read_id: u64,
    /// `PERF_SAMPLE_READ` with `PERF_FORMAT_LOST`: its lost count.
    pub read_lost: u64,
    /// `PERF_SAMPLE_READ`: number of counters (1 without `PERF_FORMAT_GROUP`).
    pub read_nr: u64,
    /// `PERF_FORMAT_GROUP`: `read_nr` entries of `read_stride` words each:
    /// value, then id with `PERF_FORMAT_ID`, then lost with `PERF_FORMAT_LOST`.
    /// NULL without `PERF_FORMAT_GROUP`.
    pub read_group: *const u64,
    /// Words per `read_group` entry (1 to 3).
    pub read_stride: u64,
    /// `PERF_SAMPLE_CALLCHAIN`: `callchain_nr` addresses, with the kernel's
    /// `PERF_CONTEXT_*` markers.
    pub callchain: *const u64,
    /// `PERF_SAMPLE_CALLCHAIN`: `nr`.
    pub callchain_nr: u64,
    /// `PERF_SAMPLE_RAW`: the data.
    pub raw: *const c_void,
    /// `PERF_SAMPLE_RAW`: its size as the kernel wrote it (padded so that
    /// the size word and the data end on 8 bytes).
    pub raw_size: u64,
    /// `PERF_SAMPLE_BRANCH_STACK`: number of entries.
    pub branch_nr: u64,
    /// With `PERF_SAMPLE_BRANCH_HW_INDEX` (see `PERFBUF_DECODE_F_BRANCH_HW_IDX`:
    /// absent when the kernel had no stack and wrote only `nr = 0`).
    pub branch_hw_idx: u64,
    /// `branch_nr` `struct perf_branch_entry` as three words each: from, to,
    /// flags.
    pub branch_entries: *const u64,
    /// With `PERF_SAMPLE_BRANCH_COUNTERS`: `branch_nr` words, else NULL.
    pub branch_counters: *const u64,
    /// `PERF_SAMPLE_REGS_USER`: `enum perf_sample_regs_abi` (NONE: no registers).
    pub regs_user_abi: u64,
    /// `PERF_SAMPLE_REGS_USER`: one value per bit of `sample_regs_user`,
    /// lowest bit first.
    pub regs_user: *const u64,
    /// Number of `regs_user` values (0 with ABI NONE).
    pub regs_user_nr: u64,
    /// `PERF_SAMPLE_STACK_USER`: the dump.
    pub stack_user: *const c_void,
    /// `PERF_SAMPLE_STACK_USER`: size of the dump (0 when there was no user stack).
    pub stack_user_size: u64,
    /// `PERF_SAMPLE_STACK_USER`: bytes of the dump actually copied.
    pub stack_user_dyn_size: u64,
    /// `PERF_SAMPLE_WEIGHT` / `PERF_SAMPLE_WEIGHT_STRUCT`: the whole word.
    pub weight: u64,
    /// `PERF_SAMPLE_WEIGHT_STRUCT`: `var1_dw` (low 32 bits of `weight`).
    pub weight_var1_dw: u32,
    /// `PERF_SAMPLE_WEIGHT_STRUCT`: `var2_w` (bits 32..48).
    pub weight_var2_w: u16,
    /// `PERF_SAMPLE_WEIGHT_STRUCT`: `var3_w` (bits 48..64).
    pub weight_var3_w: u16,
    /// `PERF_SAMPLE_DATA_SRC`.
    pub data_src: u64,
    /// `PERF_SAMPLE_TRANSACTION`.
    pub transaction: u64,
    /// `PERF_SAMPLE_REGS_INTR`: `enum perf_sample_regs_abi`.
    pub regs_intr_abi: u64,
    /// `PERF_SAMPLE_REGS_INTR`: one value per bit of `sample_regs_intr`.
    pub regs_intr: *const u64,
    /// Number of `regs_intr` values.
    pub regs_intr_nr: u64,
    /// `PERF_SAMPLE_PHYS_ADDR`.
    pub phys_addr: u64,
    /// `PERF_SAMPLE_CGROUP`: cgroup id.
    pub cgroup: u64,
    /// `PERF_SAMPLE_DATA_PAGE_SIZE`.
    pub data_page_size: u64,
    /// `PERF_SAMPLE_CODE_PAGE_SIZE`.
    pub code_page_size: u64,
    /// `PERF_SAMPLE_AUX`: the data.
    pub aux: *const c_void,
    /// `PERF_SAMPLE_AUX`: its size.
    pub aux_size: u64,
    /// `PERF_RECORD_LOST`: id of the event that lost records.
    pub lost_id: u64,
    /// `PERF_RECORD_LOST` / `PERF_RECORD_LOST_SAMPLES`: number lost.
    pub lost: u64,
    /// `PERF_RECORD_THROTTLE` / `_UNTHROTTLE`: time.
    pub throttle_time: u64,
    /// `PERF_RECORD_THROTTLE` / `_UNTHROTTLE`: event id.
    pub throttle_id: u64,
    /// `PERF_RECORD_THROTTLE` / `_UNTHROTTLE`: event stream id.
    pub throttle_stream_id: u64,
}

/// `offsetofend(struct perfbuf_sample, present)`: the smallest `sz` accepted.
pub(crate) const SAMPLE_MIN_SZ: usize = 24;

const _: () = {
    assert!(offset_of!(perfbuf_sample, present) + 8 == SAMPLE_MIN_SZ);
    assert!(offset_of!(perfbuf_sample, identifier) == 32);
    assert!(offset_of!(perfbuf_sample, read_group) == 152);
    assert!(offset_of!(perfbuf_sample, throttle_stream_id) == 416);
    assert!(size_of::<perfbuf_sample>() == 424);
};

/// Bytes of `struct perf_event_attr` up to `sample_regs_intr`
/// (`PERF_ATTR_SIZE_VER4`); later fields do not affect the layout.
const ATTR_BYTES_USED: usize = 104;
/// `PERF_ATTR_SIZE_VER0`: the smallest attr, and what `size = 0` means.
const ATTR_SIZE_VER0: usize = 64;

impl perfbuf_sample {
    /// All fields 0 / NULL but `sz`.
    fn empty(sz: usize) -> Self {
        let null = core::ptr::null();
        perfbuf_sample {
            sz,
            record_type: 0,
            misc: 0,
            size: 0,
            present: 0,
            flags: 0,
            reserved: 0,
            identifier: 0,
            ip: 0,
            pid: 0,
            tid: 0,
            time: 0,
            addr: 0,
            id: 0,
            stream_id: 0,
            cpu: 0,
            cpu_res: 0,
            period: 0,
            read_time_enabled: 0,
            read_time_running: 0,
            read_value: 0,
            read_id: 0,
            read_lost: 0,
            read_nr: 0,
            read_group: null,
            read_stride: 0,
            callchain: null,
            callchain_nr: 0,
            raw: null.cast(),
            raw_size: 0,
            branch_nr: 0,
            branch_hw_idx: 0,
            branch_entries: null,
            branch_counters: null,
            regs_user_abi: 0,
            regs_user: null,
            regs_user_nr: 0,
            stack_user: null.cast(),
            stack_user_size: 0,
            stack_user_dyn_size: 0,
            weight: 0,
            weight_var1_dw: 0,
            weight_var2_w: 0,
            weight_var3_w: 0,
            data_src: 0,
            transaction: 0,
            regs_intr_abi: 0,
            regs_intr: null,
            regs_intr_nr: 0,
            phys_addr: 0,
            cgroup: 0,
            data_page_size: 0,
            code_page_size: 0,
            aux: null.cast(),
            aux_size: 0,
            lost_id: 0,
            lost: 0,
            throttle_time: 0,
            throttle_id: 0,
            throttle_stream_id: 0,
        }
    }
}

/// Where a word array starts and how many words it has.
fn words(w: U64s<'_>) -> (*const u64, u64) {
    (w.as_bytes().as_ptr().cast(), w.len() as u64)
}

/// Where a byte array starts and how long it is.
fn blob(b: &[u8]) -> (*const c_void, u64) {
    (b.as_ptr().cast(), b.len() as u64)
}

/// Converts a decoded record to the C struct (pointers into the record).
pub fn to_c(rec: &Record<'_>, sz: usize) -> perfbuf_sample {
    let mut o = perfbuf_sample::empty(sz);
    o.record_type = rec.header.type_;
    o.misc = rec.header.misc;
    o.size = rec.header.size;
    o.present = rec.present();
    if let Some(id) = rec.sample_id() {
        let tid = id.tid.unwrap_or_default();
        let cpu = id.cpu.unwrap_or_default();
        (o.pid, o.tid, o.cpu, o.cpu_res) = (tid.pid, tid.tid, cpu.cpu, cpu.res);
        o.time = id.time.unwrap_or(0);
        o.id = id.id.unwrap_or(0);
        o.stream_id = id.stream_id.unwrap_or(0);
        o.identifier = id.identifier.unwrap_or(0);
    }
    match &rec.body {
        Body::Sample(s) => fill_sample(&mut o, s),
        Body::Lost(l) => (o.lost_id, o.lost) = (l.id, l.lost),
        Body::Throttle(t) | Body::Unthrottle(t) => {
            (o.throttle_time, o.throttle_id, o.throttle_stream_id) = (t.time, t.id, t.stream_id);
        }
        Body::LostSamples(l) => o.lost = l.lost,
        // Side-band records: the trailer above; their own fields come
        // with `perfbuf_decode_sideband`.
        _ => {}
    }
    o
}

/// A decoded sample (whose record's header is `header`) as the C struct.
pub(crate) fn sample_to_c(header: decode::Header, s: &decode::Sample<'_>, sz: usize) -> perfbuf_sample {
    let mut o = perfbuf_sample::empty(sz);
    (o.record_type, o.misc, o.size, o.present) = (header.type_, header.misc, header.size, s.sample_type);
    fill_sample(&mut o, s);
    o
}

fn fill_sample(o: &mut perfbuf_sample, s: &decode::Sample<'_>) {
    let tid = s.tid.unwrap_or_default();
    let cpu = s.cpu.unwrap_or_default();
    (o.pid, o.tid, o.cpu, o.cpu_res) = (tid.pid, tid.tid, cpu.cpu, cpu.res);
    o.identifier = s.identifier.unwrap_or(0);
    o.ip = s.ip.unwrap_or(0);
    o.time = s.time.unwrap_or(0);
    o.addr = s.addr.unwrap_or(0);
    o.id = s.id.unwrap_or(0);
    o.stream_id = s.stream_id.unwrap_or(0);
    o.period = s.period.unwrap_or(0);
    if let Some(r) = &s.read {
        o.read_time_enabled = r.time_enabled.unwrap_or(0);
        o.read_time_running = r.time_running.unwrap_or(0);
        let first = match r.values {
            ReadValues::Single(v) => {
                o.read_nr = 1;
                v
            }
            ReadValues::Group(g) => {
                o.flags |= PERFBUF_DECODE_F_READ_GROUP;
                (o.read_group, _) = words(g.words());
                o.read_nr = g.len() as u64;
                o.read_stride = g.stride() as u64;
                g.get(0).unwrap_or_default()
            }
        };
        (o.read_value, o.read_id, o.read_lost) =
            (first.value, first.id.unwrap_or(0), first.lost.unwrap_or(0));
    }
    if let Some(cc) = s.callchain {
        (o.callchain, o.callchain_nr) = words(cc);
    }
    if let Some(raw) = s.raw {
        (o.raw, o.raw_size) = blob(raw);
    }
    if let Some(b) = &s.branch_stack {
        (o.branch_entries, _) = words(b.entries);
        o.branch_nr = b.len() as u64;
        if let Some(hw_idx) = b.hw_idx {
            o.flags |= PERFBUF_DECODE_F_BRANCH_HW_IDX;
            o.branch_hw_idx = hw_idx;
        }
        if let Some(c) = b.counters {
            o.flags |= PERFBUF_DECODE_F_BRANCH_COUNTERS;
            (o.branch_counters, _) = words(c);
        }
    }
    if let Some(r) = &s.regs_user {
        o.regs_user_abi = r.abi;
        (o.regs_user, o.regs_user_nr) = words(r.values);
    }
    if let Some(st) = &s.stack_user {
        (o.stack_user, o.stack_user_size) = blob(st.data);
        o.stack_user_dyn_size = st.dyn_size.unwrap_or(0);
    }
    if let Some(w) = s.weight {
        let parts = decode::weight_struct(w);
        (o.weight, o.weight_var1_dw, o.weight_var2_w, o.weight_var3_w) =
            (w, parts.var1_dw, parts.var2_w, parts.var3_w);
    }
    o.data_src = s.data_src.unwrap_or(0);
    o.transaction = s.transaction.unwrap_or(0);
    if let Some(r) = &s.regs_intr {
        o.regs_intr_abi = r.abi;
        (o.regs_intr, o.regs_intr_nr) = words(r.values);
    }
    o.phys_addr = s.phys_addr.unwrap_or(0);
    o.cgroup = s.cgroup.unwrap_or(0);
    o.data_page_size = s.data_page_size.unwrap_or(0);
    o.code_page_size = s.code_page_size.unwrap_or(0);
    if let Some(aux) = s.aux {
        (o.aux, o.aux_size) = blob(aux);
    }
}

/// The errno of a decoding error: EBADMSG for a malformed record,
/// EOPNOTSUPP for one this decoder cannot decode.
pub fn errno_of(e: &DecodeError) -> Error {
    Error::from_errno(if e.is_malformed() { libc::EBADMSG } else { libc::EOPNOTSUPP })
}

fn u64_at(bytes: &[u8], offset: usize) -> u64 {
    bytes.get(offset..offset + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_ne_bytes)
}

/// Parses the caller's `struct perfbuf_decode_attr` (its `sz` bytes), with
/// libbpf's rules for option structs.
pub fn parse_decode_attr(bytes: &[u8]) -> Result<DecodeAttr> {
    check_tail(bytes, DECODE_ATTR_LAST_END, "perfbuf_decode_attr: bad size or non-zero reserved bytes")?;
    let sample_id_all = bytes
        .get(offset_of!(perfbuf_decode_attr, sample_id_all)..DECODE_ATTR_LAST_END)
        .is_some_and(|b| b.iter().any(|&x| x != 0));
    Ok(DecodeAttr {
        sample_type: u64_at(bytes, offset_of!(perfbuf_decode_attr, sample_type)),
        read_format: u64_at(bytes, offset_of!(perfbuf_decode_attr, read_format)),
        sample_regs_user: u64_at(bytes, offset_of!(perfbuf_decode_attr, sample_regs_user)),
        sample_regs_intr: u64_at(bytes, offset_of!(perfbuf_decode_attr, sample_regs_intr)),
        branch_sample_type: u64_at(bytes, offset_of!(perfbuf_decode_attr, branch_sample_type)),
        sample_id_all,
    })
}

/// How many bytes of a `struct perf_event_attr` to read, from its `size`
/// field (0 means `PERF_ATTR_SIZE_VER0`, as for the kernel).
pub fn attr_bytes_to_read(size: u32) -> Result<usize> {
    let size = if size == 0 { ATTR_SIZE_VER0 } else { size as usize };
    if size < ATTR_SIZE_VER0 {
        return Err(Error::INVAL);
    }
    Ok(size.min(ATTR_BYTES_USED))
}

/// The layout fields of a `struct perf_event_attr` (its first
/// [`attr_bytes_to_read`] bytes); fields beyond them are 0.
pub fn layout_of_perf_event_attr(bytes: &[u8]) -> DecodeAttr {
    let flags = u64_at(bytes, 40);
    // `sample_id_all` is bit-field number 18 of the flags word.
    let bit = if cfg!(target_endian = "little") { 18 } else { 63 - 18 };
    DecodeAttr {
        sample_type: u64_at(bytes, 24),
        read_format: u64_at(bytes, 32),
        sample_id_all: flags >> bit & 1 != 0,
        branch_sample_type: u64_at(bytes, 72),
        sample_regs_user: u64_at(bytes, 80),
        sample_regs_intr: u64_at(bytes, 96),
    }
}

/// The caller's struct as its `sz` bytes (NULL is EINVAL here).
///
/// # Safety
/// As for [`sized_in`].
unsafe fn struct_bytes<'a>(ptr: *const c_void) -> Result<&'a [u8]> {
    // SAFETY: per this function's contract.
    unsafe { sized_in(ptr) }?.ok_or(Error::INVAL)
}

/// The bytes of a record: at most 65535 (a `header.size` cannot be more),
/// and only from an 8-aligned, non-NULL `rec`.
///
/// # Safety
/// `rec` is NULL or readable for `rec_len` bytes.
pub(crate) unsafe fn record_bytes<'a>(rec: *const perf_event_header, rec_len: usize) -> Result<&'a [u8]> {
    if rec.is_null() || !rec.cast::<u64>().is_aligned() {
        return Err(Error::INVAL);
    }
    let len = rec_len.min(usize::from(u16::MAX));
    // SAFETY: non-NULL and readable for rec_len >= len bytes (contract).
    Ok(unsafe { core::slice::from_raw_parts(rec.cast::<u8>(), len) })
}

/// The bytes of a `struct perf_event_attr` that matter for the layout.
///
/// # Safety
/// `attr` is NULL or readable for `min(attr->size, 104)` bytes (64 if
/// `size` is 0).
pub(crate) unsafe fn perf_event_attr_bytes<'a>(attr: *const perf_event_attr) -> Result<&'a [u8]> {
    if attr.is_null() {
        return Err(Error::INVAL);
    }
    // SAFETY: a non-NULL attr has its u32 `size` at offset 4 (contract).
    let size = unsafe { attr.cast::<u8>().add(4).cast::<u32>().read_unaligned() };
    let n = attr_bytes_to_read(size)?;
    // SAFETY: readable for n bytes (contract).
    Ok(unsafe { core::slice::from_raw_parts(attr.cast::<u8>(), n) })
}

/// `perfbuf_decode` once its pointers are bytes: the struct to write to
/// the caller's `out` (none if `out` is unusable) and the result.
pub fn decode_to_c(
    rec: Result<&[u8]>,
    attr: Result<DecodeAttr>,
    sz: Result<usize>,
) -> (Option<perfbuf_sample>, Result<c_int>) {
    let Ok(sz) = sz else { return (None, Err(Error::INVAL)) };
    let mut failed = perfbuf_sample::empty(sz);
    let (rec, attr) = match (rec, attr) {
        (Ok(rec), Ok(attr)) => (rec, attr),
        (Err(e), _) | (_, Err(e)) => return (Some(failed), Err(e)),
    };
    match decode::decode(rec, &attr) {
        Ok(decoded) => (Some(to_c(&decoded, sz)), Ok(0)),
        Err(e) => {
            if let Some(h) = decode::header(rec) {
                (failed.record_type, failed.misc, failed.size) = (h.type_, h.misc, h.size);
            }
            (Some(failed), Err(errno_of(&e)))
        }
    }
}

/// A `PERF_RECORD_LOST` of no known event (one the library made at a final
/// drain, or of an event removed since) for a `sz`-byte struct: its header
/// fields, id and count only; `None` for another record.
pub(crate) fn lost_only(rec: &[u8], sz: usize) -> Option<perfbuf_sample> {
    let h = decode::header(rec).filter(|h| h.type_ == decode::PERF_RECORD_LOST)?;
    let lost = rec.get(16..24).map(|b| u64::from_ne_bytes(b.try_into().expect("8 bytes")))?;
    let mut s = perfbuf_sample::empty(sz);
    (s.record_type, s.misc, s.size) = (h.type_, h.misc, h.size);
    s.lost_id = rec.get(8..16).and_then(|b| b.try_into().ok()).map_or(0, u64::from_ne_bytes);
    s.lost = lost;
    Some(s)
}

/// Decodes one perf record.
///
/// `rec` points to the record (header included), `rec_len` says how many
/// bytes are readable there: only `header.size` bytes are decoded, and a
/// `header.size` above `rec_len` is an error. `attr` gives the layout of
/// the event's records. `rec` must be 8-byte aligned, as the records
/// `perf_buffer` hands out are.
///
/// On success `*out` describes the record (its pointers point into `rec`).
/// Set `out->sz = sizeof(*out)` first; only `out->sz` bytes are written. On
/// error `*out` is zeroed (but `sz`), with `record_type`, `misc` and `size`
/// filled if the header was readable.
///
/// Returns 0, or -EINVAL (NULL argument, misaligned `rec`, `out->sz` below
/// 24, bad `attr->sz` or non-zero bytes beyond the known fields of `attr`),
/// -EBADMSG (a record too short for its fields, with trailing bytes, with
/// counts that overflow, or `header.size` above `rec_len`) or -EOPNOTSUPP (a
/// record type other than SAMPLE, LOST, THROTTLE, UNTHROTTLE, LOST_SAMPLES
/// and the side-band records, or `sample_type` / `read_format` bits unknown
/// here), with `errno` set. A side-band record (COMM, FORK, EXIT, MMAP,
/// MMAP2, SWITCH, SWITCH_CPU_WIDE, NAMESPACES, KSYMBOL, BPF_EVENT, CGROUP)
/// gives its `sample_id` trailer here; `perfbuf_decode_sideband` gives its
/// own fields.
///
/// # Safety
/// `rec` is NULL or readable for `rec_len` bytes; `attr` is NULL or readable
/// for `attr->sz` bytes; `out` is NULL or writable for `out->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_decode(
    rec: *const perf_event_header,
    rec_len: usize,
    attr: *const perfbuf_decode_attr,
    out: *mut perfbuf_sample,
) -> c_int {
    // SAFETY: per this function's contract (`sz` is out's first field).
    let sz = unsafe { out_sz(out.cast(), SAMPLE_MIN_SZ) };
    // SAFETY: per this function's contract.
    let attr = unsafe { struct_bytes(attr.cast()) }.and_then(parse_decode_attr);
    // SAFETY: per this function's contract.
    let rec = unsafe { record_bytes(rec, rec_len) };
    let (value, ret) = decode_to_c(rec, attr, sz);
    if let Some(value) = value {
        // SAFETY: `out` is writable for `out->sz` = `value.sz` bytes.
        unsafe { write_sized(out, &value, value.sz) };
    }
    ret_errno(ret)
}

/// Fills `*out` with the layout fields of the kernel attr `*attr`:
/// `sample_type`, `read_format`, `sample_id_all`, `branch_sample_type`,
/// `sample_regs_user`, `sample_regs_intr`. `attr->size` says which fields
/// the caller's attr has (0 means `PERF_ATTR_SIZE_VER0`, 64; fields beyond
/// it read as 0). Set `out->sz = sizeof(*out)` first; `sz` is kept and
/// only `out->sz` bytes are written.
///
/// Returns 0, or -EINVAL (NULL argument, `attr->size` between 1 and 63,
/// `out->sz` below 8) with `errno` set.
///
/// # Safety
/// `attr` is NULL or a `struct perf_event_attr` readable for
/// `min(attr->size, 104)` bytes (64 if `size` is 0); `out` is NULL or
/// writable for `out->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_decode_attr_from(
    attr: *const perf_event_attr,
    out: *mut perfbuf_decode_attr,
) -> c_int {
    // SAFETY: per this function's contract (`sz` is out's first field).
    let sz = unsafe { out_sz(out.cast(), size_of::<usize>()) };
    // SAFETY: per this function's contract.
    let layout = unsafe { perf_event_attr_bytes(attr) }.map(layout_of_perf_event_attr);
    ret_errno(sz.and_then(|sz| {
        let value = c_decode_attr(&layout?, sz);
        // SAFETY: `out` is writable for `out->sz` = `value.sz` bytes.
        unsafe { write_sized(out, &value, value.sz) };
        Ok(0)
    }))
}

/// The C struct for a layout.
pub fn c_decode_attr(a: &DecodeAttr, sz: usize) -> perfbuf_decode_attr {
    perfbuf_decode_attr {
        sz,
        sample_type: a.sample_type,
        read_format: a.read_format,
        sample_regs_user: a.sample_regs_user,
        sample_regs_intr: a.sample_regs_intr,
        branch_sample_type: a.branch_sample_type,
        sample_id_all: u32::from(a.sample_id_all),
        reserved: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::errno::get_errno;
    use perfbuf::decode::*;

    /// An 8-aligned record built from words (header word first).
    fn record(type_: u32, misc: u16, body: &[u64]) -> Vec<u64> {
        let size = 8 * (1 + body.len()) as u64;
        let mut v = vec![u64::from(type_) | u64::from(misc) << 32 | size << 48];
        v.extend_from_slice(body);
        v
    }

    fn bytes_of(words: &[u64]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    fn c_attr(sample_type: u64) -> perfbuf_decode_attr {
        perfbuf_decode_attr { sz: size_of::<perfbuf_decode_attr>(), sample_type, ..Default::default() }
    }

    fn call(rec: &[u64], len: usize, attr: &perfbuf_decode_attr, out: &mut perfbuf_sample) -> c_int {
        assert!(len <= rec.len() * 8);
        // SAFETY: `rec` is readable for `len` bytes (checked), `attr` for
        // its sz, `out` writable for its sz.
        unsafe { perfbuf_decode(rec.as_ptr().cast(), len, attr, out) }
    }

    fn out() -> perfbuf_sample {
        perfbuf_sample::empty(size_of::<perfbuf_sample>())
    }

    #[test]
    fn sample_fields_and_pointers() {
        let t = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_CPU | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW;
        let raw = u64::from_ne_bytes([4, 0, 0, 0, b'a', b'b', b'c', b'd']);
        let tid = u64::from_ne_bytes([1, 0, 0, 0, 2, 0, 0, 0]);
        let cpu = u64::from_ne_bytes([3, 0, 0, 0, 0, 0, 0, 0]);
        let rec = record(PERF_RECORD_SAMPLE, 1, &[0xffff_1234, tid, cpu, 2, 10, 11, raw]);
        let mut o = out();
        assert_eq!(call(&rec, rec.len() * 8, &c_attr(t), &mut o), 0);
        assert_eq!((o.record_type, o.misc, o.size as usize), (PERF_RECORD_SAMPLE, 1, rec.len() * 8));
        assert_eq!((o.present, o.ip, o.pid, o.tid, o.cpu), (t, 0xffff_1234, 1, 2, 3));
        assert_eq!(o.callchain_nr, 2);
        assert_eq!(o.callchain, rec[5..].as_ptr());
        assert_eq!((o.raw_size, o.raw.cast::<u8>()), (4, rec[7..].as_ptr().cast::<u8>().wrapping_add(4)));
        assert!(o.aux.is_null() && o.read_group.is_null() && o.flags == 0);
        // rec_len beyond header.size is fine; a huge one is clamped.
        assert_eq!(call(&rec, rec.len() * 8, &c_attr(t), &mut o), 0);
        let mut big = rec.clone();
        big.resize(8192, 0);
        // SAFETY: `big` holds 65536 bytes, more than the clamp reads.
        let r = unsafe { perfbuf_decode(big.as_ptr().cast(), usize::MAX, &c_attr(t), &mut o) };
        assert_eq!(r, 0);
    }

    #[test]
    fn errors_set_errno_and_zero_out() {
        let t = PERF_SAMPLE_IP;
        let rec = record(PERF_RECORD_SAMPLE, 1, &[5]);
        let mut o = out();
        o.ip = 77;
        // Short rec_len: EBADMSG, header filled, the rest zeroed.
        assert_eq!(call(&rec, 15, &c_attr(t), &mut o), -libc::EBADMSG);
        assert_eq!(get_errno(), libc::EBADMSG);
        assert_eq!(
            (o.record_type, o.size, o.ip, o.sz),
            (PERF_RECORD_SAMPLE, 16, 0, size_of::<perfbuf_sample>())
        );
        assert_eq!(call(&rec, 0, &c_attr(t), &mut o), -libc::EBADMSG);
        assert_eq!(o.record_type, 0);
        // Unsupported record type (PERF_RECORD_AUX).
        let aux = record(11, 0, &[0]);
        assert_eq!(call(&aux, 16, &c_attr(t), &mut o), -libc::EOPNOTSUPP);
        assert_eq!((get_errno(), o.record_type), (libc::EOPNOTSUPP, 11));
        assert_eq!(call(&rec, 16, &c_attr(1 << 30), &mut o), -libc::EOPNOTSUPP);
        // NULL pointers and misalignment.
        // SAFETY: NULL arguments are allowed by the contract.
        unsafe {
            assert_eq!(perfbuf_decode(core::ptr::null(), 16, &c_attr(t), &mut o), -libc::EINVAL);
            assert_eq!(perfbuf_decode(rec.as_ptr().cast(), 16, core::ptr::null(), &mut o), -libc::EINVAL);
            assert_eq!(
                perfbuf_decode(rec.as_ptr().cast(), 16, &c_attr(t), core::ptr::null_mut()),
                -libc::EINVAL
            );
        }
        let bytes = bytes_of(&[0, rec[0], rec[1]]);
        let base = bytes.as_ptr();
        let misaligned = (1..8).map(|k| base.wrapping_add(k)).find(|p| !p.cast::<u64>().is_aligned());
        // SAFETY: `bytes` holds 24 bytes, so 16 from any of its first 8 are readable.
        let r = unsafe {
            perfbuf_decode(misaligned.expect("a misaligned address").cast(), 16, &c_attr(t), &mut o)
        };
        assert_eq!((r, get_errno()), (-libc::EINVAL, libc::EINVAL));
        // out->sz too small.
        o.sz = 23;
        assert_eq!(call(&rec, 16, &c_attr(t), &mut o), -libc::EINVAL);
    }

    #[test]
    fn out_sz_limits_what_is_written() {
        let rec = record(PERF_RECORD_SAMPLE, 1, &[5]);
        let mut o = out();
        o.ip = 77;
        o.sz = 24;
        assert_eq!(call(&rec, 16, &c_attr(PERF_SAMPLE_IP), &mut o), 0);
        assert_eq!((o.present, o.ip, o.sz), (PERF_SAMPLE_IP, 77, 24));
    }

    #[test]
    fn decode_attr_sz_rules() {
        let rec = record(PERF_RECORD_SAMPLE, 1, &[5]);
        let mut o = out();
        // sz below 8 or above the limit.
        for sz in [0, 7, 4097] {
            let a = perfbuf_decode_attr { sz, ..c_attr(PERF_SAMPLE_IP) };
            assert_eq!(call(&rec, 16, &a, &mut o), -libc::EINVAL, "sz {sz}");
        }
        // An older, shorter struct: sample_type missing means no fields, so
        // the 8 bytes after the header are trailing.
        let a = perfbuf_decode_attr { sz: 8, ..c_attr(PERF_SAMPLE_IP) };
        assert_eq!(call(&rec, 16, &a, &mut o), -libc::EBADMSG);
        let a = perfbuf_decode_attr { sz: 16, ..c_attr(PERF_SAMPLE_IP) };
        assert_eq!(call(&rec, 16, &a, &mut o), 0);
        // A newer, longer struct with a zero tail is fine, non-zero is not.
        let mut longer = [0u64; 9];
        longer[0] = 72;
        longer[1] = PERF_SAMPLE_IP;
        // SAFETY: `longer` is 72 readable bytes starting with sz.
        let r = unsafe { perfbuf_decode(rec.as_ptr().cast(), 16, longer.as_ptr().cast(), &mut o) };
        assert_eq!(r, 0);
        longer[8] = 1;
        // SAFETY: as above.
        let r = unsafe { perfbuf_decode(rec.as_ptr().cast(), 16, longer.as_ptr().cast(), &mut o) };
        assert_eq!(r, -libc::EINVAL);
        // `reserved` is beyond the known fields too.
        let mut bytes = bytes_of(&[56, PERF_SAMPLE_IP, 0, 0, 0, 0, 0]);
        bytes[52] = 1;
        assert_eq!(parse_decode_attr(&bytes).map_err(|e| e.errno()).err(), Some(libc::EINVAL));
        bytes[52] = 0;
        bytes[48] = 2;
        assert!(parse_decode_attr(&bytes).expect("valid").sample_id_all);
    }

    #[test]
    fn lost_with_sample_id() {
        let t =
            PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_RAW;
        let a = perfbuf_decode_attr { sample_id_all: 1, ..c_attr(t) };
        let tid = u64::from_ne_bytes([9, 0, 0, 0, 10, 0, 0, 0]);
        let rec = record(PERF_RECORD_LOST, 0, &[77, 5, tid, 1000, 1, 77]);
        let mut o = out();
        assert_eq!(call(&rec, rec.len() * 8, &a, &mut o), 0);
        assert_eq!((o.record_type, o.lost_id, o.lost), (PERF_RECORD_LOST, 77, 5));
        assert_eq!(
            (o.present, o.pid, o.tid, o.time, o.cpu, o.identifier),
            (t & SAMPLE_ID_BITS, 9, 10, 1000, 1, 77)
        );
        let rec = record(PERF_RECORD_THROTTLE, 0, &[1, 2, 3, tid, 1000, 1, 77]);
        assert_eq!(call(&rec, rec.len() * 8, &a, &mut o), 0);
        assert_eq!((o.throttle_time, o.throttle_id, o.throttle_stream_id, o.time), (1, 2, 3, 1000));
        let rec = record(PERF_RECORD_LOST_SAMPLES, 0, &[4, tid, 1000, 1, 77]);
        assert_eq!(call(&rec, rec.len() * 8, &a, &mut o), 0);
        assert_eq!((o.record_type, o.lost), (PERF_RECORD_LOST_SAMPLES, 4));
    }

    #[test]
    fn group_branch_regs_stack_weight_aux() {
        let t = PERF_SAMPLE_READ
            | PERF_SAMPLE_BRANCH_STACK
            | PERF_SAMPLE_REGS_USER
            | PERF_SAMPLE_STACK_USER
            | PERF_SAMPLE_WEIGHT_STRUCT
            | PERF_SAMPLE_REGS_INTR
            | PERF_SAMPLE_AUX;
        let a = perfbuf_decode_attr {
            read_format: PERF_FORMAT_GROUP | PERF_FORMAT_ID,
            branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX | PERF_SAMPLE_BRANCH_COUNTERS,
            sample_regs_user: 0b11,
            sample_regs_intr: 0b1,
            ..c_attr(t)
        };
        let body = [
            2,
            10,
            100,
            11,
            101, // group
            1,
            5,
            0xa,
            0xb,
            0xc,
            9, // branch: nr, hw_idx, entry, counter
            2,
            0x51,
            0x52, // regs_user
            8,
            0x5757,
            8,                     // stack_user
            0x0003_0002_0000_0001, // weight
            2,
            0x61, // regs_intr
            8,
            0xaa, // aux
        ];
        let rec = record(PERF_RECORD_SAMPLE, 0, &body);
        let mut o = out();
        assert_eq!(call(&rec, rec.len() * 8, &a, &mut o), 0);
        let all =
            PERFBUF_DECODE_F_READ_GROUP | PERFBUF_DECODE_F_BRANCH_HW_IDX | PERFBUF_DECODE_F_BRANCH_COUNTERS;
        assert_eq!(o.flags, all);
        assert_eq!((o.read_nr, o.read_stride, o.read_value, o.read_id), (2, 2, 10, 100));
        assert_eq!(o.read_group, rec[2..].as_ptr());
        assert_eq!((o.branch_nr, o.branch_hw_idx), (1, 5));
        assert_eq!((o.branch_entries, o.branch_counters), (rec[8..].as_ptr(), rec[11..].as_ptr()));
        assert_eq!((o.regs_user_abi, o.regs_user_nr, o.regs_user), (2, 2, rec[13..].as_ptr()));
        assert_eq!((o.stack_user_size, o.stack_user_dyn_size), (8, 8));
        assert_eq!((o.weight_var1_dw, o.weight_var2_w, o.weight_var3_w), (1, 2, 3));
        assert_eq!((o.regs_intr_abi, o.regs_intr_nr), (2, 1));
        assert_eq!((o.aux_size, o.aux.cast::<u64>()), (8, rec[22..].as_ptr()));
        // Every truncation is EBADMSG, through rec_len and through header.size.
        for len in 0..rec.len() * 8 {
            assert_eq!(call(&rec, len, &a, &mut o), -libc::EBADMSG, "rec_len {len}");
            if len >= 8 {
                let mut cut = rec.clone();
                cut[0] = cut[0] & ((1 << 48) - 1) | (len as u64) << 48;
                assert_eq!(call(&cut, len, &a, &mut o), -libc::EBADMSG, "size {len}");
            }
        }
    }

    #[test]
    fn attr_from_perf_event_attr() {
        // A PERF_ATTR_SIZE_VER7 attr: sample_type, read_format, flags with
        // sample_id_all, branch_sample_type, regs masks.
        let mut attr = [0u64; 16];
        attr[0] = 1 | 128 << 32; // type, size
        attr[3] = PERF_SAMPLE_RAW | PERF_SAMPLE_TIME;
        attr[4] = PERF_FORMAT_ID;
        attr[5] = 1 << 18 | 1; // sample_id_all, disabled
        attr[9] = PERF_SAMPLE_BRANCH_HW_INDEX;
        attr[10] = 0b111;
        attr[12] = 0b1;
        let mut out = perfbuf_decode_attr { sz: size_of::<perfbuf_decode_attr>(), ..Default::default() };
        // SAFETY: `attr` is 128 readable bytes, `out` a whole struct.
        assert_eq!(unsafe { perfbuf_decode_attr_from(attr.as_ptr().cast(), &mut out) }, 0);
        assert_eq!((out.sample_type, out.read_format, out.sample_id_all), (attr[3], PERF_FORMAT_ID, 1));
        assert_eq!((out.branch_sample_type, out.sample_regs_user, out.sample_regs_intr), (1 << 17, 7, 1));
        assert_eq!(out.sz, size_of::<perfbuf_decode_attr>());
        // A VER0 attr (size 64, or 0): the later fields read as 0.
        for size in [0u64, 64] {
            attr[0] = 1 | size << 32;
            // SAFETY: as above.
            assert_eq!(unsafe { perfbuf_decode_attr_from(attr.as_ptr().cast(), &mut out) }, 0);
            assert_eq!((out.sample_type, out.branch_sample_type, out.sample_regs_user), (attr[3], 0, 0));
        }
        // VER3 (96): regs_user but not regs_intr.
        attr[0] = 1 | 96 << 32;
        // SAFETY: as above.
        assert_eq!(unsafe { perfbuf_decode_attr_from(attr.as_ptr().cast(), &mut out) }, 0);
        assert_eq!((out.sample_regs_user, out.sample_regs_intr), (7, 0));
        // Bad size, NULLs, small out.
        attr[0] = 1 | 63 << 32;
        // SAFETY: as above; NULL arguments are allowed.
        unsafe {
            assert_eq!(perfbuf_decode_attr_from(attr.as_ptr().cast(), &mut out), -libc::EINVAL);
            assert_eq!(perfbuf_decode_attr_from(core::ptr::null(), &mut out), -libc::EINVAL);
            assert_eq!(perfbuf_decode_attr_from(attr.as_ptr().cast(), core::ptr::null_mut()), -libc::EINVAL);
        }
        out.sz = 7;
        attr[0] = 1 | 128 << 32;
        // SAFETY: as above.
        assert_eq!(unsafe { perfbuf_decode_attr_from(attr.as_ptr().cast(), &mut out) }, -libc::EINVAL);
        // A short out gets only its prefix.
        let mut short = perfbuf_decode_attr { sz: 16, read_format: 99, ..Default::default() };
        // SAFETY: as above.
        assert_eq!(unsafe { perfbuf_decode_attr_from(attr.as_ptr().cast(), &mut short) }, 0);
        assert_eq!((short.sz, short.sample_type, short.read_format), (16, attr[3], 99));
    }
}
