//! Side-band records for C: the `PERFBUF_EVENTS_SB_*` bits of
//! `perfbuf_events_opts.flags` that ask a set for them, and
//! `struct perfbuf_sideband`, which `perfbuf_decode_sideband` and
//! `perfbuf_events_decode_sideband` fill from one record.

#![allow(non_camel_case_types, reason = "these are the C names")]

use super::abi::perf_event_header;
use super::decode::{parse_decode_attr, record_bytes};
use super::events::{perfbuf_events, set_ref};
use super::ffi::{out_sz, ret_errno, sized_in, write_sized};
use core::ffi::{c_char, c_int, c_void};
use core::mem::offset_of;
use perfbuf::decode::{self, Body, DecodeAttr, FileId, Record};
use perfbuf::events::Sideband;
use perfbuf::{Error, Result};

/// `perfbuf_events_opts.flags`: `PERF_RECORD_COMM` (with
/// `PERFBUF_SIDEBAND_F_EXEC` when exec set the name).
pub const PERFBUF_EVENTS_SB_COMM: u32 = 1 << 2;
/// `perfbuf_events_opts.flags`: `PERF_RECORD_FORK` and `PERF_RECORD_EXIT`.
pub const PERFBUF_EVENTS_SB_TASK: u32 = 1 << 3;
/// `perfbuf_events_opts.flags`: `PERF_RECORD_MMAP2` of executable mappings.
pub const PERFBUF_EVENTS_SB_MMAP: u32 = 1 << 4;
/// `perfbuf_events_opts.flags`: with `PERFBUF_EVENTS_SB_MMAP`, data mappings too.
pub const PERFBUF_EVENTS_SB_MMAP_DATA: u32 = 1 << 5;
/// `perfbuf_events_opts.flags`: with `PERFBUF_EVENTS_SB_MMAP`, build ids
/// instead of device and inode where the kernel finds them (Linux 5.12).
pub const PERFBUF_EVENTS_SB_BUILD_ID: u32 = 1 << 6;
/// `perfbuf_events_opts.flags`: context switches (`PERF_RECORD_SWITCH_CPU_WIDE`).
pub const PERFBUF_EVENTS_SB_SWITCH: u32 = 1 << 7;
/// `perfbuf_events_opts.flags`: `PERF_RECORD_NAMESPACES`.
pub const PERFBUF_EVENTS_SB_NAMESPACES: u32 = 1 << 8;
/// `perfbuf_events_opts.flags`: `PERF_RECORD_CGROUP` (Linux 5.7).
pub const PERFBUF_EVENTS_SB_CGROUP: u32 = 1 << 9;
/// `perfbuf_events_opts.flags`: `PERF_RECORD_KSYMBOL`.
pub const PERFBUF_EVENTS_SB_KSYMBOL: u32 = 1 << 10;
/// `perfbuf_events_opts.flags`: `PERF_RECORD_BPF_EVENT`.
pub const PERFBUF_EVENTS_SB_BPF_EVENT: u32 = 1 << 11;

// The C names are the Rust ones, in order, two bits up.
const _: () = assert!(
    PERFBUF_EVENTS_SB_COMM == Sideband::COMM.bits() << 2
        && PERFBUF_EVENTS_SB_TASK == Sideband::TASK.bits() << 2
        && PERFBUF_EVENTS_SB_MMAP == Sideband::MMAP.bits() << 2
        && PERFBUF_EVENTS_SB_MMAP_DATA == Sideband::MMAP_DATA.bits() << 2
        && PERFBUF_EVENTS_SB_BUILD_ID == Sideband::BUILD_ID.bits() << 2
        && PERFBUF_EVENTS_SB_SWITCH == Sideband::SWITCH.bits() << 2
        && PERFBUF_EVENTS_SB_NAMESPACES == Sideband::NAMESPACES.bits() << 2
        && PERFBUF_EVENTS_SB_CGROUP == Sideband::CGROUP.bits() << 2
        && PERFBUF_EVENTS_SB_KSYMBOL == Sideband::KSYMBOL.bits() << 2
        && PERFBUF_EVENTS_SB_BPF_EVENT == Sideband::BPF_EVENT.bits() << 2
);

/// `perfbuf_sideband.flags`: COMM set by exec.
pub const PERFBUF_SIDEBAND_F_EXEC: u32 = 1;
/// `perfbuf_sideband.flags`: MMAP of a data (not executable) mapping.
pub const PERFBUF_SIDEBAND_F_DATA: u32 = 2;
/// `perfbuf_sideband.flags`: MMAP2 with a build id (`build_id`) instead of
/// device and inode.
pub const PERFBUF_SIDEBAND_F_BUILD_ID: u32 = 4;
/// `perfbuf_sideband.flags`: a switch out (else in).
pub const PERFBUF_SIDEBAND_F_SWITCH_OUT: u32 = 8;
/// `perfbuf_sideband.flags`: a switch out of a task still runnable.
pub const PERFBUF_SIDEBAND_F_PREEMPT: u32 = 16;
/// `perfbuf_sideband.flags`: `next_prev_pid`/`next_prev_tid` are valid
/// (`PERF_RECORD_SWITCH_CPU_WIDE`).
pub const PERFBUF_SIDEBAND_F_NEXT_PREV: u32 = 32;

/// One side-band record, decoded. Set `sz = sizeof(struct
/// perfbuf_sideband)`; only that many bytes are written. Fields a record
/// type does not have are 0 / NULL. Pointers point into the record.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct perfbuf_sideband {
    /// Size of the caller's struct (at least 16).
    pub sz: usize,
    /// `header.type`: `PERF_RECORD_COMM`, `_FORK`, `_EXIT`, `_MMAP`,
    /// `_MMAP2`, `_SWITCH`, `_SWITCH_CPU_WIDE`, `_NAMESPACES`, `_KSYMBOL`,
    /// `_BPF_EVENT` or `_CGROUP`.
    pub record_type: u32,
    /// `header.misc`.
    pub misc: u16,
    /// `header.size`.
    pub size: u16,
    /// `PERFBUF_SIDEBAND_F_*` bits.
    pub flags: u32,
    /// With `perfbuf_events_decode_sideband`: the id of the event that
    /// asked for it, or -1 for the set's own (`PERFBUF_EVENTS_SB_*`).
    pub event: i32,
    /// The task the record is about (COMM, FORK, EXIT, MMAP*, NAMESPACES);
    /// for the others the trailer's.
    pub pid: u32,
    /// Its thread id.
    pub tid: u32,
    /// FORK / EXIT: the parent's process id.
    pub ppid: u32,
    /// FORK / EXIT: the parent's thread id.
    pub ptid: u32,
    /// SWITCH_CPU_WIDE: the next (switching out) or previous (in) task.
    pub next_prev_pid: u32,
    /// Its thread id.
    pub next_prev_tid: u32,
    /// The `sample_id` trailer's time (the set's clock: `CLOCK_MONOTONIC`).
    pub time: u64,
    /// The trailer's CPU.
    pub cpu: u32,
    /// MMAP2: `PROT_*`.
    pub prot: u32,
    /// FORK / EXIT: the record's own time (the perf clock).
    pub task_time: u64,
    /// MMAP*: start address; KSYMBOL: the symbol's address.
    pub addr: u64,
    /// MMAP*: length; KSYMBOL: the symbol's length.
    pub len: u64,
    /// MMAP*: offset into the file, in bytes.
    pub pgoff: u64,
    /// MMAP2: device major number.
    pub maj: u32,
    /// MMAP2: device minor number.
    pub min: u32,
    /// MMAP2: inode number.
    pub ino: u64,
    /// MMAP2: inode generation.
    pub ino_generation: u64,
    /// MMAP2: `MAP_*` flags.
    pub map_flags: u32,
    /// MMAP2 with `PERFBUF_SIDEBAND_F_BUILD_ID`: bytes of `build_id`.
    pub build_id_size: u32,
    /// MMAP2 with `PERFBUF_SIDEBAND_F_BUILD_ID`: the build id.
    pub build_id: *const u8,
    /// COMM: the name; MMAP*: the file; KSYMBOL: the symbol; CGROUP: the
    /// path. NUL-terminated (inside the record).
    pub name: *const c_char,
    /// Bytes of `name`, without its NUL.
    pub name_len: u64,
    /// CGROUP: the cgroup id; BPF_EVENT: the program id.
    pub id: u64,
    /// KSYMBOL: `ksym_type`; BPF_EVENT: `type`.
    pub sub_type: u16,
    /// KSYMBOL / BPF_EVENT: `flags`.
    pub sub_flags: u16,
    /// Reserved, 0.
    pub reserved: u32,
    /// BPF_EVENT: the program's tag.
    pub tag: [u8; 8],
    /// NAMESPACES: `namespaces_nr` `(dev, inode)` word pairs.
    pub namespaces: *const u64,
    /// NAMESPACES: how many.
    pub namespaces_nr: u64,
    /// The trailer's `PERF_SAMPLE_IDENTIFIER`: the kernel event's id.
    pub identifier: u64,
}

const SIDEBAND_MIN_SZ: usize = 16;
const _: () = assert!(offset_of!(perfbuf_sideband, size) + 2 == SIDEBAND_MIN_SZ);

impl perfbuf_sideband {
    fn empty(sz: usize) -> Self {
        perfbuf_sideband {
            sz,
            record_type: 0,
            misc: 0,
            size: 0,
            flags: 0,
            event: -1,
            pid: 0,
            tid: 0,
            ppid: 0,
            ptid: 0,
            next_prev_pid: 0,
            next_prev_tid: 0,
            time: 0,
            cpu: 0,
            prot: 0,
            task_time: 0,
            addr: 0,
            len: 0,
            pgoff: 0,
            maj: 0,
            min: 0,
            ino: 0,
            ino_generation: 0,
            map_flags: 0,
            build_id_size: 0,
            build_id: core::ptr::null(),
            name: core::ptr::null(),
            name_len: 0,
            id: 0,
            sub_type: 0,
            sub_flags: 0,
            reserved: 0,
            tag: [0; 8],
            namespaces: core::ptr::null(),
            namespaces_nr: 0,
            identifier: 0,
        }
    }
}

/// Converts a decoded side-band record; EOPNOTSUPP for another kind.
pub(crate) fn to_c(rec: &Record<'_>, sz: usize) -> Result<perfbuf_sideband> {
    if !rec.is_sideband() {
        return Err(Error::from_errno(libc::EOPNOTSUPP));
    }
    let mut o = perfbuf_sideband::empty(sz);
    (o.record_type, o.misc, o.size) = (rec.header.type_, rec.header.misc, rec.header.size);
    if let Some(id) = rec.sample_id() {
        let tid = id.tid.unwrap_or_default();
        (o.pid, o.tid) = (tid.pid, tid.tid);
        o.time = id.time.unwrap_or(0);
        o.cpu = id.cpu.unwrap_or_default().cpu;
        o.identifier = id.identifier.unwrap_or(0);
    }
    let name =
        |o: &mut perfbuf_sideband, n: &[u8]| (o.name, o.name_len) = (n.as_ptr().cast(), n.len() as u64);
    match rec.body {
        Body::Comm(c) => {
            (o.pid, o.tid) = (c.pid, c.tid);
            name(&mut o, c.comm);
            o.flags |= if c.exec { PERFBUF_SIDEBAND_F_EXEC } else { 0 };
        }
        Body::Fork(t) | Body::Exit(t) => {
            (o.pid, o.tid, o.ppid, o.ptid, o.task_time) = (t.pid, t.tid, t.ppid, t.ptid, t.time);
        }
        Body::Mmap(m) | Body::Mmap2(m) => {
            (o.pid, o.tid, o.addr, o.len, o.pgoff) = (m.pid, m.tid, m.addr, m.len, m.pgoff);
            (o.prot, o.map_flags) = (m.prot, m.flags);
            name(&mut o, m.filename);
            o.flags |= if m.data { PERFBUF_SIDEBAND_F_DATA } else { 0 };
            match m.file {
                Some(FileId::Inode { maj, min, ino, ino_generation }) => {
                    (o.maj, o.min, o.ino, o.ino_generation) = (maj, min, ino, ino_generation);
                }
                Some(FileId::BuildId(id)) => {
                    o.flags |= PERFBUF_SIDEBAND_F_BUILD_ID;
                    (o.build_id, o.build_id_size) = (id.as_ptr(), id.len() as u32);
                }
                None => {}
            }
        }
        Body::Switch(s) | Body::SwitchCpuWide(s) => {
            o.flags |= if s.out { PERFBUF_SIDEBAND_F_SWITCH_OUT } else { 0 };
            o.flags |= if s.preempt { PERFBUF_SIDEBAND_F_PREEMPT } else { 0 };
            if let Some(t) = s.next_prev {
                o.flags |= PERFBUF_SIDEBAND_F_NEXT_PREV;
                (o.next_prev_pid, o.next_prev_tid) = (t.pid, t.tid);
            }
        }
        Body::Namespaces(n) => {
            (o.pid, o.tid) = (n.pid, n.tid);
            (o.namespaces, o.namespaces_nr) = (n.words.as_bytes().as_ptr().cast(), n.len() as u64);
        }
        Body::Ksymbol(k) => {
            (o.addr, o.len, o.sub_type, o.sub_flags) = (k.addr, u64::from(k.len), k.ksym_type, k.flags);
            name(&mut o, k.name);
        }
        Body::BpfEvent(b) => {
            (o.sub_type, o.sub_flags, o.id, o.tag) = (b.type_, b.flags, u64::from(b.id), b.tag)
        }
        Body::Cgroup(c) => {
            o.id = c.id;
            name(&mut o, c.path);
        }
        _ => {}
    }
    Ok(o)
}

/// Decodes `rec` with `attr` and writes the result.
///
/// # Safety
/// `out` is writable for `sz` bytes.
unsafe fn decode_into(
    rec: &[u8],
    attr: &DecodeAttr,
    out: *mut perfbuf_sideband,
    sz: usize,
    event: i32,
) -> Result<c_int> {
    let decoded = decode::decode(rec, attr).map_err(|e| super::decode::errno_of(&e))?;
    let mut value = to_c(&decoded, sz)?;
    value.event = event;
    // SAFETY: `out` is writable for `sz` bytes (contract).
    unsafe { write_sized(out, &value, sz) };
    Ok(0)
}

/// Decodes side-band record `rec` (`rec_len` readable bytes, 8-aligned)
/// with the layout `attr` (its `sample_type` and `sample_id_all` say what
/// trailer ends the record) into `*out` (set `out->sz`). Returns 0,
/// -EOPNOTSUPP for a record that is not a side-band record (a sample, a
/// LOST: use `perfbuf_decode`), -EBADMSG for a malformed one, -EINVAL for
/// bad arguments.
///
/// # Safety
/// `rec` is NULL or readable for `rec_len` bytes; `attr` is NULL or
/// readable for `attr->sz` bytes; `out` is NULL or writable for `out->sz`
/// bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_decode_sideband(
    rec: *const perf_event_header,
    rec_len: usize,
    attr: *const super::decode::perfbuf_decode_attr,
    out: *mut perfbuf_sideband,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract (`sz` is out's first field).
        let sz = unsafe { out_sz(out.cast(), SIDEBAND_MIN_SZ) }?;
        // SAFETY: per this function's contract.
        let attr =
            unsafe { sized_in(attr.cast::<c_void>()) }?.ok_or(Error::INVAL).and_then(parse_decode_attr)?;
        // SAFETY: per this function's contract.
        let rec = unsafe { record_bytes(rec, rec_len) }?;
        // SAFETY: `out` is writable for `out->sz` = `sz` bytes.
        unsafe { decode_into(rec, &attr, out, sz, -1) }
    })())
}

/// Decodes side-band record `rec` of the set's rings (see
/// `PERFBUF_EVENTS_SB_*`) into `*out` (set `out->sz`), with the layout of
/// what wrote it: `out->event` is -1 for the set's own side-band records.
/// Returns 0, -ENOENT for a record of nothing in the set, -EOPNOTSUPP for
/// a record that is not a side-band record (use `perfbuf_events_decode`),
/// -EBADMSG for a malformed one.
///
/// # Safety
/// `set` is NULL or a live set; `rec` is NULL or readable for `rec_len`
/// bytes; `out` is NULL or writable for `out->sz` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn perfbuf_events_decode_sideband(
    set: *const perfbuf_events,
    rec: *const perf_event_header,
    rec_len: usize,
    out: *mut perfbuf_sideband,
) -> c_int {
    ret_errno((|| {
        // SAFETY: per this function's contract.
        let (set, rec) = unsafe { (set_ref(set)?, record_bytes(rec, rec_len)?) };
        // SAFETY: per this function's contract (`sz` is out's first field).
        let sz = unsafe { out_sz(out.cast(), SIDEBAND_MIN_SZ) }?;
        let (event, attr) = set.decoder().layout_of(rec).ok_or(Error::from_errno(libc::ENOENT))?;
        let event = event.map_or(-1, |e| e.get() as i32);
        // SAFETY: `out` is writable for `out->sz` = `sz` bytes.
        unsafe { decode_into(rec, &attr, out, sz, event) }
    })())
}
