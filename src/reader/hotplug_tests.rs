//! CPUs that come and go, on the fake kernel (which leaves an event dead
//! when its CPU goes offline, as Linux does): non-contiguous online CPUs,
//! a CPU coming online, going offline with records in its ring, coming
//! back, without uevents, many CPUs, and the fast and ordered modes.

use super::config::Options;
use super::deliver::Collect;
use super::*;
use crate::kernel::fake::{self, FakeKernel};
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;

struct Fx {
    map: OwnedFd,
    counts: OwnedFd,
    _k: fake::Installed,
}

/// `possible` CPUs, those of `offline` offline, a map with a slot each.
fn kernel(possible: usize, offline: &[usize], setup: impl FnOnce(&mut FakeKernel)) -> Fx {
    let mut k = FakeKernel::new(possible);
    for &c in offline {
        k.set_online(c, false);
    }
    setup(&mut k);
    let _k = fake::install(k);
    let map = fake::with(|k| k.create_map(possible as u32)).unwrap();
    let counts = fake::with(|k| k.create_percpu_array(32)).unwrap();
    Fx { map, counts, _k }
}

impl Fx {
    fn open(&self, f: impl FnOnce(&mut Options)) -> RingSet<Collect> {
        let mut o = Options::new(self.map.as_raw_fd());
        o.hotplug = true;
        o.count_lost = true;
        o.counts_map = Some(self.counts.as_raw_fd());
        f(&mut o);
        RingSet::open(o, Collect::default()).expect("open")
    }

    /// `n` outputs on `cpu` through perfbuf.bpf.h's wrapper, whose first 8
    /// bytes count from `first`; returns how many were refused.
    fn emit(&self, cpu: i32, n: u64, first: u64) -> u64 {
        let (map, counts) = (self.map.as_raw_fd(), self.counts.as_raw_fd());
        fake::with(|k| {
            (0..n).filter(|i| k.emit_counted(map, counts, cpu, &(first + i).to_ne_bytes()) != 0).count()
                as u64
        })
        .unwrap()
    }

    /// The CPU of the event slot `key` points at.
    fn slot_cpu(&self, key: u32) -> Option<i32> {
        let map = self.map.as_raw_fd();
        fake::with(|k| k.slot(map, key).and_then(|fd| k.event(fd)).map(|e| e.cpu)).unwrap()
    }

    fn online(&self, cpu: usize, on: bool) {
        fake::with(|k| k.set_online(cpu, on));
    }
}

/// Samples read per CPU.
fn per_cpu(r: &RingSet<Collect>) -> BTreeMap<i32, u64> {
    let mut m = BTreeMap::new();
    for &(cpu, _) in &r.handler.0 {
        *m.entry(cpu).or_default() += 1;
    }
    m
}

fn ring_of(r: &RingSet<Collect>, cpu: i32) -> usize {
    (0..r.buffer_cnt()).find(|&i| r.cpu_of(i).unwrap() == cpu).expect("a ring for the cpu")
}

/// Every ring's identity adds up, and nothing is lost.
fn all_accounted(r: &RingSet<Collect>) {
    for i in 0..r.buffer_cnt() {
        let s = r.figures(i).unwrap();
        assert_eq!(s.produced.unwrap(), s.delivered() + s.lost_total(), "{s:?}");
    }
}

#[test]
fn non_contiguous_online_cpus_get_their_own_keys_and_lose_nothing() {
    // Possible 0-3, online 0 and 2 (cilium/ebpf#2100 reads the wrong CPUs here).
    let fx = kernel(4, &[1, 3], |_| ());
    let mut r = fx.open(|_| ());
    assert_eq!(r.buffer_cnt(), 2);
    assert_eq!((r.cpu_of(0).unwrap(), r.cpu_of(1).unwrap()), (0, 2));
    assert_eq!(
        (fx.slot_cpu(0), fx.slot_cpu(1), fx.slot_cpu(2), fx.slot_cpu(3)),
        (Some(0), None, Some(2), None)
    );
    assert_eq!(fx.emit(0, 50, 0) + fx.emit(2, 70, 0), 0);
    r.poll(0).unwrap();
    assert_eq!(per_cpu(&r), BTreeMap::from([(0, 50), (2, 70)]));
    all_accounted(&r);
    assert!((0..2).all(|i| r.figures(i).unwrap().lost_total() == 0));
}

#[test]
fn a_cpu_coming_online_gets_its_event_ring_and_slot_in_the_poll_it_wakes() {
    let fx = kernel(4, &[1, 3], |_| ());
    let mut r = fx.open(|_| ());
    assert_eq!(r.watches_cpus(), Some(true), "the kernel's uevents");
    // Before: an output on CPU 1 finds no slot (as with libbpf: ENOENT).
    fx.online(1, true);
    assert_eq!(fx.emit(1, 3, 0), 3);
    // The uevent wakes the poll, which goes back to waiting its timeout.
    let t0 = Moment::now();
    assert_eq!(r.poll(100).unwrap(), 0);
    assert_eq!(Moment::now().since(t0), Duration::from_millis(100));
    assert_eq!((r.buffer_cnt(), r.cpu_of(2).unwrap(), fx.slot_cpu(1)), (3, 1, Some(1)));
    assert_eq!(fx.emit(1, 40, 100), 0);
    assert_eq!(r.poll(0).unwrap(), 1);
    assert_eq!(per_cpu(&r), BTreeMap::from([(1, 40)]));
    let s = r.figures(2).unwrap();
    assert_eq!((s.produced, s.output_failed, s.samples), (Some(43), 3, 40), "the 3 before it had a slot");
    all_accounted(&r);
}

#[test]
fn a_cpu_going_offline_is_read_and_kept_and_coming_back_gets_a_fresh_event() {
    let fx = kernel(2, &[], |_| ());
    let mut r = fx.open(|_| ());
    let old = fake::with(|k| k.slot(fx.map.as_raw_fd(), 1)).unwrap().unwrap();
    // Records waiting in CPU 1's ring when it goes.
    assert_eq!(fx.emit(1, 25, 0), 0);
    fx.online(1, false);
    r.poll(0).unwrap();
    assert_eq!(per_cpu(&r), BTreeMap::from([(1, 25)]), "read when the cpu went");
    assert_eq!(r.buffer_cnt(), 2, "its ring is kept");
    assert!(!r.health(1).unwrap().online);
    // Back online: the old event is dead (EOPNOTSUPP, and ENABLE does not
    // revive it) until the reader hears of it.
    fx.online(1, true);
    assert_eq!(fx.emit(1, 4, 0), 4);
    assert!(fake::with(|k| k.event(old).unwrap().dead).unwrap());
    r.poll(0).unwrap();
    let fresh = fake::with(|k| k.slot(fx.map.as_raw_fd(), 1)).unwrap().unwrap();
    assert_ne!(fresh, old, "a fresh event in the slot");
    assert_eq!(fx.emit(1, 30, 100), 0);
    r.poll(0).unwrap();
    assert_eq!(per_cpu(&r), BTreeMap::from([(1, 55)]));
    let (s, h) = (r.figures(1).unwrap(), r.health(1).unwrap());
    assert_eq!((s.produced, s.output_failed, s.samples, s.records), (Some(59), 4, 55, 55));
    assert_eq!((h.replaced, h.online), (1, true));
    assert_eq!(r.buffer_cnt(), 2, "the same ring index");
    all_accounted(&r);
}

#[test]
fn offline_and_back_in_one_read_of_the_uevents_loses_nothing() {
    let fx = kernel(2, &[], |_| ());
    let mut r = fx.open(|_| ());
    fx.emit(1, 10, 0);
    fx.online(1, false);
    fx.online(1, true);
    // Both changes come in one read of the uevents: offline, then online.
    r.poll(0).unwrap();
    fx.emit(1, 10, 10);
    r.poll(0).unwrap();
    let stamps: Vec<u64> = r.handler.0.iter().map(|&(_, s)| s).collect();
    assert_eq!(stamps, (0..20).collect::<Vec<_>>());
    assert_eq!(r.health(1).unwrap().replaced, 1);
}

#[test]
fn an_ordered_reader_delivers_the_old_rings_records_before_the_fresh_ones() {
    let fx = kernel(2, &[], |_| ());
    let mut r = fx.open(|_| ());
    r.set_order(crate::reader::order::OrderBy::RawPrefix, Duration::from_millis(5)).unwrap();
    // Keys 0..10 wait in CPU 1's ring when it goes and comes back.
    fx.emit(1, 10, 0);
    fx.online(1, false);
    fx.online(1, true);
    // An ordered poll that delivers returns at once: the next serves the news.
    let slot_dead = || fake::with(|k| k.event(k.slot(fx.map.as_raw_fd(), 1).unwrap()).unwrap().dead).unwrap();
    for _ in 0..100 {
        if !slot_dead() {
            break;
        }
        r.poll(0).unwrap();
    }
    assert!(!slot_dead(), "the cpu that came back still has its dead event in the slot");
    // The fresh ring takes records at once.
    assert_eq!(fx.emit(1, 10, 10), 0);
    fx.emit(0, 2, 100);
    fake::with(|k| k.advance(Duration::from_millis(10)));
    r.flush_ordered().unwrap();
    let stamps: Vec<u64> = r.handler.0.iter().map(|&(_, s)| s).collect();
    assert_eq!(stamps, (0..20).chain([100, 101]).collect::<Vec<_>>());
}

#[test]
fn without_uevents_a_timer_compares_the_online_cpus() {
    let fx = kernel(3, &[2], |k| k.uevents_allowed = false);
    let mut r = fx.open(|_| ());
    assert_eq!(r.watches_cpus(), Some(false));
    fx.online(2, true);
    // The timer's next tick (every 500 ms) finds it.
    assert_eq!(r.poll(600).unwrap(), 0);
    assert_eq!((r.buffer_cnt(), fx.slot_cpu(2)), (3, Some(2)));
    fx.emit(2, 5, 0);
    r.poll(0).unwrap();
    assert_eq!(per_cpu(&r), BTreeMap::from([(2, 5)]));
}

#[test]
fn a_lost_uevent_is_made_up_for_by_the_next_poll_a_second_later() {
    let fx = kernel(2, &[1], |_| ());
    let mut r = fx.open(|_| ());
    fx.online(1, true);
    // The socket overflowed: the change never arrives.
    let sock = (3..1024).find(|&fd| fake::with(|k| k.read_uevents(fd).is_ok()).unwrap());
    assert!(sock.is_some());
    fake::with(|k| k.advance(Duration::from_millis(1100)));
    fx.emit(0, 1, 0);
    r.poll(0).unwrap();
    assert_eq!((r.buffer_cnt(), fx.slot_cpu(1)), (2, Some(1)));
}

#[test]
fn libbpfs_default_reads_the_cpus_online_at_creation_for_good() {
    let fx = kernel(2, &[1], |_| ());
    let mut r = fx.open(|o| o.hotplug = false);
    assert_eq!(r.watches_cpus(), None);
    fx.online(1, true);
    r.poll(0).unwrap();
    assert_eq!((r.buffer_cnt(), fx.slot_cpu(1)), (1, None));
    assert_eq!(fx.emit(1, 3, 0), 3, "ENOENT, as with libbpf");
}

#[test]
fn many_cpus_come_and_go_and_every_record_is_read() {
    let n = 256;
    let odd: Vec<usize> = (0..n).filter(|c| c % 2 == 0).collect();
    let fx = kernel(n, &odd.iter().map(|c| c + 1).collect::<Vec<_>>(), |_| ());
    let mut r = fx.open(|_| ());
    assert_eq!(r.buffer_cnt(), n / 2);
    for c in (1..n).step_by(2) {
        fx.online(c, true);
    }
    r.poll(0).unwrap();
    assert_eq!(r.buffer_cnt(), n);
    for c in 0..n {
        assert_eq!(fx.slot_cpu(c as u32), Some(c as i32));
        assert_eq!(fx.emit(c as i32, 3, 0), 0);
    }
    // A quarter go offline with their records, then come back.
    for c in (0..n).step_by(4) {
        fx.online(c, false);
    }
    r.poll(0).unwrap();
    for c in (0..n).step_by(4) {
        fx.online(c, true);
    }
    r.poll(0).unwrap();
    for c in 0..n {
        assert_eq!(fx.emit(c as i32, 2, 3), 0, "cpu {c}");
    }
    while r.poll(0).unwrap() > 0 {}
    let got = per_cpu(&r);
    assert_eq!(got.len(), n);
    assert!(got.values().all(|&v| v == 5), "{got:?}");
    assert_eq!((0..n).map(|i| r.health(i).unwrap().replaced).sum::<u64>(), (n / 4) as u64);
    all_accounted(&r);
}

/// `per_ms` records a millisecond on `cpu` for `ms`, polled every tenth of
/// a millisecond (a reader the fast mode batches behind), the first 8 bytes
/// counting from `first`.
fn stream(fx: &Fx, r: &mut RingSet<Collect>, cpu: i32, per_ms: u64, ms: u64, first: u64) {
    let tenth = per_ms / 10;
    for i in 0..ms * 10 {
        fx.emit(cpu, tenth, first + i * tenth);
        fake::with(|k| k.advance(Duration::from_micros(100)));
        r.poll(0).expect("poll");
    }
}

#[test]
fn the_fast_mode_serves_cpus_that_come_and_go() {
    let fx = kernel(3, &[2], |_| ());
    let mut r = fx.open(|o| {
        o.hotplug = false;
        o.adaptive = true;
    });
    assert!(r.watches_cpus().is_some(), "the fast mode opts in");
    fx.online(2, true);
    r.poll(0).unwrap();
    let two = ring_of(&r, 2);
    // The new CPU batches like the others once its rate is high.
    stream(&fx, &mut r, 2, 100, 60, 0);
    let f = r.figures(two).unwrap();
    assert!(f.batched && f.spill_size > 0, "the fast mode on the new cpu: {f:?}");
    // CPU 1 batches, goes offline with records waiting, comes back.
    let one = ring_of(&r, 1);
    stream(&fx, &mut r, 1, 100, 60, 0);
    assert!(r.figures(one).unwrap().spill_size > 0);
    fx.emit(1, 50, 6000);
    fx.online(1, false);
    r.poll(0).unwrap();
    assert_eq!(r.figures(one).unwrap().spill_size, 0, "its dead fast events are gone");
    fx.online(1, true);
    r.poll(0).unwrap();
    assert_eq!(r.health(one).unwrap().replaced, 1);
    stream(&fx, &mut r, 1, 100, 60, 10_000);
    let f = r.figures(one).unwrap();
    assert!(f.batched && f.spill_size > 0, "batching again after it came back: {f:?}");
    while r.poll(0).unwrap() > 0 {}
    assert_eq!(per_cpu(&r), BTreeMap::from([(1, 6000 + 50 + 6000), (2, 6000)]));
    all_accounted(&r);
}

#[test]
fn an_ordered_reader_orders_the_records_of_a_cpu_added_later() {
    let fx = kernel(2, &[1], |_| ());
    let mut r = fx.open(|_| ());
    r.set_order(crate::reader::order::OrderBy::RawPrefix, Duration::from_millis(5)).unwrap();
    fx.online(1, true);
    r.poll(0).unwrap();
    fx.emit(1, 3, 1);
    fx.emit(0, 3, 2);
    fake::with(|k| k.advance(Duration::from_millis(10)));
    r.flush_ordered().unwrap();
    let stamps: Vec<u64> = r.handler.0.iter().map(|&(_, s)| s).collect();
    assert_eq!(stamps, vec![1, 2, 2, 3, 3, 4]);
}

#[test]
fn a_caller_polling_the_epoll_fd_itself_gets_the_news_through_consume() {
    let fx = kernel(2, &[1], |_| ());
    let mut r = fx.open(|_| ());
    fx.online(1, true);
    // Its own loop: the epoll fd is readable (the uevent), then consume.
    let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 4];
    assert_eq!(sys::epoll_wait(r.epoll_fd(), &mut ev, 4, 0).unwrap(), 1);
    fake::with(|k| k.advance(Duration::from_millis(5)));
    r.consume().unwrap();
    assert_eq!((r.buffer_cnt(), fx.slot_cpu(1)), (2, Some(1)));
    assert_eq!(sys::epoll_wait(r.epoll_fd(), &mut ev, 4, 0).unwrap(), 0, "nothing left to spin on");
}
