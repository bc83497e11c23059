//! The fixed parts of a perf.data file (tools/perf/Documentation/
//! perf.data-file-format.txt): the file header, the attr table, the
//! feature bits and sections, and the byte-level helpers they share.

use crate::kernel::PerfEventAttr;

/// `"PERFILE2"`, as perf reads it from a little-endian file.
pub(crate) const MAGIC: &[u8; 8] = b"PERFILE2";
/// `sizeof(struct perf_file_header)`.
pub(crate) const HEADER_SIZE: u64 = 104;
/// Byte offset of `data.size` in the header: rewritten after every round,
/// so a writer killed mid-way leaves a file perf reads to the last round.
pub(crate) const DATA_SIZE_AT: u64 = 48;
/// `sizeof(struct perf_event_attr)` as this crate writes it.
pub(crate) const ATTR_SIZE: u64 = size_of::<PerfEventAttr>() as u64;
/// `sizeof(struct perf_file_attr)`: the attr and its ids' section.
pub(crate) const FILE_ATTR_SIZE: u64 = ATTR_SIZE + 16;
/// Strings in features are padded to this (perf's `NAME_ALIGN`).
pub(crate) const NAME_ALIGN: usize = 64;

/// `PERF_RECORD_FINISHED_ROUND`: every record before it whose time is at
/// most the previous round's last may be sorted and delivered.
pub(crate) const RECORD_FINISHED_ROUND: u32 = 68;

/// Feature bits (`HEADER_*` of perf's header.h) this writer sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u32)]
pub(crate) enum Feature {
    TracingData = 1,
    BuildId = 2,
    Hostname = 3,
    OsRelease = 4,
    Version = 5,
    Arch = 6,
    NrCpus = 7,
    CpuDesc = 8,
    TotalMem = 10,
    Cmdline = 11,
    EventDesc = 12,
    SampleTime = 21,
    ClockId = 23,
    ClockData = 29,
}

/// A `struct perf_file_section`: where something is in the file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Section {
    pub offset: u64,
    pub size: u64,
}

impl Section {
    pub fn put(&self, out: &mut Vec<u8>) {
        put_u64(out, self.offset);
        put_u64(out, self.size);
    }
}

/// `struct perf_file_header`.
#[derive(Clone, Debug, Default)]
pub(crate) struct FileHeader {
    pub attrs: Section,
    pub data: Section,
    /// `adds_features`: 256 bits.
    pub features: [u64; 4],
}

impl FileHeader {
    pub fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER_SIZE as usize);
        out.extend_from_slice(MAGIC);
        put_u64(&mut out, HEADER_SIZE);
        put_u64(&mut out, FILE_ATTR_SIZE);
        self.attrs.put(&mut out);
        self.data.put(&mut out);
        Section::default().put(&mut out); // event_types: unused since 2009
        for word in self.features {
            put_u64(&mut out, word);
        }
        debug_assert_eq!(out.len() as u64, HEADER_SIZE);
        out
    }

    pub fn set(&mut self, f: Feature) {
        let bit = f as u32;
        self.features[(bit / 64) as usize] |= 1 << (bit % 64);
    }
}

/// An attr's bytes as the kernel reads them (`size` set to this layout's).
pub(crate) fn attr_bytes(attr: &PerfEventAttr) -> Vec<u8> {
    let mut a = *attr;
    a.size = ATTR_SIZE as u32;
    let words = [
        u64::from(a.type_) | u64::from(a.size) << 32,
        a.config,
        a.sample_period,
        a.sample_type,
        a.read_format,
        a.flags,
        u64::from(a.wakeup) | u64::from(a.bp_type) << 32,
        a.config1,
        a.config2,
        a.branch_sample_type,
        a.sample_regs_user,
        u64::from(a.sample_stack_user) | u64::from(a.clockid as u32) << 32,
        a.sample_regs_intr,
        u64::from(a.aux_watermark) | u64::from(a.sample_max_stack) << 32 | u64::from(a.reserved_2) << 48,
        u64::from(a.aux_sample_size) | u64::from(a.reserved_3) << 32,
        a.sig_data,
    ];
    let mut out = Vec::with_capacity(ATTR_SIZE as usize);
    words.iter().for_each(|&w| put_u64(&mut out, w));
    out
}

pub(crate) fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub(crate) fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// perf's `do_write_string`: a u32 length (NUL included, padded to 64),
/// the bytes, zeros.
pub(crate) fn put_string(out: &mut Vec<u8>, s: &str) {
    let s = s.split('\0').next().unwrap_or_default();
    let len = (s.len() + 1).next_multiple_of(NAME_ALIGN);
    put_u32(out, len as u32);
    out.extend_from_slice(s.as_bytes());
    out.resize(out.len() + len - s.len(), 0);
}

/// A record's header: type, misc, size.
pub(crate) fn put_record_header(out: &mut Vec<u8>, type_: u32, misc: u16, size: usize) {
    put_u32(out, type_);
    out.extend_from_slice(&misc.to_le_bytes());
    out.extend_from_slice(&(size as u16).to_le_bytes());
}

/// A record's NUL-terminated name padded to 8 bytes, as the kernel
/// writes COMM and MMAP names.
pub(crate) fn put_name8(out: &mut Vec<u8>, name: &[u8]) {
    let len = (name.len() + 1).next_multiple_of(8);
    out.extend_from_slice(name);
    out.resize(out.len() + len - name.len(), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_104_bytes_with_features_at_72() {
        let mut h = FileHeader::default();
        h.set(Feature::EventDesc);
        h.set(Feature::ClockData);
        h.data = Section { offset: 1, size: 2 };
        let b = h.bytes();
        assert_eq!(&b[..8], MAGIC);
        assert_eq!(u64::from_le_bytes(b[DATA_SIZE_AT as usize..][..8].try_into().unwrap()), 2);
        assert_eq!(u64::from_le_bytes(b[72..80].try_into().unwrap()), (1 << 12) | (1 << 29));
    }

    #[test]
    fn attr_bytes_match_the_struct() {
        let attr =
            PerfEventAttr { type_: 2, config: 77, clockid: 1, sample_max_stack: 9, ..Default::default() };
        let b = attr_bytes(&attr);
        // SAFETY: PerfEventAttr is repr(C), 128 bytes of plain integers.
        let raw: [u8; 128] = unsafe { core::mem::transmute(PerfEventAttr { size: 128, ..attr }) };
        assert_eq!(b, raw);
    }

    #[test]
    fn strings_are_padded_to_64() {
        let mut out = Vec::new();
        put_string(&mut out, "x86_64");
        assert_eq!(out.len(), 4 + 64);
        assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), 64);
        assert_eq!(&out[4..11], b"x86_64\0");
    }
}
