//! Runs of records handed over whole by `consume_batch`.

use crate::ring::Header;

/// A run of whole records of one CPU, contiguous in memory: zero-copy
/// into the ring, except a record that wraps the ring's end, which comes
/// alone in a copy. Valid during the call it is passed to.
///
/// ```no_run
/// # fn f(pb: &mut perfbuf::PerfBuffer<'_>) -> perfbuf::Result<()> {
/// let mut bytes = 0;
/// pb.consume_batch(|batch| {
///     for rec in batch.records() {
///         if let Some(data) = perfbuf::Batch::sample_data(rec) {
///             bytes += data.len();
///         }
///     }
///     std::ops::ControlFlow::Continue(())
/// })?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    /// The CPU whose ring this is.
    pub cpu: i32,
    /// The records' bytes, each starting with a `struct perf_event_header`
    /// whose `size` was checked.
    pub bytes: &'a [u8],
    /// Samples in the run.
    pub samples: usize,
    /// Records other than samples (LOST, ...): when 0, a consumer that
    /// only counts need not walk the run.
    pub others: usize,
}

impl<'a> Batch<'a> {
    /// The run's records, each whole (header included).
    pub fn records(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut rest = self.bytes;
        core::iter::from_fn(move || {
            let size = Header::of(rest.get(..8)?).size();
            let (rec, tail) = rest.split_at_checked(size.max(8))?;
            rest = tail;
            Some(rec)
        })
    }

    /// The raw data of a `PERF_SAMPLE_RAW` sample record (as
    /// `perf_buffer__new`'s sample callback gets it), or `None`.
    pub fn sample_data(rec: &'a [u8]) -> Option<&'a [u8]> {
        match crate::ring::record::parse(rec) {
            crate::ring::record::Record::Sample { data } => Some(data),
            _ => None,
        }
    }
}
