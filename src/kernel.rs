//! The kernel's perf uapi as this crate uses it: record types, the
//! control page offsets, and the `perf_event_attr` we build ourselves.

use core::mem::{offset_of, size_of};

/// `PERF_RECORD_LOST`.
pub const PERF_RECORD_LOST: u32 = 2;
/// `PERF_RECORD_SAMPLE`.
pub const PERF_RECORD_SAMPLE: u32 = 9;

/// Byte offset of `data_head` in `struct perf_event_mmap_page`.
pub const MMAP_PAGE_DATA_HEAD: usize = 1024;
/// Byte offset of `data_tail` in `struct perf_event_mmap_page`.
pub const MMAP_PAGE_DATA_TAIL: usize = 1032;

/// `struct perf_event_attr` up to `sig_data` (`PERF_ATTR_SIZE_VER7`, the
/// size libbpf 1.0/1.1 pass), for the attr we build ourselves.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct PerfEventAttr {
    /// `PERF_TYPE_*`.
    pub type_: u32,
    /// `sizeof` this struct as the kernel should read it.
    pub size: u32,
    /// Type-specific config (`PERF_COUNT_SW_*`).
    pub config: u64,
    /// `sample_period` / `sample_freq`.
    pub sample_period: u64,
    /// `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// `PERF_FORMAT_*` bits.
    pub read_format: u64,
    /// The flag bit-field (`disabled`, `inherit`, …, `write_backward`, …).
    pub flags: u64,
    /// `wakeup_events` / `wakeup_watermark`.
    pub wakeup: u32,
    /// `bp_type`.
    pub bp_type: u32,
    /// `config1` / `bp_addr`.
    pub config1: u64,
    /// `config2` / `bp_len`.
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
    assert!(offset_of!(PerfEventAttr, flags) == 40);
    assert!(offset_of!(PerfEventAttr, wakeup) == 48);
    assert!(offset_of!(PerfEventAttr, sig_data) == 120);
};

/// `PERF_TYPE_SOFTWARE`.
pub const PERF_TYPE_SOFTWARE: u32 = 1;
/// `PERF_COUNT_SW_BPF_OUTPUT`.
pub const PERF_COUNT_SW_BPF_OUTPUT: u64 = 10;
/// `PERF_SAMPLE_RAW`.
pub const PERF_SAMPLE_RAW: u64 = 1 << 10;
/// `PERF_FORMAT_LOST` (Linux 6.0): `read()` on the event also returns the
/// records it could not write, whether reported in its ring yet or not.
pub const PERF_FORMAT_LOST: u64 = 1 << 4;

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
}

/// `perf_event_attr.disabled`.
pub const ATTR_FLAG_DISABLED: u64 = 1;
/// `perf_event_attr.watermark`: `wakeup` counts bytes, not events.
pub const ATTR_FLAG_WATERMARK: u64 = 1 << 14;
/// `perf_event_attr.write_backward`: the kernel writes from high to low
/// addresses and, with a read-only mapping, overwrites the oldest data.
pub const ATTR_FLAG_WRITE_BACKWARD: u64 = 1 << 27;

/// `PERF_EVENT_IOC_PAUSE_OUTPUT` (`_IOW('$', 9, __u32)`).
pub const PERF_EVENT_IOC_PAUSE_OUTPUT: u64 = 0x4004_2409;
