//! The BPF side of the loss identity: what `include/perfbuf.bpf.h`'s output
//! wrappers count per CPU in a `BPF_MAP_TYPE_PERCPU_ARRAY` of one
//! `struct perfbuf_output_counts` — every output call, and every one the
//! helper refused. A refused output leaves no trace in the kernel's
//! counts except where the ring was full (a perf event array's `-ENOSPC`,
//! which the kernel counts as lost too); a ring buffer's are counted
//! nowhere else at all. The reader reads the map when asked for figures,
//! never while reading rings.

use crate::error::{Error, Result, What};
use crate::kernel::{BPF_MAP_TYPE_PERCPU_ARRAY, cpu, sys};
use crate::log;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

/// Bytes of `struct perfbuf_output_counts` this library knows (a newer
/// header's longer value is read up to here).
pub const COUNTS_SIZE: usize = 32;

/// What perfbuf.bpf.h's output wrappers counted on one CPU (`struct
/// perfbuf_output_counts`).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutputCounts {
    /// Output calls made: `bpf_perf_event_output`, `bpf_ringbuf_output`,
    /// and `bpf_ringbuf_reserve` (counted when submitted, or when it fails).
    pub calls: u64,
    /// Calls the helper refused.
    pub failed: u64,
    /// Of those, refused for want of room: `-ENOSPC` from a full (or
    /// paused) perf ring, which the kernel counts as lost itself;
    /// `-EAGAIN` or a NULL reservation from a full ring buffer.
    pub no_space: u64,
    /// Of those, refused because no live event sat in the CPU's slot
    /// (`-ENOENT`: an empty slot; `-EOPNOTSUPP`: an event of another CPU,
    /// or of a CPU that went offline and came back).
    pub no_reader: u64,
}

impl OutputCounts {
    fn from_bytes(b: &[u8]) -> OutputCounts {
        let word =
            |i: usize| b.get(8 * i..8 * i + 8).map_or(0, |w| u64::from_ne_bytes(w.try_into().expect("8")));
        OutputCounts { calls: word(0), failed: word(1), no_space: word(2), no_reader: word(3) }
    }

    /// Refused outputs no kernel figure counts: a perf event array's
    /// failures but a full ring's (those are in the kernel's lost count).
    pub fn failed_uncounted_perf(&self) -> u64 {
        self.failed.saturating_sub(self.no_space)
    }
}

/// An output counts map, checked, and how to find a CPU's value in a
/// lookup (per-CPU values come one per possible CPU, 8-aligned).
pub struct CountsMap {
    fd: OwnedFd,
    stride: usize,
    /// Position in a lookup's values of each CPU id (`None`: not possible).
    index_of_cpu: Vec<Option<usize>>,
}

impl CountsMap {
    /// Checks `map` is a one-entry per-CPU array of values at least
    /// [`COUNTS_SIZE`] long, and keeps a duplicate of its fd.
    pub fn open(map: BorrowedFd<'_>) -> Result<CountsMap> {
        let raw = map.as_raw_fd();
        let info = sys::map_info(raw).map_err(|e| log::failed(e.with(What::MapInfo(raw))))?;
        if info.map_type != BPF_MAP_TYPE_PERCPU_ARRAY
            || (info.value_size as usize) < COUNTS_SIZE
            || info.key_size != 4
            || info.max_entries == 0
        {
            let what = What::NotOutputCounts(raw, info.map_type, info.value_size);
            return Err(log::failed(Error::new(libc::EINVAL, what)));
        }
        let possible = cpu::possible_mask()?;
        let mut index_of_cpu = Vec::new();
        let mut next = 0;
        for &p in &possible {
            index_of_cpu.push(p.then(|| {
                next += 1;
                next - 1
            }));
        }
        let fd = sys::dup(map)?;
        Ok(CountsMap { fd, stride: (info.value_size as usize).next_multiple_of(8), index_of_cpu })
    }

    /// Every CPU's counts now, indexed by CPU id.
    pub fn read(&self) -> Result<Vec<OutputCounts>> {
        let cpus = self.index_of_cpu.iter().flatten().count();
        let mut values = vec![0u8; self.stride * cpus];
        sys::map_lookup(self.fd.as_raw_fd(), 0, &mut values)?;
        Ok(self
            .index_of_cpu
            .iter()
            .map(|i| {
                i.map_or_else(OutputCounts::default, |i| OutputCounts::from_bytes(&values[i * self.stride..]))
            })
            .collect())
    }

    /// CPU `cpu`'s counts now (zero for a CPU that is not possible).
    pub fn read_cpu(&self, cpu: i32) -> Result<OutputCounts> {
        let all = self.read()?;
        Ok(usize::try_from(cpu).ok().and_then(|c| all.get(c)).copied().unwrap_or_default())
    }
}
