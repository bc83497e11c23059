//! Pure parsing of the records libbpf's default handler understands:
//! `PERF_RECORD_SAMPLE` with only `PERF_SAMPLE_RAW`, and `PERF_RECORD_LOST`.
//! No unsafe code; every field read is bounds-checked.

use crate::kernel::{PERF_RECORD_LOST, PERF_RECORD_SAMPLE};

/// One record, classified for the sample/lost callbacks.
#[derive(Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// A sample: the raw data as the kernel sized it (padded, see the header
    /// docs), starting [`SAMPLE_DATA_OFFSET`] bytes into the record.
    Sample {
        /// The raw data.
        data: &'a [u8],
    },
    /// The kernel dropped `lost` records for lack of space.
    Lost {
        /// Number of records lost.
        lost: u64,
    },
    /// A record of another type (an error for the default handler).
    Other {
        /// Its `PERF_RECORD_*` type.
        type_: u32,
    },
    /// A SAMPLE or LOST record too short for the fields it must carry.
    Malformed,
}

/// Offset of the raw data in a `PERF_SAMPLE_RAW`-only sample.
pub const SAMPLE_DATA_OFFSET: usize = 12;

fn u32_at(rec: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(rec.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(rec: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(rec.get(off..off + 8)?.try_into().ok()?))
}

/// Counts kept while handing records to a reader's callbacks (rare
/// record types only: the ring counts records and bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DispatchStats {
    /// Records the kernel reported lost.
    pub lost: u64,
    /// SAMPLE/LOST records too short for their fields, skipped.
    pub malformed: u64,
    /// Records handed out that are not well-formed samples (lost reports,
    /// other types, malformed ones): what was read less these is the
    /// samples delivered. Counted off the hot path, where they are told
    /// apart anyway.
    pub others: u64,
    /// Losses reported early (a final drain's report of what the kernel
    /// counted but had not yet written as a `PERF_RECORD_LOST`): a LOST
    /// record that arrives later reports them again, and is reduced by
    /// this much (see `reader::deliver::take_lost`).
    pub lost_credit: u64,
}

/// A `PERF_RECORD_LOST` made here, for lost records the kernel counted but
/// will not report in a ring (see `crate::adaptive`): 8-aligned like
/// records in a ring.
#[repr(C, align(8))]
pub struct LostRecord([u8; LOST_RECORD_SIZE]);

/// Header, `id` and `lost`.
pub const LOST_RECORD_SIZE: usize = 24;

impl LostRecord {
    /// A record reporting `lost` records (`id` 0).
    pub fn new(lost: u64) -> LostRecord {
        let mut bytes = [0u8; LOST_RECORD_SIZE];
        bytes[..4].copy_from_slice(&PERF_RECORD_LOST.to_ne_bytes());
        bytes[6..8].copy_from_slice(&(LOST_RECORD_SIZE as u16).to_ne_bytes());
        bytes[16..].copy_from_slice(&lost.to_ne_bytes());
        LostRecord(bytes)
    }

    /// The whole record, header included.
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The `type` field of a record's header (0 if the record is too short).
pub fn record_type(rec: &[u8]) -> u32 {
    u32_at(rec, 0).unwrap_or(0)
}

/// Classifies a whole record (header included).
#[inline(always)]
pub fn parse(rec: &[u8]) -> Record<'_> {
    let Some(header) = rec.first_chunk::<8>() else { return Record::Malformed };
    match u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) {
        PERF_RECORD_SAMPLE => {
            let Some(size) = u32_at(rec, 8) else { return Record::Malformed };
            // Both bounds in one comparison: 12 + size within the record.
            if (size as usize) <= rec.len().saturating_sub(SAMPLE_DATA_OFFSET)
                && rec.len() >= SAMPLE_DATA_OFFSET
            {
                Record::Sample { data: &rec[SAMPLE_DATA_OFFSET..SAMPLE_DATA_OFFSET + size as usize] }
            } else {
                Record::Malformed
            }
        }
        PERF_RECORD_LOST => match u64_at(rec, 16) {
            Some(lost) => Record::Lost { lost },
            None => Record::Malformed,
        },
        type_ => Record::Other { type_ },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(type_: u32, body: &[u8]) -> Vec<u8> {
        let size = (8 + body.len()) as u16;
        let mut v = type_.to_ne_bytes().to_vec();
        v.extend_from_slice(&0u16.to_ne_bytes());
        v.extend_from_slice(&size.to_ne_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn sample_data_follows_raw_size() {
        let mut body = 4u32.to_ne_bytes().to_vec();
        body.extend_from_slice(b"abcd");
        let r = rec(PERF_RECORD_SAMPLE, &body);
        assert_eq!(parse(&r), Record::Sample { data: b"abcd" });
    }

    #[test]
    fn lost_reads_second_word() {
        let mut body = 7u64.to_ne_bytes().to_vec();
        body.extend_from_slice(&49u64.to_ne_bytes());
        assert_eq!(parse(&rec(PERF_RECORD_LOST, &body)), Record::Lost { lost: 49 });
        let made = LostRecord::new(49);
        body[..8].fill(0); // id 0
        assert_eq!(made.bytes(), &rec(PERF_RECORD_LOST, &body)[..]);
        assert_eq!(made.bytes().as_ptr() as usize % 8, 0);
    }

    #[test]
    fn short_or_lying_records_are_malformed() {
        assert_eq!(parse(&rec(PERF_RECORD_SAMPLE, &[])), Record::Malformed);
        let body = 100u32.to_ne_bytes();
        assert_eq!(parse(&rec(PERF_RECORD_SAMPLE, &body)), Record::Malformed);
        let body = u32::MAX.to_ne_bytes();
        assert_eq!(parse(&rec(PERF_RECORD_SAMPLE, &body)), Record::Malformed);
        assert_eq!(parse(&rec(PERF_RECORD_LOST, &[0; 8])), Record::Malformed);
        assert_eq!(parse(&rec(3, &[])), Record::Other { type_: 3 });
        assert_eq!(record_type(&[1, 2]), 0);
    }
}
