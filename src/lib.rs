//! perfbuf: a perf buffer reader for BPF tools, with libbpf's C API and a
//! safe Rust API over the same core.
//!
//! BPF programs send records to user space with `bpf_perf_event_output`
//! into a `BPF_MAP_TYPE_PERF_EVENT_ARRAY`; a reader opens a perf event per
//! CPU, maps its ring, waits with epoll and drains the records. From Rust:
//!
//! ```no_run
//! use std::time::Duration;
//! # fn main() -> perfbuf::Result<()> {
//! # let map: std::os::fd::OwnedFd = unimplemented!();
//! // `map`: the PERF_EVENT_ARRAY, from aya, libbpf-rs or a raw fd.
//! let mut pb = perfbuf::PerfBuffer::builder(&map)
//!     .pages(64)
//!     .on_sample(|cpu, data: &[u8]| println!("cpu {cpu}: {} bytes", data.len()))
//!     .on_lost(|cpu, n| eprintln!("cpu {cpu}: {n} records lost"))
//!     .build()?;
//! loop {
//!     pb.poll(Some(Duration::from_millis(100)))?;
//! }
//! # }
//! ```
//!
//! This crate is Rust only: it defines no C symbol and builds no C
//! library, so it links beside libbpf-rs and aya. The C library,
//! `libperfbuf.so` (libbpf's ten `perf_buffer__*` functions with libbpf 1.x
//! semantics, linked, `LD_PRELOAD`ed or `dlopen`ed, plus the `perfbuf_*`
//! extensions of `include/perfbuf.h`), is built from it by the repository's
//! `capi/` crate.
//!
//! One reader, one face over it: [`Reader`] reads per-CPU perf rings
//! into a [`Sink`], where its records go. [`PerfBuffer`] is the reader
//! whose sink is the closures given to its [`Builder`]; an event set's
//! reader ([`events::EventSet::reader`]) decodes into a closure; the C
//! library (`capi/`) is a `Reader` too, whose sink is the caller's
//! function pointers, built through this public API (and, for what only
//! libbpf's C API needs, the hidden `libbpf_compat`). Only `capi/` knows
//! errno, C structs and C function pointers.
//!
//! Layout, dependencies pointing one way: the face (`perf_buffer/`) over
//! the reader (`reader/`, the ordered reader inside it), which uses the
//! fast mode (`adaptive/`), both over the ring (`ring/`), over the kernel
//! (`kernel/`: uapi, system calls, clocks, fault injection at its bottom,
//! and a fake kernel for tests). The decoder ([`decode`]) stands alone;
//! event sets ([`events`]) open their own events and share the reader;
//! [`perfdata`] writes what a reader's rings hold to a perf.data file for
//! `perf report` and `perf script`.

#![deny(unsafe_op_in_unsafe_fn)]

// No panic crosses into C: release and dev builds use panic = "abort"
// (Cargo.toml), and since Rust 1.81 a panic escaping an `extern "C"`
// function aborts rather than unwinding, whatever the profile (cargo test
// builds the library with unwinding, so a compile-time guard cannot be used).

mod adaptive;
pub mod decode;
mod error;
pub mod events;
mod kernel;
#[doc(hidden)]
pub mod libbpf_compat;
mod log;
mod perf_buffer;
pub mod perfdata;
mod reader;
mod ring;
pub mod ringbuf;

pub use crate::log::{LogFn, LogLevel, set_log};
pub use error::{Error, ErrorKind, Result};
pub use events::format as tracepoint;
pub use kernel::PerfEventAttr;
#[cfg(feature = "tokio")]
pub use perf_buffer::AsyncPerfBuffer;
pub use perf_buffer::{
    Boxes, Builder, Closures, Local, MapFd, PerfBuffer, Reader, RingReader, Sendable, Threading, Waker,
};
pub use reader::batch::Batch;
pub use reader::batch_read::{BatchBuf, BatchEntry};
pub use reader::config::Wakeup;
pub use reader::health::RingHealth;
pub use reader::order::{OrderKey, OrderStats};
pub use reader::output_counts::OutputCounts;
pub use reader::sink;
pub use reader::sink::Sink;
pub use reader::stats::RingStats;
pub use ringbuf::RingBuffer;

/// The CPU a [`PerfBuffer`] over a BPF ring buffer (`BPF_MAP_TYPE_RINGBUF`)
/// hands its closures: a ring buffer is one ring for all CPUs, and its
/// records do not say which CPU wrote them (the C library passes -1).
pub const NO_CPU: u32 = u32::MAX;

/// The perf uapi constants a caller building its own [`PerfEventAttr`]
/// needs: event types, `PERF_SAMPLE_*`, `PERF_FORMAT_*`, attr flag bits.
pub mod uapi {
    pub use crate::kernel::{
        ATTR_FLAG_DISABLED, ATTR_FLAG_FREQ, ATTR_FLAG_INHERIT, ATTR_FLAG_SAMPLE_ID_ALL, ATTR_FLAG_WATERMARK,
        ATTR_FLAG_WRITE_BACKWARD, PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_SW_BPF_OUTPUT,
        PERF_COUNT_SW_CPU_CLOCK, PERF_COUNT_SW_DUMMY, PERF_COUNT_SW_TASK_CLOCK, PERF_FORMAT_GROUP,
        PERF_FORMAT_ID, PERF_FORMAT_LOST, PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING,
        PERF_RECORD_LOST, PERF_RECORD_SAMPLE, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_CPU, PERF_SAMPLE_IDENTIFIER,
        PERF_SAMPLE_IP, PERF_SAMPLE_PERIOD, PERF_SAMPLE_RAW, PERF_SAMPLE_TID, PERF_SAMPLE_TIME,
        PERF_TYPE_HARDWARE, PERF_TYPE_SOFTWARE, PERF_TYPE_TRACEPOINT,
    };
}

/// Internals for the fuzz targets (feature `internals`; not a stable API).
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    pub use crate::kernel::{MMAP_PAGE_DATA_TAIL, PERF_RECORD_SAMPLE};
    pub use crate::ring::record::{self, Record};
    pub use crate::ring::{At, Counters, HEADER_SIZE, Header, PerfRing, Stop};
    /// The BPF ring buffer's memory and record walk.
    pub mod ringbuf {
        pub use crate::ringbuf::{BUSY_BIT, DISCARD_BIT, RingMemory, Stats};
    }
}
