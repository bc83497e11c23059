//! Lost records exact at any moment, on the real kernel: a 1-page ring
//! overflowed (by the BPF producer, by a uprobe an event set watches) and
//! drained shows `lost == produced - delivered` before any later record
//! lets the kernel write its `PERF_RECORD_LOST`; the final drain reports
//! those losses once, and the kernel's LOST record that comes later is not
//! counted again. libbpf's attr (no `count_lost`) keeps today's figures
//! and an 8-byte `read()`.
//!
//! Before Linux 6.0 (no `PERF_FORMAT_LOST`) the same scenarios check the
//! degraded figures: losses known once the LOST record comes, as today.
//! Needs root with BPF, `make producer-lib` and tracefs for uprobes;
//! skipped otherwise, a failure under `CI=true`.

#[path = "../examples/support/producer.rs"]
mod producer;

mod skip;
use perfbuf::PerfBuffer;
use perfbuf::events::{Event, EventRecord, EventSet};
use producer::Producer;
use skip::skip;
use std::cell::Cell;
use std::os::fd::AsRawFd;

/// Only one test at a time emits on CPU 0.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Records produced in each overflow: far more than a page holds.
const PRODUCED: u32 = 2000;

fn skip_or_fail(why: String) {
    skip(why);
}

/// Whether the kernel counts losses in `read()` (`PERF_FORMAT_LOST`,
/// Linux 6.0): `uname -r` is 6.0 or later.
fn format_lost() -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    release.trim().split('.').next().and_then(|m| m.parse::<u32>().ok()).is_some_and(|m| m >= 6)
}

/// What the figures know before the kernel's LOST record: everything with
/// `PERF_FORMAT_LOST`, nothing without.
fn known_early(lost: u64) -> u64 {
    if format_lost() { lost } else { 0 }
}

fn producer() -> Option<Producer> {
    Producer::open().map_err(skip_or_fail).ok()
}

/// The size of a `read()` of `fd` with room for 4 words.
fn read_size(fd: std::os::fd::BorrowedFd<'_>) -> isize {
    let mut words = [0u64; 4];
    // SAFETY: reads at most 32 bytes into a live [u64; 4].
    unsafe { libc::read(fd.as_raw_fd(), words.as_mut_ptr().cast(), 32) }
}

/// Counts what the callbacks saw.
#[derive(Default)]
struct Seen {
    samples: Cell<u64>,
    lost: Cell<u64>,
}

fn buffer<'a>(p: &'a Producer, seen: &'a Seen, count_lost: bool) -> PerfBuffer<'a, perfbuf::Local> {
    buffer_in_mode(p, seen, count_lost, false)
}

fn buffer_in_mode<'a>(
    p: &'a Producer,
    seen: &'a Seen,
    count_lost: bool,
    fast: bool,
) -> PerfBuffer<'a, perfbuf::Local> {
    PerfBuffer::builder(p.map())
        .local()
        .pages(1)
        .cpus(&[0])
        .adaptive(fast)
        .count_lost(count_lost)
        .on_sample(|_, _| seen.samples.set(seen.samples.get() + 1))
        .on_lost(|_, n| seen.lost.set(seen.lost.get() + n))
        .build()
        .unwrap()
}

#[test]
fn a_perf_buffers_losses_are_exact_before_the_kernel_reports_them() {
    perf_buffer_losses(false);
}

/// The same in the fast mode, whose spill ring (16 pages for the caller's
/// 1, given once a read finds the caller's ring half full) takes the
/// burst: its own events' losses are counted too.
#[test]
fn a_fast_perf_buffers_losses_are_exact_before_the_kernel_reports_them() {
    perf_buffer_losses(true);
}

fn perf_buffer_losses(fast: bool) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = producer() else { return };
    let seen = Seen::default();
    let mut pb = buffer_in_mode(&p, &seen, true, fast);
    if fast && format_lost() {
        // 30 records of 80 bytes: more than half the page.
        p.emit(0, 64, 1, 30).unwrap();
        pb.consume().unwrap();
        assert_eq!(pb.stats(0).unwrap().spill_size, 16 * 4096, "the fast mode's spill ring");
        seen.samples.set(0);
    }
    let size = if format_lost() { 16 } else { 8 };
    assert_eq!(read_size(pb.ring_event(0).unwrap()), size, "count_lost reads {{value, lost}}");
    p.emit(0, 64, 1, PRODUCED).unwrap();
    pb.consume().unwrap();
    let delivered = seen.samples.get();
    assert!(delivered < u64::from(PRODUCED), "a 1-page ring must overflow");
    let s = pb.stats(0).unwrap();
    let lost = u64::from(PRODUCED) - delivered;
    let early = known_early(lost);
    assert_eq!((s.lost, s.lost_unreported), (early, early), "exact before any LOST record");
    assert_eq!(seen.lost.get(), 0, "the kernel has written no LOST record yet");

    assert_eq!(pb.drain_final().unwrap(), early);
    assert_eq!(seen.lost.get(), early, "the final drain reports them");
    let s = pb.stats(0).unwrap();
    assert_eq!((s.lost, s.lost_unreported), (early, 0));

    // The next record makes the kernel write its LOST record: not again.
    p.emit(0, 64, 1, 1).unwrap();
    pb.consume().unwrap();
    assert_eq!((seen.samples.get(), seen.lost.get()), (delivered + 1, lost));
    assert_eq!(pb.stats(0).unwrap().lost, lost);
}

#[test]
fn libbpfs_attr_keeps_todays_figures() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = producer() else { return };
    let seen = Seen::default();
    let mut pb = buffer(&p, &seen, false);
    assert_eq!(read_size(pb.ring_event(0).unwrap()), 8, "libbpf's event reads one count");
    p.emit(0, 64, 1, PRODUCED).unwrap();
    pb.consume().unwrap();
    let lost = u64::from(PRODUCED) - seen.samples.get();
    assert_eq!(pb.stats(0).unwrap().lost, 0, "no count: only LOST records report");
    assert_eq!(pb.drain_final().unwrap(), 0);
    p.emit(0, 64, 1, 1).unwrap();
    pb.consume().unwrap();
    assert_eq!((seen.lost.get(), pb.stats(0).unwrap().lost), (lost, lost));
}

/// The uprobe target.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn perfbuf_lost_probe_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_add(7))
}

/// Pins this thread to CPU 0 until dropped (one ring takes every hit).
struct Pinned(libc::cpu_set_t);

impl Pinned {
    fn to_cpu0() -> Pinned {
        // SAFETY: cpu_set_t is plain data; the calls write or read one.
        unsafe {
            let mut old: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut old), 0);
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut one);
            assert_eq!(libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &one), 0);
            Pinned(old)
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: restores the mask read before.
        unsafe { libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &self.0) };
    }
}

#[test]
fn an_event_sets_losses_are_exact_before_the_kernel_reports_them() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut set = match EventSet::builder().cpus(&[0]).pages(1).build() {
        Ok(s) => s,
        Err(e) => return skip_or_fail(format!("event sets need root: {e}")),
    };
    let exe = std::env::current_exe().unwrap();
    let probe = match set.add(&Event::uprobe(&exe, "perfbuf_lost_probe_target")) {
        Ok(id) => id,
        Err(e) => return skip_or_fail(format!("uprobes: {e}")),
    };
    let me = std::process::id();
    let (samples, lost) = (Cell::new(0u64), Cell::new(0u64));
    let mut pb = set
        .local_reader(|rec| match rec {
            EventRecord::Sample(s) if s.event == probe && s.pid() == me => samples.set(samples.get() + 1),
            EventRecord::Lost { lost: n, .. } => lost.set(lost.get() + n),
            _ => {}
        })
        .unwrap();
    let pinned = Pinned::to_cpu0();
    set.enable_all().unwrap();
    for i in 0..u64::from(PRODUCED) {
        perfbuf_lost_probe_target(i);
    }
    pb.consume().unwrap();
    let delivered = samples.get();
    assert!(delivered < u64::from(PRODUCED), "a 1-page ring must overflow");
    let s = pb.stats(0).unwrap();
    let expected = u64::from(PRODUCED) - delivered;
    let early = known_early(expected);
    assert_eq!((s.lost, s.lost_unreported), (early, early), "exact before any LOST record");
    assert_eq!(lost.get(), 0, "the kernel has written no LOST record yet");
    // The counts read follows the read_format the set gave its events.
    assert_eq!(set.read(probe).unwrap().values, vec![(probe, u64::from(PRODUCED))]);

    assert_eq!(pb.drain_final().unwrap(), early);
    assert_eq!(lost.get(), early, "the final drain reports them");
    assert_eq!(pb.stats(0).unwrap().lost_unreported, 0);

    // One more hit: the kernel writes its LOST record first, not counted again.
    perfbuf_lost_probe_target(0);
    set.disable_all().unwrap();
    drop(pinned);
    pb.consume().unwrap();
    assert_eq!((samples.get(), lost.get()), (delivered + 1, expected));
    assert_eq!(pb.stats(0).unwrap().lost, expected);
}
