//! The reader and the fast mode on the fake kernel: poll's return values
//! and timeouts, every fast-mode transition and fallback, standing down,
//! lost-record reconciliation, claims on the map. No root needed.

use super::config::{Options, Wakeup};
use super::deliver::{Collect, Flow, Halt, Handler};
use super::*;
use crate::kernel::fake::{self, FakeKernel};
use crate::ring::record::DispatchStats;
use std::os::fd::OwnedFd;

const MS: Duration = Duration::from_millis(1);

struct Fx {
    map: OwnedFd,
    _k: fake::Installed,
}

fn kernel(cpus: usize, setup: impl FnOnce(&mut FakeKernel)) -> Fx {
    let mut k = FakeKernel::new(cpus);
    setup(&mut k);
    let _k = fake::install(k);
    let map = fake::with(|k| k.create_map(cpus as u32)).unwrap();
    Fx { map, _k }
}

impl Fx {
    fn options(&self, f: impl FnOnce(&mut Options)) -> Options {
        let mut o = Options::new(self.map.as_raw_fd());
        f(&mut o);
        o
    }

    fn open(&self, f: impl FnOnce(&mut Options)) -> RingSet<Collect> {
        RingSet::open(self.options(f), Collect::default()).expect("open")
    }

    /// A fast-mode reader of `pages` pages per CPU.
    fn fast(&self, pages: usize) -> RingSet<Collect> {
        self.open(|o| {
            o.adaptive = true;
            o.pages = pages;
        })
    }

    /// `n` 16-byte samples on `cpu` whose first 8 bytes count from `first`;
    /// returns how many the kernel refused.
    fn emit(&self, cpu: i32, n: u64, first: u64) -> u64 {
        let map = self.map.as_raw_fd();
        fake::with(|k| k.emit_n(map, cpu, n, 16, first)).unwrap()
    }

    /// The `wakeup_events` of the event slot `cpu` points at, and its fd.
    fn slot(&self, cpu: i32) -> (u32, RawFd) {
        let map = self.map.as_raw_fd();
        fake::with(|k| {
            let fd = k.slot(map, cpu as u32).expect("slot set");
            (k.event(fd).map_or(0, |e| e.wakeup), fd)
        })
        .unwrap()
    }

    /// What [`Self::slot`] says of a batched (streaming) CPU: the
    /// streaming event wakes at a quarter of the ring it writes into.
    fn batching(&self, f: RingStats) -> u32 {
        (if f.spill_size > 0 { f.spill_size } else { f.data_size } / 4) as u32
    }

    fn calls(&self, name: &str) -> u64 {
        fake::with(|k| k.calls.get(name).copied().unwrap_or(0)).unwrap()
    }
}

fn advance(d: Duration) {
    fake::with(|k| k.advance(d));
}

fn now() -> Moment {
    Moment::now()
}

/// `per_ms` records a millisecond on `cpu` for `ms`, polled every 100 us
/// (a prompt reader: the fast mode batches it).
fn stream<H: Handler>(fx: &Fx, r: &mut RingSet<H>, cpu: i32, per_ms: u64, ms: u64) {
    let tenth = per_ms / 10;
    for i in 0..ms * 10 {
        fx.emit(cpu, tenth + u64::from(i % 10 < per_ms % 10), i * tenth);
        advance(MS / 10);
        r.poll(0).expect("poll");
    }
}

fn stamps(r: &RingSet<Collect>) -> Vec<u64> {
    r.handler.0.iter().map(|&(_, s)| s).collect()
}

#[test]
fn poll_counts_rings_not_records() {
    let fx = kernel(2, |_| ());
    let mut r = fx.open(|_| ());
    fx.emit(0, 5, 0);
    fx.emit(1, 3, 100);
    assert_eq!(r.poll(0).unwrap(), 2);
    assert_eq!(r.handler.0.len(), 8);
    assert_eq!(r.poll(0).unwrap(), 0);
    assert_eq!(r.figures(0).unwrap().records, 5);
    assert_eq!(r.figures(1).unwrap().wakeups, 1);
}

#[test]
fn offline_cpus_get_no_ring_unless_named() {
    let fx = kernel(3, |k| k.set_online(1, false));
    let r = fx.open(|_| ());
    assert_eq!((r.buffer_cnt(), r.cpu_of(1).unwrap()), (2, 2));
    drop(r);
    // Raw mode's explicit pairs are opened as given: an offline CPU fails.
    let e = RingSet::open(
        fx.options(|o| o.cpus = config::CpuSelection::Explicit(vec![(1, 1)])),
        Collect::default(),
    );
    assert_eq!(e.err().map(|e| e.errno()), Some(libc::ENODEV));
}

#[test]
fn an_empty_poll_waits_its_timeout_even_with_the_delay_timer() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| {
        o.wakeup = Wakeup::Records(64);
        o.max_delay = Some(2 * MS);
    });
    let t0 = now();
    assert_eq!(r.poll(10).unwrap(), 0);
    assert!(now().since(t0) >= 10 * MS, "returned after {:?}", now().since(t0));
    // Below the batch: the timer delivers within the bound.
    fx.emit(0, 3, 0);
    let t0 = now();
    assert_eq!(r.poll(10).unwrap(), 1);
    assert!(now().since(t0) <= MS, "after {:?}", now().since(t0));
    assert_eq!(r.handler.0.len(), 3);
}

/// A handler that stops at its `stop_at`-th record with `halt`, and
/// takes `slow` of fake time per record.
struct Stopper {
    inner: Collect,
    stop_at: usize,
    halt: Halt,
    slow: Duration,
    /// A producer outrunning the reader: records emitted on CPU 0 into
    /// the map as records are read.
    feed: Option<Feed>,
    /// What the kernel refused of them.
    refused: u64,
}

/// A producer on CPU 0 writing into `map` as the reader reads: `freed`
/// records for each record read while the CPU's slot does not wake per
/// record, one every `slowed` records read while it does (0: `freed`
/// always).
#[derive(Clone, Copy)]
struct Feed {
    map: RawFd,
    freed: u64,
    slowed: u64,
}

impl Feed {
    /// Emits what the producer writes while the reader reads its `nth`
    /// record; returns what the kernel refused.
    fn on_read(self, nth: usize) -> u64 {
        fake::with(|k| {
            let per_record = self.slowed > 0
                && k.slot(self.map, 0).and_then(|fd| k.event(fd)).is_some_and(|e| e.wakeup == 1);
            match per_record {
                true if nth as u64 % self.slowed == 0 => k.emit_n(self.map, 0, 1, 16, 0),
                true => 0,
                false => k.emit_n(self.map, 0, self.freed, 16, 0),
            }
        })
        .unwrap()
    }
}

impl Handler for Stopper {
    fn drain(&mut self, ring: &mut PerfRing, head: u64, cpu: i32, stats: &mut DispatchStats) -> Flow {
        ring.drain_until(
            head,
            self,
            |me, _, rec| {
                if !me.slow.is_zero() {
                    advance(me.slow);
                }
                if let Some(feed) = me.feed {
                    me.refused += feed.on_read(me.inner.0.len());
                }
                let flow = me.inner.deliver(cpu, rec, stats);
                if me.inner.0.len() == me.stop_at { ControlFlow::Break(me.halt) } else { flow }
            },
            |_| (),
        )
    }

    fn deliver(&mut self, cpu: i32, rec: &[u8], stats: &mut DispatchStats) -> ControlFlow<Halt> {
        self.inner.deliver(cpu, rec, stats)
    }
}

fn stopper(stop_at: usize, halt: Halt) -> Stopper {
    Stopper { inner: Collect::default(), stop_at, halt, slow: Duration::ZERO, feed: None, refused: 0 }
}

#[test]
fn callbacks_stop_as_in_libbpf() {
    let fx = kernel(2, |_| ());
    // DONE stops the ring quietly; poll goes on with the next.
    let mut r = RingSet::open(fx.options(|_| ()), stopper(2, Halt::Done)).unwrap();
    fx.emit(0, 5, 0);
    fx.emit(1, 5, 0);
    assert_eq!(r.poll(0).unwrap(), 2);
    assert_eq!(r.handler.inner.0.len(), 7, "2 from ring 0, then all 5 of ring 1");
    drop(r);
    // Another value stops the poll and is returned as is.
    let mut r = RingSet::open(fx.options(|_| ()), stopper(1, Halt::Code(5))).unwrap();
    fx.emit(0, 2, 0);
    let e = r.poll(0).unwrap_err();
    assert_eq!((e.code(), e.kind()), (5, crate::ErrorKind::Stopped(5)));
}

#[test]
fn the_fast_mode_starts_on_the_callers_events_with_nothing_more() {
    let fx = kernel(2, |_| ());
    let r = fx.open(|o| o.adaptive = true);
    for cpu in 0..2 {
        assert_eq!(fx.slot(cpu), (1, r.bufs[cpu as usize].fd.as_raw_fd()), "libbpf's event");
        let f = r.figures(cpu as usize).unwrap();
        assert_eq!((f.spill_size, f.batched), (0, false));
    }
    assert!(!r.timer.as_ref().unwrap().ticking(), "no timer while nothing is batched");
    // Two events, the epoll set and the timer: what libbpf has, a timer,
    // and the uevent socket that serves CPUs coming and going.
    assert_eq!(fake::with(|k| k.open_objects()).unwrap(), 1 + 2 + 1 + 1 + 1);
}

#[test]
fn a_cpu_gets_its_spill_ring_when_it_first_batches() {
    let fx = kernel(2, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    let f = r.figures(0).unwrap();
    assert_eq!((f.spill_size, f.batched), (16 * 8 * 4096, true));
    assert_eq!(fx.slot(0).0, fx.batching(f));
    assert_eq!(r.figures(1).unwrap().spill_size, 0, "CPU 1 had nothing to batch");
    // Streaming and per-record events into the spill ring: two more.
    assert_eq!(fake::with(|k| k.open_objects()).unwrap(), 1 + 2 + 1 + 1 + 1 + 2);
    assert_eq!(r.handler.0.len(), 6000, "nothing lost or late across the move");
}

/// A drain that finds the caller's ring half full gives its CPU a spill
/// ring (nothing can have been lost yet): the next stall, eight times
/// what the caller's ring holds, is kept whole.
#[test]
fn a_callers_ring_found_half_full_gets_a_spill_ring() {
    let fx = kernel(1, |_| ());
    let mut r = fx.fast(1);
    // 4096 bytes hold 128 records of 32 bytes.
    assert_eq!(fx.emit(0, 80, 0), 0);
    r.consume().unwrap();
    assert_eq!(r.figures(0).unwrap().spill_size, 16 * 4096);
    assert_eq!(fx.slot(0).0, 1, "per record still");
    assert_ne!(fx.slot(0).1, r.bufs[0].fd.as_raw_fd(), "into the spill ring");
    assert_eq!(fx.emit(0, 1000, 80), 0);
    r.consume().unwrap();
    assert_eq!(stamps(&r), (0..1080).collect::<Vec<_>>());
    assert_eq!(r.figures(0).unwrap().batch_switches, 0);
    // A ring that overflowed keeps the caller's event (its loss is told
    // only by its next record there).
    let mut r = fx.fast(1);
    assert_eq!(fx.emit(0, 200, 0), 72);
    r.consume().unwrap();
    assert_eq!(fx.slot(0), (1, r.bufs[0].fd.as_raw_fd()));
    assert_eq!(fx.emit(0, 80, 0), 0);
    r.consume().unwrap();
    assert_eq!(r.handler.1, vec![(0, 72)]);
}

/// A spill ring opened while the caller has paused output starts paused.
#[test]
fn a_spill_ring_opened_while_paused_is_paused() {
    let fx = kernel(1, |_| ());
    let mut r = fx.fast(1);
    assert_eq!(fx.emit(0, 80, 0), 0);
    r.set_paused(true).unwrap();
    r.consume().unwrap();
    assert_eq!(r.figures(0).unwrap().spill_size, 16 * 4096);
    assert_eq!(fx.emit(0, 5, 80), 5, "refused while paused");
    r.set_paused(false).unwrap();
    assert_eq!(fx.emit(0, 1, 85), 0);
    r.consume().unwrap();
    assert_eq!((r.handler.0.len(), r.handler.1.clone()), (81, vec![(0, 5)]));
}

/// The slot leaves a caller's ring that lost records only once a window
/// shows none can be left unreported there (the kernel reports them only
/// with the ring's next record, and libbpf's event does not count them);
/// from then on the spill ring takes stalls whole.
#[test]
fn the_slot_leaves_a_callers_ring_only_once_its_losses_are_told() {
    let fx = kernel(1, |_| ());
    let mut r = fx.fast(16);
    // 64 KiB hold 2,048 records of 32 bytes: 3,000 overflow it, as in libbpf.
    assert_eq!(fx.emit(0, 3000, 0), 952);
    r.consume().unwrap();
    stream(&fx, &mut r, 0, 100, 50);
    assert_eq!(fx.slot(0), (1, r.bufs[0].fd.as_raw_fd()), "a window that found the ring full");
    assert_eq!(r.handler.1, vec![(0, 952)], "told by the next record");
    stream(&fx, &mut r, 0, 100, 60);
    let f = r.figures(0).unwrap();
    assert_eq!((fx.slot(0).0, f.spill_size), (fx.batching(f), 16 * 16 * 4096));
    assert_eq!(fx.emit(0, 10_000, 50_000), 0, "the spill ring takes a stall");
    r.consume().unwrap();
    assert_eq!(r.handler.0.len(), 2048 + 100 * 110 + 10_000);
    assert_eq!(r.handler.1, vec![(0, 952)]);
}

#[test]
fn a_fast_stream_batches_and_a_quiet_one_stops_batching() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60); // 100 k/s
    assert_eq!(fx.slot(0).0, fx.batching(r.figures(0).unwrap()));
    assert!(r.figures(0).unwrap().batched);
    assert!(r.timer.as_ref().unwrap().ticking());
    assert_eq!(r.handler.0.len(), 6000, "nothing lost or late across the switch");
    // Below a batch: the timer delivers within a tick.
    fx.emit(0, 10, 7000);
    let t0 = now();
    assert_eq!(r.poll(50).unwrap(), 1);
    assert!(now().since(t0) <= adaptive::TICK, "after {:?}", now().since(t0));
    assert_eq!(r.handler.0.len(), 6010);
    // Quiet: back to per record after a whole window without records, the
    // timer stops after its grace, and an empty poll sleeps its timeout.
    for _ in 0..110 {
        advance(MS);
        r.poll(0).unwrap();
    }
    assert_eq!(fx.slot(0).0, 1);
    r.poll(1).unwrap();
    assert!(!r.timer.as_ref().unwrap().ticking(), "grace over");
    let t0 = now();
    assert_eq!(r.poll(100).unwrap(), 0);
    assert!(now().since(t0) >= 100 * MS);
    assert_eq!(r.figures(0).unwrap().batch_switches, 1);
}

#[test]
fn a_faster_stream_wakes_at_a_quarter_of_the_ring_and_is_read_on_ticks() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 300, 120);
    let quarter = r.figures(0).unwrap().spill_size as u32 / 4;
    assert_eq!(fx.slot(0).0, quarter, "300 k/s streams");
    assert!(r.timer.as_ref().unwrap().ticking());
    // What sits below a quarter is read on a tick.
    fx.emit(0, 10, 7);
    let before = r.handler.0.len();
    assert_eq!(r.poll(5).unwrap(), 1);
    assert_eq!(r.handler.0.len(), before + 10);
    stream(&fx, &mut r, 0, 50, 120);
    assert_eq!(fx.slot(0).0, quarter, "50 k/s streams still");
    assert_eq!(r.figures(0).unwrap().batch_switches, 1);
    assert_eq!(r.figures(0).unwrap().lost, 0);
}

#[test]
fn a_half_full_ring_goes_back_per_record_and_is_held_there() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    assert_eq!(fx.slot(0).0, fx.batching(r.figures(0).unwrap()));
    // The reader stalls while the producer fills half the spill ring.
    let half = (16 * 8 * 4096 / 2 / 32) as u64;
    assert_eq!(fx.emit(0, half, 10_000), 0);
    r.consume().unwrap();
    assert_eq!(fx.slot(0).0, 1, "back to per-record before the drain");
    // Held for 200 ms: fast windows do not batch again meanwhile.
    stream(&fx, &mut r, 0, 100, 150);
    assert_eq!(fx.slot(0).0, 1);
    stream(&fx, &mut r, 0, 100, 110);
    assert_eq!(fx.slot(0).0, fx.batching(r.figures(0).unwrap()), "batched again after the hold");
    assert_eq!(r.figures(0).unwrap().lost, 0);
}

#[test]
fn a_reader_busy_draining_goes_back_per_record() {
    let fx = kernel(1, |_| ());
    let mut r = RingSet::open(fx.options(|o| o.adaptive = true), stopper(usize::MAX, Halt::Done)).unwrap();
    stream(&fx, &mut r, 0, 100, 60);
    assert_eq!(fx.slot(0).0, fx.batching(r.figures(0).unwrap()));
    // Each record now costs 20 us: 200 a millisecond take 4 ms to read.
    r.handler.slow = Duration::from_micros(20);
    for i in 0..4 {
        fx.emit(0, 200, i * 200);
        r.poll(0).unwrap();
    }
    assert_eq!(fx.slot(0).0, 1);
}

#[test]
fn a_backlog_growing_during_a_drain_goes_back_per_record_within_it() {
    let fx = kernel(1, |_| ());
    let mut r = RingSet::open(fx.options(|o| o.adaptive = true), stopper(usize::MAX, Halt::Done)).unwrap();
    stream(&fx, &mut r, 0, 100, 60);
    assert_eq!(fx.slot(0).0, fx.batching(r.figures(0).unwrap()));
    // The producer writes 5 records for each one the reader reads: within
    // the first chunks of this one drain the backlog passes a sixteenth of
    // the ring and grows, long before the ring is half full.
    fx.emit(0, 600, 0);
    r.handler.feed = Some(Feed { map: fx.map.as_raw_fd(), freed: 5, slowed: 0 });
    r.poll(0).unwrap();
    assert_eq!(fx.slot(0).0, 1, "per-record before the drain ended");
    r.handler.feed = None;
    r.consume().unwrap();
    assert_eq!(r.figures(0).unwrap().lost, 0);
}

/// The 3 us callback behind a producer that, freed of per-record
/// wake-ups, writes 40 records while one is read (10 M records/s on a fast
/// host), and one every other record read with them (as libbpf's
/// wake-ups slow it): the first chunks of the first drain see the backlog
/// grow and go back per record, long before the 4 MiB spill ring fills;
/// nothing is lost, where chunks of a 32nd of the ring (4,096 records, 12
/// ms of callbacks) let the producer overflow it within one.
#[test]
fn a_slow_callback_behind_a_freed_producer_goes_back_per_record_in_time() {
    let fx = kernel(1, |_| ());
    let mut r = RingSet::open(
        fx.options(|o| {
            o.adaptive = true;
            o.pages = 64;
        }),
        stopper(usize::MAX, Halt::Done),
    )
    .unwrap();
    stream(&fx, &mut r, 0, 100, 60);
    assert!(r.figures(0).unwrap().batched);
    r.handler.slow = Duration::from_micros(3);
    r.handler.feed = Some(Feed { map: fx.map.as_raw_fd(), freed: 40, slowed: 2 });
    fx.emit(0, 1000, 0);
    for _ in 0..20 {
        r.poll(0).unwrap();
    }
    assert_eq!(fx.slot(0).0, 1, "per record again");
    r.handler.feed = None;
    r.consume().unwrap();
    assert_eq!((r.handler.refused, r.figures(0).unwrap().lost), (0, 0));
    assert!(r.figures(0).unwrap().pending_bytes == 0);
}

/// A producer writing 150 records a millisecond under per-record wake-ups
/// and 60 times as many freed of them (10 M against 150 k records/s on a
/// fast host), on CPU 0, for a second of fake time.
fn freed_producer(fx: &Fx, mut read: impl FnMut(u64)) -> (u64, u64) {
    let (mut made, mut refused) = (0, 0);
    for ms in 0..1000 {
        let n = if fx.slot(0).0 == 1 { 150 } else { 150 * 60 };
        refused += fx.emit(0, n, made);
        made += n;
        advance(MS);
        read(ms);
    }
    (made, refused)
}

/// A 64-page fast-mode reader behind [`freed_producer`], reading with
/// `read` at the milliseconds `reads` names: it must never batch, and
/// lose nothing.
fn never_batched(reads: impl Fn(u64) -> bool, read: fn(&mut RingSet<Collect>)) {
    let fx = kernel(1, |_| ());
    let r = core::cell::RefCell::new(fx.fast(64));
    let (made, refused) = freed_producer(&fx, |ms| {
        if reads(ms) {
            read(&mut r.borrow_mut());
        }
    });
    let mut r = r.into_inner();
    r.consume().unwrap();
    assert_eq!((refused, r.figures(0).unwrap().batch_switches), (0, 0));
    assert_eq!(r.handler.0.len() as u64, made);
}

/// A caller that never polls and consumes every 20 ms: batching would not
/// wake it sooner, and the freed producer would write 5.8 MB between two
/// consumes into a 4 MiB spill ring. Its records wait 20 ms: never batched.
#[test]
fn a_caller_consuming_every_20_ms_is_never_batched() {
    never_batched(|ms| ms % 20 == 19, |r| r.consume().unwrap());
}

/// A reader that shares its CPU: it gets to read every 3 ms, and now and
/// then only after 20 ms. Its records wait 3 ms: never batched, so the
/// freed producer never meets a 20 ms gap.
#[test]
fn a_reader_kept_from_its_cpu_is_not_batched() {
    never_batched(
        |ms| ms % 3 == 2 && ms % 200 >= 20,
        |r| {
            r.poll(0).unwrap();
        },
    );
}

#[test]
fn a_large_backlog_that_shrinks_stays_batched() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    // The reader was away a while: a third of the ring waits, and the
    // drain reads it faster than it comes (nothing comes meanwhile here).
    fx.emit(0, (16 * 8 * 4096 / 3 / 32) as u64, 0);
    r.consume().unwrap();
    assert_eq!(fx.slot(0).0, fx.batching(r.figures(0).unwrap()));
}

#[test]
fn lost_reports_while_batched_go_back_per_record() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    r.set_paused(true).unwrap();
    assert_eq!(fx.emit(0, 3, 0), 3, "pausing covers the spill ring");
    r.set_paused(false).unwrap();
    fx.emit(0, 70, 0); // the first of these reports the 3
    r.consume().unwrap();
    assert_eq!(r.handler.1, vec![(0, 3)]);
    stream(&fx, &mut r, 0, 100, 50);
    assert_eq!(fx.slot(0).0, 1, "lost records while batched are pressure");
}

#[test]
fn standing_down_hands_the_spill_ring_over_at_once_in_order_with_its_lost() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    let before = r.handler.0.len();
    fx.emit(0, 10, 1000); // in the spill ring, unread (below a batch)
    // Refused while paused: the spill ring owes 5, to be reported only
    // with a next write there, which will never come.
    r.set_paused(true).unwrap();
    fx.emit(0, 5, 0);
    r.set_paused(false).unwrap();
    let caller = r.event_fd(0).unwrap();
    assert_eq!(fx.slot(0).1, caller, "the caller's event again");
    assert!(!r.timer.as_ref().unwrap().ticking(), "stopped at once: nothing batched");
    // A caller that reads its ring itself may never poll again: the spill
    // ring's records and debt were delivered by the call, after waiting
    // out BPF programs that could still write there.
    assert_eq!(fx.calls("wait_for_writers"), 1);
    assert_eq!(stamps(&r)[before..], [1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008, 1009]);
    assert_eq!(r.handler.1, vec![(0, 5)]);
    assert_eq!(r.figures(0).unwrap().spill_size, 0, "released");
    fx.emit(0, 3, 2000); // into the caller's ring
    r.consume().unwrap();
    assert_eq!(stamps(&r)[before + 10..], [2000, 2001, 2002]);
    r.event_fd(0).unwrap();
    assert_eq!(fx.calls("wait_for_writers"), 1, "once");
    // For good: a fast stream no longer moves the slot.
    stream(&fx, &mut r, 0, 100, 60);
    assert_eq!(fx.slot(0).1, caller);
}

#[test]
fn standing_down_an_unwritten_spill_ring_waits_for_nothing() {
    let fx = kernel(2, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    r.event_fd(1).unwrap();
    assert_eq!(fx.calls("wait_for_writers"), 0);
}

#[test]
fn a_ring_and_its_spill_ring_count_once_per_poll() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    fx.emit(0, 64, 0); // wakes through the spill ring's event
    r.event_fd(0).unwrap();
    fx.emit(0, 1, 64); // wakes through the caller's event
    assert_eq!(r.poll(0).unwrap(), 1);
    assert_eq!(r.handler.0.len(), 6065);
}

#[test]
fn every_drain_clears_a_fired_tick() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    let epoll = r.epoll_fd();
    let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 4];
    for drain in 0..3 {
        advance(2 * MS);
        match drain {
            0 => r.consume().unwrap(),
            1 => r.consume_buffer(0).unwrap(),
            _ => drop(r.consume_batch(|_| ControlFlow::Continue(()))),
        }
        assert_eq!(sys::epoll_wait(epoll, &mut ev, 4, 0).unwrap(), 0, "drain {drain} left the tick");
    }
}

#[test]
fn without_a_timer_there_is_no_fast_mode() {
    let fx = kernel(2, |k| k.fail("timerfd", 1, libc::EMFILE));
    let r = fx.open(|o| o.adaptive = true);
    assert!(r.adaptive.is_none());
    assert_eq!(fx.slot(0).1, r.bufs[0].fd.as_raw_fd());
}

#[test]
fn a_cpu_whose_fast_events_fail_keeps_the_callers_event() {
    // perf_event_open: the callers' events (2), then CPU 0's streaming
    // event when it first batches: fail that one.
    let fx = kernel(2, |k| k.fail("perf_event_open", 3, libc::EMFILE));
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    assert_eq!(fx.slot(0).1, r.bufs[0].fd.as_raw_fd());
    let f = r.figures(0).unwrap();
    assert_eq!((f.spill_size, f.batch_switches), (0, 0));
    assert_eq!(r.handler.0.len(), 6000);
    // For good: no new attempt at every window.
    let opened = fx.calls("perf_event_open");
    stream(&fx, &mut r, 0, 100, 120);
    assert_eq!(fx.calls("perf_event_open"), opened);
    // CPU 1's fast events are opened when it needs them.
    stream(&fx, &mut r, 1, 100, 110);
    assert_eq!(fx.slot(1).0, fx.batching(r.figures(1).unwrap()));
    drop(r);
    // The spill ring's mapping (the third mmap) fails: CPU 0 goes without.
    let fx = kernel(2, |k| k.fail("mmap", 3, libc::EPERM));
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    assert_eq!(fx.slot(0).1, r.bufs[0].fd.as_raw_fd());
    assert_eq!(r.figures(0).unwrap().batch_switches, 0);
    drop(r);
    assert_eq!(
        fake::with(|k| k.open_objects()).unwrap(),
        1,
        "only the map is left: {:?}",
        fake::with(|k| k.open_object_kinds())
    );
}

#[test]
fn without_format_lost_small_rings_get_no_fast_mode() {
    let fx = kernel(1, |k| k.format_lost = false);
    assert!(fx.open(|o| o.adaptive = true).adaptive.is_none());
}

#[test]
fn a_big_callers_ring_batches_into_itself() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| {
        o.adaptive = true;
        o.pages = adaptive::SPILL_MAX / 4096;
    });
    assert_eq!(fx.slot(0).1, r.bufs[0].fd.as_raw_fd(), "per record: the caller's event");
    stream(&fx, &mut r, 0, 100, 60);
    assert_eq!(fx.slot(0).0, fx.batching(r.figures(0).unwrap()));
    assert_eq!(r.figures(0).unwrap().spill_size, 0);
    assert_eq!(r.handler.0.len(), 6000);
    r.event_fd(0).unwrap();
    assert_eq!(fx.slot(0).1, r.bufs[0].fd.as_raw_fd());
}

#[test]
fn a_second_buffer_on_the_map_takes_the_slots_for_good() {
    let fx = kernel(1, |_| ());
    let mut first = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut first, 0, 100, 60);
    let second = fx.open(|_| ());
    let theirs = second.bufs[0].fd.as_raw_fd();
    let updates = fx.calls("map_update");
    // The first buffer's rate falls to nothing: it must not take the slot back.
    for _ in 0..120 {
        fx.emit(0, 10, 0);
        advance(MS);
        first.poll(0).unwrap();
    }
    assert_eq!(fx.calls("map_update"), updates);
    assert_eq!(fx.slot(0).1, theirs);
    drop(second);
}

#[test]
fn a_forked_copy_writes_no_slot() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    let updates = fx.calls("map_update");
    fake::with(|k| k.pid = 4242); // as seen from a forked child
    for _ in 0..60 {
        advance(MS);
        r.poll(0).unwrap();
    }
    assert_eq!(fx.calls("map_update"), updates);
}

#[test]
fn ordering_stands_the_fast_mode_down_and_delivers_leftovers_first() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.adaptive = true);
    stream(&fx, &mut r, 0, 100, 60);
    fx.emit(0, 10, 100_000); // unread, in the spill ring
    r.set_order(OrderBy::RawPrefix, 10 * MS).unwrap();
    assert_eq!(fx.slot(0).1, r.bufs[0].fd.as_raw_fd());
    assert_eq!(
        stamps(&r)[6000..],
        [100_000, 100_001, 100_002, 100_003, 100_004, 100_005, 100_006, 100_007, 100_008, 100_009]
    );
    assert!(!r.timer.as_ref().unwrap().ticking());
}

/// A 1-page ring on CPU 0 overflowed by 1,000 samples and drained: how
/// many the kernel refused.
fn overflow_and_drain(fx: &Fx, r: &mut RingSet<Collect>) -> u64 {
    let refused = fx.emit(0, 1000, 0);
    assert!(refused > 0, "a 1-page ring must overflow");
    r.consume().expect("consume");
    refused
}

#[test]
fn counted_losses_are_exact_before_the_kernel_reports_them() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| {
        o.pages = 1;
        o.count_lost = true;
    });
    let refused = overflow_and_drain(&fx, &mut r);
    let delivered = r.handler_mut().0.len() as u64;
    assert_eq!(delivered + refused, 1000);
    let s = r.figures(0).unwrap();
    assert_eq!((s.lost, s.lost_unreported), (refused, refused), "exact before any LOST record");
    assert!(r.handler_mut().1.is_empty(), "no lost callback without a LOST record");
    // The final drain reports them once.
    assert_eq!(r.drain_final().unwrap(), refused);
    assert_eq!(r.handler_mut().1, vec![(0, refused)]);
    let s = r.figures(0).unwrap();
    assert_eq!((s.lost, s.lost_unreported), (refused, 0));
    assert_eq!(r.drain_final().unwrap(), 0, "nothing left to report");
    // The kernel's LOST record for the same losses arrives with the next
    // sample: neither reported nor counted again.
    assert_eq!(fx.emit(0, 1, 5000), 0);
    r.consume().unwrap();
    assert_eq!(r.handler_mut().1, vec![(0, refused)]);
    assert_eq!(r.figures(0).unwrap().lost, refused);
    // New losses after the early report are reported as usual.
    let more = fx.emit(0, 1000, 0);
    r.consume().unwrap();
    assert_eq!(fx.emit(0, 1, 9000), 0);
    r.consume().unwrap();
    assert_eq!(r.handler_mut().1, vec![(0, refused), (0, more)]);
    assert_eq!(r.figures(0).unwrap().lost, refused + more);
}

#[test]
fn libbpfs_event_keeps_its_read_format_and_todays_figures() {
    let fx = kernel(1, |_| ());
    let mut r = fx.open(|o| o.pages = 1);
    let (_, fd) = fx.slot(0);
    // SAFETY: the reader keeps the slot's event open.
    let event = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    assert!(sys::read_lost(event).is_err(), "libbpf's attr has no read_format");
    let refused = overflow_and_drain(&fx, &mut r);
    let s = r.figures(0).unwrap();
    assert_eq!((s.lost, s.lost_unreported), (0, 0), "no count without PERF_FORMAT_LOST");
    assert_eq!(r.drain_final().unwrap(), 0);
    assert!(r.handler_mut().1.is_empty());
    assert_eq!(fx.emit(0, 1, 5000), 0);
    r.consume().unwrap();
    assert_eq!(r.handler_mut().1, vec![(0, refused)], "the LOST record, as libbpf reports it");
}

#[test]
fn without_format_lost_counting_degrades_to_lost_records() {
    let fx = kernel(1, |k| k.format_lost = false);
    let mut r = fx.open(|o| {
        o.pages = 1;
        o.count_lost = true;
    });
    let refused = overflow_and_drain(&fx, &mut r);
    assert_eq!(r.figures(0).unwrap().lost, 0);
    assert_eq!(r.drain_final().unwrap(), 0);
    assert_eq!(fx.emit(0, 1, 5000), 0);
    r.consume().unwrap();
    assert_eq!(r.handler_mut().1, vec![(0, refused)]);
    assert_eq!(r.figures(0).unwrap().lost, refused);
}

/// The fast mode with `count_lost`: the losses of its own events (here
/// while paused, in the spill ring) are exact before any LOST record, the
/// final drain reports them once, and neither the kernel's later LOST
/// record nor the spill ring's reconciliation reports them again.
#[test]
fn the_fast_modes_losses_are_exact_before_the_kernel_reports_them() {
    for kernel_reports_first in [true, false] {
        let fx = kernel(1, |_| ());
        let mut r = fx.open(|o| {
            o.adaptive = true;
            o.count_lost = true;
        });
        stream(&fx, &mut r, 0, 100, 60);
        assert!(r.figures(0).unwrap().batched);
        r.set_paused(true).unwrap();
        assert_eq!(fx.emit(0, 7, 0), 7);
        r.set_paused(false).unwrap();
        let s = r.figures(0).unwrap();
        assert_eq!((s.lost, s.lost_unreported), (7, 7), "exact before any LOST record");
        assert_eq!(r.drain_final().unwrap(), 7);
        assert_eq!(r.handler.1, vec![(0, 7)]);
        assert_eq!(r.figures(0).unwrap().lost_unreported, 0);
        if kernel_reports_first {
            // The next write into the spill ring carries the kernel's report.
            assert_eq!(fx.emit(0, 1, 100), 0);
            r.consume().unwrap();
        }
        // Standing down releases the spill ring, reconciled with what the
        // kernel reported there and what was reported early.
        r.event_fd(0).unwrap();
        assert_eq!(r.figures(0).unwrap().spill_size, 0, "released");
        r.consume().unwrap();
        assert_eq!(r.handler.1, vec![(0, 7)], "reported once");
        let s = r.figures(0).unwrap();
        assert_eq!((s.lost, s.lost_unreported), (7, 0));
        // Losses in the caller's ring from now on count as they come.
        r.set_paused(true).unwrap();
        assert_eq!(fx.emit(0, 3, 0), 3);
        r.set_paused(false).unwrap();
        let s = r.figures(0).unwrap();
        assert_eq!((s.lost, s.lost_unreported), (10, 3));
        assert_eq!(r.drain_final().unwrap(), 3);
        assert_eq!(r.handler.1, vec![(0, 7), (0, 3)]);
    }
}
