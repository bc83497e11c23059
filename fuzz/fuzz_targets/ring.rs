//! The ring reader on a synthetic ring built from the input; see
//! `perfbuf_fuzz::ring` for the input layout and the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| perfbuf_fuzz::ring::run(input));
