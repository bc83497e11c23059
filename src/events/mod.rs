//! Event sets: perf events that are not BPF output (sampling events for
//! profilers; tracepoints, kprobes and uprobes for tracing monitors),
//! opened per CPU and target, sharing one ring per CPU that the same
//! reader as perf buffers reads.
//!
//! Layout: `desc` describes events and targets; `set` opens them (with
//! `pmu` for the kprobe and uprobe PMUs, `tracefs` for tracepoints, `elf`
//! for uprobe symbols, `probe_events` for probes with arguments, `programs`
//! for the BPF programs on a tracepoint); `table` attributes records to events and decodes
//! them ([`mod@format`] decodes tracepoint fields); `counts` reads counters.

mod counts;
mod desc;
pub(crate) mod elf;
pub mod format;
pub(crate) mod pmu;
mod probe_events;
mod programs;
mod set;
mod sideband;
mod table;
pub(crate) mod tracefs;

pub use counts::Counts;
pub use desc::{Event, EventId, Sampling, Target};
pub use programs::AttachedProgram;
pub(crate) use set::BASE_SAMPLE_TYPE;
pub(crate) use set::{AddObserver, IdsObserver};
pub use set::{EventInfo, EventKind, EventSet, EventSetBuilder};
pub use sideband::Sideband;
pub use table::{Decoder, EventRecord, EventSample};

/// What the C library crate needs beyond the public API (feature
/// `c-face`; not a stable API).
#[cfg(feature = "c-face")]
#[doc(hidden)]
pub mod c_face {
    /// What every sample of a set carries (see `set::BASE_SAMPLE_TYPE`).
    pub const BASE_SAMPLE_TYPE: u64 = super::set::BASE_SAMPLE_TYPE;
    use super::{EventId, EventSet};
    use crate::error::Result;
    use crate::reader::OwnedRing;
    use std::time::Duration;

    /// The id the C face was given as an `int`, unchecked (a wrong one
    /// finds no event: ENOENT).
    pub fn event_id(raw: u32) -> EventId {
        EventId(raw)
    }

    /// Each CPU's ring for a reader, once (see `EventSet::take_rings`).
    pub fn take_rings(set: &mut EventSet) -> Result<Vec<OwnedRing>> {
        set.take_rings()
    }

    /// The delay bound of a reader over the set's rings.
    pub fn max_delay(set: &EventSet) -> Option<Duration> {
        set.max_delay()
    }

    /// Makes a reader over the set's rings serve its CPUs that come and go.
    pub fn serve_cpus<H: crate::reader::deliver::Handler>(
        set: &mut EventSet,
        reader: &mut crate::reader::Reader<H>,
    ) -> Result<()> {
        set.serve_cpus(reader)
    }
}
