//! Records for what existed before the recording, as `perf record`
//! synthesizes them from /proc: the kernel's map, and for each watched
//! process a COMM per thread and an MMAP2 per executable mapping, so that
//! samples of programs started earlier are named and symbolized.

use super::ids::{SampleId, put_sample_id};
use super::layout::{put_name8, put_record_header, put_u32, put_u64};
use crate::kernel::{
    PERF_RECORD_COMM as RECORD_COMM, PERF_RECORD_MISC_KERNEL as MISC_KERNEL,
    PERF_RECORD_MISC_MMAP_BUILD_ID as MISC_MMAP_BUILD_ID, PERF_RECORD_MISC_USER as MISC_USER,
    PERF_RECORD_MMAP as RECORD_MMAP, PERF_RECORD_MMAP2 as RECORD_MMAP2, PerfEventAttr,
};
use std::path::Path;

/// Which processes to describe.
#[derive(Clone, Debug)]
pub(crate) enum Tasks {
    All,
    Pids(Vec<i32>),
}

/// Who synthesized records are attributed to: perf reads their trailer
/// as `attr` lays it out.
pub(crate) struct Trailer<'a> {
    pub attr: &'a PerfEventAttr,
    pub id: u64,
}

/// The records for the kernel and `tasks`, ready for the data section.
pub(crate) fn synthesize(tasks: &Tasks, trailer: &Trailer<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    kernel_mmap(&mut out, trailer);
    let pids: Vec<i32> = match tasks {
        Tasks::All => numeric_entries(Path::new("/proc")),
        Tasks::Pids(p) => p.iter().filter_map(|&tid| tgid_of(tid)).collect(),
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut ids = BuildIds::default();
    for pid in pids.into_iter().filter(|&p| seen.insert(p)) {
        process(&mut out, pid, trailer, &mut ids);
    }
    out
}

/// The process of thread `tid` (a set's pid target is a thread id).
fn tgid_of(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

fn numeric_entries(dir: &Path) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<i32> = rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    v.sort_unstable();
    v
}

/// A COMM per thread, then the process's executable mappings. A process
/// that exits meanwhile gives what was read.
/// Build ids by (device, inode): libc is mapped by every process.
#[derive(Default)]
struct BuildIds(std::collections::HashMap<(u32, u32, u64), Option<Vec<u8>>>);

impl BuildIds {
    fn of(&mut self, pid: i32, m: &Mapping<'_>) -> Option<&[u8]> {
        if !m.name.starts_with('/') || m.inode == 0 {
            return None;
        }
        // Through the process's root: its files, whatever its mount namespace.
        let path = format!("/proc/{pid}/root{}", m.name);
        let id = self
            .0
            .entry((m.major, m.minor, m.inode))
            .or_insert_with(|| super::buildid::build_id(Path::new(&path)));
        id.as_deref()
    }
}

fn process(out: &mut Vec<u8>, pid: i32, trailer: &Trailer<'_>, ids: &mut BuildIds) {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else { return };
    for tid in numeric_entries(Path::new(&format!("/proc/{pid}/task"))) {
        let Ok(comm) = std::fs::read(format!("/proc/{pid}/task/{tid}/comm")) else { continue };
        let comm = comm.strip_suffix(b"\n").unwrap_or(&comm);
        let ids = SampleId { pid: pid as u32, tid: tid as u32, ..Default::default() };
        record(out, RECORD_COMM, 0, trailer, ids, |r| {
            put_u32(r, pid as u32);
            put_u32(r, tid as u32);
            put_name8(r, comm);
        });
    }
    if maps.is_empty() {
        return; // a kernel thread
    }
    for line in maps.lines() {
        if let Some(m) = Mapping::parse(line).filter(|m| m.exec) {
            let who = SampleId { pid: pid as u32, tid: pid as u32, ..Default::default() };
            let id = ids.of(pid, &m);
            let misc = if id.is_some() { MISC_USER | MISC_MMAP_BUILD_ID } else { MISC_USER };
            record(out, RECORD_MMAP2, misc, trailer, who, |r| m.put(r, pid, id));
        }
    }
}

/// A record: header, body, trailer, with its size filled in.
fn record(
    out: &mut Vec<u8>,
    type_: u32,
    misc: u16,
    trailer: &Trailer<'_>,
    ids: SampleId,
    body: impl FnOnce(&mut Vec<u8>),
) {
    let start = out.len();
    put_record_header(out, type_, misc, 0);
    body(out);
    put_sample_id(out, trailer.attr, trailer.id, ids);
    let size = (out.len() - start) as u16;
    out[start + 6..start + 8].copy_from_slice(&size.to_le_bytes());
}

/// One line of /proc/PID/maps.
#[derive(Debug, PartialEq, Eq)]
struct Mapping<'a> {
    start: u64,
    end: u64,
    pgoff: u64,
    major: u32,
    minor: u32,
    inode: u64,
    prot: u32,
    shared: bool,
    exec: bool,
    name: &'a str,
}

impl<'a> Mapping<'a> {
    fn parse(line: &'a str) -> Option<Mapping<'a>> {
        let mut f = line.splitn(6, ' ');
        let (range, perms, off, dev, inode) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        let name = f.next().unwrap_or("").trim_start();
        let (start, end) = range.split_once('-')?;
        let (major, minor) = dev.split_once(':')?;
        let p = perms.as_bytes();
        let prot = [(b'r', libc::PROT_READ), (b'w', libc::PROT_WRITE), (b'x', libc::PROT_EXEC)]
            .iter()
            .filter(|(c, _)| p.contains(c))
            .fold(0, |acc, (_, bit)| acc | *bit as u32);
        Some(Mapping {
            start: u64::from_str_radix(start, 16).ok()?,
            end: u64::from_str_radix(end, 16).ok()?,
            pgoff: u64::from_str_radix(off, 16).ok()?,
            major: u32::from_str_radix(major, 16).ok()?,
            minor: u32::from_str_radix(minor, 16).ok()?,
            inode: inode.parse().ok()?,
            prot,
            shared: p.get(3) == Some(&b's'),
            exec: p.get(2) == Some(&b'x'),
            name: if name.is_empty() { "//anon" } else { name },
        })
    }

    /// The MMAP2 body; with a build id, it replaces the device and inode
    /// numbers (a size byte, 3 reserved, 20 bytes).
    fn put(&self, r: &mut Vec<u8>, pid: i32, build_id: Option<&[u8]>) {
        put_u32(r, pid as u32);
        put_u32(r, pid as u32);
        put_u64(r, self.start);
        put_u64(r, self.end - self.start);
        put_u64(r, self.pgoff);
        if let Some(id) = build_id {
            let mut field = [0u8; 24];
            field[0] = id.len() as u8;
            field[4..4 + id.len()].copy_from_slice(id);
            r.extend_from_slice(&field);
        } else {
            put_u32(r, self.major);
            put_u32(r, self.minor);
            put_u64(r, self.inode);
            put_u64(r, 0); // ino_generation
        }
        put_u32(r, self.prot);
        put_u32(r, if self.shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE } as u32);
        put_name8(r, self.name.as_bytes());
    }
}

/// The kernel's text, as `[kernel.kallsyms]_text` from `_text` on, so
/// perf resolves kernel addresses with /proc/kallsyms.
fn kernel_mmap(out: &mut Vec<u8>, trailer: &Trailer<'_>) {
    let Some(text) = kernel_text() else { return };
    let ids = SampleId { pid: u32::MAX, tid: u32::MAX, ..Default::default() };
    record(out, RECORD_MMAP, MISC_KERNEL, trailer, ids, |r| {
        put_u32(r, u32::MAX);
        put_u32(r, 0);
        put_u64(r, text);
        put_u64(r, u64::MAX - text);
        put_u64(r, text);
        put_name8(r, b"[kernel.kallsyms]_text");
    });
}

/// `_text`'s address (0 when kallsyms hides addresses: then none).
fn kernel_text() -> Option<u64> {
    let syms = std::fs::read_to_string("/proc/kallsyms").ok()?;
    let line = syms.lines().find(|l| l.ends_with(" _text"))?;
    let addr = u64::from_str_radix(line.split(' ').next()?, 16).ok()?;
    (addr != 0).then_some(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_maps_lines() {
        let m = Mapping::parse("55d0c2a00000-55d0c2a21000 r-xp 00002000 fd:01 1234   /usr/bin/cat").unwrap();
        assert_eq!(
            (m.start, m.end, m.pgoff, m.major, m.minor, m.inode),
            (0x55d0c2a00000, 0x55d0c2a21000, 0x2000, 0xfd, 1, 1234)
        );
        assert!(m.exec && !m.shared);
        assert_eq!(m.prot, (libc::PROT_READ | libc::PROT_EXEC) as u32);
        assert_eq!(m.name, "/usr/bin/cat");
        let anon = Mapping::parse("7f00-7f10 rwxs 00000000 00:00 0 ").unwrap();
        assert_eq!(anon.name, "//anon");
        assert!(anon.shared);
        assert!(Mapping::parse("garbage").is_none());
    }

    #[test]
    fn synthesizes_this_process() {
        let attr = PerfEventAttr::default();
        let me = std::process::id() as i32;
        let out = synthesize(&Tasks::Pids(vec![me]), &Trailer { attr: &attr, id: 0 });
        let mut types = Vec::new();
        let mut rest = &out[..];
        while rest.len() >= 8 {
            let size = u16::from_le_bytes([rest[6], rest[7]]) as usize;
            assert!(size >= 8 && size % 8 == 0 && size <= rest.len());
            types.push(u32::from_le_bytes(rest[..4].try_into().unwrap()));
            rest = &rest[size..];
        }
        assert!(rest.is_empty());
        assert!(types.contains(&RECORD_COMM) && types.contains(&RECORD_MMAP2), "{types:?}");
    }
}
