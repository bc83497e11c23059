//! One CPU's perf ring: the kernel's `struct perf_event_mmap_page` followed
//! by a power-of-two data area, and the drain loop that reads it.
//!
//! Memory ordering follows the uapi contract (`include/uapi/linux/perf_event.h`,
//! `kernel/events/ring_buffer.c`): `data_head` is loaded with acquire before any
//! record is read, and `data_tail` is stored with release once per drain, after
//! the last record of the batch was handed out, so every record pointer stays
//! valid until the drain returns.
//!
//! Nothing the control page says is trusted for sizes: a tail that is
//! misaligned or further than one ring from the head, or a record header whose
//! size is zero, misaligned or larger than what the head covers, makes the
//! reader resynchronise at the head (counted in [`Counters`]) instead of
//! looping or reading outside the mapping.

pub mod pair;
pub mod record;

use crate::error::{Error, Result};
use crate::kernel::sys::{self, Mapping};
use crate::kernel::{MMAP_PAGE_DATA_HEAD, MMAP_PAGE_DATA_TAIL, PERF_RECORD_SAMPLE};
use core::ops::ControlFlow;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use std::os::fd::BorrowedFd;

/// Size of `struct perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// What the reader read, and what it had to skip because the ring state
/// was inconsistent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Records handed out.
    pub records: u64,
    /// Their bytes, headers included.
    pub bytes: u64,
    /// Times the reader jumped its tail to the head to recover.
    pub resyncs: u64,
    /// Bytes skipped by those jumps.
    pub skipped_bytes: u64,
    /// Records reported lost by the `PERF_RECORD_LOST` records read here.
    pub lost: u64,
}

/// Why a drain stopped before the head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop<B> {
    /// The handler (or sink) said so, with this value.
    By(B),
    /// A record that wraps the ring's end could not be copied; it stays
    /// in the ring.
    NoMemory,
}

/// What [`PerfRing::record_at`] found.
pub enum At<'a> {
    /// A whole record, header included.
    Record(&'a [u8]),
    /// Nothing published at this position yet.
    End,
    /// The ring state is inconsistent from here on.
    Corrupt,
    /// A wrapped record could not be copied.
    NoMemory,
}

enum Backing {
    /// Shared with the kernel through the perf fd.
    Kernel(#[allow(dead_code, reason = "owns the mapping; unmapped on drop")] Mapping),
    /// Ordinary memory laid out like a perf mapping (tests, fuzzing).
    #[cfg(any(test, feature = "internals"))]
    Heap(#[allow(dead_code, reason = "owns the memory behind `base`")] Vec<u64>),
}

/// A mapped perf ring.
pub struct PerfRing {
    _backing: Backing,
    base: NonNull<u8>,
    page_size: usize,
    data_size: usize,
    scratch: Vec<u64>,
    stats: Counters,
    /// A drain stops (and publishes its tail) at the first record boundary
    /// this many bytes past where it began, so its caller can look at the
    /// ring between such chunks (see [`Self::set_drain_chunk`]).
    chunk: u64,
}

// SAFETY: the ring is owned memory (a private mapping or a Vec) reachable only
// through this value; moving it to another thread moves that ownership.
unsafe impl Send for PerfRing {}

impl PerfRing {
    /// Maps `1 + data_pages` pages of a perf event fd. Read-write (the
    /// default) makes the kernel honour our tail and never overwrite unread
    /// data; read-only makes it an overwritable ring (the tail is ignored and
    /// must never be stored).
    pub fn map(fd: BorrowedFd<'_>, page_size: usize, data_pages: usize, writable: bool) -> Result<Self> {
        let data_size = checked_data_size(page_size, data_pages)?;
        let map = sys::mmap_perf(fd, page_size + data_size, !writable)?;
        let base = NonNull::new(map.ptr()).ok_or(Error::NOMEM)?;
        Ok(Self::with_backing(Backing::Kernel(map), base, page_size, data_size))
    }

    #[cfg(any(test, feature = "internals"))]
    /// A ring over zeroed heap memory with the same layout as a perf
    /// mapping, for tests and fuzzing: the caller plays the kernel.
    pub fn heap(page_size: usize, data_pages: usize) -> Result<Self> {
        if page_size < MMAP_PAGE_DATA_TAIL + 8 || page_size % 8 != 0 {
            return Err(Error::INVAL);
        }
        let data_size = checked_data_size(page_size, data_pages)?;
        let mut words = vec![0u64; (page_size + data_size) / 8];
        let base = NonNull::new(words.as_mut_ptr().cast::<u8>()).ok_or(Error::NOMEM)?;
        Ok(Self::with_backing(Backing::Heap(words), base, page_size, data_size))
    }

    fn with_backing(backing: Backing, base: NonNull<u8>, page_size: usize, data_size: usize) -> Self {
        PerfRing {
            _backing: backing,
            base,
            page_size,
            data_size,
            scratch: Vec::new(),
            stats: Counters::default(),
            chunk: u64::MAX,
        }
    }

    /// Makes each drain stop after about `bytes` (at the next record
    /// boundary), publishing its tail there: the ring's reader then frees
    /// space as it goes and can tell, between chunks, whether its backlog
    /// grows (the fast mode's back-pressure).
    pub fn set_drain_chunk(&mut self, bytes: u64) {
        self.chunk = bytes.max(HEADER_SIZE as u64);
    }

    /// The chunk a drain stops after (`u64::MAX`: none).
    pub fn drain_chunk(&self) -> u64 {
        self.chunk
    }

    /// Drains to the head again (no chunks).
    pub fn unchunk(&mut self) {
        self.chunk = u64::MAX;
    }

    /// Start of the mapping (the `perf_event_mmap_page`).
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Offset of the data area from [`Self::base`] (one page).
    #[cfg(feature = "internals")]
    pub fn data_offset(&self) -> usize {
        self.page_size
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Counters of what recovery skipped.
    pub fn stats(&self) -> Counters {
        self.stats
    }

    fn control_word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `offset` is data_head or data_tail, both 8-aligned and inside
        // the first page of the live mapping. The kernel (and possibly other
        // readers) access these words concurrently, which is what an atomic
        // is for; we never form a plain reference to them.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(offset).cast::<u64>()) }
    }

    /// `data_head`, loaded with acquire: records below it are fully written.
    pub fn load_head(&self) -> u64 {
        self.control_word(MMAP_PAGE_DATA_HEAD).load(Ordering::Acquire)
    }

    /// `data_tail` (written only by readers, so a relaxed load suffices).
    pub fn load_tail(&self) -> u64 {
        self.control_word(MMAP_PAGE_DATA_TAIL).load(Ordering::Relaxed)
    }

    /// Publishes `data_tail` with release: our reads of the records below it
    /// happen before the kernel may reuse their space.
    pub fn store_tail(&self, tail: u64) {
        self.control_word(MMAP_PAGE_DATA_TAIL).store(tail, Ordering::Release)
    }

    #[cfg(any(test, feature = "internals"))]
    /// Test/fuzz helper standing in for the kernel: sets `data_head`.
    pub fn store_head(&self, head: u64) {
        self.control_word(MMAP_PAGE_DATA_HEAD).store(head, Ordering::Release)
    }

    #[cfg(any(test, feature = "internals"))]
    /// Test/fuzz helper standing in for the kernel: writes `bytes` at ring
    /// position `pos` (wrapping at the end of the data area).
    pub fn write_data(&mut self, pos: u64, bytes: &[u8]) {
        assert!(bytes.len() <= self.data_size);
        let start = (pos as usize) & (self.data_size - 1);
        let first = bytes.len().min(self.data_size - start);
        let data = self.data_mut();
        data[start..start + first].copy_from_slice(&bytes[..first]);
        data[..bytes.len() - first].copy_from_slice(&bytes[first..]);
    }

    #[cfg(any(test, feature = "internals"))]
    fn data_mut(&mut self) -> &mut [u8] {
        assert!(matches!(self._backing, Backing::Heap(_)), "only heap rings are written by us");
        // SAFETY: heap rings are private memory owned by self; `&mut self`
        // guarantees no other reference into it exists.
        unsafe { core::slice::from_raw_parts_mut(self.base.as_ptr().add(self.page_size), self.data_size) }
    }

    /// Bytes published but not yet consumed, as the control page says it
    /// (clamped to the ring size, since the page may lie).
    pub fn pending_bytes(&self) -> u64 {
        self.load_head().wrapping_sub(self.load_tail()).min(self.data_size as u64)
    }

    #[cfg(any(test, feature = "internals"))]
    /// Reads every record between the tail and a snapshot of the head, calls
    /// `handler` with each whole record (header included, contiguous even
    /// when it wraps), and publishes the new tail once at the end.
    ///
    /// The handler returns `Continue` to go on, or `Break` to stop after
    /// this record (which counts as consumed); the break value is returned
    /// in [`Stop::By`]. A record that cannot be copied for lack of memory
    /// stops the drain with [`Stop::NoMemory`] and stays in the ring.
    pub fn drain<B, F: FnMut(&[u8]) -> ControlFlow<B>>(&mut self, mut handler: F) -> ControlFlow<Stop<B>> {
        self.drain_with(&mut (), |(), _, rec| handler(rec), |()| ())
    }

    #[cfg(any(test, feature = "internals"))]
    /// [`Self::drain`] with a state shared by `handler` and `finish`, which
    /// runs after the last record and before the tail is published (so the
    /// records handed out are still valid there). The handler also gets the
    /// record's header as the drain loaded it: along a run of records with
    /// the same header it is one value, so what the handler decides from it
    /// can be decided once for the run.
    #[inline(always)]
    pub fn drain_with<S, B, F, G>(&mut self, state: &mut S, handler: F, finish: G) -> ControlFlow<Stop<B>>
    where
        F: FnMut(&mut S, Header, &[u8]) -> ControlFlow<B>,
        G: FnOnce(&mut S),
    {
        self.drain_until(self.load_head(), state, handler, finish)
    }

    /// [`Self::drain_with`] up to `head`, a value of `data_head` loaded
    /// (with acquire) earlier; a reader of two rings uses it to keep order
    /// (see `CpuBuf::drain_rings`).
    #[inline(always)]
    pub fn drain_until<S, B, F, G>(
        &mut self,
        head: u64,
        state: &mut S,
        mut handler: F,
        finish: G,
    ) -> ControlFlow<Stop<B>>
    where
        F: FnMut(&mut S, Header, &[u8]) -> ControlFlow<B>,
        G: FnOnce(&mut S),
    {
        let mut tail = self.load_tail();
        let mask = self.data_size as u64 - 1;
        // Set only where a handler stops or a copy fails, so that no
        // result travels around the loop (it would take a register).
        let mut stop: Option<Stop<B>> = None;

        // Checked once: an aligned tail within one ring of an aligned head.
        // Records are multiples of 8, so these hold for every record below.
        let avail = head.wrapping_sub(tail);
        if avail != 0 && (tail % 8 != 0 || avail % 8 != 0 || avail > self.data_size as u64) {
            self.resync(avail);
            finish(state);
            self.store_tail(head);
            return ControlFlow::Continue(());
        }
        // Counted in locals, stored once; bytes follow from the tail.
        let (start, mut records) = (tail, 0u64);
        let (data, data_size) = (self.data_ptr(), self.data_size);
        // Where this drain ends: the head, or a chunk's end (a record that
        // crosses it is read whole, and ends the drain).
        let until = tail.wrapping_add(avail.min(self.chunk));
        while until.wrapping_sub(tail) as i64 > 0 && stop.is_none() {
            // Records up to the ring's end or `until`, whichever is first,
            // by pointer: few values live across the handler's calls, so
            // they all stay in registers.
            let offset = (tail & mask) as usize;
            // SAFETY: offset < data_size and the run ends inside the data area.
            let (first, end) = unsafe {
                let first = data.add(offset);
                (first, first.add((data_size - offset).min(until.wrapping_sub(tail) as usize)))
            };
            let (mut at, mut count) = (first, 0u64);
            'run: while at < end {
                // SAFETY: `at` is 8-aligned and below `end`, which is 8-aligned
                // and inside the data area, so the header lies inside it.
                let word = unsafe { header_word(at) };
                let Some(size) = word.size_within((end as usize - at as usize) as u64) else {
                    break; // wraps the ring's end, or is bad: decided below
                };
                // This record, then every next one with the very same header
                // (a stream of one sample size): those sit at a known stride,
                // so finding them does not wait on loading each size, their
                // size needs no new check, and `fit` bounds them.
                let fit = (end as usize - at as usize) / size;
                let mut left = fit;
                loop {
                    // SAFETY: [at, at + size) is inside the run; the kernel does
                    // not write below `head` until the tail moves past it,
                    // after the handler returned.
                    let flow = handler(state, word, unsafe { core::slice::from_raw_parts(at, size) });
                    // SAFETY: one of the `fit` records: at most `end`.
                    at = unsafe { at.add(size) };
                    left -= 1;
                    if let ControlFlow::Break(b) = flow {
                        stop = Some(Stop::By(b));
                        break;
                    }
                    // SAFETY: `left` more records fit, so the header at `at` is
                    // inside the run.
                    if left == 0 || unsafe { header_word(at) } != word {
                        break;
                    }
                }
                count += (fit - left) as u64;
                if stop.is_some() {
                    break 'run;
                }
            }
            records += count;
            // SAFETY: both inside the same data area.
            tail = tail.wrapping_add(unsafe { at.offset_from(first) } as u64);
            if at == end || stop.is_some() {
                continue; // at the head, at the ring's end, or stopped
            }
            let avail = head.wrapping_sub(tail);
            let offset = (tail & mask) as usize;
            // SAFETY: as in the run.
            let header = unsafe { header_word(data.add(offset)) };
            // Zero, misaligned, or beyond what the head covers: resync.
            let Some(size) = header.size_within(avail) else {
                self.count_read(records, tail.wrapping_sub(start));
                self.resync(avail);
                finish(state);
                self.store_tail(head);
                return ControlFlow::Continue(());
            };
            // The one record that wraps the ring's end, copied whole.
            let Some(record) = self.record_bytes(offset, size) else {
                stop = Some(Stop::NoMemory);
                break;
            };
            if let ControlFlow::Break(b) = handler(state, header, record) {
                stop = Some(Stop::By(b));
            }
            tail = tail.wrapping_add(size as u64);
            records += 1;
        }
        finish(state);
        self.store_tail(tail);
        self.count_read(records, tail.wrapping_sub(start));
        match stop {
            None => ControlFlow::Continue(()),
            Some(stop) => ControlFlow::Break(stop),
        }
    }

    #[cfg(any(test, feature = "internals"))]
    /// Drains like [`Self::drain`] but hands `sink(run, records)` runs of
    /// whole records that are contiguous in memory (the ring itself, except a
    /// record that wraps the end, which comes alone from scratch), with the
    /// number of records in the run. Every record's size was checked, so the
    /// sink may walk the run by `header.size`.
    /// `on_record(record)` sees each record other than a sample first (for
    /// counting lost ones).
    /// A sink's `Break` stops after that run and is returned.
    pub fn drain_spans<B, F, R>(&mut self, on_record: R, sink: F) -> ControlFlow<Stop<B>>
    where
        F: FnMut(&[u8], usize) -> ControlFlow<B>,
        R: FnMut(&[u8]),
    {
        self.drain_spans_until(self.load_head(), on_record, sink)
    }

    /// [`Self::drain_spans`] up to `head` (see [`Self::drain_until`]).
    pub fn drain_spans_until<B, F, R>(
        &mut self,
        head: u64,
        mut on_record: R,
        mut sink: F,
    ) -> ControlFlow<Stop<B>>
    where
        F: FnMut(&[u8], usize) -> ControlFlow<B>,
        R: FnMut(&[u8]),
    {
        let tail = self.load_tail();
        let avail = head.wrapping_sub(tail);
        if avail != 0 && (tail % 8 != 0 || avail % 8 != 0 || avail > self.data_size as u64) {
            self.resync(avail);
            self.store_tail(head);
            return ControlFlow::Continue(());
        }
        // In locals, so the scan below keeps them in registers whatever the
        // closures store.
        let (data, data_size) = (self.data_ptr(), self.data_size);
        let (mut pos, mut records, mut ret) = (tail, 0u64, ControlFlow::Continue(()));
        let mut no_memory = false;
        // Where a bad header was met: bytes read stop there, not at the head.
        let mut resynced_at = None;
        // Where this drain ends: the head, or a chunk's end (a record that
        // crosses it is read whole, alone, and ends the drain).
        let until = tail.wrapping_add(avail.min(self.chunk));
        while until.wrapping_sub(pos) as i64 > 0 && ret.is_continue() {
            let start = (pos & (data_size as u64 - 1)) as usize;
            // The run may not cross the ring's end nor the chunk's.
            let end = data_size.min(start + until.wrapping_sub(pos) as usize);
            let (mut off, mut run) = (start, 0usize);
            while off < end {
                // SAFETY: off is 8-aligned and below end <= data_size, a
                // multiple of 8, so the header lies inside the data area.
                let header = unsafe { header_word(data.add(off)) };
                let Some(size) = header.size_within((end - off) as u64) else {
                    break; // wraps the ring's end, or is bad: decided below
                };
                off += size;
                run += 1;
                if header.type_() != PERF_RECORD_SAMPLE {
                    // SAFETY: [off - size, off) is inside [start, end).
                    on_record(unsafe { core::slice::from_raw_parts(data.add(off - size), size) });
                    continue;
                }
                // Samples with this same header follow at a known stride.
                // SAFETY: the (end - off) / size records from `off` lie in
                // the run.
                let same = unsafe { count_same(data.add(off), size, header, (end - off) / size) };
                off += same * size;
                run += same;
            }
            if off > start {
                // SAFETY: the run was walked record by record inside
                // [start, end); the kernel does not write there until the
                // tail moves past it.
                ret = sink(unsafe { core::slice::from_raw_parts(data.add(start), off - start) }, run);
                records += run as u64;
                pos = pos.wrapping_add((off - start) as u64);
            }
            if off == end || ret.is_break() {
                continue; // at the head, at the ring's end, or stopped
            }
            // SAFETY: as in the scan.
            let header = unsafe { header_word(data.add(off)) };
            let Some(size) = header.size_within(head.wrapping_sub(pos)) else {
                self.resync(head.wrapping_sub(pos));
                resynced_at = Some(pos);
                pos = head;
                break;
            };
            // The one record that wraps the ring's end: alone, from scratch.
            let Some(rec) = self.record_bytes(off, size) else {
                no_memory = true;
                break;
            };
            if header.type_() != PERF_RECORD_SAMPLE {
                on_record(rec);
            }
            ret = sink(rec, 1);
            records += 1;
            pos = pos.wrapping_add(size as u64);
        }
        self.store_tail(pos);
        self.count_read(records, resynced_at.unwrap_or(pos).wrapping_sub(tail));
        if no_memory { ControlFlow::Break(Stop::NoMemory) } else { ret.map_break(Stop::By) }
    }

    /// Counts records handed out by paths other than [`Self::drain`].
    pub fn count_read(&mut self, records: u64, bytes: u64) {
        self.stats.records += records;
        self.stats.bytes += bytes;
    }

    /// Counts records reported lost by what was read here.
    pub fn count_lost(&mut self, lost: u64) {
        self.stats.lost += lost;
    }

    /// Reads an overwritable (`write_backward`) ring whose output the caller
    /// has paused: the records written since `*prev_head` (the head seen by
    /// the previous snapshot, 0 at first), oldest first. Returns the number of
    /// bytes written since then that were overwritten before this read (or
    /// were part of a record cut by the ring's end) and moves `*prev_head`.
    ///
    /// A backward ring's head decreases; the newest record starts at the head
    /// and older ones follow it upwards.
    pub fn snapshot_backward<F: FnMut(&[u8])>(&mut self, prev_head: &mut u64, mut handler: F) -> u64 {
        let head = self.load_head();
        let written = prev_head.wrapping_sub(head);
        let readable = written.min(self.data_size as u64);
        let mask = self.data_size as u64 - 1;
        // Walk newest to oldest, remembering where each record starts.
        let mut starts: Vec<(u64, usize)> = Vec::new();
        let mut consumed = 0u64;
        while consumed < readable {
            let pos = head.wrapping_add(consumed);
            let offset = (pos & mask) as usize;
            match self.record_size_at(offset, pos, readable - consumed) {
                Some(size) => {
                    starts.push((pos, size));
                    consumed += size as u64;
                }
                None => break,
            }
        }
        for &(pos, size) in starts.iter().rev() {
            let offset = (pos & mask) as usize;
            let rec = self.record_bytes(offset, size);
            match rec {
                Some(rec) => handler(rec),
                None => break,
            }
        }
        *prev_head = head;
        written - consumed
    }

    /// The record at free-running position `pos`, given a head snapshot:
    /// [`At::Record`] (contiguous, copied when it wraps), [`At::End`] when
    /// `pos == head`, or [`At::Corrupt`] when the ring state is inconsistent.
    pub fn record_at(&mut self, pos: u64, head: u64) -> At<'_> {
        if pos == head {
            return At::End;
        }
        let offset = (pos & (self.data_size as u64 - 1)) as usize;
        match self.record_size_at(offset, pos, head.wrapping_sub(pos)) {
            Some(size) => match self.record_bytes(offset, size) {
                Some(rec) => At::Record(rec),
                None => At::NoMemory,
            },
            None => At::Corrupt,
        }
    }

    /// Counts the bytes between `pos` and `head` as skipped after an
    /// inconsistent ring state (the caller moves its read position).
    pub fn note_skipped(&mut self, pos: u64, head: u64) {
        self.resync(head.wrapping_sub(pos));
    }

    /// The `size` bytes at data `offset`, copied to scratch when they wrap;
    /// `None` if scratch cannot grow.
    fn record_bytes(&mut self, offset: usize, size: usize) -> Option<&[u8]> {
        if offset + size <= self.data_size {
            // SAFETY: in bounds; the caller ensures the kernel is not writing
            // this range (below the head, or output paused).
            return Some(unsafe { core::slice::from_raw_parts(self.data_ptr().add(offset), size) });
        }
        let words = size / 8;
        if self.scratch.len() < words {
            self.scratch.clear();
            self.scratch.try_reserve_exact(words).ok()?;
            self.scratch.resize(words, 0);
        }
        let first = self.data_size - offset;
        // SAFETY: both source ranges are inside the data area (size is at
        // most data_size), scratch holds `size` bytes, any bytes are valid u8.
        unsafe {
            let data = self.data_ptr();
            let dst = self.scratch.as_mut_ptr().cast::<u8>();
            core::ptr::copy_nonoverlapping(data.add(offset), dst, first);
            core::ptr::copy_nonoverlapping(data, dst.add(first), size - first);
            Some(core::slice::from_raw_parts(dst.cast_const(), size))
        }
    }

    /// The size of the record at `offset`, or `None` when the ring state is
    /// inconsistent (misaligned tail, too few bytes for a header, or a size
    /// that is zero, misaligned, or beyond what `avail` covers).
    fn record_size_at(&self, offset: usize, tail: u64, avail: u64) -> Option<usize> {
        if tail % 8 != 0 || avail > self.data_size as u64 || avail < HEADER_SIZE as u64 {
            return None;
        }
        // SAFETY: offset is 8-aligned and at most data_size - 8 (data_size is a
        // multiple of 8), so the 8-byte header is inside the data area.
        unsafe { header_word(self.data_ptr().add(offset)) }.size_within(avail)
    }

    fn resync(&mut self, skipped: u64) {
        self.stats.resyncs += 1;
        self.stats.skipped_bytes += skipped.min(self.data_size as u64);
    }

    fn data_ptr(&self) -> *const u8 {
        // SAFETY: the mapping is page_size + data_size long.
        unsafe { self.base.as_ptr().add(self.page_size) }
    }
}

/// A record's `struct perf_event_header` as one loaded word: two records
/// with equal headers have the same type, misc and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header(u64);

impl Header {
    /// The header at the start of `rec` (at least 8 bytes long).
    pub fn of(rec: &[u8]) -> Header {
        let bytes: [u8; 8] = rec[..HEADER_SIZE].try_into().expect("8 bytes");
        Header(u64::from_ne_bytes(bytes))
    }

    /// `header.type`.
    #[inline(always)]
    pub fn type_(self) -> u32 {
        let b = self.0.to_ne_bytes();
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }

    /// `header.size`.
    #[inline(always)]
    pub fn size(self) -> usize {
        let b = self.0.to_ne_bytes();
        u16::from_ne_bytes([b[6], b[7]]) as usize
    }

    /// `header.size` when a record of that size can be read here: at least
    /// a header, a multiple of 8, and no more than the `room` bytes left.
    #[inline(always)]
    pub fn size_within(self, room: u64) -> Option<usize> {
        let size = self.size();
        (size >= HEADER_SIZE && size % 8 == 0 && size as u64 <= room).then_some(size)
    }
}

/// The header of the record at `at`.
///
/// # Safety
/// The 8 bytes at `at` are readable.
#[inline(always)]
unsafe fn header_word(at: *const u8) -> Header {
    // SAFETY: per the caller. Unaligned: one load wherever the ring happens
    // to be (a perf mapping is page-aligned, a test ring not).
    Header(unsafe { at.cast::<u64>().read_unaligned() })
}

/// How many of the `fit` records at `at`, `at + size`, ... have the header
/// `header`, counted up to the first that does not. Their addresses do not
/// depend on what is loaded, so the loads overlap, four per step.
///
/// # Safety
/// `at + fit * size` bytes are readable, and `size >= 8`.
#[inline(always)]
unsafe fn count_same(at: *const u8, size: usize, header: Header, fit: usize) -> usize {
    let word = |n: usize| {
        // SAFETY: called with n < fit only: the record at index n starts at
        // at + n * size and its 8 header bytes lie within at + fit * size.
        unsafe { header_word(at.add(n * size)) }.0 ^ header.0
    };
    let mut n = 0;
    while n + 4 <= fit && (word(n) | word(n + 1) | word(n + 2) | word(n + 3)) == 0 {
        n += 4;
    }
    while n < fit && word(n) == 0 {
        n += 1;
    }
    n
}

/// `data_pages * page_size`, which must be a non-zero power of two that
/// fits with the control page in an address space.
fn checked_data_size(page_size: usize, data_pages: usize) -> Result<usize> {
    match data_pages.checked_mul(page_size) {
        Some(size)
            if size.is_power_of_two()
                && size.checked_add(page_size).is_some_and(|t| t <= isize::MAX as usize) =>
        {
            Ok(size)
        }
        _ => Err(Error::INVAL),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{PERF_RECORD_LOST, PERF_RECORD_SAMPLE};
    use crate::ring::record::{self, Record};

    const GO_ON: ControlFlow<()> = ControlFlow::Continue(());
    const STOP: ControlFlow<()> = ControlFlow::Break(());

    const PAGE: usize = 2048;

    /// A record as the kernel lays it out: header, body, zero padding.
    fn record_of(type_: u32, body: &[u8]) -> Vec<u8> {
        let size = (8 + body.len()).next_multiple_of(8);
        let mut rec = vec![0u8; size];
        rec[..4].copy_from_slice(&type_.to_ne_bytes());
        rec[6..8].copy_from_slice(&(size as u16).to_ne_bytes());
        rec[8..8 + body.len()].copy_from_slice(body);
        rec
    }

    /// Plays the kernel: appends a record at the head and publishes it.
    fn push(ring: &mut PerfRing, type_: u32, body: &[u8]) -> usize {
        let rec = record_of(type_, body);
        let size = rec.len();
        let head = ring.load_head();
        ring.write_data(head, &rec);
        ring.store_head(head + size as u64);
        size
    }

    fn sample_body(n: usize, seed: u8) -> Vec<u8> {
        let raw = (n + 4).next_multiple_of(8) - 4;
        let mut body = (raw as u32).to_ne_bytes().to_vec();
        body.extend((0..raw).map(|i| if i < n { seed.wrapping_add((i as u8).wrapping_mul(7)) } else { 0 }));
        body
    }

    fn drain_all(ring: &mut PerfRing) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        assert_eq!(
            ring.drain(|rec| {
                assert_eq!(rec.as_ptr() as usize % 8, 0, "records are handed out 8-aligned");
                out.push(rec.to_vec());
                GO_ON
            }),
            ControlFlow::Continue(())
        );
        out
    }

    fn start_at(ring: &PerfRing, pos: u64) {
        ring.store_head(pos);
        ring.store_tail(pos);
    }

    #[test]
    fn a_chunked_drain_ends_after_the_record_crossing_the_chunk_even_across_the_end() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        start_at(&ring, PAGE as u64 - 48);
        let sizes: Vec<usize> =
            (0..8).map(|i| push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(20, i))).collect();
        assert_eq!(sizes, [32; 8]);
        ring.set_drain_chunk(40);
        let mut chunks = Vec::new();
        while ring.pending_bytes() > 0 {
            let mut n = 0;
            let _ = ring.drain(|_| {
                n += 1;
                GO_ON
            });
            chunks.push(n);
        }
        // 40 bytes: a record, then the one crossing the 40th byte (the
        // second wraps the ring's end, and is copied whole).
        assert_eq!(chunks, [2, 2, 2, 2]);
        assert_eq!(ring.stats().records, 8);
    }

    #[test]
    fn a_chunked_span_drain_ends_after_the_record_crossing_the_chunk() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        start_at(&ring, PAGE as u64 - 48);
        for i in 0..8 {
            push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(20, i));
        }
        ring.set_drain_chunk(72);
        let mut chunks = Vec::new();
        while ring.pending_bytes() > 0 {
            let mut n = 0;
            let _ = ring.drain_spans(
                |_| (),
                |_, records| {
                    n += records;
                    ControlFlow::<()>::Continue(())
                },
            );
            chunks.push(n);
        }
        // 72 bytes: two records, then the one crossing the 72nd byte.
        assert_eq!(chunks, [3, 3, 2]);
        assert_eq!(ring.stats().records, 8);
    }

    #[test]
    fn wraparound_at_every_offset() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        for start in (0..PAGE as u64).step_by(8) {
            // Counters far from zero too, to cover u64 arithmetic.
            for base in [0u64, 1 << 40] {
                start_at(&ring, base + start);
                let mut expected = Vec::new();
                for (i, n) in [1usize, 60, 200, 13, 500, 4, 333].into_iter().enumerate() {
                    let body = sample_body(n, (start as u8).wrapping_add(i as u8));
                    push(&mut ring, PERF_RECORD_SAMPLE, &body);
                    expected.push(body);
                }
                let got = drain_all(&mut ring);
                assert_eq!(got.len(), expected.len(), "start {start}");
                for (rec, body) in got.iter().zip(&expected) {
                    assert_eq!(&rec[8..], &body[..], "start {start}");
                    assert!(matches!(record::parse(rec), Record::Sample { .. }));
                }
                assert_eq!(ring.load_tail(), ring.load_head());
                assert_eq!((ring.stats().resyncs, ring.stats().skipped_bytes), (0, 0));
            }
        }
    }

    #[test]
    fn record_filling_the_whole_ring_wraps_intact() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        for start in [0u64, 8, 1000, PAGE as u64 - 8] {
            start_at(&ring, start);
            let body = sample_body(PAGE - 12, 9);
            assert_eq!(push(&mut ring, PERF_RECORD_SAMPLE, &body), PAGE);
            let got = drain_all(&mut ring);
            assert_eq!(got.len(), 1);
            assert_eq!(&got[0][8..], &body[..]);
        }
    }

    #[test]
    fn lost_records_are_delivered_in_order() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        let mut lost = 0u64.to_ne_bytes().to_vec();
        lost.extend_from_slice(&49u64.to_ne_bytes());
        push(&mut ring, PERF_RECORD_LOST, &lost);
        push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(8, 1));
        let got = drain_all(&mut ring);
        assert_eq!(record::parse(&got[0]), Record::Lost { lost: 49 });
        assert!(matches!(record::parse(&got[1]), Record::Sample { .. }));
    }

    #[test]
    fn tail_is_published_once_after_the_batch() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        for _ in 0..5 {
            push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(20, 0));
        }
        let before = ring.load_tail();
        let tail_word = ring.base() as usize + MMAP_PAGE_DATA_TAIL;
        let mut seen = Vec::new();
        let _ = ring.drain(|_| {
            // SAFETY: reading our own heap ring's tail word.
            seen.push(unsafe { AtomicU64::from_ptr(tail_word as *mut u64) }.load(Ordering::Relaxed));
            GO_ON
        });
        assert_eq!(seen, vec![before; 5]);
        assert_eq!(ring.load_tail(), ring.load_head());
    }

    #[test]
    fn handler_stop_consumes_only_up_to_that_record() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        let size = push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(8, 0));
        push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(8, 1));
        let mut calls = 0;
        let ret = ring.drain(|_| {
            calls += 1;
            STOP
        });
        assert_eq!((ret, calls), (ControlFlow::Break(Stop::By(())), 1));
        assert_eq!(ring.load_tail(), size as u64);
        assert_eq!(drain_all(&mut ring).len(), 1);
    }

    #[test]
    fn empty_ring_returns_cont() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        assert!(drain_all(&mut ring).is_empty());
    }

    /// Each corruption is detected, skipped to the head and counted, and a
    /// record published afterwards is delivered.
    fn assert_recovers(corrupt: impl Fn(&mut PerfRing)) {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        start_at(&ring, 4096);
        push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(8, 0));
        corrupt(&mut ring);
        let got = drain_all(&mut ring);
        assert_eq!(ring.stats().resyncs, 1, "corruption not detected");
        assert_eq!(ring.load_tail(), ring.load_head());
        let body = sample_body(40, 3);
        push(&mut ring, PERF_RECORD_SAMPLE, &body);
        let after = drain_all(&mut ring);
        assert_eq!(after.len(), 1);
        assert_eq!(&after[0][8..], &body[..]);
        assert!(got.len() <= 1);
    }

    #[test]
    fn misaligned_tail_resyncs() {
        assert_recovers(|r| r.store_tail(r.load_tail() + 3));
    }

    #[test]
    fn tail_inside_a_record_resyncs() {
        // The tail points at the record's body, whose bytes read as a header
        // of size 0.
        assert_recovers(|r| r.store_tail(r.load_tail() + 8));
    }

    #[test]
    fn head_far_beyond_tail_resyncs() {
        assert_recovers(|r| r.store_head(r.load_head() + 10 * PAGE as u64));
    }

    #[test]
    fn head_behind_tail_resyncs() {
        assert_recovers(|r| r.store_tail(r.load_head() + 64));
    }

    #[test]
    fn zero_size_header_resyncs() {
        assert_recovers(|r| {
            let tail = r.load_tail();
            r.write_data(tail + 6, &[0, 0]);
        });
    }

    #[test]
    fn oversized_header_resyncs() {
        assert_recovers(|r| {
            let tail = r.load_tail();
            r.write_data(tail + 6, &u16::MAX.to_ne_bytes());
        });
    }

    #[test]
    fn misaligned_size_resyncs() {
        assert_recovers(|r| {
            let tail = r.load_tail();
            r.write_data(tail + 6, &12u16.to_ne_bytes());
        });
    }

    /// Found by the fuzzer: an empty ring whose positions are misaligned is
    /// empty, not corrupt, for every drain.
    #[test]
    fn empty_misaligned_ring_is_not_a_resync() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        start_at(&ring, 4099);
        assert!(drain_all(&mut ring).is_empty());
        assert_eq!(
            ring.drain_spans(|_| {}, |_, _| -> ControlFlow<()> { panic!("a run from an empty ring") }),
            ControlFlow::Continue(())
        );
        assert_eq!(ring.stats(), Counters::default());
    }

    /// Found by the fuzzer: bytes skipped at a bad header met mid-drain are
    /// skipped bytes, not bytes read, in drain_spans as in drain.
    #[test]
    fn spans_count_skipped_bytes_apart() {
        let mut ring = PerfRing::heap(PAGE, 1).unwrap();
        let good = push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(8, 1)) as u64;
        let bad_at = ring.load_head();
        let bad = push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(8, 2)) as u64;
        ring.write_data(bad_at + 6, &0u16.to_ne_bytes());
        let mut runs = 0;
        assert_eq!(
            ring.drain_spans(
                |_| {},
                |run, records| {
                    assert_eq!((run.len() as u64, records), (good, 1));
                    runs += 1;
                    GO_ON
                }
            ),
            ControlFlow::Continue(())
        );
        let stats = ring.stats();
        assert_eq!((runs, stats.records, stats.bytes), (1, 1, good));
        assert_eq!((stats.resyncs, stats.skipped_bytes), (1, bad));
    }

    /// A run of samples with equal headers, broken at `odd` by a record of
    /// the same size but another type (or, with `resize`, another size).
    /// Checks that drain_with and drain_spans see every record; returns the
    /// records drain_spans' on_record saw.
    fn run_with_odd_record(odd: usize, resize: bool) -> Vec<Vec<u8>> {
        let mut ring = PerfRing::heap(PAGE, 4).unwrap();
        let mut pushed = Vec::new();
        for i in 0..13u8 {
            let (type_, body) = match (i as usize == odd, resize) {
                (true, false) => (PERF_RECORD_LOST, [7u64.to_ne_bytes(), 3u64.to_ne_bytes()].concat()),
                (true, true) => (PERF_RECORD_SAMPLE, sample_body(40, i)),
                // Equal headers; the raw size differs (4 + 8 or 4 + 12 bytes
                // both make a 24-byte record), which the header does not show.
                _ => (PERF_RECORD_SAMPLE, sample_body(if i % 3 == 0 { 8 } else { 12 }, i)),
            };
            push(&mut ring, type_, &body);
            pushed.push(record_of(type_, &body));
        }
        let head = ring.load_head();
        let mut drained = Vec::new();
        let _ = ring.drain_with(
            &mut drained,
            |out, header, rec| {
                assert_eq!(header, Header::of(rec), "the header handed out is the record's");
                out.push(rec.to_vec());
                GO_ON
            },
            |_| (),
        );
        assert_eq!(drained, pushed, "drain: odd record at {odd}");
        // The same bytes again for drain_spans.
        ring.store_tail(0);
        let (mut others, mut records, mut bytes) = (Vec::new(), 0, 0);
        let _ = ring.drain_spans(
            |rec| others.push(rec.to_vec()),
            |run, n| {
                records += n;
                bytes += run.len();
                GO_ON
            },
        );
        assert_eq!((records, bytes as u64), (13, head), "drain_spans: odd record at {odd}");
        others
    }

    #[test]
    fn runs_of_equal_headers_break_at_the_first_different_one() {
        // Every position in and around the four-header steps.
        for odd in 0..13 {
            let others = run_with_odd_record(odd, false);
            assert_eq!(others.len(), 1, "the LOST record at {odd} is seen");
            assert_eq!(record::parse(&others[0]), Record::Lost { lost: 3 });
            assert!(run_with_odd_record(odd, true).is_empty());
        }
    }

    #[test]
    fn handler_stop_inside_a_run_of_equal_headers() {
        for stop in 1..9 {
            let mut ring = PerfRing::heap(PAGE, 1).unwrap();
            let size =
                (0..8).map(|i| push(&mut ring, PERF_RECORD_SAMPLE, &sample_body(8, i))).sum::<usize>() / 8;
            let mut calls = 0;
            let ret = ring.drain(|_| {
                calls += 1;
                if calls == stop { STOP } else { GO_ON }
            });
            assert_eq!((ret, calls), (ControlFlow::Break(Stop::By(())), stop));
            assert_eq!(ring.load_tail(), (stop * size) as u64);
            assert_eq!(ring.stats().records, stop as u64);
            assert_eq!(drain_all(&mut ring).len(), 8 - stop);
        }
    }

    #[test]
    fn sizes_that_overflow_are_rejected() {
        assert_eq!(checked_data_size(4096, usize::MAX / 2).err(), Some(Error::INVAL));
        assert_eq!(checked_data_size(4096, 3).err(), Some(Error::INVAL));
        assert_eq!(checked_data_size(4096, 0).err(), Some(Error::INVAL));
        assert_eq!(checked_data_size(4096, 1 << 51).err(), Some(Error::INVAL));
        assert_eq!(checked_data_size(4096, 8), Ok(32768));
    }
}
