//! The decoder's unit tests: records built by hand, byte by byte.

use super::*;

/// Builds a record: fields appended in order, header patched by `finish`.
#[derive(Default)]
struct Rb {
    body: Vec<u8>,
}

impl Rb {
    fn new() -> Self {
        Rb::default()
    }
    fn u64(mut self, v: u64) -> Self {
        self.body.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.body.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn pair(self, a: u32, b: u32) -> Self {
        self.u32(a).u32(b)
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.body.extend_from_slice(b);
        self
    }
    fn words(self, w: &[u64]) -> Self {
        w.iter().fold(self, |rb, &v| rb.u64(v))
    }
    fn finish(self, type_: u32, misc: u16) -> Vec<u8> {
        let size = u16::try_from(HEADER_SIZE + self.body.len()).expect("test record fits");
        let mut v = type_.to_ne_bytes().to_vec();
        v.extend_from_slice(&misc.to_ne_bytes());
        v.extend_from_slice(&size.to_ne_bytes());
        v.extend_from_slice(&self.body);
        v
    }
    fn sample(self) -> Vec<u8> {
        self.finish(PERF_RECORD_SAMPLE, 1)
    }
}

fn attr(sample_type: u64) -> DecodeAttr {
    DecodeAttr { sample_type, ..DecodeAttr::default() }
}

fn sample<'a>(rec: &'a [u8], a: &DecodeAttr) -> Sample<'a> {
    match decode(rec, a).expect("decodes").body {
        Body::Sample(s) => s,
        other => panic!("not a sample: {other:?}"),
    }
}

/// Every field selected by sample_type is Some, the others None.
fn check_presence(s: &Sample<'_>) {
    assert_eq!(s.present(), s.sample_type, "fields present vs sample_type");
}

/// Every slice of the decoded record lies inside the record.
fn check_inside(rec: &Record<'_>) {
    let lo = rec.bytes.as_ptr() as usize;
    let hi = lo + rec.bytes.len();
    let inside = |b: &[u8]| {
        let p = b.as_ptr() as usize;
        assert!(p >= lo && p + b.len() <= hi, "slice escapes the record");
    };
    if let Body::Sample(s) = &rec.body {
        check_presence(s);
        if let Some(r) = &s.read {
            if let ReadValues::Group(g) = r.values {
                inside(g.words().as_bytes());
                assert_eq!(g.iter().count(), g.len());
            }
        }
        s.callchain.iter().for_each(|c| inside(c.as_bytes()));
        s.raw.iter().for_each(|r| inside(r));
        if let Some(b) = &s.branch_stack {
            inside(b.entries.as_bytes());
            b.counters.iter().for_each(|c| inside(c.as_bytes()));
            assert!(b.get(b.len()).is_none());
        }
        for r in s.regs_user.iter().chain(s.regs_intr.iter()) {
            inside(r.values.as_bytes());
        }
        s.stack_user.iter().for_each(|st| inside(st.data));
        s.aux.iter().for_each(|a| inside(a));
    }
}

// ---- each field on its own ----------------------------------------------

#[test]
fn scalar_fields_each_alone() {
    let cases: [(u64, Field); 13] = [
        (PERF_SAMPLE_IDENTIFIER, Field::Identifier),
        (PERF_SAMPLE_IP, Field::Ip),
        (PERF_SAMPLE_TIME, Field::Time),
        (PERF_SAMPLE_ADDR, Field::Addr),
        (PERF_SAMPLE_ID, Field::Id),
        (PERF_SAMPLE_STREAM_ID, Field::StreamId),
        (PERF_SAMPLE_PERIOD, Field::Period),
        (PERF_SAMPLE_WEIGHT, Field::Weight),
        (PERF_SAMPLE_DATA_SRC, Field::DataSrc),
        (PERF_SAMPLE_TRANSACTION, Field::Transaction),
        (PERF_SAMPLE_PHYS_ADDR, Field::PhysAddr),
        (PERF_SAMPLE_CGROUP, Field::Cgroup),
        (PERF_SAMPLE_DATA_PAGE_SIZE, Field::DataPageSize),
    ];
    for (bit, field) in cases.into_iter().chain([(PERF_SAMPLE_CODE_PAGE_SIZE, Field::CodePageSize)]) {
        let v = 0x1122_3344_5566_7788 ^ bit;
        let rec = Rb::new().u64(v).sample();
        let s = sample(&rec, &attr(bit));
        check_presence(&s);
        let got = [
            s.identifier,
            s.ip,
            s.time,
            s.addr,
            s.id,
            s.stream_id,
            s.period,
            s.weight,
            s.data_src,
            s.transaction,
            s.phys_addr,
            s.cgroup,
            s.data_page_size,
            s.code_page_size,
        ];
        assert_eq!(got.iter().flatten().copied().collect::<Vec<_>>(), vec![v], "{field:?}");
        // Missing: truncated at the field.
        let empty = Rb::new().sample();
        assert_eq!(decode(&empty, &attr(bit)), Err(DecodeError::Truncated { field, offset: 8 }));
    }
}

#[test]
fn tid_and_cpu_are_u32_pairs() {
    let rec = Rb::new().pair(100, 101).pair(3, 0).sample();
    let s = sample(&rec, &attr(PERF_SAMPLE_TID | PERF_SAMPLE_CPU));
    assert_eq!(s.tid, Some(PidTid { pid: 100, tid: 101 }));
    assert_eq!(s.cpu, Some(CpuRes { cpu: 3, res: 0 }));
    let short = Rb::new().pair(100, 101).u32(3).sample();
    assert_eq!(
        decode(&short, &attr(PERF_SAMPLE_TID | PERF_SAMPLE_CPU)),
        Err(DecodeError::Truncated { field: Field::Cpu, offset: 16 })
    );
}

#[test]
fn weight_struct_splits_the_word() {
    let rec = Rb::new().u64(0xaaaa_bbbb_cccc_dddd).sample();
    let s = sample(&rec, &attr(PERF_SAMPLE_WEIGHT_STRUCT));
    let w = weight_struct(s.weight.expect("weight"));
    assert_eq!(w, WeightStruct { var1_dw: 0xcccc_dddd, var2_w: 0xbbbb, var3_w: 0xaaaa });
    // Both weight bits still mean one word.
    let s = sample(&rec, &attr(PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT));
    assert_eq!(s.weight, Some(0xaaaa_bbbb_cccc_dddd));
}

#[test]
fn raw_sizes() {
    for n in [0usize, 4, 12, 20, 1000] {
        let data: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let rec = Rb::new().u32(n as u32).bytes(&data).sample();
        let s = sample(&rec, &attr(PERF_SAMPLE_RAW));
        assert_eq!(s.raw, Some(&data[..]));
    }
    // A raw size beyond the record, including the largest.
    for size in [5u32, 100, u32::MAX] {
        let rec = Rb::new().u32(size).u32(0).sample();
        assert_eq!(
            decode(&rec, &attr(PERF_SAMPLE_RAW)),
            Err(DecodeError::Truncated { field: Field::RawData, offset: 12 })
        );
    }
    // Shorter than the record: the rest is trailing garbage.
    let rec = Rb::new().u32(0).u32(0).sample();
    assert_eq!(decode(&rec, &attr(PERF_SAMPLE_RAW)), Err(DecodeError::Trailing { used: 12, size: 16 }));
}

#[test]
fn callchain() {
    for nr in [0u64, 1, 5] {
        let ips: Vec<u64> = (0..nr).map(|i| 0xffff_ffff_8100_0000 + i).collect();
        let rec = Rb::new().u64(nr).words(&ips).sample();
        let s = sample(&rec, &attr(PERF_SAMPLE_CALLCHAIN));
        let cc = s.callchain.expect("callchain");
        assert_eq!(cc.len(), nr as usize);
        assert_eq!(cc.iter().collect::<Vec<_>>(), ips);
        assert_eq!(cc.get(nr as usize), None);
    }
}

#[test]
fn huge_counts_are_errors_not_panics() {
    let a = attr(PERF_SAMPLE_CALLCHAIN);
    for (nr, want) in [
        (u64::MAX, DecodeError::Overflow { field: Field::Callchain, count: u64::MAX }),
        (1 << 61, DecodeError::Overflow { field: Field::Callchain, count: 1 << 61 }),
        (1 << 60, DecodeError::Truncated { field: Field::Callchain, offset: 16 }),
        (1 << 40, DecodeError::Truncated { field: Field::Callchain, offset: 16 }),
        (2, DecodeError::Truncated { field: Field::Callchain, offset: 16 }),
    ] {
        let rec = Rb::new().u64(nr).u64(7).sample();
        assert_eq!(decode(&rec, &a), Err(want), "nr {nr:#x}");
    }
    let g = DecodeAttr {
        sample_type: PERF_SAMPLE_READ,
        read_format: PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_LOST,
        ..DecodeAttr::default()
    };
    let rec = Rb::new().u64(u64::MAX / 2).sample();
    assert_eq!(decode(&rec, &g), Err(DecodeError::Overflow { field: Field::ReadGroup, count: u64::MAX / 2 }));
    let b = attr(PERF_SAMPLE_BRANCH_STACK);
    let rec = Rb::new().u64(u64::MAX / 2).sample();
    assert_eq!(
        decode(&rec, &b),
        Err(DecodeError::Overflow { field: Field::BranchEntries, count: u64::MAX / 2 })
    );
    for size in [u64::MAX, u64::MAX - 7, 1 << 63, 65536] {
        let rec = Rb::new().u64(size).sample();
        assert_eq!(
            decode(&rec, &attr(PERF_SAMPLE_STACK_USER)),
            Err(DecodeError::Truncated { field: Field::StackUserData, offset: 16 })
        );
        assert_eq!(
            decode(&rec, &attr(PERF_SAMPLE_AUX)),
            Err(DecodeError::Truncated { field: Field::AuxData, offset: 16 })
        );
    }
}

#[test]
fn read_single_every_format() {
    for f in 0..32u64 {
        if f & PERF_FORMAT_GROUP != 0 {
            continue;
        }
        let mut rb = Rb::new().u64(1000);
        let te = f & PERF_FORMAT_TOTAL_TIME_ENABLED != 0;
        let tr = f & PERF_FORMAT_TOTAL_TIME_RUNNING != 0;
        let id = f & PERF_FORMAT_ID != 0;
        let lost = f & PERF_FORMAT_LOST != 0;
        for (on, v) in [(te, 11), (tr, 22), (id, 33), (lost, 44)] {
            if on {
                rb = rb.u64(v);
            }
        }
        let rec = rb.sample();
        let a = DecodeAttr { sample_type: PERF_SAMPLE_READ, read_format: f, ..DecodeAttr::default() };
        let r = sample(&rec, &a).read.expect("read");
        assert_eq!(r.time_enabled, te.then_some(11));
        assert_eq!(r.time_running, tr.then_some(22));
        assert_eq!(
            r.values,
            ReadValues::Single(ReadValue { value: 1000, id: id.then_some(33), lost: lost.then_some(44) })
        );
        for len in HEADER_SIZE..rec.len() {
            let mut cut = rec[..len].to_vec();
            cut[6..8].copy_from_slice(&(len as u16).to_ne_bytes());
            assert!(decode(&cut, &a).is_err(), "format {f:#x} cut at {len}");
        }
    }
}

#[test]
fn read_group_every_format() {
    for f in (0..32u64).filter(|f| f & PERF_FORMAT_GROUP != 0) {
        let te = f & PERF_FORMAT_TOTAL_TIME_ENABLED != 0;
        let tr = f & PERF_FORMAT_TOTAL_TIME_RUNNING != 0;
        let id = f & PERF_FORMAT_ID != 0;
        let lost = f & PERF_FORMAT_LOST != 0;
        for nr in [0u64, 1, 3] {
            let mut rb = Rb::new().u64(nr);
            if te {
                rb = rb.u64(11);
            }
            if tr {
                rb = rb.u64(22);
            }
            for i in 0..nr {
                rb = rb.u64(100 + i);
                if id {
                    rb = rb.u64(200 + i);
                }
                if lost {
                    rb = rb.u64(300 + i);
                }
            }
            let rec = rb.sample();
            let a = DecodeAttr { sample_type: PERF_SAMPLE_READ, read_format: f, ..DecodeAttr::default() };
            let r = sample(&rec, &a).read.expect("read");
            assert_eq!((r.time_enabled, r.time_running), (te.then_some(11), tr.then_some(22)));
            let ReadValues::Group(g) = r.values else { panic!("group expected") };
            assert_eq!(g.len() as u64, nr);
            assert_eq!(g.is_empty(), nr == 0);
            assert_eq!(g.stride(), 1 + usize::from(id) + usize::from(lost));
            for (i, v) in g.iter().enumerate() {
                let i = i as u64;
                assert_eq!(
                    v,
                    ReadValue { value: 100 + i, id: id.then_some(200 + i), lost: lost.then_some(300 + i) }
                );
            }
            assert_eq!(g.get(nr as usize), None);
        }
    }
}

#[test]
fn branch_stack_forms() {
    let entries = [1u64, 2, 3, 4, 5, 6];
    // Plain.
    let rec = Rb::new().u64(2).words(&entries).sample();
    let b = sample(&rec, &attr(PERF_SAMPLE_BRANCH_STACK)).branch_stack.expect("branch");
    assert_eq!((b.len(), b.hw_idx, b.counters), (2, None, None));
    assert_eq!(b.get(1), Some(BranchEntry { from: 4, to: 5, flags: 6 }));
    assert_eq!(b.get(2), None);
    // With hw_idx and counters.
    let a = DecodeAttr {
        sample_type: PERF_SAMPLE_BRANCH_STACK,
        branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX | PERF_SAMPLE_BRANCH_COUNTERS,
        ..DecodeAttr::default()
    };
    let rec = Rb::new().u64(2).u64(9).words(&entries).words(&[70, 71]).sample();
    let b = sample(&rec, &a).branch_stack.expect("branch");
    assert_eq!(b.hw_idx, Some(9));
    assert_eq!(b.get(0), Some(BranchEntry { from: 1, to: 2, flags: 3 }));
    assert_eq!(b.counters.map(|c| c.iter().collect::<Vec<_>>()), Some(vec![70, 71]));
    // Empty with hw_idx (a PMU stack of no entries) and bare (no stack).
    let with = Rb::new().u64(0).u64(u64::MAX).sample();
    assert_eq!(sample(&with, &a).branch_stack.expect("branch").hw_idx, Some(u64::MAX));
    let bare = Rb::new().u64(0).sample();
    let b = sample(&bare, &a).branch_stack.expect("branch");
    assert_eq!((b.len(), b.hw_idx), (0, None));
    // Bare followed by more fields.
    let a2 = DecodeAttr { sample_type: a.sample_type | PERF_SAMPLE_PHYS_ADDR, ..a };
    let bare = Rb::new().u64(0).u64(0x1000).sample();
    let s = sample(&bare, &a2);
    assert_eq!((s.branch_stack.expect("branch").hw_idx, s.phys_addr), (None, Some(0x1000)));
    // A non-empty stack never drops hw_idx.
    let rec = Rb::new().u64(1).words(&entries[..3]).u64(5).sample();
    assert!(decode(&rec, &a).is_err());
    // Entries short.
    let rec = Rb::new().u64(2).words(&entries[..5]).sample();
    assert_eq!(
        decode(&rec, &attr(PERF_SAMPLE_BRANCH_STACK)),
        Err(DecodeError::Truncated { field: Field::BranchEntries, offset: 16 })
    );
}

#[test]
fn regs_follow_abi_and_mask() {
    let mask = (1 << 0) | (1 << 7) | (1 << 8);
    let a = DecodeAttr {
        sample_type: PERF_SAMPLE_REGS_USER | PERF_SAMPLE_REGS_INTR,
        sample_regs_user: mask,
        sample_regs_intr: 0b11,
        ..DecodeAttr::default()
    };
    let rec = Rb::new().u64(2).words(&[10, 70, 80]).u64(2).words(&[1, 2]).sample();
    let s = sample(&rec, &a);
    let u = s.regs_user.expect("regs_user");
    assert_eq!((u.abi, u.values.len()), (2, 3));
    assert_eq!(
        (u.get(0), u.get(7), u.get(8), u.get(1), u.get(64)),
        (Some(10), Some(70), Some(80), None, None)
    );
    let i = s.regs_intr.expect("regs_intr");
    assert_eq!(i.values.iter().collect::<Vec<_>>(), vec![1, 2]);
    // ABI_NONE: no registers follow.
    let rec = Rb::new().u64(0).u64(0).sample();
    let s = sample(&rec, &a);
    assert!(s.regs_user.expect("regs").values.is_empty());
    assert_eq!(s.regs_user.expect("regs").get(0), None);
    // Too few registers for the mask.
    let rec = Rb::new().u64(2).words(&[10, 70]).u64(0).sample();
    assert!(decode(&rec, &a).is_err());
}

#[test]
fn stack_user_dyn_size() {
    let a = attr(PERF_SAMPLE_STACK_USER);
    let rec = Rb::new().u64(16).bytes(&[7; 16]).u64(8).sample();
    let st = sample(&rec, &a).stack_user.expect("stack");
    assert_eq!((st.data.len(), st.dyn_size, st.valid().len()), (16, Some(8), 8));
    // size 0: no dyn_size.
    let rec = Rb::new().u64(0).sample();
    let st = sample(&rec, &a).stack_user.expect("stack");
    assert_eq!((st.data.len(), st.dyn_size, st.valid().len()), (0, None, 0));
    // dyn_size beyond size.
    let rec = Rb::new().u64(16).bytes(&[7; 16]).u64(17).sample();
    assert_eq!(
        decode(&rec, &a),
        Err(DecodeError::Inconsistent { field: Field::StackUserDynSize, value: 17, limit: 16 })
    );
    // Missing dyn_size.
    let rec = Rb::new().u64(16).bytes(&[7; 16]).sample();
    assert_eq!(decode(&rec, &a), Err(DecodeError::Truncated { field: Field::StackUserDynSize, offset: 32 }));
}

#[test]
fn aux_is_last() {
    let a = attr(PERF_SAMPLE_AUX | PERF_SAMPLE_CODE_PAGE_SIZE | PERF_SAMPLE_DATA_PAGE_SIZE);
    let rec = Rb::new().u64(4096).u64(2 << 20).u64(16).bytes(&[9; 16]).sample();
    let s = sample(&rec, &a);
    assert_eq!((s.data_page_size, s.code_page_size), (Some(4096), Some(2 << 20)));
    assert_eq!(s.aux, Some(&[9u8; 16][..]));
    let rec = Rb::new().u64(4096).u64(2 << 20).u64(0).sample();
    assert_eq!(sample(&rec, &a).aux, Some(&[][..]));
}

// ---- everything at once: the order --------------------------------------

const ALL: u64 = KNOWN_SAMPLE_TYPE & !PERF_SAMPLE_WEIGHT_STRUCT;

fn all_attr() -> DecodeAttr {
    DecodeAttr {
        sample_type: ALL,
        read_format: PERF_FORMAT_GROUP
            | PERF_FORMAT_ID
            | PERF_FORMAT_LOST
            | PERF_FORMAT_TOTAL_TIME_ENABLED
            | PERF_FORMAT_TOTAL_TIME_RUNNING,
        sample_id_all: true,
        sample_regs_user: 0b101,
        sample_regs_intr: 0b1,
        branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX,
    }
}

/// A sample with every field, each value distinct, in the kernel's order.
fn all_record() -> Vec<u8> {
    Rb::new()
        .u64(0x1d) // identifier
        .u64(0x1f) // ip
        .pair(42, 43) // pid, tid
        .u64(0x71) // time
        .u64(0xad) // addr
        .u64(0x1d) // id
        .u64(0x5d) // stream_id
        .pair(1, 0) // cpu, res
        .u64(0x9e) // period
        .words(&[2, 0xe0, 0xe1, 500, 0x1d, 0, 501, 0x1e, 3]) // group: nr, te, tr, {v, id, lost} x2
        .words(&[3, 0xc0, 0xc1, 0xc2]) // callchain
        .u32(4)
        .bytes(b"rawd") // raw
        .words(&[1, 0x77, 0xf0, 0x70, 0x0f]) // branch: nr, hw_idx, entry
        .words(&[2, 0xa0, 0xa2]) // regs_user: abi, 2 regs
        .u64(8)
        .bytes(b"stackdmp")
        .u64(8) // stack_user
        .u64(0x3e) // weight
        .u64(0xd5) // data_src
        .u64(0x7a) // transaction
        .words(&[2, 0xb0]) // regs_intr: abi, 1 reg
        .u64(0x9a) // phys_addr
        .u64(0xc9) // cgroup
        .u64(4096) // data_page_size
        .u64(8192) // code_page_size
        .u64(8)
        .bytes(b"auxdata!") // aux
        .sample()
}

#[test]
fn every_field_in_kernel_order() {
    let rec = all_record();
    let a = all_attr();
    let d = decode(&rec, &a).expect("decodes");
    check_inside(&d);
    assert_eq!(d.header, Header { type_: PERF_RECORD_SAMPLE, misc: 1, size: rec.len() as u16 });
    assert_eq!(d.present(), ALL);
    assert!(d.sample_id().is_none());
    let Body::Sample(s) = d.body else { panic!("sample") };
    assert_eq!((s.identifier, s.ip, s.time, s.addr), (Some(0x1d), Some(0x1f), Some(0x71), Some(0xad)));
    assert_eq!(s.tid, Some(PidTid { pid: 42, tid: 43 }));
    assert_eq!((s.id, s.stream_id, s.period), (Some(0x1d), Some(0x5d), Some(0x9e)));
    assert_eq!(s.cpu, Some(CpuRes { cpu: 1, res: 0 }));
    let r = s.read.expect("read");
    assert_eq!((r.time_enabled, r.time_running), (Some(0xe0), Some(0xe1)));
    let ReadValues::Group(g) = r.values else { panic!("group") };
    assert_eq!(g.get(1), Some(ReadValue { value: 501, id: Some(0x1e), lost: Some(3) }));
    assert_eq!(s.callchain.expect("cc").iter().collect::<Vec<_>>(), vec![0xc0, 0xc1, 0xc2]);
    assert_eq!(s.raw, Some(&b"rawd"[..]));
    let b = s.branch_stack.expect("branch");
    assert_eq!((b.hw_idx, b.get(0)), (Some(0x77), Some(BranchEntry { from: 0xf0, to: 0x70, flags: 0x0f })));
    let u = s.regs_user.expect("regs_user");
    assert_eq!((u.get(0), u.get(2)), (Some(0xa0), Some(0xa2)));
    let st = s.stack_user.expect("stack");
    assert_eq!((st.data, st.dyn_size), (&b"stackdmp"[..], Some(8)));
    assert_eq!((s.weight, s.data_src, s.transaction), (Some(0x3e), Some(0xd5), Some(0x7a)));
    assert_eq!(s.regs_intr.expect("regs_intr").get(0), Some(0xb0));
    assert_eq!((s.phys_addr, s.cgroup), (Some(0x9a), Some(0xc9)));
    assert_eq!((s.data_page_size, s.code_page_size), (Some(4096), Some(8192)));
    assert_eq!(s.aux, Some(&b"auxdata!"[..]));
}

#[test]
fn every_truncation_of_every_kind_fails() {
    let a = all_attr();
    let records = [
        all_record(),
        Rb::new().words(&[7, 12]).pair(1, 2).words(&[3, 4, 5]).pair(6, 0).u64(8).finish(PERF_RECORD_LOST, 0),
        Rb::new()
            .words(&[1, 2, 3])
            .pair(1, 2)
            .words(&[3, 4, 5])
            .pair(6, 0)
            .u64(8)
            .finish(PERF_RECORD_THROTTLE, 0),
        Rb::new().u64(5).pair(1, 2).words(&[3, 4, 5]).pair(6, 0).u64(8).finish(PERF_RECORD_LOST_SAMPLES, 0),
    ];
    for rec in &records {
        assert!(decode(rec, &a).is_ok());
        for len in 0..rec.len() {
            let err = decode(&rec[..len], &a).expect_err("cut record");
            assert!(err.is_malformed(), "{err}");
            if len >= HEADER_SIZE {
                assert_eq!(err, DecodeError::BadSize { size: rec.len() as u16, len });
                // Patched header.size: the fields no longer fit.
                let mut cut = rec[..len].to_vec();
                cut[6..8].copy_from_slice(&(len as u16).to_ne_bytes());
                let err = decode(&cut, &a).expect_err("patched record");
                assert!(err.is_malformed() && err.to_string().len() > 5, "{err}");
            } else {
                assert_eq!(err, DecodeError::ShortHeader { len });
            }
        }
        // Longer buffers are fine: only header.size bytes are read.
        let mut longer = rec.clone();
        longer.extend_from_slice(&[0xee; 24]);
        assert_eq!(decode(&longer, &a).expect("longer").bytes, &rec[..]);
        // A grown header.size is trailing garbage.
        let mut grown = longer.clone();
        grown[6..8].copy_from_slice(&(rec.len() as u16 + 8).to_ne_bytes());
        assert_eq!(decode(&grown, &a), Err(DecodeError::Trailing { used: rec.len(), size: rec.len() + 8 }));
    }
}

// ---- other records ------------------------------------------------------

#[test]
fn lost_throttle_lost_samples() {
    let plain = DecodeAttr { sample_type: ALL, ..DecodeAttr::default() };
    let rec = Rb::new().u64(7).u64(12).finish(PERF_RECORD_LOST, 0);
    let d = decode(&rec, &plain).expect("lost");
    assert_eq!(d.body, Body::Lost(Lost { id: 7, lost: 12, sample_id: SampleId::default() }));
    assert_eq!(d.present(), 0);
    for (type_, unthrottle) in [(PERF_RECORD_THROTTLE, false), (PERF_RECORD_UNTHROTTLE, true)] {
        let rec = Rb::new().words(&[100, 7, 8]).finish(type_, 0);
        let t = Throttle { time: 100, id: 7, stream_id: 8, sample_id: SampleId::default() };
        let want = if unthrottle { Body::Unthrottle(t) } else { Body::Throttle(t) };
        assert_eq!(decode(&rec, &plain).expect("throttle").body, want);
    }
    let rec = Rb::new().u64(3).finish(PERF_RECORD_LOST_SAMPLES, 0);
    assert_eq!(
        decode(&rec, &plain).expect("lost samples").body,
        Body::LostSamples(LostSamples { lost: 3, sample_id: SampleId::default() })
    );
    // Without sample_id_all, anything after the fields is garbage.
    let rec = Rb::new().u64(7).u64(12).u64(0).finish(PERF_RECORD_LOST, 0);
    assert_eq!(decode(&rec, &plain), Err(DecodeError::Trailing { used: 24, size: 32 }));
}

#[test]
fn sample_id_trailer_order() {
    // All six: TID, TIME, ID, STREAM_ID, CPU, IDENTIFIER.
    let a = DecodeAttr { sample_type: ALL, sample_id_all: true, ..DecodeAttr::default() };
    let rec =
        Rb::new().words(&[7, 12]).pair(1, 2).words(&[3, 4, 5]).pair(6, 0).u64(8).finish(PERF_RECORD_LOST, 0);
    let d = decode(&rec, &a).expect("lost");
    let want = SampleId {
        present: SAMPLE_ID_BITS,
        tid: Some(PidTid { pid: 1, tid: 2 }),
        time: Some(3),
        id: Some(4),
        stream_id: Some(5),
        cpu: Some(CpuRes { cpu: 6, res: 0 }),
        identifier: Some(8),
    };
    assert_eq!(d.sample_id(), Some(&want));
    assert_eq!(d.present(), SAMPLE_ID_BITS);
    // Each alone.
    for bit in [
        PERF_SAMPLE_TID,
        PERF_SAMPLE_TIME,
        PERF_SAMPLE_ID,
        PERF_SAMPLE_STREAM_ID,
        PERF_SAMPLE_CPU,
        PERF_SAMPLE_IDENTIFIER,
    ] {
        let a = DecodeAttr { sample_type: bit | PERF_SAMPLE_RAW | PERF_SAMPLE_IP, sample_id_all: true, ..a };
        let rec = Rb::new().u64(3).u64(0x0102_0304_0506_0708).finish(PERF_RECORD_LOST_SAMPLES, 0);
        let d = decode(&rec, &a).expect("lost samples");
        let id = d.sample_id().expect("trailer");
        assert_eq!(id.present, bit);
        let some = [
            id.tid.is_some(),
            id.time.is_some(),
            id.id.is_some(),
            id.stream_id.is_some(),
            id.cpu.is_some(),
            id.identifier.is_some(),
        ];
        assert_eq!(some.iter().filter(|&&b| b).count(), 1);
        // Missing trailer.
        let short = Rb::new().u64(3).finish(PERF_RECORD_LOST_SAMPLES, 0);
        assert!(matches!(decode(&short, &a), Err(DecodeError::Truncated { offset: 16, .. })));
    }
    // sample_id_all with no id bits: nothing follows.
    let a = DecodeAttr { sample_type: PERF_SAMPLE_RAW, sample_id_all: true, ..DecodeAttr::default() };
    let rec = Rb::new().u64(7).u64(12).finish(PERF_RECORD_LOST, 0);
    assert_eq!(decode(&rec, &a).expect("lost").present(), 0);
}

// ---- malformed and unsupported -------------------------------------------

#[test]
fn header_errors() {
    let a = attr(PERF_SAMPLE_RAW);
    assert_eq!(decode(&[], &a), Err(DecodeError::ShortHeader { len: 0 }));
    assert_eq!(decode(&[9, 0, 0, 0, 0, 0, 8], &a), Err(DecodeError::ShortHeader { len: 7 }));
    for size in [0u16, 1, 7] {
        let mut rec = Rb::new().u32(0).u32(0).sample();
        rec[6..8].copy_from_slice(&size.to_ne_bytes());
        assert_eq!(decode(&rec, &a), Err(DecodeError::BadSize { size, len: 16 }));
    }
    let mut rec = Rb::new().u32(0).u32(0).sample();
    rec[6..8].copy_from_slice(&u16::MAX.to_ne_bytes());
    assert_eq!(decode(&rec, &a), Err(DecodeError::BadSize { size: u16::MAX, len: 16 }));
    assert_eq!(header(&rec[..7]), None);
}

#[test]
fn unsupported() {
    let rec = Rb::new().u64(0).finish(11, 0); // PERF_RECORD_AUX
    let err = decode(&rec, &attr(0)).expect_err("aux");
    assert_eq!(err, DecodeError::UnsupportedType { type_: 11 });
    assert!(!err.is_malformed());
    let rec = Rb::new().u64(0).sample();
    let err = decode(&rec, &attr(PERF_SAMPLE_IP | 1 << 25)).expect_err("bit 25");
    assert_eq!(err, DecodeError::UnsupportedLayout { sample_type: 1 << 25, read_format: 0 });
    assert!(!err.is_malformed());
    let a = DecodeAttr { sample_type: PERF_SAMPLE_READ, read_format: 1 << 5, ..DecodeAttr::default() };
    assert_eq!(decode(&rec, &a), Err(DecodeError::UnsupportedLayout { sample_type: 0, read_format: 1 << 5 }));
    // Unknown read_format bits do not matter without READ.
    let a = DecodeAttr { sample_type: PERF_SAMPLE_IP, read_format: 1 << 5, ..DecodeAttr::default() };
    assert_eq!(sample(&rec, &a).ip, Some(0));
    // Unknown sample_type bits do not matter for other records.
    let lost = Rb::new().u64(7).u64(12).finish(PERF_RECORD_LOST, 0);
    assert!(decode(&lost, &attr(1 << 40)).is_ok());
}

#[test]
fn arrays_must_be_aligned() {
    // A raw size the kernel never writes (not padded) puts the branch
    // entries off an 8-byte boundary.
    let a = attr(PERF_SAMPLE_RAW | PERF_SAMPLE_BRANCH_STACK);
    let rec = Rb::new().u32(5).bytes(&[1; 5]).u64(1).words(&[1, 2, 3]).bytes(&[0; 3]).sample();
    assert_eq!(decode(&rec, &a), Err(DecodeError::Misaligned { field: Field::BranchEntries, offset: 25 }));
    // Scalars after such a raw are still read.
    let a = attr(PERF_SAMPLE_RAW | PERF_SAMPLE_PHYS_ADDR);
    let rec = Rb::new().u32(5).bytes(&[1; 5]).u64(0x1234).sample();
    assert_eq!(sample(&rec, &a).phys_addr, Some(0x1234));
}

/// Deterministic pseudo-random mutations: decoding never panics, and what
/// it returns stays inside the record.
#[test]
fn mutations_never_panic() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let base = all_record();
    let attrs = [
        all_attr(),
        DecodeAttr { branch_sample_type: PERF_SAMPLE_BRANCH_COUNTERS, ..all_attr() },
        DecodeAttr { read_format: PERF_FORMAT_ID, ..all_attr() },
        attr(PERF_SAMPLE_RAW),
        attr(PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_STACK_USER | PERF_SAMPLE_AUX),
    ];
    let mut ok = 0;
    for round in 0..20_000 {
        let mut rec = base.clone();
        if round % 3 == 0 {
            rec.truncate((next() % (rec.len() as u64 + 1)) as usize);
        }
        for _ in 0..(next() % 4 + 1) {
            if rec.is_empty() {
                break;
            }
            let i = (next() % rec.len() as u64) as usize;
            rec[i] = match next() % 4 {
                0 => 0,
                1 => 0xff,
                _ => next() as u8,
            };
        }
        let a = &attrs[(next() % attrs.len() as u64) as usize];
        if let Ok(d) = decode(&rec, a) {
            ok += 1;
            check_inside(&d);
            assert!(d.bytes.len() <= rec.len());
        }
        // Random bytes too.
        let len = (next() % 80) as usize;
        let junk: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        let _ = decode(&junk, a);
    }
    assert!(ok > 0, "some mutations still decode");
}

/// A set's trailer: TID, TIME, CPU, IDENTIFIER.
fn set_attr() -> DecodeAttr {
    DecodeAttr {
        sample_type: PERF_SAMPLE_IDENTIFIER
            | PERF_SAMPLE_IP
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_CPU,
        sample_id_all: true,
        ..DecodeAttr::default()
    }
}

fn trailer(rb: Rb) -> Rb {
    rb.pair(10, 11).u64(999).pair(1, 0).u64(77)
}

#[test]
fn comm_with_exec_bit_and_padded_name() {
    let rec = trailer(Rb::new().pair(10, 11).bytes(b"marker\0\0"))
        .finish(PERF_RECORD_COMM, PERF_RECORD_MISC_COMM_EXEC);
    let r = decode(&rec, &set_attr()).expect("comm");
    let Body::Comm(c) = r.body else { panic!("{r:?}") };
    assert_eq!((c.pid, c.tid, c.comm, c.exec), (10, 11, &b"marker"[..], true));
    assert_eq!(c.sample_id.time, Some(999));
    assert_eq!(c.sample_id.identifier, Some(77));
    assert!(r.is_sideband());
    // No NUL before the trailer: malformed.
    let rec = trailer(Rb::new().pair(10, 11).bytes(b"12345678")).finish(PERF_RECORD_COMM, 0);
    assert_eq!(decode(&rec, &set_attr()), Err(DecodeError::Truncated { field: Field::Name, offset: 16 }));
}

#[test]
fn fork_exit_mmap2_switch() {
    let a = set_attr();
    let rec = trailer(Rb::new().pair(5, 4).pair(5, 3).u64(123)).finish(PERF_RECORD_FORK, 0);
    let Body::Fork(t) = decode(&rec, &a).unwrap().body else { panic!() };
    assert_eq!((t.pid, t.ppid, t.tid, t.ptid, t.time), (5, 4, 5, 3, 123));
    let rec = trailer(Rb::new().pair(5, 4).pair(5, 3).u64(124)).finish(PERF_RECORD_EXIT, 0);
    assert!(matches!(decode(&rec, &a).unwrap().body, Body::Exit(Task { time: 124, .. })));
    let rec = trailer(
        Rb::new()
            .pair(5, 6)
            .u64(0x1000)
            .u64(0x2000)
            .u64(0x3000)
            .pair(8, 1)
            .u64(42)
            .u64(0)
            .pair(1, 2)
            .bytes(b"/f\0\0\0\0\0\0"),
    )
    .finish(PERF_RECORD_MMAP2, PERF_RECORD_MISC_MMAP_DATA);
    let Body::Mmap2(m) = decode(&rec, &a).unwrap().body else { panic!() };
    assert_eq!(
        (m.addr, m.len, m.pgoff, m.prot, m.flags, m.filename, m.data),
        (0x1000, 0x2000, 0x3000, 1, 2, &b"/f"[..], true)
    );
    assert_eq!(m.file, Some(FileId::Inode { maj: 8, min: 1, ino: 42, ino_generation: 0 }));
    // A build id instead of device and inode.
    let mut id = [0u8; 24];
    id[0] = 3;
    id[4..7].copy_from_slice(b"abc");
    let rec =
        trailer(Rb::new().pair(5, 6).u64(1).u64(2).u64(3).bytes(&id).pair(1, 2).bytes(b"/f\0\0\0\0\0\0"))
            .finish(PERF_RECORD_MMAP2, PERF_RECORD_MISC_MMAP_BUILD_ID);
    let Body::Mmap2(m) = decode(&rec, &a).unwrap().body else { panic!() };
    assert_eq!(m.file, Some(FileId::BuildId(b"abc")));
    id[0] = 21;
    let rec =
        trailer(Rb::new().pair(5, 6).u64(1).u64(2).u64(3).bytes(&id).pair(1, 2).bytes(b"/f\0\0\0\0\0\0"))
            .finish(PERF_RECORD_MMAP2, PERF_RECORD_MISC_MMAP_BUILD_ID);
    assert!(decode(&rec, &a).unwrap_err().is_malformed());
    let rec = trailer(Rb::new().pair(9, 9)).finish(PERF_RECORD_SWITCH_CPU_WIDE, PERF_RECORD_MISC_SWITCH_OUT);
    let Body::SwitchCpuWide(s) = decode(&rec, &a).unwrap().body else { panic!() };
    assert_eq!((s.out, s.preempt, s.next_prev), (true, false, Some(PidTid { pid: 9, tid: 9 })));
    let rec = trailer(Rb::new()).finish(PERF_RECORD_SWITCH, 0);
    assert!(matches!(
        decode(&rec, &a).unwrap().body,
        Body::Switch(Switch { out: false, next_prev: None, .. })
    ));
}

#[test]
fn namespaces_ksymbol_bpf_cgroup() {
    let a = set_attr();
    let rec = trailer(Rb::new().pair(1, 1).u64(2).words(&[3, 4, 5, 6])).finish(PERF_RECORD_NAMESPACES, 0);
    let Body::Namespaces(n) = decode(&rec, &a).unwrap().body else { panic!() };
    assert_eq!((n.len(), n.get(1), n.get(2)), (2, Some((5, 6)), None));
    let rec = trailer(Rb::new().u64(0xffff).u32(16).u32(1).bytes(b"bpf_prog\0\0\0\0\0\0\0\0"))
        .finish(PERF_RECORD_KSYMBOL, 0);
    let Body::Ksymbol(k) = decode(&rec, &a).unwrap().body else { panic!() };
    assert_eq!((k.addr, k.len, k.ksym_type, k.flags, k.name), (0xffff, 16, 1, 0, &b"bpf_prog"[..]));
    let rec = trailer(Rb::new().u32(1).u32(33).bytes(b"tagtag12")).finish(PERF_RECORD_BPF_EVENT, 0);
    let Body::BpfEvent(b) = decode(&rec, &a).unwrap().body else { panic!() };
    assert_eq!((b.type_, b.id, &b.tag), (1, 33, b"tagtag12"));
    let rec = trailer(Rb::new().u64(8).bytes(b"/a\0\0\0\0\0\0")).finish(PERF_RECORD_CGROUP, 0);
    let Body::Cgroup(c) = decode(&rec, &a).unwrap().body else { panic!() };
    assert_eq!((c.id, c.path), (8, &b"/a"[..]));
    // Without sample_id_all the name runs to the end.
    let rec = Rb::new().u64(8).bytes(b"/a\0\0\0\0\0\0").finish(PERF_RECORD_CGROUP, 0);
    assert!(decode(&rec, &DecodeAttr::default()).is_ok());
}
