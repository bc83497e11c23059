//! The loss identity and the rings' health on the fake kernel: every
//! output delivered or in exactly one loss bucket, the backlog's
//! high-water mark, rates, and a burst replayed with the suggested size.

use super::config::Options;
use super::deliver::Collect;
use super::*;
use crate::kernel::fake::{self, FakeKernel};
use std::os::fd::OwnedFd;

/// A fake kernel with `cpus` CPUs, a perf event array and perfbuf.bpf.h's
/// output counts map.
struct Fx {
    map: OwnedFd,
    counts: OwnedFd,
    _k: fake::Installed,
}

fn kernel(cpus: usize) -> Fx {
    let _k = fake::install(FakeKernel::new(cpus));
    let map = fake::with(|k| k.create_map(cpus as u32)).unwrap();
    let counts = fake::with(|k| k.create_percpu_array(32)).unwrap();
    Fx { map, counts, _k }
}

impl Fx {
    fn open(&self, f: impl FnOnce(&mut Options)) -> RingSet<Collect> {
        let mut o = Options::new(self.map.as_raw_fd());
        o.counts_map = Some(self.counts.as_raw_fd());
        o.count_lost = true;
        f(&mut o);
        RingSet::open(o, Collect::default()).expect("open")
    }

    /// `n` outputs of `len` bytes on `cpu` through perfbuf.bpf.h's wrapper;
    /// returns how many the helper refused.
    fn emit(&self, cpu: i32, n: u64, len: usize) -> u64 {
        let (map, counts) = (self.map.as_raw_fd(), self.counts.as_raw_fd());
        let data = vec![7u8; len];
        fake::with(|k| (0..n).filter(|_| k.emit_counted(map, counts, cpu, &data) != 0).count() as u64)
            .unwrap()
    }
}

#[test]
fn every_output_is_delivered_or_lost_in_exactly_one_bucket() {
    let fx = kernel(2);
    // One page per CPU (4096 bytes): 200 records of 40 bytes do not fit.
    let mut r = fx.open(|o| o.pages = 1);
    let refused = fx.emit(0, 200, 28);
    assert!(refused > 0, "the burst must overflow the ring");
    // The reader drops every tenth sample it reads, by its own policy.
    r.poll(0).unwrap();
    let read = r.handler.0.len() as u64;
    r.count_dropped(0, read / 10).unwrap();
    // CPU 1's slot is emptied behind the reader's back: refused, and no
    // kernel figure counts it.
    fake::with(|k| k.map_delete(fx.map.as_raw_fd(), 1)).unwrap().unwrap();
    assert_eq!(fx.emit(1, 7, 28), 7);
    // Losses the kernel counted but wrote no LOST record for yet count.
    let s = r.figures(0).unwrap();
    assert_eq!(s.produced, Some(200));
    assert_eq!(s.lost_unreported, refused, "no record came after the loss to carry its report");
    assert_eq!(s.samples, read);
    assert_eq!((s.dropped, s.delivered()), (read / 10, read - read / 10));
    assert_eq!(s.output_failed, 0, "a full ring's refusals are the kernel's");
    assert_eq!(s.produced.unwrap(), s.delivered() + s.lost_total());
    let s1 = r.figures(1).unwrap();
    assert_eq!((s1.produced, s1.output_failed, s1.samples), (Some(7), 7, 0));
    assert_eq!(s1.produced.unwrap(), s1.delivered() + s1.lost_total());
    // Once reported, the kernel's losses move bucket, not total.
    fx.emit(0, 1, 28);
    r.poll(0).unwrap();
    let s = r.figures(0).unwrap();
    assert_eq!((s.lost_reported(), s.lost_unreported), (refused, 0));
    assert_eq!(s.produced.unwrap(), s.delivered() + s.lost_total());
    let all = r.output_counts().unwrap().unwrap();
    assert_eq!((all[0].calls, all[0].no_space, all[1].no_reader), (201, refused, 7));
}

#[test]
fn without_the_counts_map_produced_is_unknown() {
    let fx = kernel(1);
    let mut r = RingSet::open(Options::new(fx.map.as_raw_fd()), Collect::default()).unwrap();
    fx.emit(0, 3, 8);
    r.poll(0).unwrap();
    let s = r.figures(0).unwrap();
    assert_eq!((s.produced, s.output_failed, s.samples, s.delivered()), (None, 0, 3, 3));
}

#[test]
fn a_map_of_another_kind_is_refused_as_counts() {
    let fx = kernel(1);
    let mut o = Options::new(fx.map.as_raw_fd());
    o.counts_map = Some(fx.map.as_raw_fd());
    let e = RingSet::open(o, Collect::default()).err().expect("refused");
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(e.to_string().contains("PERCPU_ARRAY"), "{e}");
}

#[test]
fn health_follows_backlog_rates_and_the_last_record() {
    let fx = kernel(1);
    let mut r = fx.open(|o| o.pages = 4);
    assert_eq!(r.health(0).unwrap().since_last_record, None);
    // 1,000 records of 32 bytes over one second, read every 100 ms.
    for _ in 0..10 {
        fx.emit(0, 100, 20);
        fake::with(|k| k.advance(Duration::from_millis(100)));
        r.poll(0).unwrap();
    }
    fx.emit(0, 100, 20);
    fake::with(|k| k.advance(Duration::from_millis(100)));
    r.poll(0).unwrap();
    let h = r.health(0).unwrap();
    assert_eq!((h.peak_pending_bytes, h.pending_bytes), (3200, 0));
    assert!((h.records_per_sec - 1000.0).abs() < 1.0, "{h:?}");
    assert!((h.bytes_per_sec - 32_000.0).abs() < 100.0, "{h:?}");
    assert!((h.wakeups_per_sec - 10.0).abs() < 0.1, "one wake-up per poll: {h:?}");
    assert_eq!(h.since_last_record, Some(Duration::ZERO));
    assert_eq!((h.needed_bytes, h.suggested_pages), (3200, 1), "no loss: the peak backlog");
    assert!(h.online);
    fake::with(|k| k.advance(Duration::from_secs(5)));
    let h = r.health(0).unwrap();
    assert_eq!(h.since_last_record, Some(Duration::from_secs(5)));
    assert!(h.records_per_sec < 25.0, "100 records in the last 5.1 s: {h:?}");
}

#[test]
fn a_burst_replayed_with_the_suggested_size_loses_nothing() {
    // The burst: 2,000 records of 48 bytes while the reader is away.
    let burst = |pages: usize| {
        let fx = kernel(1);
        let mut r = fx.open(|o| o.pages = pages);
        fx.emit(0, 2000, 36);
        r.poll(0).unwrap();
        r.drain_final().unwrap();
        (r.figures(0).unwrap(), r.health(0).unwrap())
    };
    let (s, h) = burst(8);
    assert!(s.lost > 0, "8 pages lose part of the burst: {s:?}");
    assert_eq!(h.peak_pending_bytes, 8 * 4096 - 8 * 4096 % 48, "the ring was full");
    assert!(h.needed_bytes >= 2000 * 48, "{h:?}");
    assert_eq!(h.suggested_pages, 32);
    let (s, h) = burst(h.suggested_pages);
    assert_eq!((s.lost, s.samples), (0, 2000));
    assert_eq!(h.suggested_pages, 32, "what the burst needed, measured without loss");
}
