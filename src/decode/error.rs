//! Why a record did not decode, and where.

use core::fmt;

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
    /// Side-band records: the task's pid and tid.
    TaskPid,
    /// FORK / EXIT: the parent's pid and tid.
    TaskParent,
    /// FORK / EXIT: `time`.
    TaskTime,
    /// MMAP / MMAP2: `addr`.
    MmapAddr,
    /// MMAP / MMAP2: `len`.
    MmapLen,
    /// MMAP / MMAP2: `pgoff`.
    MmapPgoff,
    /// MMAP2: device and inode, or the build id.
    MmapFileId,
    /// MMAP2: `prot` and `flags`.
    MmapProt,
    /// A NUL-terminated name: COMM's `comm`, MMAP's `filename`, KSYMBOL's
    /// `name`, CGROUP's `path`.
    Name,
    /// SWITCH_CPU_WIDE: the next or previous task.
    SwitchTask,
    /// NAMESPACES: `nr_namespaces`.
    NamespacesNr,
    /// NAMESPACES: the `(dev, inode)` pairs.
    Namespaces,
    /// KSYMBOL: `addr`.
    KsymbolAddr,
    /// KSYMBOL: `len`, `ksym_type`, `flags`.
    KsymbolLen,
    /// BPF_EVENT: `type`, `flags`, `id`.
    BpfEventId,
    /// BPF_EVENT: `tag`.
    BpfEventTag,
    /// CGROUP: `id`.
    CgroupId,
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
