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
//! reader resynchronise at the head (counted in [`RingStats`]) instead of
//! looping or reading outside the mapping.

use crate::abi::{LIBBPF_PERF_EVENT_CONT, LIBBPF_PERF_EVENT_ERROR};
use crate::error::{Errno, Result};
use crate::kernel::{MMAP_PAGE_DATA_HEAD, MMAP_PAGE_DATA_TAIL};
use core::ffi::c_int;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};
use memmap2::{MmapOptions, MmapRaw};
use std::os::fd::RawFd;

/// Size of `struct perf_event_header`.
pub const HEADER_SIZE: usize = 8;

/// What the reader had to skip because the ring state was inconsistent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Times the reader jumped its tail to the head to recover.
    pub resyncs: u64,
    /// Bytes skipped by those jumps.
    pub skipped_bytes: u64,
}

enum Backing {
    /// Shared with the kernel through the perf fd.
    Kernel(#[allow(dead_code, reason = "owns the mapping; unmapped on drop")] MmapRaw),
    /// Ordinary memory laid out like a perf mapping (tests, fuzzing).
    Heap(#[allow(dead_code, reason = "owns the memory behind `base`")] Vec<u64>),
}

/// A mapped perf ring.
pub struct PerfRing {
    _backing: Backing,
    base: NonNull<u8>,
    page_size: usize,
    data_size: usize,
    scratch: Vec<u8>,
    stats: RingStats,
}

// SAFETY: the ring is owned memory (a private mapping or a Vec) reachable only
// through this value; moving it to another thread moves that ownership.
unsafe impl Send for PerfRing {}

impl PerfRing {
    /// Maps `1 + data_pages` pages of a perf event fd read-write (so the
    /// kernel honours our tail and never overwrites unread data).
    pub fn map(fd: RawFd, page_size: usize, data_pages: usize) -> Result<Self> {
        let data_size = checked_data_size(page_size, data_pages)?;
        let map = MmapOptions::new()
            .len(page_size + data_size)
            .map_raw(fd)
            .map_err(|e| Errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let base = NonNull::new(map.as_mut_ptr()).ok_or(Errno::NOMEM)?;
        Ok(Self::with_backing(Backing::Kernel(map), base, page_size, data_size))
    }

    /// A ring over zeroed heap memory with the same layout as a perf
    /// mapping, for tests and fuzzing: the caller plays the kernel.
    pub fn heap(page_size: usize, data_pages: usize) -> Result<Self> {
        if page_size < MMAP_PAGE_DATA_TAIL + 8 || page_size % 8 != 0 {
            return Err(Errno::INVAL);
        }
        let data_size = checked_data_size(page_size, data_pages)?;
        let mut words = vec![0u64; (page_size + data_size) / 8];
        let base = NonNull::new(words.as_mut_ptr().cast::<u8>()).ok_or(Errno::NOMEM)?;
        Ok(Self::with_backing(Backing::Heap(words), base, page_size, data_size))
    }

    fn with_backing(backing: Backing, base: NonNull<u8>, page_size: usize, data_size: usize) -> Self {
        PerfRing {
            _backing: backing,
            base,
            page_size,
            data_size,
            scratch: Vec::new(),
            stats: RingStats::default(),
        }
    }

    /// Start of the mapping (the `perf_event_mmap_page`).
    pub fn base(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Offset of the data area from [`Self::base`] (one page).
    pub fn data_offset(&self) -> usize {
        self.page_size
    }

    /// Counters of what recovery skipped.
    pub fn stats(&self) -> RingStats {
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

    /// Test/fuzz helper standing in for the kernel: sets `data_head`.
    pub fn store_head(&self, head: u64) {
        self.control_word(MMAP_PAGE_DATA_HEAD).store(head, Ordering::Release)
    }

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

    /// Reads every record between the tail and a snapshot of the head, calls
    /// `handler` with each whole record (header included, contiguous even
    /// when it wraps), and publishes the new tail once at the end.
    ///
    /// The handler returns libbpf's `bpf_perf_event_ret`: `CONT` goes on,
    /// anything else stops after this record (which counts as consumed) and
    /// is returned. An empty ring returns `CONT`. A record that cannot be
    /// copied for lack of memory returns `ERROR` and stays in the ring.
    pub fn drain<F: FnMut(&[u8]) -> c_int>(&mut self, mut handler: F) -> c_int {
        let head = self.load_head();
        let mut tail = self.load_tail();
        let mask = self.data_size as u64 - 1;
        let mut ret = LIBBPF_PERF_EVENT_CONT;

        while tail != head {
            let avail = head.wrapping_sub(tail);
            let offset = (tail & mask) as usize;
            let size = match self.record_size_at(offset, tail, avail) {
                Some(size) => size,
                None => {
                    self.resync(avail);
                    tail = head;
                    break;
                }
            };
            let record: &[u8] = if offset + size <= self.data_size {
                // SAFETY: [offset, offset+size) lies inside the data area, and
                // the kernel does not write below `head` until we move the tail
                // past it, which happens only after the handler returned.
                unsafe { core::slice::from_raw_parts(self.data_ptr().add(offset), size) }
            } else {
                if self.scratch.len() < size {
                    self.scratch.clear();
                    if self.scratch.try_reserve_exact(size).is_err() {
                        ret = LIBBPF_PERF_EVENT_ERROR;
                        break;
                    }
                    self.scratch.resize(size, 0);
                }
                let first = self.data_size - offset;
                // SAFETY: both source ranges are inside the data area (the
                // record is shorter than the ring, checked by record_size_at),
                // and `scratch` holds at least `size` bytes.
                unsafe {
                    let data = self.data_ptr();
                    let dst = self.scratch.as_mut_ptr();
                    core::ptr::copy_nonoverlapping(data.add(offset), dst, first);
                    core::ptr::copy_nonoverlapping(data, dst.add(first), size - first);
                }
                &self.scratch[..size]
            };
            ret = handler(record);
            tail = tail.wrapping_add(size as u64);
            if ret != LIBBPF_PERF_EVENT_CONT {
                break;
            }
        }
        self.store_tail(tail);
        ret
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
        let header = unsafe { self.data_ptr().add(offset).cast::<[u8; 8]>().read() };
        let size = u16::from_ne_bytes([header[6], header[7]]) as usize;
        (size >= HEADER_SIZE && size % 8 == 0 && size as u64 <= avail).then_some(size)
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
        _ => Err(Errno::INVAL),
    }
}
