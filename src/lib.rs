//! perfbuf: a drop-in replacement for libbpf's perf buffer consumer.
//!
//! The crate exports libbpf's ten `perf_buffer__*` functions with libbpf 1.x
//! semantics (see `include/perfbuf.h`), so it can be linked with `-lperfbuf`,
//! preloaded under a program built against libbpf, or `dlopen`ed.
//!
//! Layout: the kernel-facing unsafe code lives in [`sys`] and [`ring`], the
//! C-facing unsafe code in [`ffi`]; everything else is safe Rust.
//!
//! # Safety vocabulary (used by every `extern "C"` function)
//! - *a live handle*: NULL, or a pointer returned by `perf_buffer__new` /
//!   `perf_buffer__new_raw` and not yet passed to `perf_buffer__free`.
//! - *valid for writes*: NULL, or a pointer to writable, aligned memory of the
//!   pointee type.
//! - *callbacks*: function pointers given at construction are called with the
//!   caller's `ctx` on the thread that polls; they must not free the buffer.

#![deny(unsafe_op_in_unsafe_fn)]

// No panic crosses into C: release and dev builds use panic = "abort"
// (Cargo.toml), and since Rust 1.81 a panic escaping an `extern "C"`
// function aborts rather than unwinding, whatever the profile (cargo test
// builds the library with unwinding, so a compile-time guard cannot be used).

pub mod abi;
pub mod adaptive;
pub mod buffer;
pub mod callbacks;
pub mod clock;
pub mod cpu;
pub mod decode;
pub mod error;
pub mod fallible;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod ffi;
pub mod ffi_decode;
pub mod ffi_records;
pub mod kernel;
pub mod log;
pub mod opts;
pub mod order;
pub mod record;
pub mod ring;
pub mod sys;
