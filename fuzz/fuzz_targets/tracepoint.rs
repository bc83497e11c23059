//! The tracepoint format parser and field decoder on a format file and a
//! raw record from the input; see `perfbuf_fuzz::tracepoint`.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| perfbuf_fuzz::tracepoint::run(input));
