//! Malformed format files and truncated / out-of-bounds records.

mod tracepoint_common;

use perfbuf::tracepoint::{DecodeError, Format, FormatErrorKind};
use tracepoint_common::*;

const HEAD: &str =
    "name: t\nID: 1\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n";

fn parse_err(text: &str) -> (usize, FormatErrorKind, String) {
    let e = Format::parse(text).expect_err("must not parse");
    let shown = e.to_string();
    assert!(shown.contains(&format!("line {}", e.line())), "{shown}");
    (e.line(), e.kind(), e.text().to_owned())
}

fn with_field(line: &str) -> String {
    format!("{HEAD}{line}\n\nprint fmt: \"\"\n")
}

#[test]
fn header_errors() {
    use FormatErrorKind::*;
    assert_eq!(parse_err("").1, MissingName);
    assert_eq!(parse_err("name: x\n"), (2, MissingId, String::new()));
    assert_eq!(parse_err("name: x\nID: 3\n").1, MissingFormatSection);
    assert_eq!(parse_err("ID: 3\nformat:\n").0, 2);
    assert_eq!(parse_err("ID: 3\nformat:\n").1, MissingName);
    assert_eq!(parse_err("name: x\nformat:\n").1, MissingId);
    assert_eq!(parse_err("name:\nID: 1\nformat:\n").1, EmptyName);
    assert_eq!(parse_err("name: x\nID: abc\n"), (2, BadId, "ID: abc".into()));
    assert_eq!(parse_err("name: x\nID: -1\n").1, BadId);
    assert_eq!(parse_err("name: x\nID: 4294967296\n").1, BadId);
    assert_eq!(parse_err("name: x\nname: y\n").1, DuplicateHeader);
    assert_eq!(parse_err("name: x\nID: 1\nID: 1\n").1, DuplicateHeader);
    assert_eq!(parse_err("hello\n"), (1, UnexpectedLine, "hello".into()));
    assert_eq!(parse_err("name: x\nID: 1\nprint fmt: \"\"\n").1, UnexpectedLine);
    // Truncated file: fields but no print fmt.
    assert_eq!(parse_err(HEAD), (6, MissingPrintFmt, String::new()));
    let half = &SCHED_SWITCH[..SCHED_SWITCH.find("print fmt").unwrap()];
    assert_eq!(parse_err(half).1, MissingPrintFmt);
}

#[test]
fn field_line_errors_name_the_line() {
    use FormatErrorKind::*;
    let cases: &[(&str, FormatErrorKind)] = &[
        ("\tfield:int x;\tsize:4;\tsigned:1;", MissingOffset),
        ("\tfield:int x;\toffset:4;\tsigned:1;", MissingSize),
        ("\tfield:int x;\toffset:four;\tsize:4;", BadAttribute),
        ("\tfield:int x;\toffset:-4;\tsize:4;", BadAttribute),
        ("\tfield:int x;\toffset:+4;\tsize:4;", BadAttribute),
        ("\tfield:int x;\toffset:;\tsize:4;", BadAttribute),
        ("\tfield:int x;\toffset:4;\tsize:4;\tsigned:2;", BadAttribute),
        ("\tfield:int x;\toffset:4;\toffset:4;\tsize:4;", BadAttribute),
        ("\tfield:int x;\toffset 4;\tsize:4;", BadAttribute),
        ("\tfield:int x;\toffset:99999999999999999999999;\tsize:4;", BadAttribute),
        ("\tfield:int x;\toffset:18446744073709551615;\tsize:1;", FieldTooLarge),
        ("\tfield:int;\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:x;\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:;\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:int 9x;\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:int *;\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:char x]];\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:char x[1[2]];\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:__data_loc x;\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:__data_loc [] x;\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:__data_locchar[] x;\toffset:4;\tsize:4;", BadDeclaration),
        ("\tfield:__rel_loc char[] x[2];\toffset:4;\tsize:4;", BadDeclaration),
        ("\tbogus line", UnexpectedLine),
    ];
    for (line, kind) in cases {
        let (n, k, text) = parse_err(&with_field(line));
        assert_eq!((n, k), (6, *kind), "{line:?}");
        assert_eq!(text, *line);
    }
}

#[test]
fn error_text_is_bounded_and_char_safe() {
    let long = format!("\tfield:int x;\toffset:{}é;\tsize:4;", "1".repeat(500));
    let e = Format::parse(&with_field(&long)).unwrap_err();
    assert!(e.text().len() <= 120);
    assert!(long.starts_with(e.text()));
}

#[test]
fn field_past_end_of_record() {
    let f = Format::parse(SCHED_SWITCH).unwrap();
    let next_prio = f.field("next_prio").unwrap(); // offset 60, size 4
    for len in [0, 1, 8, 60, 63] {
        assert_eq!(
            next_prio.decode(&vec![0u8; len]),
            Err(DecodeError::FieldOutOfBounds { offset: 60, size: 4, raw_len: len })
        );
    }
    assert!(next_prio.decode(&[0u8; 64]).is_ok());
    // Char arrays too.
    let comm = f.field("next_comm").unwrap();
    assert!(matches!(comm.decode(&[0u8; 55]), Err(DecodeError::FieldOutOfBounds { .. })));
    // The iterator reports per-field errors and keeps going.
    let results: Vec<_> = f.values(&[0u8; 30]).map(|(n, v)| (n, v.is_ok())).collect();
    // 4 common fields, prev_comm (8..24) and prev_pid (24..28) fit in 30 bytes.
    assert_eq!(results.iter().filter(|(_, ok)| *ok).count(), 6);
    assert_eq!(results.len(), 11);
}

#[test]
fn data_loc_out_of_bounds() {
    let f = Format::parse(SCHED_PROCESS_EXEC).unwrap();
    let filename = f.field("filename").unwrap();

    // Offset points past the end.
    let mut r = Rec::new(20, 365, 1);
    r.data_loc(8, 21, 0);
    assert_eq!(
        filename.decode(&r.0),
        Err(DecodeError::DynamicOutOfBounds { start: 21, len: 0, raw_len: 20 })
    );
    // Length runs past the end by one.
    let mut r = Rec::new(20, 365, 1);
    r.push_data_loc(8, b"abc\0");
    r.data_loc(8, 20, 5);
    assert!(matches!(
        filename.decode(&r.0),
        Err(DecodeError::DynamicOutOfBounds { start: 20, len: 5, raw_len: 24 })
    ));
    // Maximal word.
    let mut r = Rec::new(20, 365, 1);
    r.u32(8, u32::MAX);
    assert!(matches!(
        filename.decode(&r.0),
        Err(DecodeError::DynamicOutOfBounds { start: 0xffff, len: 0xffff, .. })
    ));
    // The loc word itself truncated.
    assert!(matches!(
        filename.decode(&[0u8; 10]),
        Err(DecodeError::FieldOutOfBounds { offset: 8, size: 4, raw_len: 10 })
    ));
    // Record truncated in the middle of the string.
    let r = {
        let mut r = Rec::new(20, 365, 1);
        r.push_data_loc(8, b"/bin/sh\0");
        r
    };
    assert!(filename.decode(&r.0).is_ok());
    assert!(filename.decode(&r.0[..25]).is_err());
}

#[test]
fn rel_loc_out_of_bounds() {
    let f = Format::parse(SYNTHETIC_REL_LOC).unwrap();
    let foo = f.field("foo").unwrap();
    // rel 12 from end of field (12) = 24, but the record has only 24 bytes and
    // the string is 2 long.
    let mut r = Rec::new(24, 1500, 1);
    r.data_loc(8, 12, 2);
    assert_eq!(foo.decode(&r.0), Err(DecodeError::DynamicOutOfBounds { start: 24, len: 2, raw_len: 24 }));
    r.0.extend_from_slice(b"a\0");
    assert_eq!(foo.decode(&r.0).unwrap().as_str(), Some("a"));
}

#[test]
fn size_zero_and_bad_loc_sizes() {
    let text = "name: z\nID: 2\nformat:\n\
        \tfield:int zero;\toffset:0;\tsize:0;\tsigned:1;\n\
        \tfield:void * zp;\toffset:0;\tsize:0;\tsigned:0;\n\
        \tfield:__data_loc char[] wide;\toffset:0;\tsize:8;\tsigned:0;\n\
        \tfield:__rel_loc char[] narrow;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:__data_loc char[] empty;\toffset:0;\tsize:0;\tsigned:0;\n\
        \tfield:u8 flex[];\toffset:100;\tsize:0;\tsigned:0;\n\
        \tfield:int far;\toffset:18446744073709551000;\tsize:8;\tsigned:1;\n\
        \nprint fmt: \"\"\n";
    let f = Format::parse(text).unwrap();
    let raw = [0u8; 64];
    let err = |n: &str| f.field(n).unwrap().decode(&raw).unwrap_err();
    assert_eq!(err("zero"), DecodeError::ZeroSize);
    assert_eq!(err("zp"), DecodeError::ZeroSize);
    assert_eq!(err("wide"), DecodeError::BadLocSize { size: 8 });
    assert_eq!(err("narrow"), DecodeError::BadLocSize { size: 2 });
    assert_eq!(err("empty"), DecodeError::BadLocSize { size: 0 });
    assert_eq!(err("flex"), DecodeError::FlexOutOfBounds { offset: 100, raw_len: 64 });
    assert!(matches!(err("far"), DecodeError::FieldOutOfBounds { .. }));
    assert_eq!(f.fixed_size(), 18_446_744_073_709_551_008);
    // Empty record: everything errors, nothing panics.
    for (_, v) in f.values(&[]) {
        assert!(v.is_err());
    }
    for e in [err("zero"), err("wide"), err("flex"), err("far")] {
        assert!(!e.to_string().is_empty());
    }
}
