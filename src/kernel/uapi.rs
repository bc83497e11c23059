//! The perf and BPF uapi constants this crate uses, in one place
//! (`include/uapi/linux/perf_event.h`, `bpf.h`): record types and their
//! `misc` bits, the control page's offsets, event types and configs,
//! `PERF_SAMPLE_*`, `PERF_FORMAT_*`, `perf_event_attr` flag bits, ioctls,
//! BPF map types and the ring buffer's record header bits.
//! Re-exported by `kernel`; the public ones again by `perfbuf::uapi` and
//! `perfbuf::decode`.

/// `PERF_RECORD_MMAP`.
pub const PERF_RECORD_MMAP: u32 = 1;
/// `PERF_RECORD_LOST`: records dropped for lack of space.
pub const PERF_RECORD_LOST: u32 = 2;
/// `PERF_RECORD_COMM`.
pub const PERF_RECORD_COMM: u32 = 3;
/// `PERF_RECORD_EXIT`.
pub const PERF_RECORD_EXIT: u32 = 4;
/// `PERF_RECORD_THROTTLE`.
pub const PERF_RECORD_THROTTLE: u32 = 5;
/// `PERF_RECORD_UNTHROTTLE`.
pub const PERF_RECORD_UNTHROTTLE: u32 = 6;
/// `PERF_RECORD_FORK`.
pub const PERF_RECORD_FORK: u32 = 7;
/// `PERF_RECORD_SAMPLE`.
pub const PERF_RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_MMAP2`.
pub const PERF_RECORD_MMAP2: u32 = 10;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;
/// `PERF_RECORD_SWITCH`.
pub const PERF_RECORD_SWITCH: u32 = 14;
/// `PERF_RECORD_SWITCH_CPU_WIDE`.
pub const PERF_RECORD_SWITCH_CPU_WIDE: u32 = 15;
/// `PERF_RECORD_NAMESPACES`.
pub const PERF_RECORD_NAMESPACES: u32 = 16;
/// `PERF_RECORD_KSYMBOL`.
pub const PERF_RECORD_KSYMBOL: u32 = 17;
/// `PERF_RECORD_BPF_EVENT`.
pub const PERF_RECORD_BPF_EVENT: u32 = 18;
/// `PERF_RECORD_CGROUP`.
pub const PERF_RECORD_CGROUP: u32 = 19;

/// `header.misc` of COMM: the name changed because the task exec'd.
pub const PERF_RECORD_MISC_COMM_EXEC: u16 = 1 << 13;
/// `header.misc` of MMAP / MMAP2: a data (not executable) mapping.
pub const PERF_RECORD_MISC_MMAP_DATA: u16 = 1 << 13;
/// `header.misc` of MMAP2: a build id instead of device and inode.
pub const PERF_RECORD_MISC_MMAP_BUILD_ID: u16 = 1 << 14;
/// `header.misc` of SWITCH / SWITCH_CPU_WIDE: switching out.
pub const PERF_RECORD_MISC_SWITCH_OUT: u16 = 1 << 13;
/// `header.misc` of a switch out: the task was preempted (still runnable).
pub const PERF_RECORD_MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;
/// `header.misc`: the CPU mode of a record about the kernel.
pub const PERF_RECORD_MISC_KERNEL: u16 = 1;
/// `header.misc`: the CPU mode of a record about user space.
pub const PERF_RECORD_MISC_USER: u16 = 2;
/// `header.misc` of a perf.data `HEADER_BUILD_ID` entry: its size byte
/// is valid.
pub const PERF_RECORD_MISC_BUILD_ID_SIZE: u16 = 1 << 15;

/// Longest build id the kernel writes (`BUILD_ID_SIZE_MAX`).
pub const BUILD_ID_SIZE_MAX: usize = 20;

/// Byte offset of `data_head` in `struct perf_event_mmap_page`.
pub const MMAP_PAGE_DATA_HEAD: usize = 1024;
/// Byte offset of `data_tail` in `struct perf_event_mmap_page`.
pub const MMAP_PAGE_DATA_TAIL: usize = 1032;

/// `PERF_TYPE_HARDWARE`.
pub const PERF_TYPE_HARDWARE: u32 = 0;
/// `PERF_TYPE_SOFTWARE`.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// `PERF_TYPE_TRACEPOINT`.
pub const PERF_TYPE_TRACEPOINT: u32 = 2;
/// `PERF_COUNT_HW_CPU_CYCLES`.
pub const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
/// `PERF_COUNT_SW_CPU_CLOCK`.
pub const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
/// `PERF_COUNT_SW_TASK_CLOCK`.
pub const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
/// `PERF_COUNT_SW_DUMMY`: counts nothing; a ring for other events.
pub const PERF_COUNT_SW_DUMMY: u64 = 9;
/// `PERF_COUNT_SW_BPF_OUTPUT`.
pub const PERF_COUNT_SW_BPF_OUTPUT: u64 = 10;

/// `PERF_SAMPLE_IP`.
pub const PERF_SAMPLE_IP: u64 = 1 << 0;
/// `PERF_SAMPLE_TID`.
pub const PERF_SAMPLE_TID: u64 = 1 << 1;
/// `PERF_SAMPLE_TIME`.
pub const PERF_SAMPLE_TIME: u64 = 1 << 2;
/// `PERF_SAMPLE_ADDR`.
pub const PERF_SAMPLE_ADDR: u64 = 1 << 3;
/// `PERF_SAMPLE_READ`.
pub const PERF_SAMPLE_READ: u64 = 1 << 4;
/// `PERF_SAMPLE_CALLCHAIN`.
pub const PERF_SAMPLE_CALLCHAIN: u64 = 1 << 5;
/// `PERF_SAMPLE_ID`.
pub const PERF_SAMPLE_ID: u64 = 1 << 6;
/// `PERF_SAMPLE_CPU`.
pub const PERF_SAMPLE_CPU: u64 = 1 << 7;
/// `PERF_SAMPLE_PERIOD`.
pub const PERF_SAMPLE_PERIOD: u64 = 1 << 8;
/// `PERF_SAMPLE_STREAM_ID`.
pub const PERF_SAMPLE_STREAM_ID: u64 = 1 << 9;
/// `PERF_SAMPLE_RAW`.
pub const PERF_SAMPLE_RAW: u64 = 1 << 10;
/// `PERF_SAMPLE_BRANCH_STACK`.
pub const PERF_SAMPLE_BRANCH_STACK: u64 = 1 << 11;
/// `PERF_SAMPLE_REGS_USER`.
pub const PERF_SAMPLE_REGS_USER: u64 = 1 << 12;
/// `PERF_SAMPLE_STACK_USER`.
pub const PERF_SAMPLE_STACK_USER: u64 = 1 << 13;
/// `PERF_SAMPLE_WEIGHT`.
pub const PERF_SAMPLE_WEIGHT: u64 = 1 << 14;
/// `PERF_SAMPLE_DATA_SRC`.
pub const PERF_SAMPLE_DATA_SRC: u64 = 1 << 15;
/// `PERF_SAMPLE_IDENTIFIER`.
pub const PERF_SAMPLE_IDENTIFIER: u64 = 1 << 16;
/// `PERF_SAMPLE_TRANSACTION`.
pub const PERF_SAMPLE_TRANSACTION: u64 = 1 << 17;
/// `PERF_SAMPLE_REGS_INTR`.
pub const PERF_SAMPLE_REGS_INTR: u64 = 1 << 18;
/// `PERF_SAMPLE_PHYS_ADDR`.
pub const PERF_SAMPLE_PHYS_ADDR: u64 = 1 << 19;
/// `PERF_SAMPLE_AUX`.
pub const PERF_SAMPLE_AUX: u64 = 1 << 20;
/// `PERF_SAMPLE_CGROUP`.
pub const PERF_SAMPLE_CGROUP: u64 = 1 << 21;
/// `PERF_SAMPLE_DATA_PAGE_SIZE`.
pub const PERF_SAMPLE_DATA_PAGE_SIZE: u64 = 1 << 22;
/// `PERF_SAMPLE_CODE_PAGE_SIZE`.
pub const PERF_SAMPLE_CODE_PAGE_SIZE: u64 = 1 << 23;
/// `PERF_SAMPLE_WEIGHT_STRUCT`.
pub const PERF_SAMPLE_WEIGHT_STRUCT: u64 = 1 << 24;

/// `PERF_SAMPLE_BRANCH_HW_INDEX` (in `branch_sample_type`).
pub const PERF_SAMPLE_BRANCH_HW_INDEX: u64 = 1 << 17;
/// `PERF_SAMPLE_BRANCH_COUNTERS` (in `branch_sample_type`, Linux 6.8).
pub const PERF_SAMPLE_BRANCH_COUNTERS: u64 = 1 << 19;
/// `PERF_SAMPLE_REGS_ABI_NONE`: no registers follow.
pub const PERF_SAMPLE_REGS_ABI_NONE: u64 = 0;

/// `PERF_FORMAT_TOTAL_TIME_ENABLED`.
pub const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
/// `PERF_FORMAT_TOTAL_TIME_RUNNING`.
pub const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
/// `PERF_FORMAT_ID`.
pub const PERF_FORMAT_ID: u64 = 1 << 2;
/// `PERF_FORMAT_GROUP`.
pub const PERF_FORMAT_GROUP: u64 = 1 << 3;
/// `PERF_FORMAT_LOST` (Linux 6.0): `read()` on the event also returns the
/// records it could not write, whether reported in its ring yet or not.
pub const PERF_FORMAT_LOST: u64 = 1 << 4;

/// `perf_event_attr.disabled`.
pub const ATTR_FLAG_DISABLED: u64 = 1;
/// `perf_event_attr.inherit`.
pub const ATTR_FLAG_INHERIT: u64 = 1 << 1;
/// `perf_event_attr.freq`: `sample_period` is a frequency in Hz.
pub const ATTR_FLAG_FREQ: u64 = 1 << 10;
/// `perf_event_attr.watermark`: `wakeup` counts bytes, not events.
pub const ATTR_FLAG_WATERMARK: u64 = 1 << 14;
/// `perf_event_attr.sample_id_all`.
pub const ATTR_FLAG_SAMPLE_ID_ALL: u64 = 1 << 18;
/// `perf_event_attr.use_clockid`: sample times come from `clockid`.
pub const ATTR_FLAG_USE_CLOCKID: u64 = 1 << 25;
/// `perf_event_attr.write_backward`: the kernel writes from high to low
/// addresses and, with a read-only mapping, overwrites the oldest data.
pub const ATTR_FLAG_WRITE_BACKWARD: u64 = 1 << 27;

/// `perf_event_attr.mmap`: `PERF_RECORD_MMAP` of executable mappings.
pub const ATTR_FLAG_MMAP: u64 = 1 << 8;
/// `perf_event_attr.comm`: `PERF_RECORD_COMM`.
pub const ATTR_FLAG_COMM: u64 = 1 << 9;
/// `perf_event_attr.task`: `PERF_RECORD_FORK` and `PERF_RECORD_EXIT`.
pub const ATTR_FLAG_TASK: u64 = 1 << 13;
/// `perf_event_attr.mmap_data`: data mappings too.
pub const ATTR_FLAG_MMAP_DATA: u64 = 1 << 17;
/// `perf_event_attr.mmap2`: `PERF_RECORD_MMAP2` instead of `MMAP`.
pub const ATTR_FLAG_MMAP2: u64 = 1 << 23;
/// `perf_event_attr.comm_exec`: COMM says when exec set the name.
pub const ATTR_FLAG_COMM_EXEC: u64 = 1 << 24;
/// `perf_event_attr.context_switch`: `PERF_RECORD_SWITCH*`.
pub const ATTR_FLAG_CONTEXT_SWITCH: u64 = 1 << 26;
/// `perf_event_attr.namespaces`: `PERF_RECORD_NAMESPACES`.
pub const ATTR_FLAG_NAMESPACES: u64 = 1 << 28;
/// `perf_event_attr.ksymbol`: `PERF_RECORD_KSYMBOL`.
pub const ATTR_FLAG_KSYMBOL: u64 = 1 << 29;
/// `perf_event_attr.bpf_event`: `PERF_RECORD_BPF_EVENT`.
pub const ATTR_FLAG_BPF_EVENT: u64 = 1 << 30;
/// `perf_event_attr.cgroup`: `PERF_RECORD_CGROUP` (Linux 5.7).
pub const ATTR_FLAG_CGROUP: u64 = 1 << 32;
/// `perf_event_attr.build_id`: MMAP2 with build ids (Linux 5.12).
pub const ATTR_FLAG_BUILD_ID: u64 = 1 << 34;

/// `PERF_EVENT_IOC_ENABLE`.
pub const PERF_EVENT_IOC_ENABLE: u64 = 0x2400;
/// `PERF_EVENT_IOC_DISABLE`.
pub const PERF_EVENT_IOC_DISABLE: u64 = 0x2401;
/// `PERF_EVENT_IOC_SET_OUTPUT`: send this event's records to another
/// event's ring (same CPU; the argument is that event's fd).
pub const PERF_EVENT_IOC_SET_OUTPUT: u64 = 0x2405;
/// `PERF_EVENT_IOC_SET_FILTER` (`_IOW('$', 6, char *)`).
pub const PERF_EVENT_IOC_SET_FILTER: u64 = 0x4008_2406;
/// `PERF_EVENT_IOC_ID` (`_IOR('$', 7, __u64 *)`).
pub const PERF_EVENT_IOC_ID: u64 = 0x8008_2407;
/// `PERF_EVENT_IOC_SET_BPF` (`_IOW('$', 8, __u32)`).
pub const PERF_EVENT_IOC_SET_BPF: u64 = 0x4004_2408;
/// `PERF_EVENT_IOC_PAUSE_OUTPUT` (`_IOW('$', 9, __u32)`).
pub const PERF_EVENT_IOC_PAUSE_OUTPUT: u64 = 0x4004_2409;
/// `PERF_EVENT_IOC_QUERY_BPF` (`_IOWR('$', 10, struct perf_event_query_bpf *)`,
/// Linux 4.16): the ids of the BPF programs a tracepoint runs.
pub const PERF_EVENT_IOC_QUERY_BPF: u64 = 0xc008_240a;

/// `PERF_FLAG_PID_CGROUP`: `pid` is a cgroup directory's fd.
pub const PERF_FLAG_PID_CGROUP: u64 = 1 << 2;

/// `BPF_MAP_TYPE_PERF_EVENT_ARRAY`.
pub const BPF_MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
/// `BPF_MAP_TYPE_PERCPU_ARRAY`: perfbuf.bpf.h's output counts.
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
/// `BPF_MAP_TYPE_RINGBUF` (Linux 5.8).
pub const BPF_MAP_TYPE_RINGBUF: u32 = 27;
/// `BPF_RINGBUF_BUSY_BIT`: set in a ring buffer record header's `len`
/// while the producer is still writing the record.
pub const BPF_RINGBUF_BUSY_BIT: u32 = 1 << 31;
/// `BPF_RINGBUF_DISCARD_BIT`: set in its `len` when the producer
/// discarded the record.
pub const BPF_RINGBUF_DISCARD_BIT: u32 = 1 << 30;
/// `BPF_RINGBUF_HDR_SZ`: size of a ring buffer record's header.
pub const BPF_RINGBUF_HDR_SZ: u64 = 8;
