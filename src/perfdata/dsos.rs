//! `HEADER_BUILD_ID`: the build ids of the files the recording mapped, as
//! MMAP2 records carry them (the kernel's with `attr.build_id`, and those
//! synthesized from /proc) or, for an executable mapping whose record has
//! none (a kernel before 5.12, a page the kernel could not read), from the
//! file's ELF note at close; and the running kernel's. perf then finds each
//! binary by build id (`perf buildid-list`, `~/.debug`) without reading
//! the data. Like `perf record --buildid-all`: every mapped file with a
//! build id, not only those samples hit.

use super::buildid::gnu_build_id;
use super::layout::{NAME_ALIGN, put_record_header, put_u32};
use crate::kernel::{
    BUILD_ID_SIZE_MAX, PERF_RECORD_MISC_BUILD_ID_SIZE as MISC_BUILD_ID_SIZE,
    PERF_RECORD_MISC_KERNEL as MISC_KERNEL, PERF_RECORD_MISC_MMAP_BUILD_ID as MISC_MMAP_BUILD_ID,
    PERF_RECORD_MISC_USER as MISC_USER,
};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// perf's `HOST_KERNEL_ID`: the entry is of the host, not of a guest.
const HOST: u32 = u32::MAX;
/// Where an MMAP2 record's fields are (after its 8-byte header).
const BUILD_ID_AT: usize = 40;
const PROT_AT: usize = 64;
const FILENAME_AT: usize = 72;

/// Mapped files with their build ids, by name.
#[derive(Default)]
pub(crate) struct BuildIds {
    /// Filename → (CPU mode, build id); a file mapped again keeps its entry.
    files: BTreeMap<Vec<u8>, (u16, Vec<u8>)>,
    /// Files mapped executable by records without a build id: read at close.
    unread: BTreeSet<Vec<u8>>,
}

impl BuildIds {
    /// Notes the file of an MMAP2 record: its build id, or, for an
    /// executable mapping of a file without one, the file to read at close.
    /// The record's bytes are untrusted: a short or malformed one is skipped.
    pub fn note_mmap2(&mut self, misc: u16, rec: &[u8]) {
        let Some(rest) = rec.get(FILENAME_AT..) else { return };
        let Some(name) = rest.iter().position(|&b| b == 0).map(|end| &rest[..end]) else { return };
        if name.is_empty() || self.files.contains_key(name) {
            return;
        }
        if misc & MISC_MMAP_BUILD_ID == 0 {
            let prot =
                rec.get(PROT_AT..PROT_AT + 4).map_or(0, |p| u32::from_le_bytes([p[0], p[1], p[2], p[3]]));
            if prot & libc::PROT_EXEC as u32 != 0 && name.starts_with(b"/") {
                self.unread.insert(name.to_vec());
            }
            return;
        }
        let size = usize::from(rec[BUILD_ID_AT]);
        let Some(id) = rec.get(BUILD_ID_AT + 4..BUILD_ID_AT + 4 + size) else { return };
        if (1..=BUILD_ID_SIZE_MAX).contains(&size) {
            self.unread.remove(name);
            self.files.insert(name.to_vec(), (misc & 7, id.to_vec()));
        }
    }

    /// Reads the build ids of the files noted without one (a file gone
    /// or without a note stays without).
    fn read_unread(&mut self) {
        for name in std::mem::take(&mut self.unread) {
            if let Some(id) = super::buildid::build_id(Path::new(OsStr::from_bytes(&name))) {
                self.files.insert(name, (MISC_USER, id));
            }
        }
    }

    /// The feature's payload: an entry per file, then the running kernel's
    /// (from /sys/kernel/notes) as `[kernel.kallsyms]`; `None` when there
    /// is none at all.
    pub fn feature(&mut self) -> Option<Vec<u8>> {
        self.read_unread();
        let kernel = std::fs::read("/sys/kernel/notes").ok().and_then(|n| gnu_build_id(&n));
        let mut out = Vec::new();
        for (name, (mode, id)) in &self.files {
            put_entry(&mut out, *mode, id, name);
        }
        if let Some(id) = kernel {
            put_entry(&mut out, MISC_KERNEL, &id, b"[kernel.kallsyms]");
        }
        (!out.is_empty()).then_some(out)
    }
}

/// perf's `struct perf_record_header_build_id`: a header, the pid, the
/// build id in 20 bytes then its size, and the name padded to 64.
fn put_entry(out: &mut Vec<u8>, mode: u16, id: &[u8], name: &[u8]) {
    let name_len = (name.len() + 1).next_multiple_of(NAME_ALIGN);
    put_record_header(out, 0, mode | MISC_BUILD_ID_SIZE, 36 + name_len);
    put_u32(out, HOST);
    let mut field = [0u8; 24];
    field[..id.len()].copy_from_slice(id);
    field[20] = id.len() as u8;
    out.extend_from_slice(&field);
    out.extend_from_slice(name);
    out.resize(out.len() + name_len - name.len(), 0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perfdata::layout::put_u64;

    fn mmap2(id: &[u8], name: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        put_record_header(&mut r, 10, MISC_USER | MISC_MMAP_BUILD_ID, 0);
        put_u64(&mut r, 7 | 7 << 32);
        r.resize(BUILD_ID_AT, 0);
        r.push(id.len() as u8);
        r.extend_from_slice(&[0; 3]);
        r.extend_from_slice(id);
        r.resize(FILENAME_AT, 0);
        r.extend_from_slice(name);
        r.extend_from_slice(&[0; 8]);
        r
    }

    #[test]
    fn entries_have_perfs_layout_and_bad_records_are_skipped() {
        let mut ids = BuildIds::default();
        let rec = mmap2(&[0xab; 20], b"/usr/bin/x");
        ids.note_mmap2(MISC_USER | MISC_MMAP_BUILD_ID, &rec);
        ids.note_mmap2(MISC_USER, &mmap2(&[1; 20], b"/no/build/id/flag"));
        ids.note_mmap2(MISC_USER | MISC_MMAP_BUILD_ID, &rec[..50]);
        let mut long = mmap2(&[1; 20], b"/too/long");
        long[BUILD_ID_AT] = 21;
        ids.note_mmap2(MISC_USER | MISC_MMAP_BUILD_ID, &long);
        let mut unterminated = mmap2(&[2; 20], b"/x");
        unterminated.truncate(FILENAME_AT + 2);
        ids.note_mmap2(MISC_USER | MISC_MMAP_BUILD_ID, &unterminated);
        assert_eq!(ids.files.len(), 1);
        let mut out = Vec::new();
        let (mode, id) = &ids.files[&b"/usr/bin/x"[..]];
        put_entry(&mut out, *mode, id, b"/usr/bin/x");
        assert_eq!(out.len(), 36 + 64);
        assert_eq!(u16::from_le_bytes([out[6], out[7]]) as usize, out.len());
        assert_eq!(u16::from_le_bytes([out[4], out[5]]), MISC_USER | MISC_BUILD_ID_SIZE);
        assert_eq!(&out[8..12], &[0xff; 4]);
        assert_eq!(&out[12..32], &[0xab; 20]);
        assert_eq!(out[32], 20);
        assert_eq!(&out[36..47], b"/usr/bin/x\0");
    }

    /// An MMAP2 record with the device and inode form, mapping `name`.
    fn mmap2_without_id(name: &[u8], prot: i32) -> Vec<u8> {
        let mut r = mmap2(&[], name);
        r[BUILD_ID_AT] = 0;
        r[PROT_AT..PROT_AT + 4].copy_from_slice(&(prot as u32).to_le_bytes());
        r
    }

    #[test]
    fn an_executable_mapping_without_a_build_id_gets_its_files() {
        let mut ids = BuildIds::default();
        ids.note_mmap2(MISC_USER, &mmap2_without_id(b"/bin/sh", libc::PROT_READ | libc::PROT_EXEC));
        ids.note_mmap2(MISC_USER, &mmap2_without_id(b"/etc/hostname", libc::PROT_READ));
        ids.note_mmap2(MISC_USER, &mmap2_without_id(b"[heap]", libc::PROT_EXEC));
        assert_eq!(ids.unread.len(), 1);
        ids.read_unread();
        let want = crate::perfdata::buildid::build_id(std::path::Path::new("/bin/sh"))
            .expect("a build id in /bin/sh");
        assert_eq!(ids.files.get(&b"/bin/sh"[..]), Some(&(MISC_USER, want)));
        assert_eq!(ids.files.len(), 1);
    }
}
