//! The kernel as this crate uses it: the perf and BPF uapi in one place
//! (record types, `perf_event_attr`, ioctls, the control page), every
//! system call ([`sys`]), allocation that reports ENOMEM ([`fallible`]),
//! CPU lists, clocks, fault injection at the bottom ([`fault`]), and, in
//! test builds, a fake
//! kernel (`fake`) that the reader and the adaptive policy run against
//! without root.

pub mod clock;
pub mod cpu;
pub mod fallible;
#[cfg(test)]
pub mod fake;
pub mod fault;
pub mod quiesce;
pub mod sys;

use core::mem::{offset_of, size_of};

/// `PERF_RECORD_LOST`: records dropped for lack of space.
pub const PERF_RECORD_LOST: u32 = 2;
/// `PERF_RECORD_THROTTLE`.
pub const PERF_RECORD_THROTTLE: u32 = 5;
/// `PERF_RECORD_UNTHROTTLE`.
pub const PERF_RECORD_UNTHROTTLE: u32 = 6;
/// `PERF_RECORD_SAMPLE`.
pub const PERF_RECORD_SAMPLE: u32 = 9;
/// `PERF_RECORD_LOST_SAMPLES`.
pub const PERF_RECORD_LOST_SAMPLES: u32 = 13;

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

/// `PERF_FLAG_PID_CGROUP`: `pid` is a cgroup directory's fd.
pub const PERF_FLAG_PID_CGROUP: u64 = 1 << 2;

/// `BPF_MAP_TYPE_PERF_EVENT_ARRAY`.
pub const BPF_MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
/// `BPF_MAP_TYPE_RINGBUF` (Linux 5.8).
pub const BPF_MAP_TYPE_RINGBUF: u32 = 27;

/// The kernel's `struct perf_event_attr` up to `sig_data`
/// (`PERF_ATTR_SIZE_VER7`, 128 bytes, the size libbpf 1.0/1.1 pass), with
/// its flag bit-field as one word ([`ATTR_FLAG_DISABLED`] and friends).
///
/// ```
/// let attr = perfbuf::PerfEventAttr::bpf_output(1);
/// assert_eq!(attr.size, 128);
/// ```
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerfEventAttr {
    /// `PERF_TYPE_*`, or a dynamic PMU's type.
    pub type_: u32,
    /// `sizeof` this struct as the kernel should read it.
    pub size: u32,
    /// Type-specific config (`PERF_COUNT_SW_*`, a tracepoint id, ...).
    pub config: u64,
    /// `sample_period`, or `sample_freq` with [`ATTR_FLAG_FREQ`].
    pub sample_period: u64,
    /// `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// `PERF_FORMAT_*` bits.
    pub read_format: u64,
    /// The flag bit-field (`disabled`, `inherit`, ..., `write_backward`, ...).
    pub flags: u64,
    /// `wakeup_events`, or `wakeup_watermark` with [`ATTR_FLAG_WATERMARK`].
    pub wakeup: u32,
    /// `bp_type`.
    pub bp_type: u32,
    /// `config1` / `bp_addr` / `kprobe_func` / `uprobe_path`.
    pub config1: u64,
    /// `config2` / `bp_len` / `kprobe_addr` / `probe_offset`.
    pub config2: u64,
    /// `branch_sample_type`.
    pub branch_sample_type: u64,
    /// `sample_regs_user`.
    pub sample_regs_user: u64,
    /// `sample_stack_user`.
    pub sample_stack_user: u32,
    /// `clockid`.
    pub clockid: i32,
    /// `sample_regs_intr`.
    pub sample_regs_intr: u64,
    /// `aux_watermark`.
    pub aux_watermark: u32,
    /// `sample_max_stack`.
    pub sample_max_stack: u16,
    /// `__reserved_2`.
    pub reserved_2: u16,
    /// `aux_sample_size`.
    pub aux_sample_size: u32,
    /// `__reserved_3`.
    pub reserved_3: u32,
    /// `sig_data`.
    pub sig_data: u64,
}

const _: () = {
    assert!(size_of::<PerfEventAttr>() == 128);
    assert!(offset_of!(PerfEventAttr, sample_type) == 24);
    assert!(offset_of!(PerfEventAttr, flags) == 40);
    assert!(offset_of!(PerfEventAttr, wakeup) == 48);
    assert!(offset_of!(PerfEventAttr, sig_data) == 120);
};

impl PerfEventAttr {
    /// The attr `perf_buffer__new` uses: a BPF output event sampling raw
    /// data, enabled at open, waking the reader every `wakeup_events` samples.
    pub fn bpf_output(wakeup_events: u32) -> Self {
        PerfEventAttr {
            type_: PERF_TYPE_SOFTWARE,
            size: size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_SW_BPF_OUTPUT,
            sample_period: 1,
            sample_type: PERF_SAMPLE_RAW,
            wakeup: wakeup_events,
            ..Default::default()
        }
    }

    /// [`Self::bpf_output`], waking after `wakeup_bytes` bytes instead when
    /// non-zero, and writing backward (for overwritable rings) if asked.
    pub fn bpf_output_ext(wakeup_events: u32, wakeup_bytes: u32, backward: bool) -> Self {
        let mut attr = Self::bpf_output(wakeup_events);
        if wakeup_bytes > 0 {
            attr.flags |= ATTR_FLAG_WATERMARK;
            attr.wakeup = wakeup_bytes;
        }
        if backward {
            attr.flags |= ATTR_FLAG_WRITE_BACKWARD;
        }
        attr
    }

    /// Whether `flag` (an `ATTR_FLAG_*` bit) is set.
    pub fn has(&self, flag: u64) -> bool {
        self.flags & flag != 0
    }
}
