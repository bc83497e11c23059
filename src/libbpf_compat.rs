//! What only libbpf's C API needs of the reader, for the C library
//! (`capi/`, whose `perf_buffer__*` are libbpf's, and whose other
//! functions keep libbpf's habits): a map fd that may be invalid, the
//! caller's `perf_event_attr` passed through untouched, explicit map keys,
//! errno left at ENOENT after a drain, the raw mapping, a wake-up fd made
//! only when first used, allocation (and formatting) that fails with
//! ENOMEM (or cuts) instead of aborting the host, and the test builds'
//! fault injection. Rust users
//! need none of it: not a stable API.

use crate::error::Result;
use crate::perf_buffer::{Builder, Reader};
use crate::reader::config::{AttrChoice, CpuSelection};
use crate::reader::sink::Sink;
use crate::reader::waker::WakeFd;
use std::os::fd::{AsRawFd, RawFd};

pub use crate::kernel::fallible::{boxed, collect, reserve};
pub use crate::kernel::sys::CallerAttr;
/// Formats into a buffer, cut to fit on a character boundary: messages
/// without allocating.
pub use crate::log::format_into;

/// A builder over `map_fd`, which the reader does not hold (the caller
/// keeps it) and which may be invalid: the reader reports that as libbpf
/// does. Like libbpf's `perf_buffer__new`, the reader it builds refuses a
/// map other than a `BPF_MAP_TYPE_PERF_EVENT_ARRAY` with EINVAL
/// ([`accepting_ring_buffers`] lets it read a ring buffer too).
pub fn builder(map_fd: RawFd) -> Builder<'static> {
    Builder::over_raw_fd(map_fd)
}

/// `b` reads a `BPF_MAP_TYPE_RINGBUF` too, as a Rust builder does (see
/// [`Builder`]): perfbuf's own constructors, not libbpf's.
pub fn accepting_ring_buffers(mut b: Builder<'_>) -> Builder<'_> {
    b.ring_buffers = true;
    b
}

/// The caller's attr, passed to the kernel untouched
/// (`perf_buffer__new_raw`), whose `sample_type` is `sample_type`.
pub fn with_caller_attr<'a>(mut b: Builder<'a>, attr: CallerAttr, sample_type: u64) -> Builder<'a> {
    b.opts.attr = AttrChoice::Caller(attr, sample_type);
    b
}

/// Exactly these `(cpu, map key)` pairs, in order, none skipped
/// (`perf_buffer_raw_opts`' `cpus` and `map_keys`).
pub fn with_cpu_keys(mut b: Builder<'_>, pairs: Vec<(i32, i32)>) -> Builder<'_> {
    b.opts.cpus = CpuSelection::Explicit(pairs);
    b
}

/// These CPUs (map key = CPU id; offline ones skipped), collected by the
/// caller without aborting on ENOMEM ([`collect`]).
pub fn with_cpus(mut b: Builder<'_>, cpus: Vec<i32>) -> Builder<'_> {
    b.opts.cpus = CpuSelection::Subset(cpus);
    b
}

/// Whether a drain of the last poll or consume read a ring to its head:
/// libbpf's `perf_event_read_simple` then returns
/// `libbpf_err(LIBBPF_PERF_EVENT_CONT)`, which leaves errno at ENOENT.
pub fn reached_head<S: Sink>(reader: &mut Reader<'_, S>) -> bool {
    reader.ring_set("reached_head").is_ok_and(|rings| rings.reached_head())
}

/// Ring `idx`'s mapping (`perf_buffer__buffer`): the address of its
/// control page (`struct perf_event_mmap_page`; the data follows a page
/// later) and the size of its data area. In the fast mode, the ring goes
/// back to libbpf's event for good.
pub fn ring_region<S: Sink>(reader: &mut Reader<'_, S>, idx: usize) -> Result<(*mut u8, usize)> {
    let ring = reader.ring_set("a perf ring's mapping")?.raw_ring(idx)?;
    Ok((ring.base(), ring.data_size()))
}

/// A waker of a reader that holds no fd of its own (libbpf's buffer has
/// none): its eventfd is made at the first wake. Unlike
/// [`crate::Waker`], it must not be used once the reader is gone.
pub struct BorrowedWaker(WakeFd);

/// A [`BorrowedWaker`] of `reader`.
///
/// # Safety
/// No [`BorrowedWaker::wake`] may run once `reader` is dropped (it writes
/// to the reader's epoll instance by its fd number).
pub unsafe fn borrowed_waker<S: Sink>(reader: &mut Reader<'_, S>) -> BorrowedWaker {
    BorrowedWaker(WakeFd::borrowing(reader.as_raw_fd()))
}

impl BorrowedWaker {
    /// Makes the reader's poll in progress (or its next) fail with
    /// ECANCELED. Safe from any thread while the reader lives.
    pub fn wake(&self) -> Result<()> {
        self.0.wake()
    }
}

/// Test builds only (feature `fault-injection`): system calls that fail
/// on request.
#[cfg(feature = "fault-injection")]
pub mod fault {
    use crate::error::Result;

    /// Makes the `nth` next call of failure point `point` fail with
    /// `errno` (`nth` 0 disarms); EINVAL for an unknown point.
    pub fn arm(point: &str, nth: u32, errno: i32) -> Result<()> {
        crate::kernel::fault::arm(point, nth, errno)
    }

    /// Whether a point armed has not fired yet.
    pub fn armed() -> bool {
        crate::kernel::fault::armed()
    }

    /// The library sees `list` (`"0,2-3"`; `""` for none) as the online
    /// CPUs; `None` restores the machine's.
    pub fn set_online_cpus(list: Option<&str>) -> Result<()> {
        crate::kernel::cpu::set_online_for_tests(list)
    }
}
