//! Event sets: perf events that are not BPF output (sampling events for
//! profilers; tracepoints, kprobes and uprobes for tracing monitors),
//! opened per CPU and target, sharing one ring per CPU that the same
//! reader as perf buffers reads.
//!
//! Layout: `desc` describes events and targets; `set` opens them (with
//! `pmu` for the kprobe and uprobe PMUs, `tracefs` for tracepoints, `elf`
//! for uprobe symbols, `probe_events` for probes with arguments, `programs`
//! for the BPF programs on a tracepoint); `reader` reads its rings; `table`
//! attributes records to events and decodes them ([`mod@format`] decodes
//! tracepoint fields); `counts` reads counters.

mod counts;
mod desc;
pub(crate) mod elf;
pub mod format;
pub(crate) mod pmu;
mod probe_events;
mod programs;
mod reader;
mod set;
mod sideband;
mod table;
pub(crate) mod tracefs;

pub use counts::Counts;
pub use desc::{Event, EventId, Sampling, Target};
pub use programs::AttachedProgram;
pub(crate) use set::{AddObserver, IdsObserver};
pub use set::{EventInfo, EventKind, EventSet, EventSetBuilder};
pub use sideband::Sideband;
pub use table::{Decoder, EventRecord, EventSample, Whole};
