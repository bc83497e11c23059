//! Fuzz harnesses for perfbuf (perf ring reader, BPF ring buffer walk,
//! record decoder, tracepoint formats): what each fuzz target runs and checks, the
//! seed corpus generator, and a replay of the corpus for `cargo test`.
//!
//! A failed check panics; under libFuzzer a panic aborts and is reported as
//! a crash with its input. Bounds errors are caught by Rust's checks and by
//! AddressSanitizer (the ring lives in one heap allocation exactly as large
//! as a perf mapping, so a read past it hits a redzone).

pub mod decode;
pub mod ring;
pub mod ringbuf;
pub mod seeds;
pub mod tracepoint;
