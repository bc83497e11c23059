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

use core::fmt;

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

/// `PERF_SAMPLE_BRANCH_HW_INDEX` (in `branch_sample_type`).
pub const PERF_SAMPLE_BRANCH_HW_INDEX: u64 = 1 << 17;
/// `PERF_SAMPLE_BRANCH_COUNTERS` (in `branch_sample_type`, Linux 6.8).
pub const PERF_SAMPLE_BRANCH_COUNTERS: u64 = 1 << 19;

/// `PERF_SAMPLE_REGS_ABI_NONE`: no registers follow.
pub const PERF_SAMPLE_REGS_ABI_NONE: u64 = 0;

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

/// A field of a record, to say where decoding failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field {
    /// `struct perf_event_header`.
    Header,
    /// `PERF_SAMPLE_IDENTIFIER`.
    Identifier,
    /// `PERF_SAMPLE_IP`.
    Ip,
    /// `PERF_SAMPLE_TID`: pid, tid.
    Tid,
    /// `PERF_SAMPLE_TIME`.
    Time,
    /// `PERF_SAMPLE_ADDR`.
    Addr,
    /// `PERF_SAMPLE_ID`.
    Id,
    /// `PERF_SAMPLE_STREAM_ID`.
    StreamId,
    /// `PERF_SAMPLE_CPU`: cpu, res.
    Cpu,
    /// `PERF_SAMPLE_PERIOD`.
    Period,
    /// READ: `nr` of a group.
    ReadNr,
    /// READ: the value of a single counter.
    ReadValue,
    /// READ: `time_enabled`.
    ReadTimeEnabled,
    /// READ: `time_running`.
    ReadTimeRunning,
    /// READ: the id of a single counter.
    ReadId,
    /// READ: the lost count of a single counter.
    ReadLost,
    /// READ: the values of a group.
    ReadGroup,
    /// CALLCHAIN: `nr`.
    CallchainNr,
    /// CALLCHAIN: the instruction pointers.
    Callchain,
    /// RAW: the `u32` size.
    RawSize,
    /// RAW: the data.
    RawData,
    /// BRANCH_STACK: `nr`.
    BranchNr,
    /// BRANCH_STACK: `hw_idx`.
    BranchHwIdx,
    /// BRANCH_STACK: the entries.
    BranchEntries,
    /// BRANCH_STACK: the counters.
    BranchCounters,
    /// REGS_USER: `abi`.
    RegsUserAbi,
    /// REGS_USER: the registers.
    RegsUser,
    /// STACK_USER: `size`.
    StackUserSize,
    /// STACK_USER: the data.
    StackUserData,
    /// STACK_USER: `dyn_size`.
    StackUserDynSize,
    /// WEIGHT or WEIGHT_STRUCT.
    Weight,
    /// DATA_SRC.
    DataSrc,
    /// TRANSACTION.
    Transaction,
    /// REGS_INTR: `abi`.
    RegsIntrAbi,
    /// REGS_INTR: the registers.
    RegsIntr,
    /// PHYS_ADDR.
    PhysAddr,
    /// CGROUP.
    Cgroup,
    /// DATA_PAGE_SIZE.
    DataPageSize,
    /// CODE_PAGE_SIZE.
    CodePageSize,
    /// AUX: `size`.
    AuxSize,
    /// AUX: the data.
    AuxData,
    /// LOST: `id`.
    LostId,
    /// LOST / LOST_SAMPLES: `lost`.
    Lost,
    /// THROTTLE / UNTHROTTLE: `time`.
    ThrottleTime,
    /// THROTTLE / UNTHROTTLE: `id`.
    ThrottleId,
    /// THROTTLE / UNTHROTTLE: `stream_id`.
    ThrottleStreamId,
}

/// Why a record could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Fewer than 8 bytes: not even a header.
    ShortHeader {
        /// Bytes given.
        len: usize,
    },
    /// `header.size` is below 8 or beyond the bytes given.
    BadSize {
        /// `header.size`.
        size: u16,
        /// Bytes given.
        len: usize,
    },
    /// A field does not fit in `header.size`.
    Truncated {
        /// The field.
        field: Field,
        /// Its offset in the record.
        offset: usize,
    },
    /// A count whose size in bytes overflows.
    Overflow {
        /// The array it sizes.
        field: Field,
        /// The count read.
        count: u64,
    },
    /// An array of `u64` that would start off an 8-byte boundary (the data
    /// before it has a size the kernel never writes).
    Misaligned {
        /// The array.
        field: Field,
        /// Its offset in the record.
        offset: usize,
    },
    /// A value inconsistent with another (STACK_USER `dyn_size` > `size`).
    Inconsistent {
        /// The field.
        field: Field,
        /// Its value.
        value: u64,
        /// The bound it exceeds.
        limit: u64,
    },
    /// Bytes left over after the last field.
    Trailing {
        /// Bytes the fields use, header included.
        used: usize,
        /// `header.size`.
        size: usize,
    },
    /// A record type this decoder does not decode.
    UnsupportedType {
        /// `header.type`.
        type_: u32,
    },
    /// `sample_type` or `read_format` bits whose layout this decoder does
    /// not know (from a newer kernel).
    UnsupportedLayout {
        /// Unknown `sample_type` bits.
        sample_type: u64,
        /// Unknown `read_format` bits (with `PERF_SAMPLE_READ`).
        read_format: u64,
    },
}

impl DecodeError {
    /// True if the record is malformed (as opposed to undecodable here).
    pub fn is_malformed(&self) -> bool {
        !matches!(self, DecodeError::UnsupportedType { .. } | DecodeError::UnsupportedLayout { .. })
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            DecodeError::ShortHeader { len } => write!(f, "{len} bytes cannot hold a record header"),
            DecodeError::BadSize { size, len } => write!(f, "header.size {size} with {len} bytes given"),
            DecodeError::Truncated { field, offset } => {
                write!(f, "{field:?} at offset {offset} runs past the record")
            }
            DecodeError::Overflow { field, count } => write!(f, "{field:?} count {count} overflows"),
            DecodeError::Misaligned { field, offset } => {
                write!(f, "{field:?} at offset {offset} is not 8-byte aligned")
            }
            DecodeError::Inconsistent { field, value, limit } => {
                write!(f, "{field:?} {value} exceeds {limit}")
            }
            DecodeError::Trailing { used, size } => {
                write!(f, "fields end at {used} but header.size is {size}")
            }
            DecodeError::UnsupportedType { type_ } => write!(f, "record type {type_} is not decoded"),
            DecodeError::UnsupportedLayout { sample_type, read_format } => {
                write!(f, "unknown layout bits: sample_type {sample_type:#x}, read_format {read_format:#x}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// A view of `u64`s stored in a record (native byte order).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct U64s<'a> {
    bytes: &'a [u8],
}

impl<'a> U64s<'a> {
    /// Number of values.
    pub fn len(&self) -> usize {
        self.bytes.len() / 8
    }

    /// True if there are no values.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Value `i`, if in range.
    pub fn get(&self, i: usize) -> Option<u64> {
        let start = i.checked_mul(8)?;
        let chunk = self.bytes.get(start..start.checked_add(8)?)?;
        chunk.try_into().ok().map(u64::from_ne_bytes)
    }

    /// The values in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        let bytes = self.bytes;
        bytes.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
    }

    /// The bytes the values occupy in the record.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

impl fmt::Debug for U64s<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(|v| format!("{v:#x}"))).finish()
    }
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

/// One counter of a READ value: `value`, `[id]`, `[lost]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadValue {
    /// Counter value.
    pub value: u64,
    /// With `PERF_FORMAT_ID`.
    pub id: Option<u64>,
    /// With `PERF_FORMAT_LOST`.
    pub lost: Option<u64>,
}

/// The counters of a `PERF_FORMAT_GROUP` read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadGroup<'a> {
    words: U64s<'a>,
    has_id: bool,
    has_lost: bool,
}

impl<'a> ReadGroup<'a> {
    /// Words per counter: 1, plus 1 with `PERF_FORMAT_ID`, plus 1 with
    /// `PERF_FORMAT_LOST`.
    pub fn stride(&self) -> usize {
        1 + usize::from(self.has_id) + usize::from(self.has_lost)
    }

    /// Number of counters (`nr`).
    pub fn len(&self) -> usize {
        self.words.len() / self.stride()
    }

    /// True if `nr` is 0.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Counter `i`, if in range.
    pub fn get(&self, i: usize) -> Option<ReadValue> {
        if i >= self.len() {
            return None;
        }
        let base = i * self.stride();
        let value = self.words.get(base)?;
        let id = if self.has_id { Some(self.words.get(base + 1)?) } else { None };
        let lost_at = base + 1 + usize::from(self.has_id);
        let lost = if self.has_lost { Some(self.words.get(lost_at)?) } else { None };
        Some(ReadValue { value, id, lost })
    }

    /// The counters in order.
    pub fn iter(&self) -> impl Iterator<Item = ReadValue> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The raw words: `nr` entries of [`Self::stride`] words.
    pub fn words(&self) -> U64s<'a> {
        self.words
    }
}

/// The values of `PERF_SAMPLE_READ`, without or with `PERF_FORMAT_GROUP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadValues<'a> {
    /// One counter (no `PERF_FORMAT_GROUP`).
    Single(ReadValue),
    /// A group's counters.
    Group(ReadGroup<'a>),
}

/// `PERF_SAMPLE_READ`: the event's `struct read_format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read<'a> {
    /// With `PERF_FORMAT_TOTAL_TIME_ENABLED`.
    pub time_enabled: Option<u64>,
    /// With `PERF_FORMAT_TOTAL_TIME_RUNNING`.
    pub time_running: Option<u64>,
    /// The counter(s).
    pub values: ReadValues<'a>,
}

/// One entry of a branch stack (`struct perf_branch_entry`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BranchEntry {
    /// Source address.
    pub from: u64,
    /// Target address.
    pub to: u64,
    /// The flag bit-field (mispred, predicted, in_tx, abort, cycles, type, ...).
    pub flags: u64,
}

/// `PERF_SAMPLE_BRANCH_STACK`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BranchStack<'a> {
    /// With `PERF_SAMPLE_BRANCH_HW_INDEX` (absent when the kernel had no
    /// stack to write and wrote only `nr = 0`).
    pub hw_idx: Option<u64>,
    /// The entries, three words each (from, to, flags).
    pub entries: U64s<'a>,
    /// With `PERF_SAMPLE_BRANCH_COUNTERS`: one word per entry.
    pub counters: Option<U64s<'a>>,
}

impl BranchStack<'_> {
    /// Number of entries (`nr`).
    pub fn len(&self) -> usize {
        self.entries.len() / 3
    }

    /// True if `nr` is 0.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Entry `i`, if in range.
    pub fn get(&self, i: usize) -> Option<BranchEntry> {
        let base = i.checked_mul(3)?;
        Some(BranchEntry {
            from: self.entries.get(base)?,
            to: self.entries.get(base + 1)?,
            flags: self.entries.get(base + 2)?,
        })
    }
}

/// `PERF_SAMPLE_REGS_USER` / `PERF_SAMPLE_REGS_INTR`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Regs<'a> {
    /// `enum perf_sample_regs_abi`; with `PERF_SAMPLE_REGS_ABI_NONE` no
    /// registers follow.
    pub abi: u64,
    /// The attr's register mask.
    pub mask: u64,
    /// One value per bit of `mask`, lowest bit first (empty for ABI_NONE).
    pub values: U64s<'a>,
}

impl Regs<'_> {
    /// The value of register `reg` (its bit number in the mask), if dumped.
    pub fn get(&self, reg: u32) -> Option<u64> {
        if reg >= 64 || self.mask & (1 << reg) == 0 {
            return None;
        }
        let below = self.mask & ((1u64 << reg) - 1);
        self.values.get(below.count_ones() as usize)
    }
}

/// `PERF_SAMPLE_STACK_USER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackUser<'a> {
    /// The dump, `size` bytes (0 when the task had no user stack).
    pub data: &'a [u8],
    /// Bytes of `data` actually copied; present when `size` is not 0.
    pub dyn_size: Option<u64>,
}

impl<'a> StackUser<'a> {
    /// The valid part of the dump (`dyn_size` bytes).
    pub fn valid(&self) -> &'a [u8] {
        let n = self.dyn_size.map_or(0, |d| usize::try_from(d).unwrap_or(usize::MAX));
        &self.data[..n.min(self.data.len())]
    }
}

/// `PERF_SAMPLE_WEIGHT_STRUCT`'s view of the weight word.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WeightStruct {
    /// `var1_dw`: the low 32 bits.
    pub var1_dw: u32,
    /// `var2_w`: bits 32..48.
    pub var2_w: u16,
    /// `var3_w`: bits 48..64.
    pub var3_w: u16,
}

/// Splits a weight word as `union perf_sample_weight` does. The kernel
/// orders the struct by endianness so that the split is the same numeric
/// split on both.
pub fn weight_struct(full: u64) -> WeightStruct {
    WeightStruct { var1_dw: full as u32, var2_w: (full >> 32) as u16, var3_w: (full >> 48) as u16 }
}

/// A decoded `PERF_RECORD_SAMPLE`. On success every field selected by
/// `sample_type` is `Some` and every other one `None`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample<'a> {
    /// The attr's `sample_type`: the fields present.
    pub sample_type: u64,
    /// `PERF_SAMPLE_IDENTIFIER`.
    pub identifier: Option<u64>,
    /// `PERF_SAMPLE_IP`.
    pub ip: Option<u64>,
    /// `PERF_SAMPLE_TID`.
    pub tid: Option<PidTid>,
    /// `PERF_SAMPLE_TIME`.
    pub time: Option<u64>,
    /// `PERF_SAMPLE_ADDR`.
    pub addr: Option<u64>,
    /// `PERF_SAMPLE_ID`.
    pub id: Option<u64>,
    /// `PERF_SAMPLE_STREAM_ID`.
    pub stream_id: Option<u64>,
    /// `PERF_SAMPLE_CPU`.
    pub cpu: Option<CpuRes>,
    /// `PERF_SAMPLE_PERIOD`.
    pub period: Option<u64>,
    /// `PERF_SAMPLE_READ`.
    pub read: Option<Read<'a>>,
    /// `PERF_SAMPLE_CALLCHAIN`: the `nr` instruction pointers (with the
    /// kernel's `PERF_CONTEXT_*` markers).
    pub callchain: Option<U64s<'a>>,
    /// `PERF_SAMPLE_RAW`: the data, `size` bytes as the kernel padded them.
    pub raw: Option<&'a [u8]>,
    /// `PERF_SAMPLE_BRANCH_STACK`.
    pub branch_stack: Option<BranchStack<'a>>,
    /// `PERF_SAMPLE_REGS_USER`.
    pub regs_user: Option<Regs<'a>>,
    /// `PERF_SAMPLE_STACK_USER`.
    pub stack_user: Option<StackUser<'a>>,
    /// `PERF_SAMPLE_WEIGHT` or `PERF_SAMPLE_WEIGHT_STRUCT` (see
    /// [`weight_struct`]).
    pub weight: Option<u64>,
    /// `PERF_SAMPLE_DATA_SRC`.
    pub data_src: Option<u64>,
    /// `PERF_SAMPLE_TRANSACTION`.
    pub transaction: Option<u64>,
    /// `PERF_SAMPLE_REGS_INTR`.
    pub regs_intr: Option<Regs<'a>>,
    /// `PERF_SAMPLE_PHYS_ADDR`.
    pub phys_addr: Option<u64>,
    /// `PERF_SAMPLE_CGROUP`.
    pub cgroup: Option<u64>,
    /// `PERF_SAMPLE_DATA_PAGE_SIZE`.
    pub data_page_size: Option<u64>,
    /// `PERF_SAMPLE_CODE_PAGE_SIZE`.
    pub code_page_size: Option<u64>,
    /// `PERF_SAMPLE_AUX`: the data, `size` bytes.
    pub aux: Option<&'a [u8]>,
}

impl Sample<'_> {
    /// The `PERF_SAMPLE_*` bits of the fields that are `Some` (the weight
    /// stands for whichever of `WEIGHT` and `WEIGHT_STRUCT` `sample_type`
    /// has): equal to `sample_type` for every sample `decode` returns.
    pub fn present(&self) -> u64 {
        let weight = self.sample_type & (PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT);
        [
            (PERF_SAMPLE_IDENTIFIER, self.identifier.is_some()),
            (PERF_SAMPLE_IP, self.ip.is_some()),
            (PERF_SAMPLE_TID, self.tid.is_some()),
            (PERF_SAMPLE_TIME, self.time.is_some()),
            (PERF_SAMPLE_ADDR, self.addr.is_some()),
            (PERF_SAMPLE_ID, self.id.is_some()),
            (PERF_SAMPLE_STREAM_ID, self.stream_id.is_some()),
            (PERF_SAMPLE_CPU, self.cpu.is_some()),
            (PERF_SAMPLE_PERIOD, self.period.is_some()),
            (PERF_SAMPLE_READ, self.read.is_some()),
            (PERF_SAMPLE_CALLCHAIN, self.callchain.is_some()),
            (PERF_SAMPLE_RAW, self.raw.is_some()),
            (PERF_SAMPLE_BRANCH_STACK, self.branch_stack.is_some()),
            (PERF_SAMPLE_REGS_USER, self.regs_user.is_some()),
            (PERF_SAMPLE_STACK_USER, self.stack_user.is_some()),
            (weight, self.weight.is_some()),
            (PERF_SAMPLE_DATA_SRC, self.data_src.is_some()),
            (PERF_SAMPLE_TRANSACTION, self.transaction.is_some()),
            (PERF_SAMPLE_REGS_INTR, self.regs_intr.is_some()),
            (PERF_SAMPLE_PHYS_ADDR, self.phys_addr.is_some()),
            (PERF_SAMPLE_CGROUP, self.cgroup.is_some()),
            (PERF_SAMPLE_DATA_PAGE_SIZE, self.data_page_size.is_some()),
            (PERF_SAMPLE_CODE_PAGE_SIZE, self.code_page_size.is_some()),
            (PERF_SAMPLE_AUX, self.aux.is_some()),
        ]
        .iter()
        .filter(|&&(_, some)| some)
        .fold(0, |bits, &(bit, _)| bits | bit)
    }
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

/// `PERF_RECORD_LOST`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Id of the event that lost records.
    pub id: u64,
    /// Number of records lost.
    pub lost: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_RECORD_THROTTLE` / `PERF_RECORD_UNTHROTTLE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttle {
    /// When.
    pub time: u64,
    /// Event id.
    pub id: u64,
    /// Event stream id.
    pub stream_id: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_RECORD_LOST_SAMPLES`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostSamples {
    /// Number of samples lost.
    pub lost: u64,
    /// The trailer.
    pub sample_id: SampleId,
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
        match &self.body {
            Body::Sample(s) => s.sample_type,
            Body::Lost(l) => l.sample_id.present,
            Body::Throttle(t) | Body::Unthrottle(t) => t.sample_id.present,
            Body::LostSamples(l) => l.sample_id.present,
        }
    }

    /// The `sample_id` trailer, for records other than samples.
    pub fn sample_id(&self) -> Option<&SampleId> {
        match &self.body {
            Body::Sample(_) => None,
            Body::Lost(l) => Some(&l.sample_id),
            Body::Throttle(t) | Body::Unthrottle(t) => Some(&t.sample_id),
            Body::LostSamples(l) => Some(&l.sample_id),
        }
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
        PERF_RECORD_LOST => {
            let mut c = Cursor::new(bytes);
            let id = c.u64(Field::LostId)?;
            let lost = c.u64(Field::Lost)?;
            Body::Lost(Lost { id, lost, sample_id: c.sample_id_end(attr)? })
        }
        PERF_RECORD_THROTTLE | PERF_RECORD_UNTHROTTLE => {
            let mut c = Cursor::new(bytes);
            let time = c.u64(Field::ThrottleTime)?;
            let id = c.u64(Field::ThrottleId)?;
            let stream_id = c.u64(Field::ThrottleStreamId)?;
            let t = Throttle { time, id, stream_id, sample_id: c.sample_id_end(attr)? };
            if header.type_ == PERF_RECORD_THROTTLE { Body::Throttle(t) } else { Body::Unthrottle(t) }
        }
        PERF_RECORD_LOST_SAMPLES => {
            let mut c = Cursor::new(bytes);
            let lost = c.u64(Field::Lost)?;
            Body::LostSamples(LostSamples { lost, sample_id: c.sample_id_end(attr)? })
        }
        type_ => return Err(DecodeError::UnsupportedType { type_ }),
    };
    Ok(Record { header, bytes, body })
}

/// How to read an empty branch stack with `PERF_SAMPLE_BRANCH_HW_INDEX`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum EmptyBranch {
    /// `nr = 0, hw_idx` (a PMU stack with no entries).
    WithHwIdx,
    /// `nr = 0` alone (the kernel had no stack to write).
    Bare,
}

fn decode_sample<'a>(rec: &'a [u8], attr: &DecodeAttr) -> Result<Sample<'a>, DecodeError> {
    let unknown_sample = attr.sample_type & !KNOWN_SAMPLE_TYPE;
    let unknown_read =
        if attr.sample_type & PERF_SAMPLE_READ != 0 { attr.read_format & !KNOWN_READ_FORMAT } else { 0 };
    if unknown_sample != 0 || unknown_read != 0 {
        return Err(DecodeError::UnsupportedLayout {
            sample_type: unknown_sample,
            read_format: unknown_read,
        });
    }
    let first = sample_fields(rec, attr, EmptyBranch::WithHwIdx);
    let ambiguous = attr.sample_type & PERF_SAMPLE_BRANCH_STACK != 0
        && attr.branch_sample_type & PERF_SAMPLE_BRANCH_HW_INDEX != 0;
    match first {
        Err(e) if ambiguous => sample_fields(rec, attr, EmptyBranch::Bare).map_err(|_| e),
        other => other,
    }
}

fn sample_fields<'a>(rec: &'a [u8], a: &DecodeAttr, empty: EmptyBranch) -> Result<Sample<'a>, DecodeError> {
    let t = a.sample_type;
    let has = |bit: u64| t & bit != 0;
    let mut c = Cursor::new(rec);
    let mut s = Sample { sample_type: t, ..Sample::default() };
    s.identifier = c.u64_if(has(PERF_SAMPLE_IDENTIFIER), Field::Identifier)?;
    s.ip = c.u64_if(has(PERF_SAMPLE_IP), Field::Ip)?;
    s.tid = c.tid_if(has(PERF_SAMPLE_TID))?;
    s.time = c.u64_if(has(PERF_SAMPLE_TIME), Field::Time)?;
    s.addr = c.u64_if(has(PERF_SAMPLE_ADDR), Field::Addr)?;
    s.id = c.u64_if(has(PERF_SAMPLE_ID), Field::Id)?;
    s.stream_id = c.u64_if(has(PERF_SAMPLE_STREAM_ID), Field::StreamId)?;
    s.cpu = c.cpu_if(has(PERF_SAMPLE_CPU))?;
    s.period = c.u64_if(has(PERF_SAMPLE_PERIOD), Field::Period)?;
    if has(PERF_SAMPLE_READ) {
        s.read = Some(c.read(a.read_format)?);
    }
    if has(PERF_SAMPLE_CALLCHAIN) {
        let nr = c.u64(Field::CallchainNr)?;
        s.callchain = Some(c.u64_array(nr, Field::Callchain)?);
    }
    if has(PERF_SAMPLE_RAW) {
        let size = c.u32(Field::RawSize)?;
        s.raw = Some(c.bytes(u64::from(size), Field::RawData)?);
    }
    if has(PERF_SAMPLE_BRANCH_STACK) {
        s.branch_stack = Some(c.branch_stack(a.branch_sample_type, empty)?);
    }
    if has(PERF_SAMPLE_REGS_USER) {
        s.regs_user = Some(c.regs(a.sample_regs_user, Field::RegsUserAbi, Field::RegsUser)?);
    }
    if has(PERF_SAMPLE_STACK_USER) {
        s.stack_user = Some(c.stack_user()?);
    }
    s.weight = c.u64_if(has(PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT), Field::Weight)?;
    s.data_src = c.u64_if(has(PERF_SAMPLE_DATA_SRC), Field::DataSrc)?;
    s.transaction = c.u64_if(has(PERF_SAMPLE_TRANSACTION), Field::Transaction)?;
    if has(PERF_SAMPLE_REGS_INTR) {
        s.regs_intr = Some(c.regs(a.sample_regs_intr, Field::RegsIntrAbi, Field::RegsIntr)?);
    }
    s.phys_addr = c.u64_if(has(PERF_SAMPLE_PHYS_ADDR), Field::PhysAddr)?;
    s.cgroup = c.u64_if(has(PERF_SAMPLE_CGROUP), Field::Cgroup)?;
    s.data_page_size = c.u64_if(has(PERF_SAMPLE_DATA_PAGE_SIZE), Field::DataPageSize)?;
    s.code_page_size = c.u64_if(has(PERF_SAMPLE_CODE_PAGE_SIZE), Field::CodePageSize)?;
    if has(PERF_SAMPLE_AUX) {
        let size = c.u64(Field::AuxSize)?;
        s.aux = Some(c.bytes(size, Field::AuxData)?);
    }
    c.end()?;
    Ok(s)
}

/// A bounds-checked reader over one record's `header.size` bytes, starting
/// after the header.
struct Cursor<'a> {
    rec: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(rec: &'a [u8]) -> Self {
        Cursor { rec, pos: HEADER_SIZE }
    }

    fn take(&mut self, n: u64, field: Field) -> Result<&'a [u8], DecodeError> {
        let truncated = DecodeError::Truncated { field, offset: self.pos };
        let n = usize::try_from(n).map_err(|_| truncated)?;
        let end = self.pos.checked_add(n).ok_or(truncated)?;
        let bytes = self.rec.get(self.pos..end).ok_or(truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, field: Field) -> Result<[u8; N], DecodeError> {
        let bytes = self.take(N as u64, field)?;
        bytes.try_into().map_err(|_| DecodeError::Truncated { field, offset: self.pos - N })
    }

    fn u64(&mut self, field: Field) -> Result<u64, DecodeError> {
        self.array::<8>(field).map(u64::from_ne_bytes)
    }

    fn u32(&mut self, field: Field) -> Result<u32, DecodeError> {
        self.array::<4>(field).map(u32::from_ne_bytes)
    }

    fn u32_pair(&mut self, field: Field) -> Result<(u32, u32), DecodeError> {
        let b = self.array::<8>(field)?;
        Ok((u32::from_ne_bytes([b[0], b[1], b[2], b[3]]), u32::from_ne_bytes([b[4], b[5], b[6], b[7]])))
    }

    fn u64_if(&mut self, present: bool, field: Field) -> Result<Option<u64>, DecodeError> {
        if present { self.u64(field).map(Some) } else { Ok(None) }
    }

    fn tid_if(&mut self, present: bool) -> Result<Option<PidTid>, DecodeError> {
        if !present {
            return Ok(None);
        }
        let (pid, tid) = self.u32_pair(Field::Tid)?;
        Ok(Some(PidTid { pid, tid }))
    }

    fn cpu_if(&mut self, present: bool) -> Result<Option<CpuRes>, DecodeError> {
        if !present {
            return Ok(None);
        }
        let (cpu, res) = self.u32_pair(Field::Cpu)?;
        Ok(Some(CpuRes { cpu, res }))
    }

    /// `count` bytes of opaque data.
    fn bytes(&mut self, count: u64, field: Field) -> Result<&'a [u8], DecodeError> {
        self.take(count, field)
    }

    /// `count` words, which must start 8-byte aligned in the record.
    fn u64_array(&mut self, count: u64, field: Field) -> Result<U64s<'a>, DecodeError> {
        let len = count.checked_mul(8).ok_or(DecodeError::Overflow { field, count })?;
        if self.pos % 8 != 0 {
            return Err(DecodeError::Misaligned { field, offset: self.pos });
        }
        Ok(U64s { bytes: self.take(len, field)? })
    }

    fn read(&mut self, format: u64) -> Result<Read<'a>, DecodeError> {
        let has = |bit: u64| format & bit != 0;
        if has(PERF_FORMAT_GROUP) {
            let nr = self.u64(Field::ReadNr)?;
            let time_enabled = self.u64_if(has(PERF_FORMAT_TOTAL_TIME_ENABLED), Field::ReadTimeEnabled)?;
            let time_running = self.u64_if(has(PERF_FORMAT_TOTAL_TIME_RUNNING), Field::ReadTimeRunning)?;
            let (has_id, has_lost) = (has(PERF_FORMAT_ID), has(PERF_FORMAT_LOST));
            let stride = 1 + u64::from(has_id) + u64::from(has_lost);
            let count =
                nr.checked_mul(stride).ok_or(DecodeError::Overflow { field: Field::ReadGroup, count: nr })?;
            let words = self.u64_array(count, Field::ReadGroup)?;
            let values = ReadValues::Group(ReadGroup { words, has_id, has_lost });
            Ok(Read { time_enabled, time_running, values })
        } else {
            let value = self.u64(Field::ReadValue)?;
            let time_enabled = self.u64_if(has(PERF_FORMAT_TOTAL_TIME_ENABLED), Field::ReadTimeEnabled)?;
            let time_running = self.u64_if(has(PERF_FORMAT_TOTAL_TIME_RUNNING), Field::ReadTimeRunning)?;
            let id = self.u64_if(has(PERF_FORMAT_ID), Field::ReadId)?;
            let lost = self.u64_if(has(PERF_FORMAT_LOST), Field::ReadLost)?;
            Ok(Read { time_enabled, time_running, values: ReadValues::Single(ReadValue { value, id, lost }) })
        }
    }

    fn branch_stack(&mut self, branch_type: u64, empty: EmptyBranch) -> Result<BranchStack<'a>, DecodeError> {
        let nr = self.u64(Field::BranchNr)?;
        let hw_index = branch_type & PERF_SAMPLE_BRANCH_HW_INDEX != 0;
        let hw_idx =
            self.u64_if(hw_index && (nr != 0 || empty == EmptyBranch::WithHwIdx), Field::BranchHwIdx)?;
        let words =
            nr.checked_mul(3).ok_or(DecodeError::Overflow { field: Field::BranchEntries, count: nr })?;
        let entries = self.u64_array(words, Field::BranchEntries)?;
        let counters = if branch_type & PERF_SAMPLE_BRANCH_COUNTERS != 0 {
            Some(self.u64_array(nr, Field::BranchCounters)?)
        } else {
            None
        };
        Ok(BranchStack { hw_idx, entries, counters })
    }

    fn regs(&mut self, mask: u64, abi_field: Field, regs_field: Field) -> Result<Regs<'a>, DecodeError> {
        let abi = self.u64(abi_field)?;
        let count = if abi == PERF_SAMPLE_REGS_ABI_NONE { 0 } else { u64::from(mask.count_ones()) };
        Ok(Regs { abi, mask, values: self.u64_array(count, regs_field)? })
    }

    fn stack_user(&mut self) -> Result<StackUser<'a>, DecodeError> {
        let size = self.u64(Field::StackUserSize)?;
        let data = self.bytes(size, Field::StackUserData)?;
        let dyn_size = self.u64_if(size != 0, Field::StackUserDynSize)?;
        if let Some(d) = dyn_size.filter(|&d| d > size) {
            return Err(DecodeError::Inconsistent { field: Field::StackUserDynSize, value: d, limit: size });
        }
        Ok(StackUser { data, dyn_size })
    }

    /// The `sample_id` trailer (if the attr has `sample_id_all`), which must
    /// end the record.
    fn sample_id_end(&mut self, a: &DecodeAttr) -> Result<SampleId, DecodeError> {
        let mut id = SampleId::default();
        if a.sample_id_all {
            let has = |bit: u64| a.sample_type & bit != 0;
            id.present = a.sample_type & SAMPLE_ID_BITS;
            id.tid = self.tid_if(has(PERF_SAMPLE_TID))?;
            id.time = self.u64_if(has(PERF_SAMPLE_TIME), Field::Time)?;
            id.id = self.u64_if(has(PERF_SAMPLE_ID), Field::Id)?;
            id.stream_id = self.u64_if(has(PERF_SAMPLE_STREAM_ID), Field::StreamId)?;
            id.cpu = self.cpu_if(has(PERF_SAMPLE_CPU))?;
            id.identifier = self.u64_if(has(PERF_SAMPLE_IDENTIFIER), Field::Identifier)?;
        }
        self.end()?;
        Ok(id)
    }

    fn end(&self) -> Result<(), DecodeError> {
        if self.pos == self.rec.len() {
            Ok(())
        } else {
            Err(DecodeError::Trailing { used: self.pos, size: self.rec.len() })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a record: fields appended in order, header patched by `finish`.
    #[derive(Default)]
    struct Rb {
        body: Vec<u8>,
    }

    impl Rb {
        fn new() -> Self {
            Rb::default()
        }
        fn u64(mut self, v: u64) -> Self {
            self.body.extend_from_slice(&v.to_ne_bytes());
            self
        }
        fn u32(mut self, v: u32) -> Self {
            self.body.extend_from_slice(&v.to_ne_bytes());
            self
        }
        fn pair(self, a: u32, b: u32) -> Self {
            self.u32(a).u32(b)
        }
        fn bytes(mut self, b: &[u8]) -> Self {
            self.body.extend_from_slice(b);
            self
        }
        fn words(self, w: &[u64]) -> Self {
            w.iter().fold(self, |rb, &v| rb.u64(v))
        }
        fn finish(self, type_: u32, misc: u16) -> Vec<u8> {
            let size = u16::try_from(HEADER_SIZE + self.body.len()).expect("test record fits");
            let mut v = type_.to_ne_bytes().to_vec();
            v.extend_from_slice(&misc.to_ne_bytes());
            v.extend_from_slice(&size.to_ne_bytes());
            v.extend_from_slice(&self.body);
            v
        }
        fn sample(self) -> Vec<u8> {
            self.finish(PERF_RECORD_SAMPLE, 1)
        }
    }

    fn attr(sample_type: u64) -> DecodeAttr {
        DecodeAttr { sample_type, ..DecodeAttr::default() }
    }

    fn sample<'a>(rec: &'a [u8], a: &DecodeAttr) -> Sample<'a> {
        match decode(rec, a).expect("decodes").body {
            Body::Sample(s) => s,
            other => panic!("not a sample: {other:?}"),
        }
    }

    /// Every field selected by sample_type is Some, the others None.
    fn check_presence(s: &Sample<'_>) {
        assert_eq!(s.present(), s.sample_type, "fields present vs sample_type");
    }

    /// Every slice of the decoded record lies inside the record.
    fn check_inside(rec: &Record<'_>) {
        let lo = rec.bytes.as_ptr() as usize;
        let hi = lo + rec.bytes.len();
        let inside = |b: &[u8]| {
            let p = b.as_ptr() as usize;
            assert!(p >= lo && p + b.len() <= hi, "slice escapes the record");
        };
        if let Body::Sample(s) = &rec.body {
            check_presence(s);
            if let Some(r) = &s.read {
                if let ReadValues::Group(g) = r.values {
                    inside(g.words().as_bytes());
                    assert_eq!(g.iter().count(), g.len());
                }
            }
            s.callchain.iter().for_each(|c| inside(c.as_bytes()));
            s.raw.iter().for_each(|r| inside(r));
            if let Some(b) = &s.branch_stack {
                inside(b.entries.as_bytes());
                b.counters.iter().for_each(|c| inside(c.as_bytes()));
                assert!(b.get(b.len()).is_none());
            }
            for r in s.regs_user.iter().chain(s.regs_intr.iter()) {
                inside(r.values.as_bytes());
            }
            s.stack_user.iter().for_each(|st| inside(st.data));
            s.aux.iter().for_each(|a| inside(a));
        }
    }

    // ---- each field on its own ----------------------------------------------

    #[test]
    fn scalar_fields_each_alone() {
        let cases: [(u64, Field); 13] = [
            (PERF_SAMPLE_IDENTIFIER, Field::Identifier),
            (PERF_SAMPLE_IP, Field::Ip),
            (PERF_SAMPLE_TIME, Field::Time),
            (PERF_SAMPLE_ADDR, Field::Addr),
            (PERF_SAMPLE_ID, Field::Id),
            (PERF_SAMPLE_STREAM_ID, Field::StreamId),
            (PERF_SAMPLE_PERIOD, Field::Period),
            (PERF_SAMPLE_WEIGHT, Field::Weight),
            (PERF_SAMPLE_DATA_SRC, Field::DataSrc),
            (PERF_SAMPLE_TRANSACTION, Field::Transaction),
            (PERF_SAMPLE_PHYS_ADDR, Field::PhysAddr),
            (PERF_SAMPLE_CGROUP, Field::Cgroup),
            (PERF_SAMPLE_DATA_PAGE_SIZE, Field::DataPageSize),
        ];
        for (bit, field) in cases.into_iter().chain([(PERF_SAMPLE_CODE_PAGE_SIZE, Field::CodePageSize)]) {
            let v = 0x1122_3344_5566_7788 ^ bit;
            let rec = Rb::new().u64(v).sample();
            let s = sample(&rec, &attr(bit));
            check_presence(&s);
            let got = [
                s.identifier,
                s.ip,
                s.time,
                s.addr,
                s.id,
                s.stream_id,
                s.period,
                s.weight,
                s.data_src,
                s.transaction,
                s.phys_addr,
                s.cgroup,
                s.data_page_size,
                s.code_page_size,
            ];
            assert_eq!(got.iter().flatten().copied().collect::<Vec<_>>(), vec![v], "{field:?}");
            // Missing: truncated at the field.
            let empty = Rb::new().sample();
            assert_eq!(decode(&empty, &attr(bit)), Err(DecodeError::Truncated { field, offset: 8 }));
        }
    }

    #[test]
    fn tid_and_cpu_are_u32_pairs() {
        let rec = Rb::new().pair(100, 101).pair(3, 0).sample();
        let s = sample(&rec, &attr(PERF_SAMPLE_TID | PERF_SAMPLE_CPU));
        assert_eq!(s.tid, Some(PidTid { pid: 100, tid: 101 }));
        assert_eq!(s.cpu, Some(CpuRes { cpu: 3, res: 0 }));
        let short = Rb::new().pair(100, 101).u32(3).sample();
        assert_eq!(
            decode(&short, &attr(PERF_SAMPLE_TID | PERF_SAMPLE_CPU)),
            Err(DecodeError::Truncated { field: Field::Cpu, offset: 16 })
        );
    }

    #[test]
    fn weight_struct_splits_the_word() {
        let rec = Rb::new().u64(0xaaaa_bbbb_cccc_dddd).sample();
        let s = sample(&rec, &attr(PERF_SAMPLE_WEIGHT_STRUCT));
        let w = weight_struct(s.weight.expect("weight"));
        assert_eq!(w, WeightStruct { var1_dw: 0xcccc_dddd, var2_w: 0xbbbb, var3_w: 0xaaaa });
        // Both weight bits still mean one word.
        let s = sample(&rec, &attr(PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT));
        assert_eq!(s.weight, Some(0xaaaa_bbbb_cccc_dddd));
    }

    #[test]
    fn raw_sizes() {
        for n in [0usize, 4, 12, 20, 1000] {
            let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let rec = Rb::new().u32(n as u32).bytes(&data).sample();
            let s = sample(&rec, &attr(PERF_SAMPLE_RAW));
            assert_eq!(s.raw, Some(&data[..]));
        }
        // A raw size beyond the record, including the largest.
        for size in [5u32, 100, u32::MAX] {
            let rec = Rb::new().u32(size).u32(0).sample();
            assert_eq!(
                decode(&rec, &attr(PERF_SAMPLE_RAW)),
                Err(DecodeError::Truncated { field: Field::RawData, offset: 12 })
            );
        }
        // Shorter than the record: the rest is trailing garbage.
        let rec = Rb::new().u32(0).u32(0).sample();
        assert_eq!(decode(&rec, &attr(PERF_SAMPLE_RAW)), Err(DecodeError::Trailing { used: 12, size: 16 }));
    }

    #[test]
    fn callchain() {
        for nr in [0u64, 1, 5] {
            let ips: Vec<u64> = (0..nr).map(|i| 0xffff_ffff_8100_0000 + i).collect();
            let rec = Rb::new().u64(nr).words(&ips).sample();
            let s = sample(&rec, &attr(PERF_SAMPLE_CALLCHAIN));
            let cc = s.callchain.expect("callchain");
            assert_eq!(cc.len(), nr as usize);
            assert_eq!(cc.iter().collect::<Vec<_>>(), ips);
            assert_eq!(cc.get(nr as usize), None);
        }
    }

    #[test]
    fn huge_counts_are_errors_not_panics() {
        let a = attr(PERF_SAMPLE_CALLCHAIN);
        for (nr, want) in [
            (u64::MAX, DecodeError::Overflow { field: Field::Callchain, count: u64::MAX }),
            (1 << 61, DecodeError::Overflow { field: Field::Callchain, count: 1 << 61 }),
            (1 << 60, DecodeError::Truncated { field: Field::Callchain, offset: 16 }),
            (1 << 40, DecodeError::Truncated { field: Field::Callchain, offset: 16 }),
            (2, DecodeError::Truncated { field: Field::Callchain, offset: 16 }),
        ] {
            let rec = Rb::new().u64(nr).u64(7).sample();
            assert_eq!(decode(&rec, &a), Err(want), "nr {nr:#x}");
        }
        let g = DecodeAttr {
            sample_type: PERF_SAMPLE_READ,
            read_format: PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_LOST,
            ..DecodeAttr::default()
        };
        let rec = Rb::new().u64(u64::MAX / 2).sample();
        assert_eq!(
            decode(&rec, &g),
            Err(DecodeError::Overflow { field: Field::ReadGroup, count: u64::MAX / 2 })
        );
        let b = attr(PERF_SAMPLE_BRANCH_STACK);
        let rec = Rb::new().u64(u64::MAX / 2).sample();
        assert_eq!(
            decode(&rec, &b),
            Err(DecodeError::Overflow { field: Field::BranchEntries, count: u64::MAX / 2 })
        );
        for size in [u64::MAX, u64::MAX - 7, 1 << 63, 65536] {
            let rec = Rb::new().u64(size).sample();
            assert_eq!(
                decode(&rec, &attr(PERF_SAMPLE_STACK_USER)),
                Err(DecodeError::Truncated { field: Field::StackUserData, offset: 16 })
            );
            assert_eq!(
                decode(&rec, &attr(PERF_SAMPLE_AUX)),
                Err(DecodeError::Truncated { field: Field::AuxData, offset: 16 })
            );
        }
    }

    #[test]
    fn read_single_every_format() {
        for f in 0..32u64 {
            if f & PERF_FORMAT_GROUP != 0 {
                continue;
            }
            let mut rb = Rb::new().u64(1000);
            let te = f & PERF_FORMAT_TOTAL_TIME_ENABLED != 0;
            let tr = f & PERF_FORMAT_TOTAL_TIME_RUNNING != 0;
            let id = f & PERF_FORMAT_ID != 0;
            let lost = f & PERF_FORMAT_LOST != 0;
            for (on, v) in [(te, 11), (tr, 22), (id, 33), (lost, 44)] {
                if on {
                    rb = rb.u64(v);
                }
            }
            let rec = rb.sample();
            let a = DecodeAttr { sample_type: PERF_SAMPLE_READ, read_format: f, ..DecodeAttr::default() };
            let r = sample(&rec, &a).read.expect("read");
            assert_eq!(r.time_enabled, te.then_some(11));
            assert_eq!(r.time_running, tr.then_some(22));
            assert_eq!(
                r.values,
                ReadValues::Single(ReadValue { value: 1000, id: id.then_some(33), lost: lost.then_some(44) })
            );
            for len in HEADER_SIZE..rec.len() {
                let mut cut = rec[..len].to_vec();
                cut[6..8].copy_from_slice(&(len as u16).to_ne_bytes());
                assert!(decode(&cut, &a).is_err(), "format {f:#x} cut at {len}");
            }
        }
    }

    #[test]
    fn read_group_every_format() {
        for f in (0..32u64).filter(|f| f & PERF_FORMAT_GROUP != 0) {
            let te = f & PERF_FORMAT_TOTAL_TIME_ENABLED != 0;
            let tr = f & PERF_FORMAT_TOTAL_TIME_RUNNING != 0;
            let id = f & PERF_FORMAT_ID != 0;
            let lost = f & PERF_FORMAT_LOST != 0;
            for nr in [0u64, 1, 3] {
                let mut rb = Rb::new().u64(nr);
                if te {
                    rb = rb.u64(11);
                }
                if tr {
                    rb = rb.u64(22);
                }
                for i in 0..nr {
                    rb = rb.u64(100 + i);
                    if id {
                        rb = rb.u64(200 + i);
                    }
                    if lost {
                        rb = rb.u64(300 + i);
                    }
                }
                let rec = rb.sample();
                let a = DecodeAttr { sample_type: PERF_SAMPLE_READ, read_format: f, ..DecodeAttr::default() };
                let r = sample(&rec, &a).read.expect("read");
                assert_eq!((r.time_enabled, r.time_running), (te.then_some(11), tr.then_some(22)));
                let ReadValues::Group(g) = r.values else { panic!("group expected") };
                assert_eq!(g.len() as u64, nr);
                assert_eq!(g.is_empty(), nr == 0);
                assert_eq!(g.stride(), 1 + usize::from(id) + usize::from(lost));
                for (i, v) in g.iter().enumerate() {
                    let i = i as u64;
                    assert_eq!(
                        v,
                        ReadValue {
                            value: 100 + i,
                            id: id.then_some(200 + i),
                            lost: lost.then_some(300 + i)
                        }
                    );
                }
                assert_eq!(g.get(nr as usize), None);
            }
        }
    }

    #[test]
    fn branch_stack_forms() {
        let entries = [1u64, 2, 3, 4, 5, 6];
        // Plain.
        let rec = Rb::new().u64(2).words(&entries).sample();
        let b = sample(&rec, &attr(PERF_SAMPLE_BRANCH_STACK)).branch_stack.expect("branch");
        assert_eq!((b.len(), b.hw_idx, b.counters), (2, None, None));
        assert_eq!(b.get(1), Some(BranchEntry { from: 4, to: 5, flags: 6 }));
        assert_eq!(b.get(2), None);
        // With hw_idx and counters.
        let a = DecodeAttr {
            sample_type: PERF_SAMPLE_BRANCH_STACK,
            branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX | PERF_SAMPLE_BRANCH_COUNTERS,
            ..DecodeAttr::default()
        };
        let rec = Rb::new().u64(2).u64(9).words(&entries).words(&[70, 71]).sample();
        let b = sample(&rec, &a).branch_stack.expect("branch");
        assert_eq!(b.hw_idx, Some(9));
        assert_eq!(b.get(0), Some(BranchEntry { from: 1, to: 2, flags: 3 }));
        assert_eq!(b.counters.map(|c| c.iter().collect::<Vec<_>>()), Some(vec![70, 71]));
        // Empty with hw_idx (a PMU stack of no entries) and bare (no stack).
        let with = Rb::new().u64(0).u64(u64::MAX).sample();
        assert_eq!(sample(&with, &a).branch_stack.expect("branch").hw_idx, Some(u64::MAX));
        let bare = Rb::new().u64(0).sample();
        let b = sample(&bare, &a).branch_stack.expect("branch");
        assert_eq!((b.len(), b.hw_idx), (0, None));
        // Bare followed by more fields.
        let a2 = DecodeAttr { sample_type: a.sample_type | PERF_SAMPLE_PHYS_ADDR, ..a };
        let bare = Rb::new().u64(0).u64(0x1000).sample();
        let s = sample(&bare, &a2);
        assert_eq!((s.branch_stack.expect("branch").hw_idx, s.phys_addr), (None, Some(0x1000)));
        // A non-empty stack never drops hw_idx.
        let rec = Rb::new().u64(1).words(&entries[..3]).u64(5).sample();
        assert!(decode(&rec, &a).is_err());
        // Entries short.
        let rec = Rb::new().u64(2).words(&entries[..5]).sample();
        assert_eq!(
            decode(&rec, &attr(PERF_SAMPLE_BRANCH_STACK)),
            Err(DecodeError::Truncated { field: Field::BranchEntries, offset: 16 })
        );
    }

    #[test]
    fn regs_follow_abi_and_mask() {
        let mask = (1 << 0) | (1 << 7) | (1 << 8);
        let a = DecodeAttr {
            sample_type: PERF_SAMPLE_REGS_USER | PERF_SAMPLE_REGS_INTR,
            sample_regs_user: mask,
            sample_regs_intr: 0b11,
            ..DecodeAttr::default()
        };
        let rec = Rb::new().u64(2).words(&[10, 70, 80]).u64(2).words(&[1, 2]).sample();
        let s = sample(&rec, &a);
        let u = s.regs_user.expect("regs_user");
        assert_eq!((u.abi, u.values.len()), (2, 3));
        assert_eq!(
            (u.get(0), u.get(7), u.get(8), u.get(1), u.get(64)),
            (Some(10), Some(70), Some(80), None, None)
        );
        let i = s.regs_intr.expect("regs_intr");
        assert_eq!(i.values.iter().collect::<Vec<_>>(), vec![1, 2]);
        // ABI_NONE: no registers follow.
        let rec = Rb::new().u64(0).u64(0).sample();
        let s = sample(&rec, &a);
        assert!(s.regs_user.expect("regs").values.is_empty());
        assert_eq!(s.regs_user.expect("regs").get(0), None);
        // Too few registers for the mask.
        let rec = Rb::new().u64(2).words(&[10, 70]).u64(0).sample();
        assert!(decode(&rec, &a).is_err());
    }

    #[test]
    fn stack_user_dyn_size() {
        let a = attr(PERF_SAMPLE_STACK_USER);
        let rec = Rb::new().u64(16).bytes(&[7; 16]).u64(8).sample();
        let st = sample(&rec, &a).stack_user.expect("stack");
        assert_eq!((st.data.len(), st.dyn_size, st.valid().len()), (16, Some(8), 8));
        // size 0: no dyn_size.
        let rec = Rb::new().u64(0).sample();
        let st = sample(&rec, &a).stack_user.expect("stack");
        assert_eq!((st.data.len(), st.dyn_size, st.valid().len()), (0, None, 0));
        // dyn_size beyond size.
        let rec = Rb::new().u64(16).bytes(&[7; 16]).u64(17).sample();
        assert_eq!(
            decode(&rec, &a),
            Err(DecodeError::Inconsistent { field: Field::StackUserDynSize, value: 17, limit: 16 })
        );
        // Missing dyn_size.
        let rec = Rb::new().u64(16).bytes(&[7; 16]).sample();
        assert_eq!(
            decode(&rec, &a),
            Err(DecodeError::Truncated { field: Field::StackUserDynSize, offset: 32 })
        );
    }

    #[test]
    fn aux_is_last() {
        let a = attr(PERF_SAMPLE_AUX | PERF_SAMPLE_CODE_PAGE_SIZE | PERF_SAMPLE_DATA_PAGE_SIZE);
        let rec = Rb::new().u64(4096).u64(2 << 20).u64(16).bytes(&[9; 16]).sample();
        let s = sample(&rec, &a);
        assert_eq!((s.data_page_size, s.code_page_size), (Some(4096), Some(2 << 20)));
        assert_eq!(s.aux, Some(&[9u8; 16][..]));
        let rec = Rb::new().u64(4096).u64(2 << 20).u64(0).sample();
        assert_eq!(sample(&rec, &a).aux, Some(&[][..]));
    }

    // ---- everything at once: the order --------------------------------------

    const ALL: u64 = KNOWN_SAMPLE_TYPE & !PERF_SAMPLE_WEIGHT_STRUCT;

    fn all_attr() -> DecodeAttr {
        DecodeAttr {
            sample_type: ALL,
            read_format: PERF_FORMAT_GROUP
                | PERF_FORMAT_ID
                | PERF_FORMAT_LOST
                | PERF_FORMAT_TOTAL_TIME_ENABLED
                | PERF_FORMAT_TOTAL_TIME_RUNNING,
            sample_id_all: true,
            sample_regs_user: 0b101,
            sample_regs_intr: 0b1,
            branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX,
        }
    }

    /// A sample with every field, each value distinct, in the kernel's order.
    fn all_record() -> Vec<u8> {
        Rb::new()
            .u64(0x1d) // identifier
            .u64(0x1f) // ip
            .pair(42, 43) // pid, tid
            .u64(0x71) // time
            .u64(0xad) // addr
            .u64(0x1d) // id
            .u64(0x5d) // stream_id
            .pair(1, 0) // cpu, res
            .u64(0x9e) // period
            .words(&[2, 0xe0, 0xe1, 500, 0x1d, 0, 501, 0x1e, 3]) // group: nr, te, tr, {v, id, lost} x2
            .words(&[3, 0xc0, 0xc1, 0xc2]) // callchain
            .u32(4)
            .bytes(b"rawd") // raw
            .words(&[1, 0x77, 0xf0, 0x70, 0x0f]) // branch: nr, hw_idx, entry
            .words(&[2, 0xa0, 0xa2]) // regs_user: abi, 2 regs
            .u64(8)
            .bytes(b"stackdmp")
            .u64(8) // stack_user
            .u64(0x3e) // weight
            .u64(0xd5) // data_src
            .u64(0x7a) // transaction
            .words(&[2, 0xb0]) // regs_intr: abi, 1 reg
            .u64(0x9a) // phys_addr
            .u64(0xc9) // cgroup
            .u64(4096) // data_page_size
            .u64(8192) // code_page_size
            .u64(8)
            .bytes(b"auxdata!") // aux
            .sample()
    }

    #[test]
    fn every_field_in_kernel_order() {
        let rec = all_record();
        let a = all_attr();
        let d = decode(&rec, &a).expect("decodes");
        check_inside(&d);
        assert_eq!(d.header, Header { type_: PERF_RECORD_SAMPLE, misc: 1, size: rec.len() as u16 });
        assert_eq!(d.present(), ALL);
        assert!(d.sample_id().is_none());
        let Body::Sample(s) = d.body else { panic!("sample") };
        assert_eq!((s.identifier, s.ip, s.time, s.addr), (Some(0x1d), Some(0x1f), Some(0x71), Some(0xad)));
        assert_eq!(s.tid, Some(PidTid { pid: 42, tid: 43 }));
        assert_eq!((s.id, s.stream_id, s.period), (Some(0x1d), Some(0x5d), Some(0x9e)));
        assert_eq!(s.cpu, Some(CpuRes { cpu: 1, res: 0 }));
        let r = s.read.expect("read");
        assert_eq!((r.time_enabled, r.time_running), (Some(0xe0), Some(0xe1)));
        let ReadValues::Group(g) = r.values else { panic!("group") };
        assert_eq!(g.get(1), Some(ReadValue { value: 501, id: Some(0x1e), lost: Some(3) }));
        assert_eq!(s.callchain.expect("cc").iter().collect::<Vec<_>>(), vec![0xc0, 0xc1, 0xc2]);
        assert_eq!(s.raw, Some(&b"rawd"[..]));
        let b = s.branch_stack.expect("branch");
        assert_eq!(
            (b.hw_idx, b.get(0)),
            (Some(0x77), Some(BranchEntry { from: 0xf0, to: 0x70, flags: 0x0f }))
        );
        let u = s.regs_user.expect("regs_user");
        assert_eq!((u.get(0), u.get(2)), (Some(0xa0), Some(0xa2)));
        let st = s.stack_user.expect("stack");
        assert_eq!((st.data, st.dyn_size), (&b"stackdmp"[..], Some(8)));
        assert_eq!((s.weight, s.data_src, s.transaction), (Some(0x3e), Some(0xd5), Some(0x7a)));
        assert_eq!(s.regs_intr.expect("regs_intr").get(0), Some(0xb0));
        assert_eq!((s.phys_addr, s.cgroup), (Some(0x9a), Some(0xc9)));
        assert_eq!((s.data_page_size, s.code_page_size), (Some(4096), Some(8192)));
        assert_eq!(s.aux, Some(&b"auxdata!"[..]));
    }

    #[test]
    fn every_truncation_of_every_kind_fails() {
        let a = all_attr();
        let records = [
            all_record(),
            Rb::new()
                .words(&[7, 12])
                .pair(1, 2)
                .words(&[3, 4, 5])
                .pair(6, 0)
                .u64(8)
                .finish(PERF_RECORD_LOST, 0),
            Rb::new()
                .words(&[1, 2, 3])
                .pair(1, 2)
                .words(&[3, 4, 5])
                .pair(6, 0)
                .u64(8)
                .finish(PERF_RECORD_THROTTLE, 0),
            Rb::new()
                .u64(5)
                .pair(1, 2)
                .words(&[3, 4, 5])
                .pair(6, 0)
                .u64(8)
                .finish(PERF_RECORD_LOST_SAMPLES, 0),
        ];
        for rec in &records {
            assert!(decode(rec, &a).is_ok());
            for len in 0..rec.len() {
                let err = decode(&rec[..len], &a).expect_err("cut record");
                assert!(err.is_malformed(), "{err}");
                if len >= HEADER_SIZE {
                    assert_eq!(err, DecodeError::BadSize { size: rec.len() as u16, len });
                    // Patched header.size: the fields no longer fit.
                    let mut cut = rec[..len].to_vec();
                    cut[6..8].copy_from_slice(&(len as u16).to_ne_bytes());
                    let err = decode(&cut, &a).expect_err("patched record");
                    assert!(err.is_malformed() && err.to_string().len() > 5, "{err}");
                } else {
                    assert_eq!(err, DecodeError::ShortHeader { len });
                }
            }
            // Longer buffers are fine: only header.size bytes are read.
            let mut longer = rec.clone();
            longer.extend_from_slice(&[0xee; 24]);
            assert_eq!(decode(&longer, &a).expect("longer").bytes, &rec[..]);
            // A grown header.size is trailing garbage.
            let mut grown = longer.clone();
            grown[6..8].copy_from_slice(&(rec.len() as u16 + 8).to_ne_bytes());
            assert_eq!(
                decode(&grown, &a),
                Err(DecodeError::Trailing { used: rec.len(), size: rec.len() + 8 })
            );
        }
    }

    // ---- other records ------------------------------------------------------

    #[test]
    fn lost_throttle_lost_samples() {
        let plain = DecodeAttr { sample_type: ALL, ..DecodeAttr::default() };
        let rec = Rb::new().u64(7).u64(12).finish(PERF_RECORD_LOST, 0);
        let d = decode(&rec, &plain).expect("lost");
        assert_eq!(d.body, Body::Lost(Lost { id: 7, lost: 12, sample_id: SampleId::default() }));
        assert_eq!(d.present(), 0);
        for (type_, unthrottle) in [(PERF_RECORD_THROTTLE, false), (PERF_RECORD_UNTHROTTLE, true)] {
            let rec = Rb::new().words(&[100, 7, 8]).finish(type_, 0);
            let t = Throttle { time: 100, id: 7, stream_id: 8, sample_id: SampleId::default() };
            let want = if unthrottle { Body::Unthrottle(t) } else { Body::Throttle(t) };
            assert_eq!(decode(&rec, &plain).expect("throttle").body, want);
        }
        let rec = Rb::new().u64(3).finish(PERF_RECORD_LOST_SAMPLES, 0);
        assert_eq!(
            decode(&rec, &plain).expect("lost samples").body,
            Body::LostSamples(LostSamples { lost: 3, sample_id: SampleId::default() })
        );
        // Without sample_id_all, anything after the fields is garbage.
        let rec = Rb::new().u64(7).u64(12).u64(0).finish(PERF_RECORD_LOST, 0);
        assert_eq!(decode(&rec, &plain), Err(DecodeError::Trailing { used: 24, size: 32 }));
    }

    #[test]
    fn sample_id_trailer_order() {
        // All six: TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER.
        let a = DecodeAttr { sample_type: ALL, sample_id_all: true, ..DecodeAttr::default() };
        let rec = Rb::new()
            .words(&[7, 12])
            .pair(1, 2)
            .words(&[3, 4, 5])
            .pair(6, 0)
            .u64(8)
            .finish(PERF_RECORD_LOST, 0);
        let d = decode(&rec, &a).expect("lost");
        let want = SampleId {
            present: SAMPLE_ID_BITS,
            tid: Some(PidTid { pid: 1, tid: 2 }),
            time: Some(3),
            id: Some(4),
            stream_id: Some(5),
            cpu: Some(CpuRes { cpu: 6, res: 0 }),
            identifier: Some(8),
        };
        assert_eq!(d.sample_id(), Some(&want));
        assert_eq!(d.present(), SAMPLE_ID_BITS);
        // Each alone.
        for bit in [
            PERF_SAMPLE_TID,
            PERF_SAMPLE_TIME,
            PERF_SAMPLE_ID,
            PERF_SAMPLE_STREAM_ID,
            PERF_SAMPLE_CPU,
            PERF_SAMPLE_IDENTIFIER,
        ] {
            let a =
                DecodeAttr { sample_type: bit | PERF_SAMPLE_RAW | PERF_SAMPLE_IP, sample_id_all: true, ..a };
            let rec = Rb::new().u64(3).u64(0x0102_0304_0506_0708).finish(PERF_RECORD_LOST_SAMPLES, 0);
            let d = decode(&rec, &a).expect("lost samples");
            let id = d.sample_id().expect("trailer");
            assert_eq!(id.present, bit);
            let some = [
                id.tid.is_some(),
                id.time.is_some(),
                id.id.is_some(),
                id.stream_id.is_some(),
                id.cpu.is_some(),
                id.identifier.is_some(),
            ];
            assert_eq!(some.iter().filter(|&&b| b).count(), 1);
            // Missing trailer.
            let short = Rb::new().u64(3).finish(PERF_RECORD_LOST_SAMPLES, 0);
            assert!(matches!(decode(&short, &a), Err(DecodeError::Truncated { offset: 16, .. })));
        }
        // sample_id_all with no id bits: nothing follows.
        let a = DecodeAttr { sample_type: PERF_SAMPLE_RAW, sample_id_all: true, ..DecodeAttr::default() };
        let rec = Rb::new().u64(7).u64(12).finish(PERF_RECORD_LOST, 0);
        assert_eq!(decode(&rec, &a).expect("lost").present(), 0);
    }

    // ---- malformed and unsupported -------------------------------------------

    #[test]
    fn header_errors() {
        let a = attr(PERF_SAMPLE_RAW);
        assert_eq!(decode(&[], &a), Err(DecodeError::ShortHeader { len: 0 }));
        assert_eq!(decode(&[9, 0, 0, 0, 0, 0, 8], &a), Err(DecodeError::ShortHeader { len: 7 }));
        for size in [0u16, 1, 7] {
            let mut rec = Rb::new().u32(0).u32(0).sample();
            rec[6..8].copy_from_slice(&size.to_ne_bytes());
            assert_eq!(decode(&rec, &a), Err(DecodeError::BadSize { size, len: 16 }));
        }
        let mut rec = Rb::new().u32(0).u32(0).sample();
        rec[6..8].copy_from_slice(&u16::MAX.to_ne_bytes());
        assert_eq!(decode(&rec, &a), Err(DecodeError::BadSize { size: u16::MAX, len: 16 }));
        assert_eq!(header(&rec[..7]), None);
    }

    #[test]
    fn unsupported() {
        let rec = Rb::new().u64(0).finish(1, 0); // PERF_RECORD_MMAP
        let err = decode(&rec, &attr(0)).expect_err("mmap");
        assert_eq!(err, DecodeError::UnsupportedType { type_: 1 });
        assert!(!err.is_malformed());
        let rec = Rb::new().u64(0).sample();
        let err = decode(&rec, &attr(PERF_SAMPLE_IP | 1 << 25)).expect_err("bit 25");
        assert_eq!(err, DecodeError::UnsupportedLayout { sample_type: 1 << 25, read_format: 0 });
        assert!(!err.is_malformed());
        let a = DecodeAttr { sample_type: PERF_SAMPLE_READ, read_format: 1 << 5, ..DecodeAttr::default() };
        assert_eq!(
            decode(&rec, &a),
            Err(DecodeError::UnsupportedLayout { sample_type: 0, read_format: 1 << 5 })
        );
        // Unknown read_format bits do not matter without READ.
        let a = DecodeAttr { sample_type: PERF_SAMPLE_IP, read_format: 1 << 5, ..DecodeAttr::default() };
        assert_eq!(sample(&rec, &a).ip, Some(0));
        // Unknown sample_type bits do not matter for other records.
        let lost = Rb::new().u64(7).u64(12).finish(PERF_RECORD_LOST, 0);
        assert!(decode(&lost, &attr(1 << 40)).is_ok());
    }

    #[test]
    fn arrays_must_be_aligned() {
        // A raw size the kernel never writes (not padded) puts the branch
        // entries off an 8-byte boundary.
        let a = attr(PERF_SAMPLE_RAW | PERF_SAMPLE_BRANCH_STACK);
        let rec = Rb::new().u32(5).bytes(&[1; 5]).u64(1).words(&[1, 2, 3]).bytes(&[0; 3]).sample();
        assert_eq!(
            decode(&rec, &a),
            Err(DecodeError::Misaligned { field: Field::BranchEntries, offset: 25 })
        );
        // Scalars after such a raw are still read.
        let a = attr(PERF_SAMPLE_RAW | PERF_SAMPLE_PHYS_ADDR);
        let rec = Rb::new().u32(5).bytes(&[1; 5]).u64(0x1234).sample();
        assert_eq!(sample(&rec, &a).phys_addr, Some(0x1234));
    }

    /// Deterministic pseudo-random mutations: decoding never panics, and what
    /// it returns stays inside the record.
    #[test]
    fn mutations_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let base = all_record();
        let attrs = [
            all_attr(),
            DecodeAttr { branch_sample_type: PERF_SAMPLE_BRANCH_COUNTERS, ..all_attr() },
            DecodeAttr { read_format: PERF_FORMAT_ID, ..all_attr() },
            attr(PERF_SAMPLE_RAW),
            attr(PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_STACK_USER | PERF_SAMPLE_AUX),
        ];
        let mut ok = 0;
        for round in 0..20_000 {
            let mut rec = base.clone();
            if round % 3 == 0 {
                rec.truncate((next() % (rec.len() as u64 + 1)) as usize);
            }
            for _ in 0..(next() % 4 + 1) {
                if rec.is_empty() {
                    break;
                }
                let i = (next() % rec.len() as u64) as usize;
                rec[i] = match next() % 4 {
                    0 => 0,
                    1 => 0xff,
                    _ => next() as u8,
                };
            }
            let a = &attrs[(next() % attrs.len() as u64) as usize];
            if let Ok(d) = decode(&rec, a) {
                ok += 1;
                check_inside(&d);
                assert!(d.bytes.len() <= rec.len());
            }
            // Random bytes too.
            let len = (next() % 80) as usize;
            let junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let _ = decode(&junk, a);
        }
        assert!(ok > 0, "some mutations still decode");
    }
}
