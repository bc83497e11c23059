//! Side-band records: what happens to processes and address spaces
//! (COMM, FORK, EXIT, MMAP, MMAP2, SWITCH, SWITCH_CPU_WIDE, NAMESPACES,
//! KSYMBOL, BPF_EVENT, CGROUP), as `include/uapi/linux/perf_event.h` lays
//! them out. Names (`comm`, `filename`, `name`, `path`) are NUL-terminated
//! and padded by the kernel to 8 bytes; what is between the fixed fields
//! and the `sample_id` trailer is the name, so the trailer's size (from the
//! attr) says where the name ends.

use super::cursor::Cursor;
use super::{Body, DecodeAttr, DecodeError, Field, PidTid, SampleId, U64s};
use crate::kernel::{
    BUILD_ID_SIZE_MAX, PERF_RECORD_BPF_EVENT, PERF_RECORD_CGROUP, PERF_RECORD_COMM, PERF_RECORD_EXIT,
    PERF_RECORD_FORK, PERF_RECORD_KSYMBOL, PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MISC_MMAP_BUILD_ID,
    PERF_RECORD_MISC_MMAP_DATA, PERF_RECORD_MISC_SWITCH_OUT, PERF_RECORD_MISC_SWITCH_OUT_PREEMPT,
    PERF_RECORD_MMAP, PERF_RECORD_MMAP2, PERF_RECORD_NAMESPACES, PERF_RECORD_SWITCH,
    PERF_RECORD_SWITCH_CPU_WIDE,
};

/// `PERF_RECORD_COMM`: a task's name, set by exec or `prctl(PR_SET_NAME)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comm<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The new name, without its NUL.
    pub comm: &'a [u8],
    /// Whether exec set it (`PERF_RECORD_MISC_COMM_EXEC`).
    pub exec: bool,
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_RECORD_FORK` / `PERF_RECORD_EXIT`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Task {
    /// Process id of the new (FORK) or exiting (EXIT) task.
    pub pid: u32,
    /// Its parent's process id.
    pub ppid: u32,
    /// Thread id of the task.
    pub tid: u32,
    /// Thread id of its parent.
    pub ptid: u32,
    /// When (the perf clock, not the attr's: use the trailer's time).
    pub time: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// Which file a mapping maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileId<'a> {
    /// MMAP2: the file's device and inode.
    Inode {
        /// Device major number.
        maj: u32,
        /// Device minor number.
        min: u32,
        /// Inode number.
        ino: u64,
        /// Inode generation.
        ino_generation: u64,
    },
    /// MMAP2 with `PERF_RECORD_MISC_MMAP_BUILD_ID`: the ELF build id.
    BuildId(&'a [u8]),
}

/// `PERF_RECORD_MMAP` / `PERF_RECORD_MMAP2`: a new mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Offset in the file (in bytes, despite the name).
    pub pgoff: u64,
    /// MMAP2: the file (`None` for MMAP).
    pub file: Option<FileId<'a>>,
    /// MMAP2: `PROT_*` bits (0 for MMAP).
    pub prot: u32,
    /// MMAP2: `MAP_*` bits (0 for MMAP).
    pub flags: u32,
    /// The file's path (or `//anon`, `[stack]`...), without its NUL.
    pub filename: &'a [u8],
    /// A data mapping (`PERF_RECORD_MISC_MMAP_DATA`, with `mmap_data`).
    pub data: bool,
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_RECORD_SWITCH` / `PERF_RECORD_SWITCH_CPU_WIDE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Switch {
    /// Switching out (else in).
    pub out: bool,
    /// Switching out while still runnable (preempted).
    pub preempt: bool,
    /// SWITCH_CPU_WIDE: the next task (switching out) or the previous one
    /// (switching in); `None` for SWITCH.
    pub next_prev: Option<PidTid>,
    /// The trailer (its TID is the task switching).
    pub sample_id: SampleId,
}

/// `PERF_RECORD_NAMESPACES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Namespaces<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// `(dev, inode)` word pairs, indexed by `NET_NS_INDEX` and friends.
    pub words: U64s<'a>,
    /// The trailer.
    pub sample_id: SampleId,
}

impl Namespaces<'_> {
    /// Number of namespaces.
    pub fn len(&self) -> usize {
        self.words.len() / 2
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Namespace `i`'s `(dev, inode)`.
    pub fn get(&self, i: usize) -> Option<(u64, u64)> {
        Some((self.words.get(2 * i)?, self.words.get(2 * i + 1)?))
    }
}

/// `PERF_RECORD_KSYMBOL`: a kernel symbol (BPF program, ftrace trampoline)
/// registered or unregistered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ksymbol<'a> {
    /// Address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// `PERF_RECORD_KSYMBOL_TYPE_*`.
    pub ksym_type: u16,
    /// `PERF_RECORD_KSYMBOL_FLAGS_*` (1: unregistered).
    pub flags: u16,
    /// The symbol's name, without its NUL.
    pub name: &'a [u8],
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_RECORD_BPF_EVENT`: a BPF program loaded or unloaded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BpfEvent {
    /// `PERF_BPF_EVENT_*` (1: program load, 2: unload).
    pub type_: u16,
    /// Flags.
    pub flags: u16,
    /// The program's id.
    pub id: u32,
    /// The program's tag.
    pub tag: [u8; 8],
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_RECORD_CGROUP`: a cgroup created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupRecord<'a> {
    /// Its id (`PERF_SAMPLE_CGROUP` values name it).
    pub id: u64,
    /// Its path below the cgroup root, without its NUL.
    pub path: &'a [u8],
    /// The trailer.
    pub sample_id: SampleId,
}

/// Decodes a side-band record (`None`: not a side-band type).
pub(super) fn decode_sideband<'a>(
    type_: u32,
    misc: u16,
    rec: &'a [u8],
    a: &DecodeAttr,
) -> Option<Result<Body<'a>, DecodeError>> {
    let mut c = Cursor::new(rec);
    let c = &mut c;
    Some(match type_ {
        PERF_RECORD_COMM => comm(c, misc, a).map(Body::Comm),
        PERF_RECORD_FORK => task(c, a).map(Body::Fork),
        PERF_RECORD_EXIT => task(c, a).map(Body::Exit),
        PERF_RECORD_MMAP => mmap(c, misc, a, false).map(Body::Mmap),
        PERF_RECORD_MMAP2 => mmap(c, misc, a, true).map(Body::Mmap2),
        PERF_RECORD_SWITCH => switch(c, misc, a, false).map(Body::Switch),
        PERF_RECORD_SWITCH_CPU_WIDE => switch(c, misc, a, true).map(Body::SwitchCpuWide),
        PERF_RECORD_NAMESPACES => namespaces(c, a).map(Body::Namespaces),
        PERF_RECORD_KSYMBOL => ksymbol(c, a).map(Body::Ksymbol),
        PERF_RECORD_BPF_EVENT => bpf_event(c, a).map(Body::BpfEvent),
        PERF_RECORD_CGROUP => cgroup(c, a).map(Body::Cgroup),
        _ => return None,
    })
}

fn comm<'a>(c: &mut Cursor<'a>, misc: u16, a: &DecodeAttr) -> Result<Comm<'a>, DecodeError> {
    let (pid, tid) = c.u32_pair(Field::TaskPid)?;
    let comm = c.name(a)?;
    let exec = misc & PERF_RECORD_MISC_COMM_EXEC != 0;
    Ok(Comm { pid, tid, comm, exec, sample_id: c.sample_id_end(a)? })
}

fn task(c: &mut Cursor<'_>, a: &DecodeAttr) -> Result<Task, DecodeError> {
    let (pid, ppid) = c.u32_pair(Field::TaskPid)?;
    let (tid, ptid) = c.u32_pair(Field::TaskParent)?;
    let time = c.u64(Field::TaskTime)?;
    Ok(Task { pid, ppid, tid, ptid, time, sample_id: c.sample_id_end(a)? })
}

fn mmap<'a>(c: &mut Cursor<'a>, misc: u16, a: &DecodeAttr, v2: bool) -> Result<Mmap<'a>, DecodeError> {
    let (pid, tid) = c.u32_pair(Field::TaskPid)?;
    let addr = c.u64(Field::MmapAddr)?;
    let len = c.u64(Field::MmapLen)?;
    let pgoff = c.u64(Field::MmapPgoff)?;
    let (mut file, mut prot, mut flags) = (None, 0, 0);
    if v2 {
        let at = c.pos();
        let id = c.bytes(24, Field::MmapFileId)?;
        file = Some(if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 {
            let size = usize::from(id[0]);
            if size > BUILD_ID_SIZE_MAX {
                let limit = BUILD_ID_SIZE_MAX as u64;
                return Err(DecodeError::Inconsistent {
                    field: Field::MmapFileId,
                    value: size as u64,
                    limit,
                });
            }
            FileId::BuildId(&id[4..4 + size])
        } else {
            let word = |i: usize| id.get(i..i + 8).and_then(|b| b.try_into().ok()).map(u64::from_ne_bytes);
            let truncated = DecodeError::Truncated { field: Field::MmapFileId, offset: at };
            let majmin = word(0).ok_or(truncated)?;
            FileId::Inode {
                maj: majmin as u32,
                min: (majmin >> 32) as u32,
                ino: word(8).ok_or(truncated)?,
                ino_generation: word(16).ok_or(truncated)?,
            }
        });
        (prot, flags) = c.u32_pair(Field::MmapProt)?;
    }
    let filename = c.name(a)?;
    let data = misc & PERF_RECORD_MISC_MMAP_DATA != 0;
    Ok(Mmap { pid, tid, addr, len, pgoff, file, prot, flags, filename, data, sample_id: c.sample_id_end(a)? })
}

fn switch(c: &mut Cursor<'_>, misc: u16, a: &DecodeAttr, cpu_wide: bool) -> Result<Switch, DecodeError> {
    let next_prev = if cpu_wide {
        let (pid, tid) = c.u32_pair(Field::SwitchTask)?;
        Some(PidTid { pid, tid })
    } else {
        None
    };
    let out = misc & PERF_RECORD_MISC_SWITCH_OUT != 0;
    let preempt = out && misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0;
    Ok(Switch { out, preempt, next_prev, sample_id: c.sample_id_end(a)? })
}

fn namespaces<'a>(c: &mut Cursor<'a>, a: &DecodeAttr) -> Result<Namespaces<'a>, DecodeError> {
    let (pid, tid) = c.u32_pair(Field::TaskPid)?;
    let nr = c.u64(Field::NamespacesNr)?;
    let count = nr.checked_mul(2).ok_or(DecodeError::Overflow { field: Field::Namespaces, count: nr })?;
    let words = c.u64_array(count, Field::Namespaces)?;
    Ok(Namespaces { pid, tid, words, sample_id: c.sample_id_end(a)? })
}

fn ksymbol<'a>(c: &mut Cursor<'a>, a: &DecodeAttr) -> Result<Ksymbol<'a>, DecodeError> {
    let addr = c.u64(Field::KsymbolAddr)?;
    let b = c.bytes(8, Field::KsymbolLen)?;
    let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
    let ksym_type = u16::from_ne_bytes([b[4], b[5]]);
    let flags = u16::from_ne_bytes([b[6], b[7]]);
    let name = c.name(a)?;
    Ok(Ksymbol { addr, len, ksym_type, flags, name, sample_id: c.sample_id_end(a)? })
}

fn bpf_event(c: &mut Cursor<'_>, a: &DecodeAttr) -> Result<BpfEvent, DecodeError> {
    let b = c.bytes(8, Field::BpfEventId)?;
    let type_ = u16::from_ne_bytes([b[0], b[1]]);
    let flags = u16::from_ne_bytes([b[2], b[3]]);
    let id = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
    let mut tag = [0; 8];
    tag.copy_from_slice(c.bytes(8, Field::BpfEventTag)?);
    Ok(BpfEvent { type_, flags, id, tag, sample_id: c.sample_id_end(a)? })
}

fn cgroup<'a>(c: &mut Cursor<'a>, a: &DecodeAttr) -> Result<CgroupRecord<'a>, DecodeError> {
    let id = c.u64(Field::CgroupId)?;
    let path = c.name(a)?;
    Ok(CgroupRecord { id, path, sample_id: c.sample_id_end(a)? })
}
