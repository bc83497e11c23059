//! A BPF ring buffer's memory as the kernel lays it out
//! (`kernel/bpf/ringbuf.c`): page 0 holds `consumer_pos`, the only word
//! user space writes, and is the only page the kernel lets it map
//! writable; page 1 holds `producer_pos`; the data area follows, mapped
//! twice in a row, so that a record wrapping the ring's end reads as one
//! contiguous slice. Each record is an 8-byte header (`u32 len` with the
//! busy and discard bits on top, `u32 pg_off` for the kernel) and `len`
//! bytes, the whole rounded up to 8.
//!
//! The consumer page is mapped read-write, the producer page and the data
//! read-only, as libbpf maps them. A heap-backed copy of the same layout
//! stands in for the kernel in tests and fuzzing.

use crate::error::{Error, Result, What};
use crate::kernel::sys::{self, Mapping};
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU64};
use std::os::fd::{AsRawFd, BorrowedFd};

pub use crate::kernel::{
    BPF_RINGBUF_BUSY_BIT as BUSY_BIT, BPF_RINGBUF_DISCARD_BIT as DISCARD_BIT,
    BPF_RINGBUF_HDR_SZ as HEADER_SIZE,
};

enum Backing {
    /// The kernel's pages: the consumer page (read-write), and the producer
    /// page with the data area twice (read-only).
    Kernel(
        #[allow(dead_code, reason = "owns the mapping; unmapped on drop")] Mapping,
        #[allow(dead_code, reason = "owns the mapping; unmapped on drop")] Mapping,
    ),
    /// Ordinary memory laid out the same way (tests, fuzzing).
    #[cfg(any(test, feature = "internals"))]
    Heap(#[allow(dead_code, reason = "owns the memory behind the pointers")] Vec<u64>),
}

/// One ring buffer map's memory.
pub struct RingMemory {
    _backing: Backing,
    consumer: NonNull<u8>,
    producer: NonNull<u8>,
    /// `2 * size` readable bytes.
    data: NonNull<u8>,
    size: u64,
}

// SAFETY: the memory is owned by this value (mappings or a Vec) and only
// reached through it; moving it to another thread moves that ownership.
unsafe impl Send for RingMemory {}

impl RingMemory {
    /// Maps the ring buffer map `fd` whose data area is `size` bytes (its
    /// `max_entries`), as libbpf does: the consumer page read-write, the
    /// producer page and twice the data read-only.
    pub fn map(fd: BorrowedFd<'_>, size: u32, page_size: usize) -> Result<Self> {
        let raw = fd.as_raw_fd();
        // The kernel makes ring buffers a power of two pages; anything else
        // would break the double mapping's arithmetic below.
        if !size.is_power_of_two() || (size as usize) < page_size {
            return Err(Error::new(libc::EINVAL, What::RingBufSize(raw, size)));
        }
        let rest_len = (size as usize)
            .checked_mul(2)
            .and_then(|d| d.checked_add(page_size))
            .filter(|&l| l <= isize::MAX as usize)
            .ok_or(Error::new(libc::E2BIG, What::RingBufSize(raw, size)))?;
        let consumer = sys::mmap_map(fd, page_size, 0, false)
            .map_err(|e| e.with(What::MapRingBuf(raw, "consumer page")))?;
        let rest = sys::mmap_map(fd, rest_len, page_size as u64, true)
            .map_err(|e| e.with(What::MapRingBuf(raw, "data pages")))?;
        let consumer_ptr = NonNull::new(consumer.ptr()).ok_or(Error::NOMEM)?;
        let producer_ptr = NonNull::new(rest.ptr()).ok_or(Error::NOMEM)?;
        // SAFETY: the second mapping is page_size + 2 * size long.
        let data = unsafe { producer_ptr.add(page_size) };
        Ok(RingMemory {
            _backing: Backing::Kernel(consumer, rest),
            consumer: consumer_ptr,
            producer: producer_ptr,
            data,
            size: size as u64,
        })
    }

    /// A ring over zeroed heap memory laid out like the kernel's, for tests
    /// and fuzzing: the caller plays the kernel ([`Self::store_producer`],
    /// [`Self::write_data`]). `size` is a power of two, at least 8.
    #[cfg(any(test, feature = "internals"))]
    pub fn heap(size: u64) -> Self {
        assert!(size.is_power_of_two() && size >= 8, "ring size {size}");
        // A consumer word, a producer word (each on its own cache line in
        // spirit), then the data twice.
        let words = 16 + 2 * size as usize / 8;
        let mut mem = vec![0u64; words];
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).expect("a Vec's pointer");
        // SAFETY: all three offsets are inside the allocation.
        let (producer, data) = unsafe { (base.add(64), base.add(128)) };
        RingMemory { _backing: Backing::Heap(mem), consumer: base, producer, data, size }
    }

    /// Size of the data area in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `consumer_pos`: written by the reader, read by the kernel.
    pub fn consumer(&self) -> &AtomicU64 {
        // SAFETY: 8-aligned (page or Vec<u64> start), inside the read-write
        // consumer page for as long as self lives; the kernel and other
        // readers of the map access it concurrently, as atomics.
        unsafe { &*self.consumer.as_ptr().cast::<AtomicU64>() }
    }

    /// `producer_pos`: written by the kernel, read-only here.
    pub fn producer(&self) -> &AtomicU64 {
        // SAFETY: 8-aligned and inside the producer page for as long as self
        // lives. The page is mapped read-only: std's atomics allow plain
        // (relaxed/acquire) loads of a lock-free size on read-only memory,
        // and nothing here ever stores through this reference.
        unsafe { &*self.producer.as_ptr().cast::<AtomicU64>() }
    }

    /// The `len` word of the header at data offset `offset`.
    ///
    /// # Safety
    /// `offset` is 8-aligned and below [`Self::size`].
    #[inline(always)]
    pub unsafe fn header_len(&self, offset: u64) -> &AtomicU32 {
        // SAFETY: inside the data area (caller), 4-aligned; read-only memory
        // loaded only (see `producer`); the kernel writes it concurrently.
        unsafe { &*self.data.as_ptr().add(offset as usize).cast::<AtomicU32>() }
    }

    /// The `len` bytes after the header at data offset `offset`.
    ///
    /// # Safety
    /// `offset < size`, and `offset + 8 + len <= 2 * size`; the kernel does
    /// not write those bytes while the slice lives (the record is committed
    /// and the consumer position has not passed it).
    #[inline(always)]
    pub unsafe fn body(&self, offset: u64, len: usize) -> &[u8] {
        // SAFETY: per the caller, inside the doubly-mapped data area.
        unsafe { core::slice::from_raw_parts(self.data.as_ptr().add(offset as usize + 8), len) }
    }

    /// Test/fuzz helper standing in for the kernel: sets `producer_pos`.
    #[cfg(any(test, feature = "internals"))]
    pub fn store_producer(&self, pos: u64) {
        assert!(matches!(self._backing, Backing::Heap(_)), "only heap rings are written by us");
        // SAFETY: a heap ring's producer word is writable memory of ours.
        unsafe { AtomicU64::from_ptr(self.producer.as_ptr().cast()) }
            .store(pos, core::sync::atomic::Ordering::Release);
    }

    /// Test/fuzz helper standing in for the kernel: writes `bytes` at ring
    /// position `pos`, wrapping, into both copies of the data area. Takes
    /// `&self` as the kernel writes while a reader walks: byte by byte
    /// through the raw pointer, never through a reference to the area.
    #[cfg(any(test, feature = "internals"))]
    pub fn write_data(&self, pos: u64, bytes: &[u8]) {
        assert!(matches!(self._backing, Backing::Heap(_)), "only heap rings are written by us");
        assert!(bytes.len() as u64 <= self.size);
        let size = self.size as usize;
        for (i, &b) in bytes.iter().enumerate() {
            let at = (pos as usize).wrapping_add(i) & (size - 1);
            // SAFETY: heap memory owned by self, 2 * size bytes from `data`;
            // at + size < 2 * size.
            unsafe {
                self.data.as_ptr().add(at).write(b);
                self.data.as_ptr().add(at + size).write(b);
            }
        }
    }
}
