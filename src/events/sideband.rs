//! Side-band records a set asks for by name: which `perf_event_attr` bits
//! of each CPU's ring owner (the dummy event) make the kernel write them.

use crate::kernel::{
    ATTR_FLAG_BPF_EVENT, ATTR_FLAG_BUILD_ID, ATTR_FLAG_CGROUP, ATTR_FLAG_COMM, ATTR_FLAG_COMM_EXEC,
    ATTR_FLAG_CONTEXT_SWITCH, ATTR_FLAG_KSYMBOL, ATTR_FLAG_MMAP, ATTR_FLAG_MMAP_DATA, ATTR_FLAG_MMAP2,
    ATTR_FLAG_NAMESPACES, ATTR_FLAG_TASK,
};
use core::ops::{BitOr, BitOrAssign};

/// Side-band records of a set (see [`super::EventSetBuilder::sideband`]):
/// combine with `|`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Sideband(u32);

impl Sideband {
    /// None.
    pub const NONE: Sideband = Sideband(0);
    /// `PERF_RECORD_COMM`: a task's new name, with the exec bit when exec
    /// set it (attr `comm` + `comm_exec`).
    pub const COMM: Sideband = Sideband(1);
    /// `PERF_RECORD_FORK` and `PERF_RECORD_EXIT` (attr `task`).
    pub const TASK: Sideband = Sideband(1 << 1);
    /// `PERF_RECORD_MMAP2` of executable mappings: address, length,
    /// offset, device and inode, protection, file name (attr `mmap` +
    /// `mmap2`).
    pub const MMAP: Sideband = Sideband(1 << 2);
    /// With [`Self::MMAP`]: data mappings too (attr `mmap_data`).
    pub const MMAP_DATA: Sideband = Sideband(1 << 3);
    /// With [`Self::MMAP`]: the file's build id instead of device and
    /// inode where the kernel finds one (attr `build_id`, Linux 5.12).
    pub const BUILD_ID: Sideband = Sideband(1 << 4);
    /// `PERF_RECORD_SWITCH_CPU_WIDE` (`PERF_RECORD_SWITCH` for a per-task
    /// ring): context switches, direction and the next / previous task
    /// (attr `context_switch`).
    pub const SWITCH: Sideband = Sideband(1 << 5);
    /// `PERF_RECORD_NAMESPACES` (attr `namespaces`).
    pub const NAMESPACES: Sideband = Sideband(1 << 6);
    /// `PERF_RECORD_CGROUP`: cgroups created (attr `cgroup`, Linux 5.7).
    pub const CGROUP: Sideband = Sideband(1 << 7);
    /// `PERF_RECORD_KSYMBOL`: kernel symbols (BPF programs) registered and
    /// unregistered (attr `ksymbol`).
    pub const KSYMBOL: Sideband = Sideband(1 << 8);
    /// `PERF_RECORD_BPF_EVENT`: BPF programs loaded and unloaded (attr
    /// `bpf_event`).
    pub const BPF_EVENT: Sideband = Sideband(1 << 9);
    /// Every record above.
    pub const ALL: Sideband = Sideband((1 << 10) - 1);

    /// The bits (the C face's `PERFBUF_EVENTS_SB_*` values shifted right by 2).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// From bits; `None` if an unknown one is set.
    pub const fn from_bits(bits: u32) -> Option<Sideband> {
        if bits & !Self::ALL.0 == 0 { Some(Sideband(bits)) } else { None }
    }

    /// Whether every record of `other` is asked for.
    pub const fn contains(self, other: Sideband) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether none is asked for.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The `perf_event_attr` flag bits that ask the kernel for them.
    pub(crate) fn attr_flags(self) -> u64 {
        let pairs = [
            (Self::COMM, ATTR_FLAG_COMM | ATTR_FLAG_COMM_EXEC),
            (Self::TASK, ATTR_FLAG_TASK),
            (Self::MMAP, ATTR_FLAG_MMAP | ATTR_FLAG_MMAP2),
            (Self::MMAP_DATA, ATTR_FLAG_MMAP_DATA),
            (Self::BUILD_ID, ATTR_FLAG_BUILD_ID),
            (Self::SWITCH, ATTR_FLAG_CONTEXT_SWITCH),
            (Self::NAMESPACES, ATTR_FLAG_NAMESPACES),
            (Self::CGROUP, ATTR_FLAG_CGROUP),
            (Self::KSYMBOL, ATTR_FLAG_KSYMBOL),
            (Self::BPF_EVENT, ATTR_FLAG_BPF_EVENT),
        ];
        pairs.iter().filter(|(s, _)| self.contains(*s)).fold(0, |acc, (_, bits)| acc | bits)
    }
}

impl BitOr for Sideband {
    type Output = Sideband;
    fn bitor(self, rhs: Sideband) -> Sideband {
        Sideband(self.0 | rhs.0)
    }
}

impl BitOrAssign for Sideband {
    fn bitor_assign(&mut self, rhs: Sideband) {
        self.0 |= rhs.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_to_the_kernels_attr_bits() {
        assert_eq!(Sideband::COMM.attr_flags(), (1 << 9) | (1 << 24));
        assert_eq!((Sideband::MMAP | Sideband::TASK).attr_flags(), (1 << 8) | (1 << 23) | (1 << 13));
        assert_eq!(Sideband::NONE.attr_flags(), 0);
        // Every name asks for something, and no two for the same bit.
        let mut seen = 0u64;
        for i in 0..10 {
            let bits = Sideband(1 << i).attr_flags();
            assert_ne!(bits, 0);
            assert_eq!(seen & bits, 0);
            seen |= bits;
        }
        assert_eq!(Sideband::from_bits(1 << 10), None);
    }
}
