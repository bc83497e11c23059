//! Records about the ring itself: lost records, throttling.

use super::SampleId;

/// `PERF_RECORD_LOST`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lost {
    /// Id of the event that lost records.
    pub id: u64,
    /// Number of records lost.
    pub lost: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_RECORD_THROTTLE` / `PERF_RECORD_UNTHROTTLE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Throttle {
    /// When.
    pub time: u64,
    /// Event id.
    pub id: u64,
    /// Event stream id.
    pub stream_id: u64,
    /// The trailer.
    pub sample_id: SampleId,
}

/// `PERF_RECORD_LOST_SAMPLES`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostSamples {
    /// Number of samples lost.
    pub lost: u64,
    /// The trailer.
    pub sample_id: SampleId,
}
