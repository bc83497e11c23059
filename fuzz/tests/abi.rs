//! The decode harness's copies of C ABI constants that `perfbuf::internals`
//! does not re-export agree with the checked-in C header.

use perfbuf_fuzz::decode::{
    PERFBUF_DECODE_F_BRANCH_COUNTERS, PERFBUF_DECODE_F_BRANCH_HW_IDX, PERFBUF_DECODE_F_READ_GROUP,
};
use std::fs;
use std::path::Path;

#[test]
fn decode_flags_match_the_header() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include/perfbuf.h");
    let header = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let define = |name: &str| -> u32 {
        let values: Vec<u32> = header
            .lines()
            .filter_map(|l| l.trim().strip_prefix("#define ")?.strip_prefix(name)?.trim().parse().ok())
            .collect();
        assert_eq!(values.len(), 1, "{name}: one #define with a number in {}", path.display());
        values[0]
    };
    for (name, value) in [
        ("PERFBUF_DECODE_F_BRANCH_HW_IDX", PERFBUF_DECODE_F_BRANCH_HW_IDX),
        ("PERFBUF_DECODE_F_BRANCH_COUNTERS", PERFBUF_DECODE_F_BRANCH_COUNTERS),
        ("PERFBUF_DECODE_F_READ_GROUP", PERFBUF_DECODE_F_READ_GROUP),
    ] {
        assert_eq!(define(name), value, "{name}");
    }
}
