//! The checked-in header must be what cbindgen generates from the sources.

#[test]
fn checked_in_header_is_current() {
    let fresh = include_str!(concat!(env!("OUT_DIR"), "/perfbuf.h"));
    let checked_in = include_str!("../../include/perfbuf.h");
    assert!(fresh == checked_in, "include/perfbuf.h is stale: run `make header` and commit it");
}
