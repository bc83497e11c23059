//! The kernel as this crate uses it: the perf and BPF uapi in one place
//! (`perf_event_attr` here; record types, flag bits, ioctls and the control
//! page's offsets in `uapi`, re-exported here), every
//! system call ([`sys`]), allocation that reports ENOMEM ([`fallible`]),
//! CPU lists, clocks, fault injection at the bottom ([`fault`]), and, in
//! test builds, a fake
//! kernel (`fake`) that the reader and the adaptive policy run against
//! without root.

pub mod clock;
pub mod cpu;
#[cfg(test)]
pub mod fake;
pub mod fallible;
pub mod fault;
pub mod quiesce;
pub mod sys;
mod uapi;
pub mod uevent;

pub use uapi::*;

use core::mem::{offset_of, size_of};

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
