//! The GNU build id of an ELF file (its `NT_GNU_BUILD_ID` note), which
//! synthesized MMAP2 records carry as the kernel's do (`attr.build_id`),
//! so perf matches each mapping with the right binary.
//!
//! Every size and offset in the file is untrusted: reads are bounded and
//! arithmetic checked; a file that is not a 64-bit little-endian ELF, or
//! has no such note, has no build id.

use crate::kernel::BUILD_ID_SIZE_MAX;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;
/// Notes segments larger than this are not read.
const MAX_NOTES: u64 = 64 << 10;

/// The build id of the ELF file at `path`, if it has one.
pub(crate) fn build_id(path: &Path) -> Option<Vec<u8>> {
    let file = File::open(path).ok()?;
    let read = |offset: u64, len: u64| -> Option<Vec<u8>> {
        let mut buf = vec![0u8; usize::try_from(len).ok()?];
        file.read_exact_at(&mut buf, offset).ok()?;
        Some(buf)
    };
    let ehdr = read(0, 64)?;
    if &ehdr[..4] != b"\x7fELF" || ehdr[4] != 2 || ehdr[5] != 1 {
        return None;
    }
    let u16_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap_or_default());
    let u64_at = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let (phoff, phentsize, phnum) = (u64_at(&ehdr, 32), u16_at(&ehdr, 54), u16_at(&ehdr, 56));
    if phentsize < 56 {
        return None;
    }
    let phdrs = read(phoff, u64::from(phentsize).checked_mul(u64::from(phnum))?)?;
    for ph in phdrs.chunks_exact(usize::from(phentsize)) {
        if u32_at(ph, 0) != PT_NOTE || u64_at(ph, 32) > MAX_NOTES {
            continue;
        }
        if let Some(id) = read(u64_at(ph, 8), u64_at(ph, 32)).and_then(|notes| gnu_build_id(&notes)) {
            return Some(id);
        }
    }
    None
}

/// The `NT_GNU_BUILD_ID` note's bytes in a notes segment.
pub(crate) fn gnu_build_id(mut notes: &[u8]) -> Option<Vec<u8>> {
    while notes.len() >= 12 {
        let word = |at: usize| u32::from_le_bytes(notes[at..at + 4].try_into().unwrap_or_default()) as usize;
        let (namesz, descsz, type_) = (word(0), word(4), word(8) as u32);
        let name_end = 12usize.checked_add(namesz)?;
        let desc_at = 12usize.checked_add(namesz.checked_next_multiple_of(4)?)?;
        let desc_end = desc_at.checked_add(descsz)?;
        if desc_end > notes.len() {
            return None;
        }
        if type_ == NT_GNU_BUILD_ID
            && &notes[12..name_end] == b"GNU\0"
            && (1..=BUILD_ID_SIZE_MAX).contains(&descsz)
        {
            return Some(notes[desc_at..desc_end].to_vec());
        }
        notes = notes.get(desc_at.checked_add(descsz.checked_next_multiple_of(4)?)?..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_note_after_another() {
        let mut notes = Vec::new();
        for (name, type_, desc) in
            [(&b"ABI\0"[..], 1u32, &[1u8, 2, 3][..]), (b"GNU\0", NT_GNU_BUILD_ID, &[0xab; 20])]
        {
            notes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            notes.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            notes.extend_from_slice(&type_.to_le_bytes());
            notes.extend_from_slice(name);
            notes.extend_from_slice(desc);
            notes.resize(notes.len().next_multiple_of(4), 0);
        }
        assert_eq!(gnu_build_id(&notes), Some(vec![0xab; 20]));
        assert_eq!(gnu_build_id(&notes[..notes.len() - 8]), None);
    }

    #[test]
    fn reads_a_real_binary() {
        // Debian's binaries are built with build ids.
        let id = build_id(Path::new("/bin/sh")).expect("a build id in /bin/sh");
        assert!((1..=BUILD_ID_SIZE_MAX).contains(&id.len()));
        assert_eq!(build_id(Path::new("/proc/self/status")), None);
    }
}
