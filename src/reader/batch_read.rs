//! Batch reads: what the rings hold, copied into buffers the caller owns
//! in one call ([`BatchBuf`]), for faces whose per-record calls cost more
//! than the records (Python, Go): the samples' bytes packed at 8-aligned
//! offsets, and one fixed-size [`BatchEntry`] per sample or loss report.
//!
//! A read takes from a ring only the records that fit whole: before each
//! drain it walks the headers from the tail and stops the drain at the
//! first record that would not fit, so what does not fit stays in the ring
//! (nothing consumed that is not delivered). The drain itself is the
//! reader's usual one (fast mode, lost accounting, health, tail
//! publication), so the figures stay exact.

use super::RingSet;
use super::deliver::{self, Halt, Handler};
use crate::error::{Error, Result, What};
use crate::kernel::PERF_SAMPLE_RAW;
use crate::log;
use crate::ring::record::{self, Record};
use crate::ring::{At, PerfRing, Stop};
use core::cell::RefCell;
use core::ops::ControlFlow;

/// One record (or loss report) of a batch read: where its bytes are in
/// the batch's data, and from which CPU. `#[repr(C)]`, 24 bytes, so that
/// other languages read an array of them in place (the C library's
/// `struct perfbuf_batch_entry`, a NumPy structured array).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchEntry {
    /// The CPU whose ring held it; [`crate::NO_CPU`] for a BPF ring buffer.
    pub cpu: u32,
    /// The sample's size: its raw data as the sample callback would get it
    /// (a perf ring's comes padded by the kernel); 0 for a loss report.
    pub size: u32,
    /// Where its bytes start in the batch's data (a multiple of 8).
    pub offset: u64,
    /// A loss report: the number of records lost (the record's `size` is
    /// 0); 0 for a sample.
    pub lost: u64,
}

/// Buffers a batch read fills: `data` for the samples' bytes, each at an
/// 8-aligned offset, and `entries`, one per sample or loss report. Reads
/// append; [`Self::clear`] starts over.
#[derive(Debug)]
pub struct BatchBuf<'b> {
    data: &'b mut [u8],
    entries: &'b mut [BatchEntry],
    used: usize,
    count: usize,
    needed: Option<usize>,
    /// Samples that reached the copy without room (a ring changed under
    /// the reader between the walk that sized the drain and the drain).
    overflowed: u64,
}

impl<'b> BatchBuf<'b> {
    /// Buffers over `data` and `entries`, empty.
    pub fn new(data: &'b mut [u8], entries: &'b mut [BatchEntry]) -> Self {
        BatchBuf { data, entries, used: 0, count: 0, needed: None, overflowed: 0 }
    }

    /// Forgets what was read (the buffers are reused).
    pub fn clear(&mut self) {
        (self.used, self.count, self.needed) = (0, 0, None);
    }

    /// The entries read so far.
    pub fn entries(&self) -> &[BatchEntry] {
        &self.entries[..self.count]
    }

    /// The bytes the entries point into (up to the end of the last sample).
    pub fn data(&self) -> &[u8] {
        &self.data[..self.used]
    }

    /// The bytes of entry `i` (empty for a loss report).
    pub fn record(&self, i: usize) -> Option<&[u8]> {
        let e = self.entries().get(i)?;
        self.data.get(e.offset as usize..e.offset as usize + e.size as usize)
    }

    /// Entries read so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was read.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of `data` used (the end of the last sample, 8-aligned).
    pub fn bytes_used(&self) -> usize {
        self.used
    }

    /// After a read failed with EMSGSIZE: the data size the next record
    /// needs (its own bytes; give a batch at least this much).
    pub fn needed(&self) -> Option<usize> {
        self.needed
    }

    pub(crate) fn entries_left(&self) -> usize {
        self.entries.len() - self.count
    }

    /// Room for `n` more bytes after the 8-aligned end.
    pub(crate) fn data_left(&self) -> usize {
        self.data.len().saturating_sub(self.used)
    }

    fn push(&mut self, entry: BatchEntry) {
        self.entries[self.count] = entry;
        self.count += 1;
    }

    /// Copies a sample's bytes in; without room, counts it as overflowed.
    pub(crate) fn push_sample(&mut self, cpu: u32, bytes: &[u8]) {
        if self.entries_left() == 0 || bytes.len() > self.data_left() || bytes.len() > u32::MAX as usize {
            self.overflowed += 1;
            return;
        }
        let offset = self.used;
        self.data[offset..offset + bytes.len()].copy_from_slice(bytes);
        self.used = aligned(offset + bytes.len()).min(self.data.len());
        self.push(BatchEntry { cpu, size: bytes.len() as u32, offset: offset as u64, lost: 0 });
    }

    /// Adds a loss report; without an entry for it, counts it as
    /// overflowed.
    pub(crate) fn push_lost(&mut self, cpu: u32, lost: u64) {
        if self.entries_left() == 0 {
            self.overflowed += 1;
            return;
        }
        self.push(BatchEntry { cpu, size: 0, offset: self.used as u64, lost });
    }

    /// Whether a sample of `size` bytes fits, given what a walk already
    /// set aside (`bytes`, `entries`); notes what an empty batch would need
    /// when it does not fit at all.
    pub(crate) fn fits(&mut self, size: usize, bytes: usize, entries: usize) -> bool {
        if entries >= self.entries_left() {
            return false;
        }
        if bytes + size <= self.data_left() {
            return true;
        }
        if self.count == 0 && entries == 0 && size > self.data.len() {
            self.needed = Some(size);
        }
        false
    }

    /// Takes the count of samples that found no room.
    pub(crate) fn take_overflowed(&mut self) -> u64 {
        core::mem::take(&mut self.overflowed)
    }

    /// The error for a record that no batch of this size can hold.
    pub(crate) fn too_small(&self) -> Option<Error> {
        let needed = self.needed.filter(|_| self.count == 0)?;
        Some(log::failed(Error::new(libc::EMSGSIZE, What::BatchTooSmall(needed, self.data.len()))))
    }
}

/// `n` rounded up to 8.
fn aligned(n: usize) -> usize {
    (n + 7) & !7
}

/// Where a drain of `ring` from its tail up to `head` must stop so that
/// every sample and loss report it delivers fits `out`: the end of the
/// last record that fits. A record the walk cannot read (an inconsistent
/// ring) ends the walk at `head`, so that the drain skips what it must
/// (and counts it) as it always does.
fn fitting_end(ring: &mut PerfRing, head: u64, out: &mut BatchBuf<'_>) -> u64 {
    let (mut pos, mut bytes, mut entries) = (ring.load_tail(), 0usize, 0usize);
    loop {
        let (len, size) = match ring.record_at(pos, head) {
            At::End => return pos,
            At::Corrupt | At::NoMemory => return head,
            At::Record(rec) => match record::parse(rec) {
                Record::Sample { data } => (rec.len(), data.len()),
                _ => (rec.len(), 0),
            },
        };
        if !out.fits(size, bytes, entries) {
            return pos;
        }
        bytes += aligned(size);
        entries += 1;
        pos = pos.wrapping_add(len as u64);
    }
}

impl<H: Handler> RingSet<H> {
    /// Reads into `out` what fits of every ring, without waiting (see
    /// the module's docs). Rings are read round-robin from the one the
    /// last read left records in. Returns the entries appended; EMSGSIZE
    /// (see [`BatchBuf::needed`]) when the next record alone is larger
    /// than `out`'s data, EINVAL in the ordered mode or without entries.
    pub fn read_batch(&mut self, out: &mut BatchBuf<'_>) -> Result<usize> {
        if self.order.is_some() {
            return Err(log::invalid("batch reads of an ordered reader"));
        }
        if self.sample_type != PERF_SAMPLE_RAW {
            let e = Error::new(libc::EOPNOTSUPP, What::BatchSampleType(self.sample_type));
            return Err(log::failed(e));
        }
        if out.entries.is_empty() {
            return Err(log::invalid("a batch without entries"));
        }
        self.reached_head = false;
        self.begin_read();
        let (before, rings) = (out.len(), self.bufs.len());
        let start = self.batch_next.min(rings.saturating_sub(1));
        let mut ret = Ok(());
        for idx in (start..rings).chain(0..start) {
            // A ring left with records (no room, or an error) is read
            // first next time.
            if out.entries_left() == 0 {
                self.batch_next = idx;
                break;
            }
            ret = self.read_ring_into(idx, out);
            if ret.is_err() || out.needed.is_some() || self.bufs[idx].rings.has_pending() {
                self.batch_next = idx;
                break;
            }
        }
        self.end_read(false, false, None);
        ret?;
        match out.too_small() {
            Some(e) => Err(e),
            None => Ok(out.len() - before),
        }
    }

    /// Reads ring `idx` into `out` as far as it fits.
    fn read_ring_into(&mut self, idx: usize, out: &mut BatchBuf<'_>) -> Result<()> {
        let buf = &mut self.bufs[idx];
        if buf.overwrite_prev_head.is_some() {
            return Ok(());
        }
        buf.publish();
        if !buf.rings.has_pending() {
            self.reached_head = true;
            return Ok(());
        }
        if let Some(a) = &mut self.adaptive {
            a.before_drain(idx, &mut self.bufs[idx], self.map_fd);
        }
        let RingSet { bufs, adaptive, map_fd, clock, .. } = self;
        let buf = &mut bufs[idx];
        buf.health.drain_begins(buf.rings.pending_bytes(), *clock);
        let (cpu, mut stats) = (buf.cpu as u32, buf.stats);
        if let Some(lost) = buf.rings.take_owed() {
            // Counted as the lost record the per-record read makes of it;
            // an entry is free (the caller checked).
            stats.others += 1;
            match deliver::take_lost(lost, &mut stats) {
                0 => {}
                left => out.push_lost(cpu, left),
            }
        }
        let to = buf.slot_move(*map_fd);
        let size = buf.rings.current().data_size() as u64;
        let out = RefCell::new(out);
        let ret = buf.rings.drain_watched(
            &mut stats,
            |ring, head, stats| {
                let end = fitting_end(ring, head, &mut out.borrow_mut());
                if end == ring.load_tail() && end != head {
                    return ControlFlow::Break(Stop::By(Halt::Done));
                }
                let flow = deliver::drain_parsed(
                    ring,
                    end,
                    stats,
                    |data| out.borrow_mut().push_sample(cpu, data),
                    |n| out.borrow_mut().push_lost(cpu, n),
                );
                match flow {
                    ControlFlow::Continue(()) if end != head && ring.load_tail() == end => {
                        ControlFlow::Break(Stop::By(Halt::Done))
                    }
                    flow => flow,
                }
            },
            |chunk, before, now| match adaptive {
                Some(a) => a.between_chunks(idx, chunk, before, now, size, to),
                None => chunk,
            },
        );
        buf.dropped += out.into_inner().take_overflowed();
        self.drain_ends(idx, stats, ret)
    }
}
