//! Decoding of whole perf records by the layout their event's attr selects.
//!
//! A `PERF_RECORD_SAMPLE` carries the fields its event's `sample_type`
//! selects, in the order the kernel writes them (`perf_output_sample`):
//! IDENTIFIER, IP, TID, TIME, ADDR, ID, STREAM_ID, CPU, PERIOD, READ,
//! CALLCHAIN, RAW, BRANCH_STACK, REGS_USER, STACK_USER, WEIGHT or
//! WEIGHT_STRUCT, DATA_SRC, TRANSACTION, REGS_INTR, PHYS_ADDR, CGROUP,
//! DATA_PAGE_SIZE, CODE_PAGE_SIZE, AUX. (The uapi header's comment lists AUX
//! before the page sizes and omits CGROUP; the kernel and perf write and read
//! AUX last.) Other records end with a `sample_id` trailer when the event has
//! `sample_id_all`: TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER, each if set in
//! `sample_type`.
//!
//! [`decode`] is pure and safe: every read is bounds-checked against
//! `header.size` (which must not exceed the bytes given), counts are
//! multiplied with overflow checks, a record must be consumed exactly, and
//! the result borrows the record. Arrays of `u64` must start 8-byte aligned
//! relative to the record, as the kernel always lays them out, so a caller
//! holding an 8-aligned record can view them as `u64` arrays.
//!
//! Layout details the kernel has that the uapi comment does not spell out:
//! - RAW data is padded by the kernel so that the `u32` size plus the data
//!   end on 8 bytes; `size` counts the padding.
//! - REGS_USER / REGS_INTR: the registers follow `abi` only when `abi` is not
//!   `PERF_SAMPLE_REGS_ABI_NONE`.
//! - STACK_USER: `dyn_size` follows the data only when `size` is not 0.
//! - BRANCH_STACK: `hw_idx` is written with `PERF_SAMPLE_BRANCH_HW_INDEX`,
//!   except when the PMU had no stack, where the kernel writes only `nr = 0`;
//!   such a record decodes too (with `hw_idx` absent). With
//!   `PERF_SAMPLE_BRANCH_COUNTERS` (Linux 6.8) `nr` counters follow the
//!   entries.

#![forbid(unsafe_code)]

mod control;
mod cursor;
mod error;
mod sample;
mod sideband;

pub use control::{Lost, LostSamples, Throttle};
pub use error::{DecodeError, Field};
use sample::decode_sample;
pub use sample::{
    BranchEntry, BranchStack, Read, ReadGroup, ReadValue, ReadValues, Regs, Sample, StackUser, U64s,
    WeightStruct, weight_struct,
};
pub use sideband::{BpfEvent, CgroupRecord, Comm, FileId, Ksymbol, Mmap, Namespaces, Switch, Task};

pub use crate::kernel::{
    BUILD_ID_SIZE_MAX, PERF_RECORD_BPF_EVENT, PERF_RECORD_CGROUP, PERF_RECORD_COMM, PERF_RECORD_EXIT,
    PERF_RECORD_FORK, PERF_RECORD_KSYMBOL, PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MISC_MMAP_BUILD_ID,
    PERF_RECORD_MISC_MMAP_DATA, PERF_RECORD_MISC_SWITCH_OUT, PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    PERF_RECORD_MMAP, PERF_RECORD_MMAP2, PERF_RECORD_NAMESPACES, PERF_RECORD_SWITCH,
    PERF_RECORD_SWITCH_CPU_WIDE, PERF_SAMPLE_BRANCH_COUNTERS, PERF_SAMPLE_BRANCH_HW_INDEX,
    PERF_SAMPLE_REGS_ABI_NONE,
};
pub use crate::kernel::{
    PERF_FORMAT_GROUP, PERF_FORMAT_ID, PERF_FORMAT_LOST, PERF_FORMAT_TOTAL_TIME_ENABLED,
    PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES, PERF_RECORD_SAMPLE,
    PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE, PERF_SAMPLE_ADDR, PERF_SAMPLE_AUX,
    PERF_SAMPLE_BRANCH_STACK, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CGROUP, PERF_SAMPLE_CODE_PAGE_SIZE,
    PERF_SAMPLE_CPU, PERF_SAMPLE_DATA_PAGE_SIZE, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_ID,
    PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_PHYS_ADDR, PERF_SAMPLE_RAW,
    PERF_SAMPLE_READ, PERF_SAMPLE_REGS_INTR, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER,
    PERF_SAMPLE_STREAM_ID, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_TRANSACTION, PERF_SAMPLE_WEIGHT,
    PERF_SAMPLE_WEIGHT_STRUCT,
};

/// Every `PERF_SAMPLE_*` bit this decoder knows the layout of.
pub const KNOWN_SAMPLE_TYPE: u64 = (1 << 25) - 1;
/// The `sample_type` bits a `sample_id` trailer can carry.
pub const SAMPLE_ID_BITS: u64 = PERF_SAMPLE_TID
    | PERF_SAMPLE_TIME
    | PERF_SAMPLE_ID
    | PERF_SAMPLE_STREAM_ID
    | PERF_SAMPLE_CPU
    | PERF_SAMPLE_IDENTIFIER;

/// Every `PERF_FORMAT_*` bit this decoder knows the layout of.
pub const KNOWN_READ_FORMAT: u64 = (1 << 5) - 1;

/// Size of `struct perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// The fields of the event's `perf_event_attr` that determine the layout of
/// its records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeAttr {
    /// `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// `PERF_FORMAT_*` bits (used with `PERF_SAMPLE_READ`).
    pub read_format: u64,
    /// Non-sample records end with a `sample_id` trailer.
    pub sample_id_all: bool,
    /// Registers dumped with `PERF_SAMPLE_REGS_USER` (one per bit).
    pub sample_regs_user: u64,
    /// Registers dumped with `PERF_SAMPLE_REGS_INTR` (one per bit).
    pub sample_regs_intr: u64,
    /// `PERF_SAMPLE_BRANCH_*` bits (`HW_INDEX` and `COUNTERS` matter).
    pub branch_sample_type: u64,
}

/// `struct perf_event_header`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// `PERF_RECORD_*`.
    pub type_: u32,
    /// `PERF_RECORD_MISC_*` bits.
    pub misc: u16,
    /// Size of the record, header included.
    pub size: u16,
}

/// A `u32` pid and tid (`PERF_SAMPLE_TID`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PidTid {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
}

/// A `u32` cpu and its reserved word (`PERF_SAMPLE_CPU`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuRes {
    /// CPU the record was written on.
    pub cpu: u32,
    /// Reserved (0).
    pub res: u32,
}

/// The `sample_id` trailer of a non-sample record (all `None` without
/// `sample_id_all`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    /// The `PERF_SAMPLE_*` bits of the fields present.
    pub present: u64,
    /// `PERF_SAMPLE_TID`.
    pub tid: Option<PidTid>,
    /// `PERF_SAMPLE_TIME`.
    pub time: Option<u64>,
    /// `PERF_SAMPLE_ID`.
    pub id: Option<u64>,
    /// `PERF_SAMPLE_STREAM_ID`.
    pub stream_id: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<CpuRes>,
    /// `PERF_SAMPLE_IDENTIFIER`.
    pub identifier: Option<u64>,
}

/// The decoded payload of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant, reason = "returned by value; boxing would allocate per record")]
pub enum Body<'a> {
    /// `PERF_RECORD_SAMPLE`.
    Sample(Sample<'a>),
    /// `PERF_RECORD_LOST`.
    Lost(Lost),
    /// `PERF_RECORD_THROTTLE`.
    Throttle(Throttle),
    /// `PERF_RECORD_UNTHROTTLE`.
    Unthrottle(Throttle),
    /// `PERF_RECORD_LOST_SAMPLES`.
    LostSamples(LostSamples),
    /// `PERF_RECORD_COMM`.
    Comm(Comm<'a>),
    /// `PERF_RECORD_FORK`.
    Fork(Task),
    /// `PERF_RECORD_EXIT`.
    Exit(Task),
    /// `PERF_RECORD_MMAP`.
    Mmap(Mmap<'a>),
    /// `PERF_RECORD_MMAP2`.
    Mmap2(Mmap<'a>),
    /// `PERF_RECORD_SWITCH`.
    Switch(Switch),
    /// `PERF_RECORD_SWITCH_CPU_WIDE`.
    SwitchCpuWide(Switch),
    /// `PERF_RECORD_NAMESPACES`.
    Namespaces(Namespaces<'a>),
    /// `PERF_RECORD_KSYMBOL`.
    Ksymbol(Ksymbol<'a>),
    /// `PERF_RECORD_BPF_EVENT`.
    BpfEvent(BpfEvent),
    /// `PERF_RECORD_CGROUP`.
    Cgroup(CgroupRecord<'a>),
}

/// A decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its header.
    pub header: Header,
    /// Its `header.size` bytes, header included.
    pub bytes: &'a [u8],
    /// Its fields.
    pub body: Body<'a>,
}

impl Record<'_> {
    /// The `PERF_SAMPLE_*` bits of the fields decoded: `sample_type` for a
    /// sample, the `sample_id` bits present for other records.
    pub fn present(&self) -> u64 {
        match (&self.body, self.sample_id()) {
            (Body::Sample(s), _) => s.sample_type,
            (_, Some(id)) => id.present,
            (_, None) => 0,
        }
    }

    /// The `sample_id` trailer, for records other than samples.
    pub fn sample_id(&self) -> Option<&SampleId> {
        Some(match &self.body {
            Body::Sample(_) => return None,
            Body::Lost(l) => &l.sample_id,
            Body::Throttle(t) | Body::Unthrottle(t) => &t.sample_id,
            Body::LostSamples(l) => &l.sample_id,
            Body::Comm(c) => &c.sample_id,
            Body::Fork(t) | Body::Exit(t) => &t.sample_id,
            Body::Mmap(m) | Body::Mmap2(m) => &m.sample_id,
            Body::Switch(s) | Body::SwitchCpuWide(s) => &s.sample_id,
            Body::Namespaces(n) => &n.sample_id,
            Body::Ksymbol(k) => &k.sample_id,
            Body::BpfEvent(b) => &b.sample_id,
            Body::Cgroup(c) => &c.sample_id,
        })
    }

    /// Whether it is a side-band record (a task's or an address space's
    /// news), as opposed to a sample or a record about the ring.
    pub fn is_sideband(&self) -> bool {
        !matches!(
            self.body,
            Body::Sample(_) | Body::Lost(_) | Body::Throttle(_) | Body::Unthrottle(_) | Body::LostSamples(_)
        )
    }
}

/// Reads the header of `rec`, if it has 8 bytes.
pub fn header(rec: &[u8]) -> Option<Header> {
    let h = rec.get(..HEADER_SIZE)?;
    Some(Header {
        type_: u32::from_ne_bytes([h[0], h[1], h[2], h[3]]),
        misc: u16::from_ne_bytes([h[4], h[5]]),
        size: u16::from_ne_bytes([h[6], h[7]]),
    })
}

/// Decodes the record at the start of `rec` (header included). `rec` may be
/// longer than the record: only `header.size` bytes are read, and it is an
/// error for `header.size` to exceed `rec.len()`.
pub fn decode<'a>(rec: &'a [u8], attr: &DecodeAttr) -> Result<Record<'a>, DecodeError> {
    let header = header(rec).ok_or(DecodeError::ShortHeader { len: rec.len() })?;
    let size = usize::from(header.size);
    if size < HEADER_SIZE || size > rec.len() {
        return Err(DecodeError::BadSize { size: header.size, len: rec.len() });
    }
    let bytes = &rec[..size];
    let body = match header.type_ {
        PERF_RECORD_SAMPLE => Body::Sample(decode_sample(bytes, attr)?),
        type_ => control::decode_control(type_, bytes, attr)
            .or_else(|| sideband::decode_sideband(type_, header.misc, bytes, attr))
            .unwrap_or(Err(DecodeError::UnsupportedType { type_ }))?,
    };
    Ok(Record { header, bytes, body })
}

#[cfg(test)]
mod tests;
