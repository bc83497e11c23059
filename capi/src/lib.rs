//! libperfbuf, the C face of perfbuf: libbpf's ten `perf_buffer__*`
//! functions ([`libbpf`]), the `perfbuf_*` extensions ([`ext`],
//! [`records`], [`decode`], [`events`]), and the only code that knows
//! errno, C structs and C function pointers. It builds `libperfbuf.so`,
//! `libperfbuf.a` and `include/perfbuf.h` (by cbindgen, in `build.rs`) from
//! the Rust core, the `perfbuf` crate, through its public API: a `struct
//! perf_buffer` is a [`perfbuf::Reader`] whose [`perfbuf::Sink`] is the
//! caller's callbacks ([`callbacks`]), built with the same
//! [`perfbuf::Builder`] the Rust face uses; what only libbpf's C API needs
//! (a raw map fd, the caller's attr, errno left at ENOENT...) comes from
//! the core's hidden `perfbuf::libbpf_compat`. The C library's own state
//! (where messages go, each thread's last error: [`print`]) and its
//! handles ([`handle`]) live here.
//!
//! Every exported function is a short shim: check pointers, turn the
//! caller's structs into Rust values, call the reader, and map the result
//! to libbpf's conventions (NULL + errno from constructors, `-errno` with
//! errno set from the rest: [`ffi`]).
//!
//! # Safety vocabulary (used by every `extern "C"` function)
//! - *a live handle*: NULL, or a pointer returned by a constructor
//!   (`perf_buffer__new`, `perf_buffer__new_raw`, `perfbuf_new`) and not
//!   yet passed to `perf_buffer__free`. A pointer to a libbpf `struct
//!   perf_buffer` is also accepted and refused with EINVAL (see [`handle`]).
//! - *valid for writes*: NULL, or a pointer to writable, aligned memory of
//!   the pointee type.
//! - *callbacks*: function pointers given at construction are called with
//!   the caller's `ctx` on the thread that polls; they must not free the
//!   buffer.

#![deny(unsafe_op_in_unsafe_fn)]
// Its Rust docs are for the library's developers (the C API's are in
// perfbuf.h): they link the private modules they describe.
#![allow(rustdoc::private_intra_doc_links)]

// No panic crosses into C: release and dev builds use panic = "abort" (the
// workspace's Cargo.toml), and since Rust 1.81 a panic escaping an
// `extern "C"` function aborts rather than unwinding, whatever the profile.

pub(crate) mod abi;
pub(crate) mod batch_read;
pub(crate) mod buffer;
pub(crate) mod callbacks;
pub(crate) mod decode;
pub(crate) mod errno;
pub(crate) mod event_records;
pub(crate) mod events;
pub(crate) mod ext;
pub(crate) mod ffi;
pub(crate) mod handle;
pub(crate) mod libbpf;
pub(crate) mod names;
pub(crate) mod opts;
pub(crate) mod perfdata;
pub(crate) mod print;
pub(crate) mod records;
pub(crate) mod ring_buffer;
pub(crate) mod sideband;

/// Internals for the fuzz targets (feature `internals`; not a stable API).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::abi::{perf_event_attr, perf_event_header};
    pub use crate::decode::{
        c_decode_attr, decode_to_c, layout_of_perf_event_attr, parse_decode_attr, perfbuf_decode,
        perfbuf_decode_attr, perfbuf_decode_attr_from, perfbuf_sample,
    };
}
