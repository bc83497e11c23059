//! The record decoder (Rust API and C entry points) on an attr layout and a
//! record taken from the input; see `perfbuf_fuzz::decode` for the layout.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| perfbuf_fuzz::decode::run(input));
