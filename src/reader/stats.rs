//! Per-ring figures, as the Rust API hands them out (the C face copies
//! them into `struct perfbuf_ring_stats`).

/// One ring's figures: what was read, lost and skipped, and the fast
/// mode's state.
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
