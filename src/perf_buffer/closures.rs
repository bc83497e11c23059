//! The builder's closures as a [`Sink`]: `on_sample` and `on_lost`
//! (libbpf's split) or `on_record` (every record whole).

use super::threading::Threading;
use crate::reader::sink::{Records, Sink, Stop, Taken};

/// The closures given to a [`super::Builder`], as the [`Sink`] of the
/// [`super::PerfBuffer`] it builds.
pub struct Closures<'a, T: Threading> {
    pub(super) sample: Option<T::SampleFn<'a>>,
    pub(super) lost: Option<T::LostFn<'a>>,
    pub(super) record: Option<T::RecordFn<'a>>,
}

impl<T: Threading> Default for Closures<'_, T> {
    fn default() -> Self {
        Closures { sample: None, lost: None, record: None }
    }
}

impl<'a, T: Threading> Closures<'a, T> {
    /// Only a record closure (an event set's reader).
    pub(crate) fn records(record: T::RecordFn<'a>) -> Self {
        Closures { record: Some(record), ..Closures::default() }
    }
}

impl<T: Threading> Sink for Closures<'_, T> {
    #[inline(always)]
    fn take(&mut self, records: Records<'_>) -> Taken {
        let cpu = records.cpu().unwrap_or(u32::MAX);
        if let Some(record) = &mut self.record {
            return records.each(|rec| record(cpu, rec).map_break(|()| Stop::Ring));
        }
        let lost = &mut self.lost;
        let on_lost = |n| {
            if let Some(f) = lost {
                f(cpu, n)
            }
        };
        match &mut self.sample {
            Some(sample) => records.samples(|data| sample(cpu, data), on_lost),
            None => records.samples(|_| {}, on_lost),
        }
    }
}
