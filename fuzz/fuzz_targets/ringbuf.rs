//! The BPF ring buffer's record walk on a ring built from the input; see
//! `perfbuf_fuzz::ringbuf` for the input layout and the checks.
#![no_main]

libfuzzer_sys::fuzz_target!(|input: &[u8]| perfbuf_fuzz::ringbuf::run(input));
