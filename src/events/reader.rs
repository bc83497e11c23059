//! Reading a set's rings: the same [`Reader`] as BPF output, over the
//! rings the set mapped, each record attributed to its event and decoded.

use super::set::BASE_SAMPLE_TYPE;
use super::{EventRecord, EventSet};
use crate::error::Result;
use crate::perf_buffer::{Closures, Local, PerfBuffer, Reader, Sendable};
use crate::reader::sink::Sink;
use core::ops::ControlFlow;

impl EventSet {
    /// A reader of the set's rings, through the same [`Reader`] as BPF
    /// output (poll, consume, batches, ordering by
    /// [`crate::OrderKey::SampleTime`], stats), handing `f` each record
    /// attributed to its event and decoded. Once per set (EBUSY after);
    /// EINVAL for a set built without rings. Events added later are read
    /// too, and CPUs that come online later (or back: the set opens its
    /// events there again; see [`crate::Builder::hotplug`]). Its [`crate::RingStats::lost`] is exact at any moment on Linux
    /// 6.0+ (every event of the set counts its losses), and
    /// [`Reader::drain_final`] reports what the kernel has not yet written
    /// as an [`EventRecord::Lost`] with no event. The buffer is `Send`, so
    /// `f` must be; see [`Self::local_reader`].
    pub fn reader<'a>(&mut self, mut f: impl FnMut(EventRecord<'_>) + Send + 'a) -> Result<PerfBuffer<'a>> {
        let decoder = self.decoder();
        self.reader_with(Closures::<Sendable>::records(Box::new(move |cpu, rec: &[u8]| {
            decoder.decode(cpu, rec, &mut f);
            ControlFlow::Continue(())
        })))
    }

    /// [`Self::reader`] for an `f` that is not `Send` (it captures an
    /// `Rc`, a `&RefCell`...): the buffer stays on this thread.
    pub fn local_reader<'a>(
        &mut self,
        mut f: impl FnMut(EventRecord<'_>) + 'a,
    ) -> Result<PerfBuffer<'a, Local>> {
        let decoder = self.decoder();
        self.reader_with(Closures::<Local>::records(Box::new(move |cpu, rec: &[u8]| {
            decoder.decode(cpu, rec, &mut f);
            ControlFlow::Continue(())
        })))
    }

    /// A reader of the set's rings handing `sink` every record whole (a
    /// sample, a side-band record, a lost report...), to decode with
    /// [`Self::decoder`] when it likes (see [`Self::reader`] for the rest).
    pub fn reader_with<'a, S: Sink>(&mut self, sink: S) -> Result<Reader<'a, S>> {
        let mut reader = Reader::over_rings(self.take_rings()?, sink, BASE_SAMPLE_TYPE, self.max_delay())?;
        self.serve_cpus(reader.ring_set("an event set's rings")?)?;
        Ok(reader)
    }
}
