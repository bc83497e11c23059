//! Parsing of format files copied from the real kernel (see
//! `tests/fixtures/tracepoint/README.md`).

mod tracepoint_common;

use perfbuf::tracepoint::{FieldKind, Format};
use tracepoint_common::*;

fn parse(text: &str) -> Format {
    Format::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

fn kind<'a>(f: &'a Format, name: &str) -> &'a FieldKind {
    f.field(name).unwrap_or_else(|| panic!("no field {name}")).kind()
}

#[test]
fn all_fixtures_parse_with_standard_common_fields() {
    for (label, text) in ALL {
        let f = Format::parse(text).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert_eq!(f.name(), *label);
        let common: Vec<_> = f
            .common_fields()
            .iter()
            .map(|c| (c.name(), c.c_type(), c.offset(), c.size(), c.is_signed()))
            .collect();
        assert_eq!(
            common,
            [
                ("common_type", "unsigned short", 0, 2, false),
                ("common_flags", "unsigned char", 2, 1, false),
                ("common_preempt_count", "unsigned char", 3, 1, false),
                ("common_pid", "int", 4, 4, true),
            ],
            "{label}"
        );
        assert!(f.common_fields().iter().all(|c| c.is_common()));
        assert!(f.event_fields().iter().all(|c| !c.is_common()));
        assert!(!f.event_fields().is_empty(), "{label}");
        assert!(f.print_fmt().starts_with('"'), "{label}");
        assert!(!f.print_fmt().ends_with('\n'), "{label}");
        // Real layouts never overlap: each field ends before the next starts.
        for pair in f.fields().windows(2) {
            assert!(
                pair[0].offset() + pair[0].size() <= pair[1].offset(),
                "{label}: {} overlaps {}",
                pair[0].name(),
                pair[1].name()
            );
        }
        assert_eq!(f.values(&[]).len(), f.fields().len());
    }
}

#[test]
fn sched_process_exec_layout() {
    let f = parse(SCHED_PROCESS_EXEC);
    assert_eq!(f.id(), 365);
    assert_eq!(f.fields().len(), 7);
    assert_eq!(f.event_fields().len(), 3);
    let filename = f.field("filename").unwrap();
    assert_eq!(filename.c_type(), "__data_loc char[]");
    assert_eq!((filename.offset(), filename.size()), (8, 4));
    assert!(!filename.is_signed());
    assert!(filename.is_string());
    assert_eq!(filename.kind(), &FieldKind::DataLoc { elem_type: "char".into() });
    let pid = f.field("pid").unwrap();
    assert_eq!((pid.c_type(), pid.offset(), pid.size()), ("pid_t", 12, 4));
    assert!(pid.is_signed());
    assert_eq!(pid.kind(), &FieldKind::Scalar);
    assert_eq!(kind(&f, "old_pid"), &FieldKind::Scalar);
    assert_eq!(f.fixed_size(), 20);
    assert_eq!(
        f.print_fmt(),
        "\"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid"
    );
    assert!(f.field("nope").is_none());
}

#[test]
fn sched_switch_layout() {
    let f = parse(SCHED_SWITCH);
    assert_eq!(f.id(), 372);
    let names: Vec<_> = f.event_fields().iter().map(|x| x.name()).collect();
    assert_eq!(
        names,
        ["prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio"]
    );
    let comm = f.field("prev_comm").unwrap();
    assert_eq!(comm.c_type(), "char");
    assert_eq!(comm.kind(), &FieldKind::CharArray { len: 16 });
    assert_eq!(comm.elem_size(), Some(1));
    assert!(comm.is_string());
    let state = f.field("prev_state").unwrap();
    assert_eq!((state.c_type(), state.size(), state.is_signed()), ("long", 8, true));
    assert_eq!(f.fixed_size(), 64);
}

#[test]
fn sys_enter_openat_syscall_args_are_unsigned_long_sized() {
    let f = parse(SYS_ENTER_OPENAT);
    let nr = f.field("__syscall_nr").unwrap();
    assert_eq!((nr.offset(), nr.size(), nr.is_signed()), (8, 4, true));
    // Declared `int` but stored as an 8-byte unsigned long.
    let dfd = f.field("dfd").unwrap();
    assert_eq!((dfd.c_type(), dfd.offset(), dfd.size()), ("int", 16, 8));
    assert!(!dfd.is_signed());
    let filename = f.field("filename").unwrap();
    assert_eq!(filename.c_type(), "const char *");
    assert_eq!(filename.kind(), &FieldKind::Pointer);
    assert!(!filename.is_string());
    assert_eq!(kind(&f, "mode"), &FieldKind::Scalar);
}

#[test]
fn irq_handler_entry_layout() {
    let f = parse(IRQ_HANDLER_ENTRY);
    assert_eq!(f.id(), 225);
    let name = f.field("name").unwrap();
    assert_eq!((name.offset(), name.size()), (12, 4));
    assert!(name.is_string());
    assert_eq!(kind(&f, "irq"), &FieldKind::Scalar);
}

#[test]
fn inet_sock_set_state_byte_arrays() {
    let f = parse(INET_SOCK_SET_STATE);
    assert_eq!(kind(&f, "skaddr"), &FieldKind::Pointer);
    assert_eq!(f.field("skaddr").unwrap().c_type(), "const void *");
    assert_eq!(kind(&f, "saddr"), &FieldKind::FixedArray { elem_type: "__u8".into(), elem_size: 1, len: 4 });
    assert_eq!(
        kind(&f, "daddr_v6"),
        &FieldKind::FixedArray { elem_type: "__u8".into(), elem_size: 1, len: 16 }
    );
    assert!(!f.field("saddr").unwrap().is_string());
}

#[test]
fn dma_map_sg_non_char_data_loc() {
    let f = parse(DMA_MAP_SG);
    for (name, elem, size) in
        [("phys_addrs", "u64", 8), ("dma_addrs", "u64", 8), ("lengths", "unsigned int", 4)]
    {
        let fld = f.field(name).unwrap();
        assert_eq!(fld.kind(), &FieldKind::DataLoc { elem_type: elem.into() });
        assert_eq!(fld.elem_size(), Some(size));
        assert!(!fld.is_string());
    }
    assert!(f.field("device").unwrap().is_string());
    let truncated = f.field("truncated").unwrap();
    assert_eq!((truncated.c_type(), truncated.size()), ("bool", 1));
    assert_eq!(f.field("dir").unwrap().c_type(), "enum dma_data_direction");
}

#[test]
fn ipi_send_cpumask_data_loc_without_brackets() {
    let f = parse(IPI_SEND_CPUMASK);
    let m = f.field("cpumask").unwrap();
    assert_eq!(m.c_type(), "__data_loc cpumask_t");
    assert_eq!(m.kind(), &FieldKind::DataLoc { elem_type: "cpumask_t".into() });
    assert_eq!(m.elem_size(), None);
    assert!(!m.is_string());
    assert_eq!(kind(&f, "callsite"), &FieldKind::Pointer);
}

#[test]
fn ftrace_print_flexible_char_array() {
    let f = parse(FTRACE_PRINT);
    let buf = f.field("buf").unwrap();
    assert_eq!((buf.offset(), buf.size()), (16, 0));
    assert_eq!(buf.kind(), &FieldKind::FlexArray { elem_type: "char".into() });
    assert!(buf.is_string());
}

#[test]
fn ftrace_kernel_stack_unsigned_long_array() {
    let f = parse(FTRACE_KERNEL_STACK);
    assert_eq!(
        kind(&f, "caller"),
        &FieldKind::FixedArray { elem_type: "unsigned long".into(), elem_size: 8, len: 8 }
    );
    // Multi-line print fmt with escaped \t and \n inside strings.
    assert!(f.print_fmt().contains("\\t=> %ps\\n"));
}

#[test]
fn ftrace_branch_odd_sized_char_arrays_and_unsigned_char() {
    let f = parse(FTRACE_BRANCH);
    assert_eq!(kind(&f, "func"), &FieldKind::CharArray { len: 31 });
    assert_eq!(kind(&f, "file"), &FieldKind::CharArray { len: 21 });
    let correct = f.field("correct").unwrap();
    // `char` is unsigned on this kernel (built with -funsigned-char).
    assert_eq!((correct.c_type(), correct.is_signed()), ("char", false));
    assert_eq!(correct.kind(), &FieldKind::Scalar);
}

#[test]
fn ext4_print_fmt_spanning_lines() {
    let f = parse(EXT4_FSMAP_LOW_KEY);
    assert!(f.print_fmt().contains('\n'), "literal newline kept");
    assert!(f.print_fmt().ends_with("REC->owner"));
    assert_eq!(f.field("keydev").unwrap().c_type(), "dev_t");

    let f = parse(EXT4_FC_STATS);
    assert_eq!(
        kind(&f, "fc_ineligible_rc"),
        &FieldKind::FixedArray { elem_type: "unsigned int".into(), elem_size: 4, len: 10 }
    );
    assert!(f.print_fmt().contains('\n'));
    assert!(f.print_fmt().ends_with("REC->fc_numblks"));
}

#[test]
fn kvm_mmu_get_page_statement_expression_print_fmt() {
    let f = parse(KVM_MMU_GET_PAGE);
    assert!(f.print_fmt().contains("static const char *access_str[]"));
    assert!(f.field("created").is_some());
}

#[test]
fn synthetic_rel_loc_layout() {
    let f = parse(SYNTHETIC_REL_LOC);
    assert_eq!(f.id(), 1500);
    let foo = f.field("foo").unwrap();
    assert_eq!(foo.c_type(), "__rel_loc char[]");
    assert_eq!(foo.kind(), &FieldKind::RelLoc { elem_type: "char".into() });
    assert!(foo.is_string());
    assert_eq!(kind(&f, "bitmask"), &FieldKind::RelLoc { elem_type: "unsigned long".into() });
    assert_eq!(kind(&f, "cpumask"), &FieldKind::RelLoc { elem_type: "cpumask_t".into() });
}

#[test]
fn symbolic_and_multi_dimensional_array_lengths() {
    let text = "name: t\nID: 1\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
        \tfield:char comm[TASK_COMM_LEN];\toffset:2;\tsize:16;\tsigned:0;\n\
        \tfield:u32 regs[NR_REGS];\toffset:20;\tsize:12;\tsigned:0;\n\
        \tfield:struct foo blob[N];\toffset:32;\tsize:6;\tsigned:0;\n\
        \tfield:u16 grid[2][3];\toffset:38;\tsize:12;\tsigned:0;\n\
        \tfield:u64 odd[3];\toffset:50;\tsize:20;\tsigned:0;\n\
        \tfield:const char * const names;\toffset:70;\tsize:8;\tsigned:0;\n\
        \tfield:const void *const p;\toffset:78;\tsize:8;\tsigned:0;\n\
        \tfield:struct pair embedded;\toffset:86;\tsize:16;\tsigned:0;\n\
        \nprint fmt: \"\"\n";
    let f = parse(text);
    assert_eq!(kind(&f, "comm"), &FieldKind::CharArray { len: 16 });
    assert_eq!(kind(&f, "regs"), &FieldKind::FixedArray { elem_type: "u32".into(), elem_size: 4, len: 3 });
    assert_eq!(
        kind(&f, "blob"),
        &FieldKind::FixedArray { elem_type: "struct foo".into(), elem_size: 1, len: 6 }
    );
    assert_eq!(kind(&f, "grid"), &FieldKind::FixedArray { elem_type: "u16".into(), elem_size: 2, len: 6 });
    // Size is authoritative: 20 is not 3 * 8 and not a multiple of 8.
    assert_eq!(kind(&f, "odd"), &FieldKind::FixedArray { elem_type: "u64".into(), elem_size: 1, len: 20 });
    assert_eq!(kind(&f, "names"), &FieldKind::Pointer);
    assert_eq!(f.field("names").unwrap().c_type(), "const char * const");
    assert_eq!(kind(&f, "p"), &FieldKind::Pointer);
    assert_eq!(kind(&f, "embedded"), &FieldKind::Scalar);
    assert_eq!(f.print_fmt(), "\"\"");
}

#[test]
fn lenient_variants_of_the_grammar() {
    // CRLF line endings, `field special:`, missing `signed:`, unknown
    // attributes, extra blank lines, no trailing newline.
    let text = "name: old\r\nID: 7\r\nformat:\r\n\
        \tfield special:char comm[16];\toffset:0;\tsize:16;\r\n\
        \r\n\
        \tfield:int x;\toffset:16;\tsize:4;\tsigned:1;\tfuture:abc;\r\n\
        \r\n\r\n\
        print fmt: \"x=%d\", REC->x";
    let f = parse(text);
    assert_eq!((f.name(), f.id()), ("old", 7));
    assert_eq!(f.common_fields().len(), 1);
    assert!(!f.field("comm").unwrap().is_signed());
    assert!(f.field("x").unwrap().is_signed());
    assert_eq!(f.print_fmt(), "\"x=%d\", REC->x");
}

#[test]
fn no_event_fields() {
    let text = "name: e\nID: 9\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\n\
        print fmt: \"\"\n";
    let f = parse(text);
    assert_eq!(f.common_fields().len(), 1);
    assert!(f.event_fields().is_empty());
}
