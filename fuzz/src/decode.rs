//! The decode target: an attr layout and a record from the input, decoded
//! by the Rust API (`perfbuf::decode::decode`), the C entry points
//! (`perfbuf_decode`, `perfbuf_decode_attr_from`) and libbpf's record
//! classifier (`perfbuf::internals::record::parse`).
//!
//! Checks: every slice and C pointer lies inside the record; a successful
//! decode has exactly the fields `sample_type` selects and re-encodes to
//! the record's bytes (so every field was read at its place and nothing was
//! left over); the C entry point agrees with the Rust API and with its
//! documented argument rules (`sz` prefixes, EINVAL / EBADMSG /
//! EOPNOTSUPP), and writes only `out->sz` bytes.
//!
//! Input layout (integers little endian), [`PREFIX`] bytes, then the record:
//!
//! | bytes | meaning |
//! |---|---|
//! | 0..8 | `sample_type` |
//! | 8..16 | `read_format` |
//! | 16..24 | `branch_sample_type` |
//! | 24..32 | `sample_regs_user` |
//! | 32..40 | `sample_regs_intr` |
//! | 40 | `sample_id_all` (non-zero: set) |
//! | 41 | bit 0: C attr `sz` from 44..46 (else the whole struct); bit 1: non-zero bytes after its known fields; bit 2: `out->sz` from 46..48 (else the whole struct); bit 3: `rec_len` cut by byte 42; bit 4: `rec_len` beyond the record by byte 42; bit 5: a misaligned record pointer; bit 6: `perf_event_attr.size` from 44..46 (else 128); bit 7: also call both C entry points with each pointer NULL |
//! | 42 | `rec_len` adjustment |
//! | 43 | unused |
//! | 44..46 | C attr `sz` / `perf_event_attr.size` (low 13 bits) |
//! | 46..48 | `out->sz` (low 10 bits) |
//! | 48.. | the record, header included |

use core::mem::{offset_of, size_of};
use perfbuf::decode::*;
use perfbuf::internals::record;
use perfbuf_capi::internals::{
    perf_event_header, perfbuf_decode, perfbuf_decode_attr, perfbuf_decode_attr_from, perfbuf_sample,
};

// `perfbuf_sample.flags` bits. `perfbuf_capi::internals` does not re-export the
// library's constants, so these are the C ABI's values (`include/perfbuf.h`,
// checked against it by `tests/abi.rs`).
/// `PERFBUF_DECODE_F_BRANCH_HW_IDX`: `branch_hw_idx` is valid.
pub const PERFBUF_DECODE_F_BRANCH_HW_IDX: u32 = 1;
/// `PERFBUF_DECODE_F_BRANCH_COUNTERS`: `branch_counters` is valid.
pub const PERFBUF_DECODE_F_BRANCH_COUNTERS: u32 = 2;
/// `PERFBUF_DECODE_F_READ_GROUP`: the READ values are a group.
pub const PERFBUF_DECODE_F_READ_GROUP: u32 = 4;

/// Bytes of an input before the record.
pub const PREFIX: usize = 48;

/// `flags` bits of an input.
pub mod flag {
    /// C attr `sz` from the input.
    pub const ATTR_SZ: u8 = 1;
    /// Garbage after the C attr's known fields.
    pub const ATTR_GARBAGE: u8 = 2;
    /// `out->sz` from the input.
    pub const OUT_SZ: u8 = 4;
    /// `rec_len` shorter than the record.
    pub const CUT: u8 = 8;
    /// `rec_len` longer than the record.
    pub const EXTEND: u8 = 16;
    /// A misaligned record pointer.
    pub const MISALIGNED: u8 = 32;
    /// `perf_event_attr.size` from the input.
    pub const EVENT_ATTR_SIZE: u8 = 64;
    /// NULL arguments too.
    pub const NULLS: u8 = 128;
}

/// One decode input.
#[derive(Clone, Copy, Debug, Default)]
pub struct DecodeInput<'a> {
    /// The layout.
    pub attr: DecodeAttr,
    /// [`flag`] bits.
    pub flags: u8,
    /// `rec_len` adjustment.
    pub adjust: u8,
    /// C attr `sz` / `perf_event_attr.size`.
    pub attr_sz: u16,
    /// `out->sz`.
    pub out_sz: u16,
    /// The record.
    pub record: &'a [u8],
}

impl<'a> DecodeInput<'a> {
    /// Parses an input; `None` if it is shorter than [`PREFIX`].
    pub fn parse(input: &'a [u8]) -> Option<Self> {
        let p: &[u8; PREFIX] = input.get(..PREFIX)?.try_into().ok()?;
        let word = |i: usize| u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7].map(|j| p[8 * i + j]));
        Some(DecodeInput {
            attr: DecodeAttr {
                sample_type: word(0),
                read_format: word(1),
                branch_sample_type: word(2),
                sample_regs_user: word(3),
                sample_regs_intr: word(4),
                sample_id_all: p[40] != 0,
            },
            flags: p[41],
            adjust: p[42],
            attr_sz: u16::from_le_bytes([p[44], p[45]]) & 0x1fff,
            out_sz: u16::from_le_bytes([p[46], p[47]]) & 0x3ff,
            record: &input[PREFIX..],
        })
    }

    /// The input bytes (the inverse of [`Self::parse`]).
    pub fn encode(&self) -> Vec<u8> {
        let a = &self.attr;
        let mut v = Vec::with_capacity(PREFIX + self.record.len());
        for w in [a.sample_type, a.read_format, a.branch_sample_type, a.sample_regs_user, a.sample_regs_intr]
        {
            v.extend_from_slice(&w.to_le_bytes());
        }
        v.extend_from_slice(&[u8::from(a.sample_id_all), self.flags, self.adjust, 0]);
        v.extend_from_slice(&self.attr_sz.to_le_bytes());
        v.extend_from_slice(&self.out_sz.to_le_bytes());
        v.extend_from_slice(self.record);
        v
    }

    fn has(&self, f: u8) -> bool {
        self.flags & f != 0
    }
}

/// Runs one input.
pub fn run(input: &[u8]) {
    let Some(case) = DecodeInput::parse(input) else { return };
    // Records come 8-aligned from a ring (the C API requires it): copy into
    // words, with room for a rec_len beyond the record.
    let extra = if case.has(flag::EXTEND) { usize::from(case.adjust) } else { 0 };
    let mut words = vec![0u64; (case.record.len() + extra).div_ceil(8) + 1];
    let bytes = to_bytes_mut(&mut words);
    bytes[..case.record.len()].copy_from_slice(case.record);
    let buffer = &bytes[..case.record.len() + extra];
    let rec_len = if case.has(flag::CUT) {
        case.record.len().saturating_sub(case.adjust.into())
    } else {
        case.record.len() + extra
    };

    let rust = decode(&buffer[..rec_len], &case.attr);
    match &rust {
        Ok(r) => check_decoded(r, &buffer[..rec_len], &case.attr),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    check_record_parse(&buffer[..rec_len]);
    check_c(&case, buffer, rec_len);
    check_attr_from(&case);
    if case.has(flag::NULLS) {
        check_nulls(buffer, rec_len);
    }
}

/// Every NULL argument is EINVAL, never a dereference.
fn check_nulls(buffer: &[u8], rec_len: usize) {
    const EINVAL: i32 = 22;
    let rec: *const perf_event_header = buffer.as_ptr().cast();
    let attr = perfbuf_decode_attr { sz: size_of::<perfbuf_decode_attr>(), ..Default::default() };
    let mut out = [0u64; size_of::<perfbuf_sample>() / 8];
    out[0] = size_of::<perfbuf_sample>() as u64;
    let out: *mut perfbuf_sample = out.as_mut_ptr().cast();
    let null_rec = core::ptr::null();
    let null_attr = core::ptr::null();
    let null_out = core::ptr::null_mut();
    // SAFETY: each non-NULL pointer is valid as the contract asks (the
    // record readable for rec_len bytes, attr and out whole structs); NULL
    // is allowed for each.
    unsafe {
        assert_eq!(perfbuf_decode(null_rec, rec_len, &attr, out), -EINVAL);
        assert_eq!(perfbuf_decode(rec, rec_len, null_attr, out), -EINVAL);
        assert_eq!(perfbuf_decode(rec, rec_len, &attr, null_out), -EINVAL);
        let mut dattr = perfbuf_decode_attr { sz: size_of::<perfbuf_decode_attr>(), ..Default::default() };
        assert_eq!(perfbuf_decode_attr_from(core::ptr::null(), &mut dattr), -EINVAL);
        let event_attr = [0u64; 16];
        assert_eq!(perfbuf_decode_attr_from(event_attr.as_ptr().cast(), null_out.cast()), -EINVAL);
    }
}

/// The bytes of `words`.
fn to_bytes_mut(words: &mut [u64]) -> &mut [u8] {
    let len = words.len() * 8;
    // SAFETY: the same memory, `len` bytes, exclusively borrowed for the
    // result's lifetime; any byte pattern is a valid u8 and u64.
    unsafe { core::slice::from_raw_parts_mut(words.as_mut_ptr().cast::<u8>(), len) }
}

/// Asserts `s` lies inside `outer`.
fn inside(outer: &[u8], s: &[u8], what: &str) {
    let (lo, hi) = (outer.as_ptr() as usize, outer.as_ptr() as usize + outer.len());
    let p = s.as_ptr() as usize;
    assert!(p >= lo && p + s.len() <= hi, "{what}: {} bytes at {p:#x} outside the record", s.len());
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_ne_bytes());
}

fn put_opt(out: &mut Vec<u8>, v: Option<u64>) {
    if let Some(v) = v {
        put(out, v);
    }
}

fn put_pair(out: &mut Vec<u8>, a: u32, b: u32) {
    out.extend_from_slice(&a.to_ne_bytes());
    out.extend_from_slice(&b.to_ne_bytes());
}

fn put_sample_id(out: &mut Vec<u8>, id: &SampleId) {
    if let Some(t) = id.tid {
        put_pair(out, t.pid, t.tid);
    }
    put_opt(out, id.time);
    put_opt(out, id.id);
    put_opt(out, id.stream_id);
    if let Some(c) = id.cpu {
        put_pair(out, c.cpu, c.res);
    }
    put_opt(out, id.identifier);
}

/// Bytes of the `sample_id` trailer `a` gives non-sample records.
fn trailer_len(a: &DecodeAttr) -> usize {
    if a.sample_id_all { 8 * (a.sample_type & SAMPLE_ID_BITS).count_ones() as usize } else { 0 }
}

/// A name: its bytes, which must be the record's at this place, followed
/// by a NUL; then the record's padding up to the trailer (the kernel
/// writes zeros; the decoder reads up to the first NUL and skips the rest).
fn put_name(out: &mut Vec<u8>, name: &[u8], rec: &[u8], a: &DecodeAttr) {
    assert!(!name.contains(&0), "a name stops at its NUL");
    let at = out.len();
    let end = rec.len() - trailer_len(a);
    assert_eq!(rec.get(at..at + name.len()), Some(name), "the name is the record's bytes");
    assert_eq!(rec.get(at + name.len()), Some(&0), "a NUL ends the name");
    out.extend_from_slice(&rec[at..end]);
}

/// The record as the kernel would have written these fields.
fn encode(r: &Record<'_>, a: &DecodeAttr) -> Vec<u8> {
    let mut out = Vec::with_capacity(r.bytes.len());
    out.extend_from_slice(&r.header.type_.to_ne_bytes());
    out.extend_from_slice(&r.header.misc.to_ne_bytes());
    out.extend_from_slice(&r.header.size.to_ne_bytes());
    match &r.body {
        Body::Sample(s) => encode_sample(&mut out, s),
        Body::Lost(l) => {
            put(&mut out, l.id);
            put(&mut out, l.lost);
            put_sample_id(&mut out, &l.sample_id);
        }
        Body::Throttle(t) | Body::Unthrottle(t) => {
            put(&mut out, t.time);
            put(&mut out, t.id);
            put(&mut out, t.stream_id);
            put_sample_id(&mut out, &t.sample_id);
        }
        Body::LostSamples(l) => {
            put(&mut out, l.lost);
            put_sample_id(&mut out, &l.sample_id);
        }
        body => encode_sideband(&mut out, body, r.bytes, a),
    }
    out
}

fn encode_sideband(out: &mut Vec<u8>, body: &Body<'_>, rec: &[u8], a: &DecodeAttr) {
    let id = match body {
        Body::Comm(c) => {
            put_pair(out, c.pid, c.tid);
            put_name(out, c.comm, rec, a);
            &c.sample_id
        }
        Body::Fork(t) | Body::Exit(t) => {
            put_pair(out, t.pid, t.ppid);
            put_pair(out, t.tid, t.ptid);
            put(out, t.time);
            &t.sample_id
        }
        Body::Mmap(m) | Body::Mmap2(m) => {
            put_pair(out, m.pid, m.tid);
            put(out, m.addr);
            put(out, m.len);
            put(out, m.pgoff);
            match m.file {
                Some(FileId::Inode { maj, min, ino, ino_generation }) => {
                    put_pair(out, maj, min);
                    put(out, ino);
                    put(out, ino_generation);
                }
                Some(FileId::BuildId(id)) => {
                    // size, reserved bytes and the id area, as the record has them
                    let at = out.len();
                    assert_eq!(usize::from(rec[at]), id.len());
                    assert_eq!(&rec[at + 4..at + 4 + id.len()], id);
                    out.extend_from_slice(&rec[at..at + 24]);
                }
                None => {}
            }
            if m.file.is_some() {
                put_pair(out, m.prot, m.flags);
            }
            put_name(out, m.filename, rec, a);
            &m.sample_id
        }
        Body::Switch(sw) | Body::SwitchCpuWide(sw) => {
            if let Some(t) = sw.next_prev {
                put_pair(out, t.pid, t.tid);
            }
            &sw.sample_id
        }
        Body::Namespaces(n) => {
            put_pair(out, n.pid, n.tid);
            put(out, n.len() as u64);
            out.extend_from_slice(n.words.as_bytes());
            &n.sample_id
        }
        Body::Ksymbol(k) => {
            put(out, k.addr);
            out.extend_from_slice(&k.len.to_ne_bytes());
            out.extend_from_slice(&k.ksym_type.to_ne_bytes());
            out.extend_from_slice(&k.flags.to_ne_bytes());
            put_name(out, k.name, rec, a);
            &k.sample_id
        }
        Body::BpfEvent(b) => {
            out.extend_from_slice(&b.type_.to_ne_bytes());
            out.extend_from_slice(&b.flags.to_ne_bytes());
            out.extend_from_slice(&b.id.to_ne_bytes());
            out.extend_from_slice(&b.tag);
            &b.sample_id
        }
        Body::Cgroup(c) => {
            put(out, c.id);
            put_name(out, c.path, rec, a);
            &c.sample_id
        }
        other => panic!("not a side-band record: {other:?}"),
    };
    put_sample_id(out, id);
}

fn encode_sample(out: &mut Vec<u8>, s: &Sample<'_>) {
    put_opt(out, s.identifier);
    put_opt(out, s.ip);
    if let Some(t) = s.tid {
        put_pair(out, t.pid, t.tid);
    }
    put_opt(out, s.time);
    put_opt(out, s.addr);
    put_opt(out, s.id);
    put_opt(out, s.stream_id);
    if let Some(c) = s.cpu {
        put_pair(out, c.cpu, c.res);
    }
    put_opt(out, s.period);
    if let Some(r) = &s.read {
        match r.values {
            ReadValues::Single(v) => {
                put(out, v.value);
                put_opt(out, r.time_enabled);
                put_opt(out, r.time_running);
                put_opt(out, v.id);
                put_opt(out, v.lost);
            }
            ReadValues::Group(g) => {
                put(out, g.len() as u64);
                put_opt(out, r.time_enabled);
                put_opt(out, r.time_running);
                out.extend_from_slice(g.words().as_bytes());
            }
        }
    }
    if let Some(c) = s.callchain {
        put(out, c.len() as u64);
        out.extend_from_slice(c.as_bytes());
    }
    if let Some(raw) = s.raw {
        out.extend_from_slice(&(raw.len() as u32).to_ne_bytes());
        out.extend_from_slice(raw);
    }
    if let Some(b) = &s.branch_stack {
        put(out, b.len() as u64);
        put_opt(out, b.hw_idx);
        out.extend_from_slice(b.entries.as_bytes());
        if let Some(c) = b.counters {
            out.extend_from_slice(c.as_bytes());
        }
    }
    if let Some(r) = &s.regs_user {
        put(out, r.abi);
        out.extend_from_slice(r.values.as_bytes());
    }
    if let Some(st) = &s.stack_user {
        put(out, st.data.len() as u64);
        out.extend_from_slice(st.data);
        put_opt(out, st.dyn_size);
    }
    put_opt(out, s.weight);
    put_opt(out, s.data_src);
    put_opt(out, s.transaction);
    if let Some(r) = &s.regs_intr {
        put(out, r.abi);
        out.extend_from_slice(r.values.as_bytes());
    }
    put_opt(out, s.phys_addr);
    put_opt(out, s.cgroup);
    put_opt(out, s.data_page_size);
    put_opt(out, s.code_page_size);
    if let Some(aux) = s.aux {
        put(out, aux.len() as u64);
        out.extend_from_slice(aux);
    }
}

fn check_decoded(r: &Record<'_>, given: &[u8], a: &DecodeAttr) {
    let size = usize::from(r.header.size);
    assert!(size >= HEADER_SIZE && size <= given.len());
    assert_eq!(
        (r.bytes.as_ptr(), r.bytes.len()),
        (given.as_ptr(), size),
        "bytes is the record's header.size bytes"
    );
    assert!(encode(r, a) == r.bytes, "the decoded fields do not re-encode to the record: {r:?}");
    assert!(!format!("{r:?}").is_empty());
    let rec = r.bytes;
    match &r.body {
        Body::Sample(s) => {
            assert_eq!(r.header.type_, PERF_RECORD_SAMPLE);
            check_sample(s, rec, a);
        }
        _ => {
            check_sideband(r, a);
            let id = r.sample_id().expect("a non-sample has a sample_id");
            let bits = if a.sample_id_all { a.sample_type & SAMPLE_ID_BITS } else { 0 };
            assert_eq!(id.present, bits);
            let fields = [
                (PERF_SAMPLE_TID, id.tid.is_some()),
                (PERF_SAMPLE_TIME, id.time.is_some()),
                (PERF_SAMPLE_ID, id.id.is_some()),
                (PERF_SAMPLE_STREAM_ID, id.stream_id.is_some()),
                (PERF_SAMPLE_CPU, id.cpu.is_some()),
                (PERF_SAMPLE_IDENTIFIER, id.identifier.is_some()),
            ];
            for (bit, some) in fields {
                assert_eq!(bits & bit != 0, some, "sample_id field {bit:#x}");
            }
        }
    }
}

/// A side-band record's flags follow `header.misc`, its slices lie inside
/// the record, its word arrays are 8-aligned.
fn check_sideband(r: &Record<'_>, _a: &DecodeAttr) {
    let rec = r.bytes;
    let misc = r.header.misc;
    assert_eq!(
        r.is_sideband(),
        !matches!(r.body, Body::Lost(_) | Body::Throttle(_) | Body::Unthrottle(_) | Body::LostSamples(_))
    );
    match &r.body {
        Body::Comm(c) => {
            inside(rec, c.comm, "comm");
            assert_eq!(c.exec, misc & PERF_RECORD_MISC_COMM_EXEC != 0);
        }
        Body::Mmap(m) | Body::Mmap2(m) => {
            inside(rec, m.filename, "filename");
            assert_eq!(m.data, misc & PERF_RECORD_MISC_MMAP_DATA != 0);
            assert_eq!(m.file.is_some(), r.header.type_ == PERF_RECORD_MMAP2);
            if let Some(FileId::BuildId(id)) = m.file {
                inside(rec, id, "build id");
                assert!(id.len() <= BUILD_ID_SIZE_MAX);
                assert_ne!(misc & PERF_RECORD_MISC_MMAP_BUILD_ID, 0);
            }
        }
        Body::Switch(s) | Body::SwitchCpuWide(s) => {
            assert_eq!(s.out, misc & PERF_RECORD_MISC_SWITCH_OUT != 0);
            assert!(!s.preempt || s.out);
            assert_eq!(s.next_prev.is_some(), r.header.type_ == PERF_RECORD_SWITCH_CPU_WIDE);
        }
        Body::Namespaces(n) => {
            inside(rec, n.words.as_bytes(), "namespaces");
            assert_eq!((n.words.as_bytes().as_ptr() as usize - rec.as_ptr() as usize) % 8, 0);
            assert_eq!(n.words.len(), 2 * n.len());
            assert!((0..n.len()).all(|i| n.get(i).is_some()) && n.get(n.len()).is_none());
        }
        Body::Ksymbol(k) => inside(rec, k.name, "ksymbol name"),
        Body::Cgroup(c) => inside(rec, c.path, "cgroup path"),
        _ => {}
    }
}

fn check_sample(s: &Sample<'_>, rec: &[u8], a: &DecodeAttr) {
    let t = a.sample_type;
    assert_eq!(s.sample_type, t);
    assert_eq!(s.present(), t, "fields present vs sample_type {t:#x}");
    // Word arrays start 8-aligned (the record is), so C can read them as u64.
    let words = |w: U64s<'_>, what: &str| {
        inside(rec, w.as_bytes(), what);
        assert_eq!(w.as_bytes().as_ptr() as usize % 8, 0, "{what}: misaligned");
        assert_eq!(w.iter().count(), w.len());
        assert_eq!(w.get(w.len()), None);
    };
    if let Some(r) = &s.read {
        let group = a.read_format & PERF_FORMAT_GROUP != 0;
        match r.values {
            ReadValues::Group(g) => {
                assert!(group);
                words(g.words(), "read group");
                assert_eq!(g.words().len(), g.len() * g.stride());
                assert_eq!(g.iter().count(), g.len());
                assert_eq!(g.get(g.len()), None);
                assert_eq!(g.is_empty(), g.iter().next().is_none());
            }
            ReadValues::Single(v) => {
                assert!(!group);
                assert_eq!(v.id.is_some(), a.read_format & PERF_FORMAT_ID != 0);
                assert_eq!(v.lost.is_some(), a.read_format & PERF_FORMAT_LOST != 0);
            }
        }
        assert_eq!(r.time_enabled.is_some(), a.read_format & PERF_FORMAT_TOTAL_TIME_ENABLED != 0);
        assert_eq!(r.time_running.is_some(), a.read_format & PERF_FORMAT_TOTAL_TIME_RUNNING != 0);
    }
    if let Some(c) = s.callchain {
        words(c, "callchain");
    }
    if let Some(raw) = s.raw {
        inside(rec, raw, "raw");
    }
    if let Some(b) = &s.branch_stack {
        words(b.entries, "branch entries");
        assert_eq!(b.entries.len(), 3 * b.len());
        assert!(b.get(b.len()).is_none() && (b.is_empty() || b.get(b.len() - 1).is_some()));
        let hw = a.branch_sample_type & PERF_SAMPLE_BRANCH_HW_INDEX != 0;
        // hw_idx is absent only in the kernel's bare `nr = 0` form.
        assert!(b.hw_idx.is_none() || hw, "hw_idx without HW_INDEX");
        assert!(b.hw_idx.is_some() || !hw || b.is_empty(), "hw_idx missing");
        assert_eq!(b.counters.is_some(), a.branch_sample_type & PERF_SAMPLE_BRANCH_COUNTERS != 0);
        if let Some(c) = b.counters {
            words(c, "branch counters");
            assert_eq!(c.len(), b.len());
        }
    }
    for (r, mask, what) in
        [(&s.regs_user, a.sample_regs_user, "regs_user"), (&s.regs_intr, a.sample_regs_intr, "regs_intr")]
    {
        if let Some(r) = r {
            words(r.values, what);
            let n = if r.abi == PERF_SAMPLE_REGS_ABI_NONE { 0 } else { mask.count_ones() as usize };
            assert_eq!((r.mask, r.values.len()), (mask, n), "{what}");
            for reg in 0..64 {
                let expect = if mask & (1 << reg) != 0 {
                    r.values.get((mask & ((1u64 << reg) - 1)).count_ones() as usize)
                } else {
                    None
                };
                assert_eq!(r.get(reg), expect, "{what} register {reg}");
            }
            assert_eq!(r.get(64), None);
        }
    }
    if let Some(st) = &s.stack_user {
        inside(rec, st.data, "stack_user");
        assert_eq!(st.dyn_size.is_some(), !st.data.is_empty());
        assert!(st.dyn_size.is_none_or(|d| d <= st.data.len() as u64), "dyn_size beyond size");
        assert_eq!(st.valid().len() as u64, st.dyn_size.unwrap_or(0));
    }
    if let Some(aux) = s.aux {
        inside(rec, aux, "aux");
    }
}

/// libbpf's classifier: a sample's raw data lies inside the record.
fn check_record_parse(rec: &[u8]) {
    match record::parse(rec) {
        record::Record::Sample { data } => {
            inside(rec, data, "record::parse data");
            assert!(rec.len() >= record::SAMPLE_DATA_OFFSET);
        }
        record::Record::Lost { .. } => assert!(rec.len() >= 24),
        record::Record::Other { type_ } => assert_eq!(type_, record::record_type(rec)),
        record::Record::Malformed => {}
    }
}

/// What `perfbuf_decode` must make of the C attr this input describes:
/// fields beyond `sz` read as 0, bytes beyond the known fields must be 0.
fn expected_c_attr(case: &DecodeInput<'_>, sz: usize) -> Option<DecodeAttr> {
    let a = &case.attr;
    let has = |end: usize| sz >= end;
    let end = |field: usize, len: usize| field + len;
    if !(8..=4096).contains(&sz) || (case.has(flag::ATTR_GARBAGE) && sz > 52) {
        return None;
    }
    Some(DecodeAttr {
        sample_type: if has(end(offset_of!(perfbuf_decode_attr, sample_type), 8)) {
            a.sample_type
        } else {
            0
        },
        read_format: if has(end(offset_of!(perfbuf_decode_attr, read_format), 8)) {
            a.read_format
        } else {
            0
        },
        sample_regs_user: if has(end(offset_of!(perfbuf_decode_attr, sample_regs_user), 8)) {
            a.sample_regs_user
        } else {
            0
        },
        sample_regs_intr: if has(end(offset_of!(perfbuf_decode_attr, sample_regs_intr), 8)) {
            a.sample_regs_intr
        } else {
            0
        },
        branch_sample_type: if has(end(offset_of!(perfbuf_decode_attr, branch_sample_type), 8)) {
            a.branch_sample_type
        } else {
            0
        },
        sample_id_all: has(end(offset_of!(perfbuf_decode_attr, sample_id_all), 4)) && a.sample_id_all,
    })
}

/// `perfbuf_decode` on the same record: the same verdict as the Rust API,
/// pointers into the record, and only `out->sz` bytes written.
fn check_c(case: &DecodeInput<'_>, buffer: &[u8], rec_len: usize) {
    const EBADMSG: i32 = 74;
    const EOPNOTSUPP: i32 = 95;
    const EINVAL: i32 = 22;
    let full = size_of::<perfbuf_decode_attr>();
    let attr_sz = if case.has(flag::ATTR_SZ) { usize::from(case.attr_sz) } else { full };
    // The caller's attr struct: sz, the fields, then zeros (or garbage)
    // up to sz.
    let mut attr_words = vec![0u64; attr_sz.max(full).div_ceil(8)];
    let a = &case.attr;
    attr_words[..6].copy_from_slice(&[
        attr_sz as u64,
        a.sample_type,
        a.read_format,
        a.sample_regs_user,
        a.sample_regs_intr,
        a.branch_sample_type,
    ]);
    let attr_bytes = to_bytes_mut(&mut attr_words);
    attr_bytes[48..52].copy_from_slice(&u32::from(a.sample_id_all).to_ne_bytes());
    if case.has(flag::ATTR_GARBAGE) && attr_sz > 52 {
        attr_bytes[attr_sz - 1] = 0x5a;
    }
    // The out struct, in a guarded buffer: bytes past sz must stay as they were.
    const GUARD: u8 = 0xa5;
    let out_sz =
        if case.has(flag::OUT_SZ) { usize::from(case.out_sz).max(8) } else { size_of::<perfbuf_sample>() };
    let mut out_words =
        vec![u64::from_ne_bytes([GUARD; 8]); (out_sz.max(size_of::<perfbuf_sample>()) + 64) / 8];
    out_words[0] = out_sz as u64;
    let (misaligned, rec_ptr) = if case.has(flag::MISALIGNED) {
        // One byte in: still inside `buffer` when rec_len > 0.
        (true, buffer.as_ptr().wrapping_add(1))
    } else {
        (false, buffer.as_ptr())
    };
    let readable = if misaligned { rec_len.min(buffer.len().saturating_sub(1)) } else { rec_len };
    // SAFETY: `rec_ptr` is readable for `readable` bytes (inside `buffer`),
    // the attr buffer holds at least its sz bytes and starts with sz, the
    // out buffer is writable for more than its sz bytes and starts with sz.
    let ret = unsafe {
        perfbuf_decode(
            rec_ptr.cast(),
            readable,
            attr_words.as_ptr().cast(),
            out_words.as_mut_ptr().cast::<perfbuf_sample>(),
        )
    };
    let out_bytes = to_bytes_mut(&mut out_words);
    let written = if out_sz >= 24 { out_sz.min(size_of::<perfbuf_sample>()) } else { 0 };
    assert!(out_bytes[written.max(8)..].iter().all(|&b| b == GUARD), "perfbuf_decode wrote past out->sz");
    assert_eq!(out_bytes[..8], (out_sz as u64).to_ne_bytes(), "out->sz must be kept");

    let expected = if out_sz < 24 || misaligned {
        Err(EINVAL)
    } else {
        match expected_c_attr(case, attr_sz) {
            None => Err(EINVAL),
            Some(attr) => decode(&buffer[..rec_len.min(usize::from(u16::MAX))], &attr)
                .map(|_| ())
                .map_err(|e| if e.is_malformed() { EBADMSG } else { EOPNOTSUPP }),
        }
    };
    assert_eq!(ret, expected.map_or_else(|e| -e, |()| 0), "perfbuf_decode's verdict (expected {expected:?})");
    if ret != 0 || out_sz < size_of::<perfbuf_sample>() {
        return;
    }
    // SAFETY: a whole perfbuf_sample was written (out_sz is its size) into
    // 8-aligned memory; its fields are integers and raw pointers.
    let out = unsafe { out_words.as_ptr().cast::<perfbuf_sample>().read() };
    let attr = expected_c_attr(case, attr_sz).expect("decoded");
    let rec = &buffer[..usize::from(out.size)];
    let rust = decode(rec, &attr).expect("decoded");
    assert_eq!(
        (out.record_type, out.misc, out.size),
        (rust.header.type_, rust.header.misc, rust.header.size)
    );
    assert_eq!(out.present, rust.present());
    assert_eq!(out.reserved, 0);
    let c_words = |p: *const u64, n: u64, what: &str| {
        if p.is_null() {
            return;
        }
        let len = usize::try_from(n).ok().and_then(|n| n.checked_mul(8)).expect("word count fits");
        assert_eq!(p as usize % 8, 0, "{what}: misaligned");
        let (lo, hi) = (rec.as_ptr() as usize, rec.as_ptr() as usize + rec.len());
        assert!(p as usize >= lo && p as usize + len <= hi, "{what}: outside the record");
    };
    let c_blob = |p: *const core::ffi::c_void, n: u64, what: &str| {
        if p.is_null() {
            return;
        }
        let len = usize::try_from(n).expect("size fits");
        let (lo, hi) = (rec.as_ptr() as usize, rec.as_ptr() as usize + rec.len());
        assert!(p as usize >= lo && p as usize + len <= hi, "{what}: outside the record");
    };
    c_words(out.read_group, out.read_nr.saturating_mul(out.read_stride), "read_group");
    c_words(out.callchain, out.callchain_nr, "callchain");
    c_blob(out.raw, out.raw_size, "raw");
    c_words(out.branch_entries, out.branch_nr.saturating_mul(3), "branch_entries");
    c_words(out.branch_counters, out.branch_nr, "branch_counters");
    c_words(out.regs_user, out.regs_user_nr, "regs_user");
    c_words(out.regs_intr, out.regs_intr_nr, "regs_intr");
    c_blob(out.stack_user, out.stack_user_size, "stack_user");
    c_blob(out.aux, out.aux_size, "aux");
    // The C view says what the Rust one does.
    if let Body::Sample(s) = &rust.body {
        assert_eq!(out.raw.cast::<u8>(), s.raw.map_or(core::ptr::null(), |r| r.as_ptr()));
        assert_eq!(out.raw_size, s.raw.map_or(0, |r| r.len() as u64));
        assert_eq!(out.callchain_nr, s.callchain.map_or(0, |c| c.len() as u64));
        assert_eq!(out.aux_size, s.aux.map_or(0, |x| x.len() as u64));
        assert_eq!(
            out.flags & PERFBUF_DECODE_F_READ_GROUP != 0,
            matches!(s.read.map(|r| r.values), Some(ReadValues::Group(_)))
        );
        let b = s.branch_stack;
        assert_eq!(out.branch_nr, b.map_or(0, |b| b.len() as u64));
        assert_eq!(out.flags & PERFBUF_DECODE_F_BRANCH_HW_IDX != 0, b.is_some_and(|b| b.hw_idx.is_some()));
        assert_eq!(
            out.flags & PERFBUF_DECODE_F_BRANCH_COUNTERS != 0,
            b.is_some_and(|b| b.counters.is_some())
        );
        assert_eq!(out.stack_user_size, s.stack_user.map_or(0, |st| st.data.len() as u64));
    }
}

/// `perfbuf_decode_attr_from` on a `perf_event_attr` holding this input's
/// layout: fields beyond `attr.size` read as 0.
fn check_attr_from(case: &DecodeInput<'_>) {
    let a = &case.attr;
    let size = if case.has(flag::EVENT_ATTR_SIZE) { u32::from(case.attr_sz) } else { 128 };
    let mut words = [0u64; 16];
    words[0] = u64::from(size) << 32;
    words[3] = a.sample_type;
    words[4] = a.read_format;
    words[5] = u64::from(a.sample_id_all) << 18;
    words[9] = a.branch_sample_type;
    words[10] = a.sample_regs_user;
    words[12] = a.sample_regs_intr;
    let mut out = perfbuf_decode_attr { sz: size_of::<perfbuf_decode_attr>(), ..Default::default() };
    // SAFETY: `words` is 128 readable bytes, more than the 104 read at most;
    // `out` is a whole struct whose sz says so.
    let ret = unsafe { perfbuf_decode_attr_from(words.as_ptr().cast(), &mut out) };
    let n = match size {
        0 => 64,
        1..64 => {
            assert_eq!(ret, -22, "perf_event_attr.size {size} must be refused");
            return;
        }
        s => (s as usize).min(104),
    };
    assert_eq!(ret, 0);
    let field = |end: usize, v: u64| if n >= end { v } else { 0 };
    let got = (out.sample_type, out.read_format, out.sample_id_all != 0, out.branch_sample_type);
    assert_eq!(got, (a.sample_type, a.read_format, a.sample_id_all, field(80, a.branch_sample_type)));
    let regs = (out.sample_regs_user, out.sample_regs_intr);
    assert_eq!(regs, (field(88, a.sample_regs_user), field(104, a.sample_regs_intr)));
    assert_eq!((out.sz, out.reserved), (size_of::<perfbuf_decode_attr>(), 0));
}
