//! The seed corpus: meaningful inputs for each target, so the fuzzer starts
//! from well-formed rings and records and from each corrupt state instead of
//! finding them by chance. `cargo run --bin gen-corpus` writes them to
//! `corpus/`; a test checks the checked-in files are exactly these.

use crate::decode::{DecodeInput, flag};
use crate::ring::{Head, PAGE, RingInput, TailBase};
use perfbuf::decode::*;

/// A seed: file name and bytes.
pub type Seed = (String, Vec<u8>);

const MMAP: u32 = 1;

fn header(type_: u32, misc: u16, size: usize) -> Vec<u8> {
    let mut v = type_.to_ne_bytes().to_vec();
    v.extend_from_slice(&misc.to_ne_bytes());
    v.extend_from_slice(&u16::try_from(size).expect("record fits").to_ne_bytes());
    v
}

/// A record: header with `size = 8 + body.len()`, then `body`.
fn rec(type_: u32, body: &[u8]) -> Vec<u8> {
    let mut v = header(type_, 0, 8 + body.len());
    v.extend_from_slice(body);
    v
}

fn words(ws: &[u64]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// A `bpf_perf_event_output` sample of `n` bytes as the kernel writes it:
/// the u32 raw size counts the padding to 8 bytes.
fn sample(n: usize, fill: u8) -> Vec<u8> {
    let size = (8 + 4 + n).next_multiple_of(8);
    let mut v = header(PERF_RECORD_SAMPLE, 0, size);
    v.extend_from_slice(&u32::try_from(size - 12).expect("fits").to_ne_bytes());
    v.resize(size, fill);
    v
}

fn lost(count: u64) -> Vec<u8> {
    rec(PERF_RECORD_LOST, &words(&[7, count]))
}

/// A header claiming `size`, with no body.
fn claiming(size: u16) -> Vec<u8> {
    header(PERF_RECORD_SAMPLE, 0, size.into())
}

/// A few samples, a LOST and a THROTTLE record (both go to `on_record`).
fn mixed() -> Vec<u8> {
    [sample(4, 1), sample(20, 2), lost(5), sample(100, 3), rec(PERF_RECORD_THROTTLE, &words(&[1, 2, 3]))]
        .concat()
}

fn ring(name: &str, input: RingInput<'_>) -> Seed {
    (format!("ring-{name}"), input.encode())
}

fn len16(data: &[u8]) -> u16 {
    u16::try_from(data.len()).expect("seed data fits")
}

/// The ring target's seeds.
pub fn ring_seeds() -> Vec<Seed> {
    let good = mixed();
    let n = len16(&good);
    let base = RingInput {
        pages: 1,
        tail_base: TailBase::Zero,
        tail_offset: 0,
        head: Head::Ahead(n),
        data_at_head: false,
        stop_at: 0,
        stop_value: 0,
        back: 0,
        data: &good,
    };
    let page = PAGE as u16;
    let full = sample(PAGE - 12, 5);
    // 512 header-only records fill one page.
    let tiny: Vec<u8> = (0..PAGE / 8).flat_map(|_| rec(MMAP, &[])).collect();
    let corrupt = |bad: Vec<u8>| [sample(4, 9), bad, sample(4, 9)].concat();
    let zero = corrupt(claiming(0));
    let short = corrupt(claiming(4));
    let odd = corrupt(claiming(20));
    let beyond_head = corrupt(claiming(200));
    let beyond_ring = corrupt(claiming(0xfff8));
    let wrap_then_bad = [sample(20, 1), claiming(12)].concat();
    let backward_full: Vec<u8> = (0..PAGE / 64).flat_map(|i| sample(52, i as u8)).collect();
    let mut seeds = vec![
        ring("empty", RingInput { head: Head::Ahead(0), data: &[], ..base }),
        ring("good", base),
        ring("good-stop1-done", RingInput { stop_at: 1, ..base }),
        ring("good-stop2-error", RingInput { stop_at: 2, stop_value: -1, ..base }),
        ring("good-stop3-positive", RingInput { stop_at: 3, stop_value: 7, ..base }),
        ring("record-ends-at-ring-end", RingInput { tail_offset: page - 16, ..base }),
        ring("wrap-record", RingInput { tail_offset: page - 24, ..base }),
        ring("wrap-body-only", RingInput { tail_offset: page - 8, ..base }),
        ring("wrap-2-pages", RingInput { pages: 2, tail_offset: 2 * page - 40, ..base }),
        ring("wrap-4-pages", RingInput { pages: 4, tail_offset: 4 * page - 40, stop_at: 2, ..base }),
        ring("u64-wrap", RingInput { tail_base: TailBase::NearWrap, tail_offset: page - 24, ..base }),
        ring(
            "u64-wrap-raw",
            RingInput { tail_base: TailBase::Raw(u64::MAX - 15), head: Head::Raw(u64::from(n) - 16), ..base },
        ),
        ring("high-counters", RingInput { tail_base: TailBase::High, tail_offset: 808, ..base }),
        ring("full-ring-record", RingInput { tail_offset: 8, head: Head::Ahead(page), data: &full, ..base }),
        ring("exactly-one-ring-ahead", RingInput { tail_offset: 8, head: Head::Far(0), data: &full, ..base }),
        ring(
            "512-tiny-records",
            RingInput { tail_offset: 64, head: Head::Far(0), stop_at: 200, data: &tiny, ..base },
        ),
        // The README's inconsistent states.
        ring("tail-misaligned", RingInput { tail_offset: 3, ..base }),
        ring("tail-inside-record", RingInput { back: 1, head: Head::Ahead(n - 8), ..base }),
        ring("head-behind-tail", RingInput { tail_offset: 256, head: Head::Behind(64), ..base }),
        ring("head-far-beyond", RingInput { head: Head::Far(1000), ..base }),
        ring("head-raw-far", RingInput { head: Head::Raw(1 << 40), ..base }),
        ring("head-unaligned", RingInput { head: Head::Ahead(n + 4), ..base }),
        ring("size-zero", RingInput { head: Head::Ahead(len16(&zero)), data: &zero, ..base }),
        ring("size-below-header", RingInput { head: Head::Ahead(len16(&short)), data: &short, ..base }),
        ring("size-misaligned", RingInput { head: Head::Ahead(len16(&odd)), data: &odd, ..base }),
        ring(
            "size-beyond-head",
            RingInput { head: Head::Ahead(len16(&beyond_head)), data: &beyond_head, ..base },
        ),
        ring(
            "size-beyond-ring",
            RingInput { head: Head::Ahead(len16(&beyond_ring)), data: &beyond_ring, ..base },
        ),
        ring(
            "wrap-then-bad",
            RingInput { tail_offset: page - 16, head: Head::Ahead(40), data: &wrap_then_bad, ..base },
        ),
        ring(
            "size-zero-stop1",
            RingInput { head: Head::Ahead(len16(&zero)), data: &zero, stop_at: 1, ..base },
        ),
        // Backward (overwritable) rings: records from the head up.
        ring("backward", RingInput { tail_offset: 512, head: Head::Behind(n), data_at_head: true, ..base }),
        ring(
            "backward-wrap",
            RingInput { tail_offset: 64, head: Head::Behind(n), data_at_head: true, ..base },
        ),
        ring(
            "backward-overwritten",
            RingInput { head: Head::Behind(page + 104), data_at_head: true, data: &backward_full, ..base },
        ),
        ring(
            "backward-cut",
            RingInput { tail_offset: 512, head: Head::Behind(n - 8), data_at_head: true, ..base },
        ),
    ];
    // 3 data pages: not a power of two, refused.
    seeds.push(ring("3-pages-refused", RingInput { pages: 3, ..base }));
    seeds
}

fn dec(name: &str, attr: DecodeAttr, record: &[u8]) -> Seed {
    dec_with(name, DecodeInput { attr, record, ..DecodeInput::default() })
}

fn dec_with(name: &str, input: DecodeInput<'_>) -> Seed {
    (format!("decode-{name}"), input.encode())
}

fn attr(sample_type: u64) -> DecodeAttr {
    DecodeAttr { sample_type, ..DecodeAttr::default() }
}

/// RAW: u32 size, then `n` bytes (the kernel pads `4 + n` to 8).
fn raw(n: u32) -> Vec<u8> {
    let mut v = n.to_ne_bytes().to_vec();
    v.resize(4 + n as usize, 0xab);
    v
}

fn pair(a: u32, b: u32) -> u64 {
    u64::from_ne_bytes([a.to_ne_bytes(), b.to_ne_bytes()].concat().try_into().expect("8 bytes"))
}

fn sample_rec(body: &[u8]) -> Vec<u8> {
    rec(PERF_RECORD_SAMPLE, body)
}

/// A side-band record of `parts` and a set's trailer (TID, TIME, CPU,
/// IDENTIFIER).
fn sb(type_: u32, misc: u16, parts: &[Vec<u8>]) -> Vec<u8> {
    let body = [parts.concat(), words(&[pair(5, 5), 1_000_000, pair(1, 0), 77])].concat();
    let mut v = header(type_, misc, 8 + body.len());
    v.extend_from_slice(&body);
    v
}

/// MMAP2's build id area: size, 3 reserved bytes, 20 bytes of id.
fn build_id(size: u8) -> Vec<u8> {
    let mut v = vec![size, 0, 0, 0];
    v.extend((0..20).map(|i| 0xb0 + i as u8));
    v
}

/// The decode target's seeds.
pub fn decode_seeds() -> Vec<Seed> {
    let set = DecodeAttr {
        sample_type: PERF_SAMPLE_IDENTIFIER
            | PERF_SAMPLE_IP
            | PERF_SAMPLE_TID
            | PERF_SAMPLE_TIME
            | PERF_SAMPLE_CPU,
        sample_id_all: true,
        ..DecodeAttr::default()
    };
    let ids = PERF_SAMPLE_IDENTIFIER
        | PERF_SAMPLE_IP
        | PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_ADDR
        | PERF_SAMPLE_ID
        | PERF_SAMPLE_STREAM_ID
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_PERIOD;
    let ids_body =
        words(&[77, 0xffff_ffff_8100_0000, pair(10, 11), 1_000_000, 0x7000, 77, 78, pair(1, 0), 4000]);
    let trailer_bits = PERF_SAMPLE_TID
        | PERF_SAMPLE_TIME
        | PERF_SAMPLE_ID
        | PERF_SAMPLE_STREAM_ID
        | PERF_SAMPLE_CPU
        | PERF_SAMPLE_IDENTIFIER;
    let with_ids = DecodeAttr {
        sample_type: trailer_bits | PERF_SAMPLE_RAW,
        sample_id_all: true,
        ..DecodeAttr::default()
    };
    let trailer = words(&[pair(10, 11), 1_000_000, 77, 78, pair(1, 0), 77]);
    let everything = DecodeAttr {
        sample_type: KNOWN_SAMPLE_TYPE & !PERF_SAMPLE_WEIGHT,
        read_format: PERF_FORMAT_GROUP | PERF_FORMAT_ID,
        branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX | PERF_SAMPLE_BRANCH_COUNTERS,
        sample_regs_user: 0b101,
        sample_regs_intr: 0b1,
        sample_id_all: true,
    };
    let all_body = [
        words(&[77, 0x4000, pair(10, 11), 5, 0x7000, 77, 78, pair(1, 0), 4000]),
        words(&[1, 900, 77]),                       // READ group: nr, value, id
        words(&[2, 0x10, 0x20]),                    // CALLCHAIN
        raw(4),                                     // RAW
        words(&[1, 3, 0xa, 0xb, 0xc, 9]),           // BRANCH_STACK: nr, hw_idx, entry, counter
        words(&[2, 0x51, 0x52]),                    // REGS_USER
        words(&[8, 0x5757, 8]),                     // STACK_USER
        words(&[0x0003_0002_0000_0001, 0x42, 0x1]), // WEIGHT_STRUCT, DATA_SRC, TRANSACTION
        words(&[2, 0x61]),                          // REGS_INTR
        words(&[0x1000, 0x99, 4096, 4096]),         // PHYS_ADDR, CGROUP, page sizes
        words(&[8, 0xaa]),                          // AUX
    ]
    .concat();
    vec![
        dec("raw-only", attr(PERF_SAMPLE_RAW), &sample_rec(&raw(12))),
        dec("ids", attr(ids), &sample_rec(&ids_body)),
        dec(
            "callchain-raw",
            attr(PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW),
            &sample_rec(&[words(&[3, 1, 2, 3]), raw(4)].concat()),
        ),
        dec(
            "read-single-every-format",
            DecodeAttr { read_format: 0x17, ..attr(PERF_SAMPLE_READ) },
            &sample_rec(&words(&[100, 10, 9, 5, 0])),
        ),
        dec(
            "read-group-every-format",
            DecodeAttr { read_format: 0x1f, ..attr(PERF_SAMPLE_READ) },
            &sample_rec(&words(&[2, 10, 9, 100, 1, 0, 200, 2, 3])),
        ),
        dec(
            "branch-hw-idx-counters",
            DecodeAttr {
                branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX | PERF_SAMPLE_BRANCH_COUNTERS,
                ..attr(PERF_SAMPLE_BRANCH_STACK)
            },
            &sample_rec(&words(&[1, 5, 0x10, 0x20, 0x3, 4])),
        ),
        dec(
            "branch-bare-nr0",
            DecodeAttr { branch_sample_type: PERF_SAMPLE_BRANCH_HW_INDEX, ..attr(PERF_SAMPLE_BRANCH_STACK) },
            &sample_rec(&words(&[0])),
        ),
        dec("branch-plain", attr(PERF_SAMPLE_BRANCH_STACK), &sample_rec(&words(&[2, 1, 2, 3, 4, 5, 6]))),
        dec(
            "regs-user-stack-user",
            DecodeAttr { sample_regs_user: 0b1011, ..attr(PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER) },
            &sample_rec(&words(&[2, 1, 2, 3, 16, 0xaa, 0xbb, 8])),
        ),
        dec(
            "regs-abi-none-stack-empty",
            DecodeAttr { sample_regs_user: 0b1011, ..attr(PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER) },
            &sample_rec(&words(&[0, 0])),
        ),
        dec(
            "weight-datasrc-transaction",
            attr(PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_TRANSACTION),
            &sample_rec(&words(&[300, 0x42, 0x1])),
        ),
        dec("all-fields", everything, &sample_rec(&all_body)),
        dec(
            "lost-sample-id-all",
            with_ids,
            &rec(PERF_RECORD_LOST, &[words(&[7, 3]), trailer.clone()].concat()),
        ),
        dec(
            "throttle-sample-id-all",
            with_ids,
            &rec(PERF_RECORD_THROTTLE, &[words(&[1, 2, 3]), trailer.clone()].concat()),
        ),
        dec("unthrottle", attr(PERF_SAMPLE_RAW), &rec(PERF_RECORD_UNTHROTTLE, &words(&[1, 2, 3]))),
        dec(
            "lost-samples-sample-id-all",
            with_ids,
            &rec(PERF_RECORD_LOST_SAMPLES, &[words(&[9]), trailer].concat()),
        ),
        // Side-band records, with a set's trailer (names padded to 8).
        dec(
            "comm-exec",
            set,
            &sb(
                PERF_RECORD_COMM,
                PERF_RECORD_MISC_COMM_EXEC,
                &[words(&[pair(5, 5)]), b"marker\0\0".to_vec()],
            ),
        ),
        dec("fork", set, &sb(PERF_RECORD_FORK, 0, &[words(&[pair(5, 4), pair(5, 4), 123])])),
        dec("exit", set, &sb(PERF_RECORD_EXIT, 0, &[words(&[pair(5, 4), pair(5, 4), 124])])),
        dec("mmap", set, &sb(MMAP, 0, &[words(&[pair(5, 5), 0x1000, 0x2000, 0]), b"/bin/sh\0".to_vec()])),
        dec(
            "mmap2-inode-data",
            set,
            &sb(
                PERF_RECORD_MMAP2,
                PERF_RECORD_MISC_MMAP_DATA,
                &[
                    words(&[pair(5, 5), 0x1000, 0x2000, 0x1000, pair(8, 1), 42, 0, pair(1, 2)]),
                    b"/tmp/f\0\0".to_vec(),
                ],
            ),
        ),
        dec(
            "mmap2-build-id",
            set,
            &sb(
                PERF_RECORD_MMAP2,
                PERF_RECORD_MISC_MMAP_BUILD_ID,
                &[
                    words(&[pair(5, 5), 0x1000, 0x2000, 0]),
                    build_id(20),
                    words(&[pair(5, 2)]),
                    b"/lib/x.so\0\0\0\0\0\0\0".to_vec(),
                ],
            ),
        ),
        dec(
            "mmap2-build-id-too-long",
            set,
            &sb(
                PERF_RECORD_MMAP2,
                PERF_RECORD_MISC_MMAP_BUILD_ID,
                &[
                    words(&[pair(5, 5), 0x1000, 0x2000, 0]),
                    build_id(21),
                    words(&[pair(5, 2)]),
                    b"/x\0\0\0\0\0\0".to_vec(),
                ],
            ),
        ),
        dec(
            "switch-out-preempt",
            set,
            &sb(PERF_RECORD_SWITCH, PERF_RECORD_MISC_SWITCH_OUT | PERF_RECORD_MISC_SWITCH_OUT_PREEMPT, &[]),
        ),
        dec("switch-cpu-wide", set, &sb(PERF_RECORD_SWITCH_CPU_WIDE, 0, &[words(&[pair(6, 7)])])),
        dec(
            "namespaces",
            set,
            &sb(PERF_RECORD_NAMESPACES, 0, &[words(&[pair(5, 5), 2, 4, 0xf0001, 4, 0xf0002])]),
        ),
        dec(
            "namespaces-huge-nr",
            set,
            &sb(PERF_RECORD_NAMESPACES, 0, &[words(&[pair(5, 5), u64::MAX / 2 + 1])]),
        ),
        dec(
            "ksymbol",
            set,
            &sb(
                PERF_RECORD_KSYMBOL,
                0,
                &[words(&[0xffff_ffff_a000_0000, pair(64, 1)]), b"bpf_prog_x\0\0\0\0\0\0".to_vec()],
            ),
        ),
        dec("bpf-event", set, &sb(PERF_RECORD_BPF_EVENT, 0, &[words(&[pair(1, 33)]), b"tagtag12".to_vec()])),
        dec("cgroup", set, &sb(PERF_RECORD_CGROUP, 0, &[words(&[99]), b"/a/b\0\0\0\0".to_vec()])),
        dec(
            "cgroup-no-trailer",
            attr(0),
            &rec(PERF_RECORD_CGROUP, &[words(&[99]), b"/a\0\0\0\0\0\0".to_vec()].concat()),
        ),
        dec("comm-without-nul", set, &sb(PERF_RECORD_COMM, 0, &[words(&[pair(5, 5)]), b"12345678".to_vec()])),
        dec("comm-name-into-trailer", set, &rec(PERF_RECORD_COMM, &words(&[pair(5, 5), 0]))),
        // Errors.
        dec("unsupported-type", attr(PERF_SAMPLE_RAW), &rec(11, &words(&[1, 2]))), // PERF_RECORD_AUX
        dec("unknown-sample-type-bit", attr(1 << 30), &sample_rec(&words(&[1]))),
        dec("trailing", attr(PERF_SAMPLE_IP), &sample_rec(&words(&[1, 2]))),
        dec("short-body", attr(ids), &sample_rec(&words(&[77, 1]))),
        dec("size-below-header", attr(PERF_SAMPLE_IP), &header(PERF_RECORD_SAMPLE, 0, 4)),
        dec(
            "misaligned-array",
            attr(PERF_SAMPLE_RAW | PERF_SAMPLE_BRANCH_STACK),
            &sample_rec(&[raw(8), words(&[1, 1, 2, 3])].concat()),
        ),
        dec("count-overflow", attr(PERF_SAMPLE_CALLCHAIN), &sample_rec(&words(&[u64::MAX / 4, 1]))),
        dec("stack-dyn-size-beyond", attr(PERF_SAMPLE_STACK_USER), &sample_rec(&words(&[8, 0, 16]))),
        // The C entry points' argument rules.
        dec_with(
            "c-rec-len-cut",
            DecodeInput {
                attr: attr(ids),
                flags: flag::CUT,
                adjust: 8,
                record: &sample_rec(&ids_body),
                ..DecodeInput::default()
            },
        ),
        dec_with(
            "c-rec-len-beyond",
            DecodeInput {
                attr: attr(PERF_SAMPLE_RAW),
                flags: flag::EXTEND,
                adjust: 64,
                record: &sample_rec(&raw(12)),
                ..DecodeInput::default()
            },
        ),
        dec_with(
            "c-misaligned-record",
            DecodeInput {
                attr: attr(PERF_SAMPLE_RAW),
                flags: flag::MISALIGNED,
                record: &sample_rec(&raw(12)),
                ..DecodeInput::default()
            },
        ),
        dec_with(
            "c-attr-sz-16",
            DecodeInput {
                attr: attr(PERF_SAMPLE_IP),
                flags: flag::ATTR_SZ,
                attr_sz: 16,
                record: &sample_rec(&words(&[1])),
                ..DecodeInput::default()
            },
        ),
        dec_with(
            "c-attr-longer-with-garbage",
            DecodeInput {
                attr: attr(PERF_SAMPLE_IP),
                flags: flag::ATTR_SZ | flag::ATTR_GARBAGE,
                attr_sz: 72,
                record: &sample_rec(&words(&[1])),
                ..DecodeInput::default()
            },
        ),
        dec_with(
            "c-out-sz-24",
            DecodeInput {
                attr: attr(ids),
                flags: flag::OUT_SZ,
                out_sz: 24,
                record: &sample_rec(&ids_body),
                ..DecodeInput::default()
            },
        ),
        dec_with(
            "c-event-attr-ver0",
            DecodeInput {
                attr: everything,
                flags: flag::EVENT_ATTR_SIZE,
                attr_sz: 64,
                record: &sample_rec(&all_body),
                ..DecodeInput::default()
            },
        ),
        dec_with(
            "c-null-pointers",
            DecodeInput {
                attr: attr(PERF_SAMPLE_RAW),
                flags: flag::NULLS,
                record: &sample_rec(&raw(12)),
                ..DecodeInput::default()
            },
        ),
        dec_with(
            "c-event-attr-size-63",
            DecodeInput {
                attr: attr(PERF_SAMPLE_IP),
                flags: flag::EVENT_ATTR_SIZE,
                attr_sz: 63,
                record: &sample_rec(&words(&[1])),
                ..DecodeInput::default()
            },
        ),
    ]
}

/// Format files of a real kernel (the library's test fixtures).
const FORMATS: [(&str, &str); 8] = [
    ("sched_process_exec", include_str!("../../tests/fixtures/tracepoint/sched_sched_process_exec.format")),
    ("sched_switch", include_str!("../../tests/fixtures/tracepoint/sched_sched_switch.format")),
    ("sys_enter_openat", include_str!("../../tests/fixtures/tracepoint/syscalls_sys_enter_openat.format")),
    ("irq_handler_entry", include_str!("../../tests/fixtures/tracepoint/irq_irq_handler_entry.format")),
    ("ipi_send_cpumask", include_str!("../../tests/fixtures/tracepoint/ipi_ipi_send_cpumask.format")),
    ("ftrace_print", include_str!("../../tests/fixtures/tracepoint/ftrace_print.format")),
    ("ext4_fc_stats", include_str!("../../tests/fixtures/tracepoint/ext4_ext4_fc_stats.format")),
    ("foo_rel_loc", include_str!("../../tests/fixtures/tracepoint/synthetic_foo_rel_loc.format")),
];

/// A raw record the kernel wrote for sched_process_exec (filename
/// "/usr/bin/true", pid and old_pid 31925), from the fixtures.
const EXEC_RECORD: &str = "6d010000b57c000014000e00b57c0000b57c00002f7573722f62696e2f74727565000000";

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

/// Seeds of the tracepoint target: each real format with an all-zero
/// record and an all-ones one; a real exec record whole, cut, and with its
/// `__data_loc` word pointing past the end; malformed format files.
pub fn tracepoint_seeds() -> Vec<Seed> {
    use crate::tracepoint::join;
    let mut seeds = Vec::new();
    for (name, text) in FORMATS {
        seeds.push((format!("tp-{name}-zeros"), join(text, &[0; 64])));
        seeds.push((format!("tp-{name}-ones"), join(text, &[0xff; 96])));
    }
    let exec_format = FORMATS[0].1;
    let exec = hex(EXEC_RECORD);
    seeds.push(("tp-exec-record".into(), join(exec_format, &exec)));
    seeds.push(("tp-exec-record-cut".into(), join(exec_format, &exec[..22])));
    let mut far = exec.clone();
    far[8..12].copy_from_slice(&((0xffu32 << 16) | 0x40).to_ne_bytes());
    seeds.push(("tp-exec-data-loc-beyond".into(), join(exec_format, &far)));
    seeds.push(("tp-no-record".into(), exec_format.as_bytes().to_vec()));
    let broken = exec_format.replace("offset:8;", "offset:18446744073709551615;");
    seeds.push(("tp-offset-overflow".into(), join(&broken, &exec)));
    let no_id = exec_format.replace("ID:", "XX:");
    seeds.push(("tp-missing-id".into(), join(&no_id, &exec)));
    seeds.push(("tp-empty".into(), Vec::new()));
    seeds
}

/// A BPF ring buffer record as the kernel lays it out: `len` with the
/// header bits, the kernel's page offset (0 here), the body, padding.
fn rb_record(len: u32, bits: u32, fill: u8) -> Vec<u8> {
    let mut v = (len | bits).to_ne_bytes().to_vec();
    v.extend_from_slice(&[0; 4]);
    v.resize(8 + len as usize, fill);
    v.resize((8 + len as usize).next_multiple_of(8), 0);
    v
}

/// A ring buffer input: size `64 << size_log`, consumer at `cons`,
/// producer `delta` bytes ahead (or `raw_prod`), limit, stop, data.
fn rb(
    name: &str,
    size_log: u8,
    cons: u64,
    prod: Result<u16, u64>,
    limit: u8,
    stop: (u8, i8),
    data: &[u8],
) -> Seed {
    let (mode, delta, raw) = match prod {
        Ok(d) => (0u8, d, 0u64),
        Err(r) => (8, 0, r),
    };
    let mut v = vec![size_log & 7 | mode];
    v.extend_from_slice(&delta.to_le_bytes());
    v.extend_from_slice(&[limit, stop.0, stop.1 as u8, 0, 0]);
    v.extend_from_slice(&cons.to_le_bytes());
    v.extend_from_slice(&raw.to_le_bytes());
    v.extend_from_slice(data);
    (format!("ringbuf-{name}"), v)
}

/// The BPF ring buffer target's seeds.
pub fn ringbuf_seeds() -> Vec<Seed> {
    use perfbuf::internals::ringbuf::{BUSY_BIT, DISCARD_BIT};
    let three = [rb_record(5, 0, 1), rb_record(16, DISCARD_BIT, 2), rb_record(30, 0, 3)].concat();
    let n = three.len() as u16;
    let many: Vec<u8> =
        (0..40).flat_map(|i| rb_record(i % 13, if i % 7 == 3 { DISCARD_BIT } else { 0 }, i as u8)).collect();
    let busy = [rb_record(8, 0, 1), rb_record(8, BUSY_BIT, 2), rb_record(8, 0, 3)].concat();
    let whole = rb_record(64 * 4 - 8, 0, 9);
    vec![
        rb("empty", 0, 0, Ok(0), 255, (0, 0), &[]),
        rb("three", 1, 0, Ok(n), 255, (0, 0), &three),
        rb("three-wrapping", 1, 128 - 16, Ok(n), 255, (0, 0), &three),
        rb("three-near-u64-wrap", 1, u64::MAX - 15, Ok(n), 255, (0, 0), &three),
        rb("many-limit-5", 4, 1000, Ok(many.len() as u16), 5, (0, 0), &many),
        rb("many-stop-3", 4, 8, Ok(many.len() as u16), 255, (3, -7), &many),
        rb("many-limit-0", 4, 0, Ok(many.len() as u16), 0, (0, 0), &many),
        rb("busy", 1, 40, Ok(busy.len() as u16), 255, (0, 0), &busy),
        rb("whole-ring", 2, 200, Ok(whole.len() as u16), 255, (0, 0), &whole),
        rb("length-beyond-producer", 1, 0, Ok(n - 8), 255, (0, 0), &three),
        rb("misaligned-consumer", 1, 3, Ok(n), 255, (0, 0), &three),
        rb("producer-behind", 1, 4096, Err(4000), 255, (0, 0), &three),
        rb("producer-far-ahead", 1, 0, Err(1 << 20), 255, (0, 0), &three),
        rb("misaligned-producer", 1, 0, Ok(n + 4), 255, (0, 0), &three),
        rb("huge-length", 1, 0, Ok(64), 255, (0, 0), &rb_record(0, 0x3fff_fff0, 0)[..8]),
    ]
}

/// Every seed of `target` ("ring", "ringbuf", "decode" or "tracepoint").
pub fn for_target(target: &str) -> Vec<Seed> {
    match target {
        "ring" => ring_seeds(),
        "ringbuf" => ringbuf_seeds(),
        "decode" => decode_seeds(),
        "tracepoint" => tracepoint_seeds(),
        _ => panic!("unknown target {target}"),
    }
}

/// The fuzz targets.
pub const TARGETS: [&str; 4] = ["ring", "ringbuf", "decode", "tracepoint"];
