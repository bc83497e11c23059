//! Records about the ring itself: lost records, throttling.

use super::cursor::Cursor;
use super::{Body, DecodeAttr, DecodeError, Field, SampleId};
use super::{PERF_RECORD_LOST, PERF_RECORD_LOST_SAMPLES, PERF_RECORD_THROTTLE, PERF_RECORD_UNTHROTTLE};

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

/// Decodes a record about the ring (`None`: not one of those types).
pub(super) fn decode_control<'a>(
    type_: u32,
    rec: &'a [u8],
    a: &DecodeAttr,
) -> Option<Result<Body<'a>, DecodeError>> {
    let mut c = Cursor::new(rec);
    let c = &mut c;
    Some(match type_ {
        PERF_RECORD_LOST => lost(c, a).map(Body::Lost),
        PERF_RECORD_THROTTLE => throttle(c, a).map(Body::Throttle),
        PERF_RECORD_UNTHROTTLE => throttle(c, a).map(Body::Unthrottle),
        PERF_RECORD_LOST_SAMPLES => lost_samples(c, a).map(Body::LostSamples),
        _ => return None,
    })
}

fn lost(c: &mut Cursor<'_>, a: &DecodeAttr) -> Result<Lost, DecodeError> {
    let id = c.u64(Field::LostId)?;
    let lost = c.u64(Field::Lost)?;
    Ok(Lost { id, lost, sample_id: c.sample_id_end(a)? })
}

fn throttle(c: &mut Cursor<'_>, a: &DecodeAttr) -> Result<Throttle, DecodeError> {
    let time = c.u64(Field::ThrottleTime)?;
    let id = c.u64(Field::ThrottleId)?;
    let stream_id = c.u64(Field::ThrottleStreamId)?;
    Ok(Throttle { time, id, stream_id, sample_id: c.sample_id_end(a)? })
}

fn lost_samples(c: &mut Cursor<'_>, a: &DecodeAttr) -> Result<LostSamples, DecodeError> {
    let lost = c.u64(Field::Lost)?;
    Ok(LostSamples { lost, sample_id: c.sample_id_end(a)? })
}
