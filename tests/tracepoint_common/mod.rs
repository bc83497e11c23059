//! Shared fixtures and a raw-record builder for the integration tests.
#![allow(dead_code)]

pub const SCHED_PROCESS_EXEC: &str = include_str!("../fixtures/tracepoint/sched_sched_process_exec.format");
pub const SCHED_SWITCH: &str = include_str!("../fixtures/tracepoint/sched_sched_switch.format");
pub const SYS_ENTER_OPENAT: &str = include_str!("../fixtures/tracepoint/syscalls_sys_enter_openat.format");
pub const IRQ_HANDLER_ENTRY: &str = include_str!("../fixtures/tracepoint/irq_irq_handler_entry.format");
pub const INET_SOCK_SET_STATE: &str = include_str!("../fixtures/tracepoint/sock_inet_sock_set_state.format");
pub const DMA_MAP_SG: &str = include_str!("../fixtures/tracepoint/dma_dma_map_sg.format");
pub const IPI_SEND_CPUMASK: &str = include_str!("../fixtures/tracepoint/ipi_ipi_send_cpumask.format");
pub const FTRACE_PRINT: &str = include_str!("../fixtures/tracepoint/ftrace_print.format");
pub const FTRACE_KERNEL_STACK: &str = include_str!("../fixtures/tracepoint/ftrace_kernel_stack.format");
pub const FTRACE_BRANCH: &str = include_str!("../fixtures/tracepoint/ftrace_branch.format");
pub const EXT4_FSMAP_LOW_KEY: &str = include_str!("../fixtures/tracepoint/ext4_ext4_fsmap_low_key.format");
pub const EXT4_FC_STATS: &str = include_str!("../fixtures/tracepoint/ext4_ext4_fc_stats.format");
pub const KVM_MMU_GET_PAGE: &str = include_str!("../fixtures/tracepoint/kvmmmu_kvm_mmu_get_page.format");
pub const SYNTHETIC_REL_LOC: &str = include_str!("../fixtures/tracepoint/synthetic_foo_rel_loc.format");

/// Every fixture, with a short label.
pub const ALL: &[(&str, &str)] = &[
    ("sched_process_exec", SCHED_PROCESS_EXEC),
    ("sched_switch", SCHED_SWITCH),
    ("sys_enter_openat", SYS_ENTER_OPENAT),
    ("irq_handler_entry", IRQ_HANDLER_ENTRY),
    ("inet_sock_set_state", INET_SOCK_SET_STATE),
    ("dma_map_sg", DMA_MAP_SG),
    ("ipi_send_cpumask", IPI_SEND_CPUMASK),
    ("print", FTRACE_PRINT),
    ("kernel_stack", FTRACE_KERNEL_STACK),
    ("branch", FTRACE_BRANCH),
    ("ext4_fsmap_low_key", EXT4_FSMAP_LOW_KEY),
    ("ext4_fc_stats", EXT4_FC_STATS),
    ("kvm_mmu_get_page", KVM_MMU_GET_PAGE),
    ("foo_rel_loc", SYNTHETIC_REL_LOC),
];

/// Builds a raw tracepoint record (native endianness), the way the kernel
/// lays it out in a PERF_SAMPLE_RAW payload.
#[derive(Debug, Clone)]
pub struct Rec(pub Vec<u8>);

impl Rec {
    /// A zeroed record of `len` bytes with the common header filled in.
    pub fn new(len: usize, common_type: u16, pid: i32) -> Self {
        let mut r = Rec(vec![0; len]);
        r.u16(0, common_type);
        r.u8(2, 0x01); // common_flags: TRACE_FLAG_IRQS_OFF
        r.u8(3, 0x00); // common_preempt_count
        r.i32(4, pid);
        r
    }

    pub fn bytes(&mut self, off: usize, b: &[u8]) -> &mut Self {
        self.0[off..off + b.len()].copy_from_slice(b);
        self
    }
    pub fn u8(&mut self, off: usize, v: u8) -> &mut Self {
        self.bytes(off, &[v])
    }
    pub fn u16(&mut self, off: usize, v: u16) -> &mut Self {
        self.bytes(off, &v.to_ne_bytes())
    }
    pub fn u32(&mut self, off: usize, v: u32) -> &mut Self {
        self.bytes(off, &v.to_ne_bytes())
    }
    pub fn i32(&mut self, off: usize, v: i32) -> &mut Self {
        self.bytes(off, &v.to_ne_bytes())
    }
    pub fn u64(&mut self, off: usize, v: u64) -> &mut Self {
        self.bytes(off, &v.to_ne_bytes())
    }
    pub fn i64(&mut self, off: usize, v: i64) -> &mut Self {
        self.bytes(off, &v.to_ne_bytes())
    }
    /// Writes a `__data_loc` word at `off` for data at `data_off` of
    /// `len` bytes.
    pub fn data_loc(&mut self, off: usize, data_off: usize, len: usize) -> &mut Self {
        let word = u32::try_from(len).unwrap() << 16 | u32::try_from(data_off).unwrap();
        self.u32(off, word)
    }
    /// Appends `data` at the end and points the `__data_loc` word at `off`
    /// to it.
    pub fn push_data_loc(&mut self, off: usize, data: &[u8]) -> &mut Self {
        let at = self.0.len();
        self.0.extend_from_slice(data);
        self.data_loc(off, at, data.len())
    }
    /// Appends `data` at the end and points the `__rel_loc` word at `off`
    /// (relative to `off + 4`) to it.
    pub fn push_rel_loc(&mut self, off: usize, data: &[u8]) -> &mut Self {
        let at = self.0.len();
        self.0.extend_from_slice(data);
        self.data_loc(off, at - (off + 4), data.len())
    }
}

/// Whether `sub` lies entirely inside `outer` (pointer-range check).
pub fn is_subslice(outer: &[u8], sub: &[u8]) -> bool {
    let o = outer.as_ptr_range();
    let s = sub.as_ptr_range();
    o.start <= s.start && s.end <= o.end
}
