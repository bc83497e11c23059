//! Per-ring figures, as the Rust API hands them out (the C face copies
//! them into `struct perfbuf_ring_stats`).

/// One ring's figures: what was read, lost and skipped, and the fast
/// mode's state.
///
/// **The loss identity.** Every record a BPF program meant to send on this
/// CPU is delivered or lost, and each loss is in exactly one bucket:
///
/// ```text
/// produced = delivered + lost_reported + lost_unreported + output_failed + dropped
/// ```
///
/// where `delivered = samples - dropped`, `lost_reported = lost -
/// lost_unreported` (the kernel's LOST records), `lost_unreported` what the
/// kernel counted and has not reported yet ([`crate::Builder::count_lost`]),
/// `output_failed` outputs the helper refused that no kernel figure counts
/// (`perfbuf.bpf.h`'s counts, [`crate::Builder::output_counts`]), and
/// `dropped` what the caller threw away ([`crate::PerfBuffer::count_dropped`]).
/// It holds once the ring is read to its head (records still waiting are
/// neither delivered nor lost), and `produced` is known only with
/// perfbuf.bpf.h's counts.
///
/// ```no_run
/// # fn f(pb: &perfbuf::PerfBuffer<'_>) -> perfbuf::Result<()> {
/// let s = pb.stats(0)?;
/// println!("cpu {}: {} records, {} lost", s.cpu, s.records, s.lost);
/// # Ok(()) }
/// ```
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// The CPU this ring reads.
    pub cpu: i32,
    /// Output calls made on this CPU, as perfbuf.bpf.h's output wrappers
    /// counted them (`None` without [`crate::Builder::output_counts`]).
    pub produced: Option<u64>,
    /// Samples read: the records successful outputs wrote (`records` less
    /// lost reports and records of other types). Samples the caller then
    /// dropped are in `dropped` too; see [`Self::delivered`].
    pub samples: u64,
    /// Samples the caller read and dropped by its own policy
    /// ([`crate::PerfBuffer::count_dropped`]).
    pub dropped: u64,
    /// Outputs on this CPU the helper refused that no kernel figure
    /// counts: an empty slot (`-ENOENT`), an event that is not on the CPU
    /// (`-EOPNOTSUPP`: one left dead when its CPU went offline)... from
    /// perfbuf.bpf.h's counts (0 without them). A full ring's refusals are
    /// in `lost`, where the kernel counts them.
    pub output_failed: u64,
    /// Records read (samples, lost reports and any other type), plus the
    /// lost reports the library made for a ring the kernel no longer
    /// writes to (fast mode): one per lost callback.
    pub records: u64,
    /// Bytes of those records, headers included.
    pub bytes: u64,
    /// Records lost so far: what `PERF_RECORD_LOST` reports read from the
    /// ring said (and the lost reports the library made), plus, where the
    /// ring's events count their losses (`PERF_FORMAT_LOST`, Linux 6.0: an
    /// event set's rings, a buffer built with `count_lost`), what the
    /// kernel counted and has not yet written as a LOST record: exact at
    /// any moment, not only once the kernel finds room for its report.
    /// Elsewhere, only what was reported.
    pub lost: u64,
    /// The part of `lost` no lost report has told the reader about yet
    /// (`lost` minus what the lost callbacks got; 0 where the kernel's
    /// count is not known). A final drain reports it.
    pub lost_unreported: u64,
    /// Times epoll reported the ring ready.
    pub wakeups: u64,
    /// Bytes waiting in the ring now.
    pub pending_bytes: u64,
    /// Size of the caller's data area.
    pub data_size: u64,
    /// Times the reader skipped to the head after an inconsistent ring state.
    pub resyncs: u64,
    /// Bytes skipped doing so.
    pub skipped_bytes: u64,
    /// SAMPLE/LOST records too short for their fields, skipped.
    pub malformed: u64,
    /// Overwritable rings: bytes overwritten before they were read.
    pub overwritten_bytes: u64,
    /// The ring has batched wake-ups now (fast mode).
    pub batched: bool,
    /// Times the ring switched to batched wake-ups.
    pub batch_switches: u64,
    /// Size of the spill ring the fast mode gave this CPU (0: none).
    pub spill_size: u64,
}

impl RingStats {
    /// Samples that reached the caller and were kept: `samples - dropped`.
    pub fn delivered(&self) -> u64 {
        self.samples.saturating_sub(self.dropped)
    }

    /// Every loss, all buckets: `lost + output_failed + dropped`.
    pub fn lost_total(&self) -> u64 {
        self.lost.saturating_add(self.output_failed).saturating_add(self.dropped)
    }

    /// The losses the kernel reported in LOST records (`lost -
    /// lost_unreported`).
    pub fn lost_reported(&self) -> u64 {
        self.lost.saturating_sub(self.lost_unreported)
    }
}
