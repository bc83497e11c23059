//! The record walk on a ring in ordinary memory laid out like the
//! kernel's (the test plays the kernel): order, wrapping, busy and discard
//! bits, limits, callbacks that stop, and the hostile cases (positions and
//! lengths the pages should never hold) that must neither read outside the
//! ring nor loop.

use super::layout::{BUSY_BIT, DISCARD_BIT, RingMemory};
use super::walk::{Stats, record_size};
use core::ops::ControlFlow;
use core::sync::atomic::Ordering;

const SIZE: u64 = 4096;

/// Plays the kernel: reserves a record of `len` bytes at `producer_pos`
/// with header bits `bits`, fills it from `seed`, publishes the position.
/// Returns where the record starts.
fn push(ring: &RingMemory, len: u32, bits: u32, seed: u8) -> u64 {
    let at = ring.producer().load(Ordering::Relaxed);
    let mut rec = vec![0u8; record_size(len) as usize];
    rec[..4].copy_from_slice(&(len | bits).to_ne_bytes());
    for (i, b) in rec[8..8 + len as usize].iter_mut().enumerate() {
        *b = seed.wrapping_add(i as u8);
    }
    ring.write_data(at, &rec);
    ring.store_producer(at.wrapping_add(rec.len() as u64));
    at
}

fn body(len: u32, seed: u8) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// Sets the header bits of the record at `at` (commit, discard...).
fn set_len(ring: &RingMemory, at: u64, word: u32) {
    ring.write_data(at, &word.to_ne_bytes());
}

fn start_at(ring: &RingMemory, pos: u64) {
    ring.consumer().store(pos, Ordering::Relaxed);
    ring.store_producer(pos);
}

fn walk_all(ring: &RingMemory, stats: &mut Stats) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let flow = ring.walk(u64::MAX, stats, |data| {
        got.push(data.to_vec());
        ControlFlow::Continue(())
    });
    assert_eq!(flow, ControlFlow::Continue(got.len() as u64));
    got
}

fn consumer(ring: &RingMemory) -> u64 {
    ring.consumer().load(Ordering::Relaxed)
}

#[test]
fn records_arrive_whole_in_order_and_wrap_at_every_offset() {
    let ring = RingMemory::heap(SIZE);
    for start in (0..SIZE).step_by(8) {
        for base in [0u64, 1 << 40, u64::MAX - SIZE + 1] {
            let pos = base.wrapping_add(start);
            start_at(&ring, pos);
            let lens = [1u32, 60, 200, 13, 500, 4, 333, 0];
            for (i, &len) in lens.iter().enumerate() {
                push(&ring, len, 0, (i as u8).wrapping_add(start as u8));
            }
            let mut stats = Stats::default();
            let got = walk_all(&ring, &mut stats);
            let want: Vec<_> =
                lens.iter().enumerate().map(|(i, &l)| body(l, (i as u8).wrapping_add(start as u8))).collect();
            assert_eq!(got, want, "start {start} base {base}");
            assert_eq!(consumer(&ring), ring.producer().load(Ordering::Relaxed));
            assert_eq!((stats.records, stats.resyncs), (lens.len() as u64, 0));
        }
    }
}

#[test]
fn a_record_as_large_as_the_ring_reads_whole_wherever_it_starts() {
    let ring = RingMemory::heap(SIZE);
    for start in [0u64, 8, 1000, SIZE - 8] {
        start_at(&ring, start);
        push(&ring, SIZE as u32 - 8, 0, 9);
        let got = walk_all(&ring, &mut Stats::default());
        assert_eq!(got, vec![body(SIZE as u32 - 8, 9)]);
    }
}

#[test]
fn discarded_records_are_stepped_over() {
    let ring = RingMemory::heap(SIZE);
    push(&ring, 16, 0, 1);
    push(&ring, 24, DISCARD_BIT, 2);
    push(&ring, 8, 0, 3);
    let mut stats = Stats::default();
    assert_eq!(walk_all(&ring, &mut stats), vec![body(16, 1), body(8, 3)]);
    assert_eq!((stats.records, stats.discarded), (2, 1));
    assert_eq!(consumer(&ring), ring.producer().load(Ordering::Relaxed));
}

#[test]
fn a_busy_record_ends_the_walk_until_committed() {
    let ring = RingMemory::heap(SIZE);
    push(&ring, 16, 0, 1);
    let busy = push(&ring, 16, BUSY_BIT, 2);
    push(&ring, 16, 0, 3);
    let mut stats = Stats::default();
    assert_eq!(walk_all(&ring, &mut stats), vec![body(16, 1)]);
    assert_eq!(consumer(&ring), busy, "the consumer waits at the busy record");
    // Never committed: every walk returns at once, reading nothing more.
    for _ in 0..1000 {
        assert!(walk_all(&ring, &mut stats).is_empty());
    }
    assert_eq!(consumer(&ring), busy);
    set_len(&ring, busy, 16);
    assert_eq!(walk_all(&ring, &mut stats), vec![body(16, 2), body(16, 3)]);
    assert_eq!(stats.resyncs, 0);
}

#[test]
fn the_consumer_moves_after_each_callback() {
    let ring = RingMemory::heap(SIZE);
    let starts: Vec<u64> = (0..4).map(|i| push(&ring, 20, 0, i)).collect();
    let mut seen = Vec::new();
    let _ = ring.walk(u64::MAX, &mut Stats::default(), |_| {
        seen.push(consumer(&ring));
        ControlFlow::Continue(())
    });
    // While a record's callback runs its space is not released.
    assert_eq!(seen, starts);
}

#[test]
fn a_callback_that_stops_consumes_its_record_only() {
    let ring = RingMemory::heap(SIZE);
    push(&ring, 16, 0, 1);
    let second = push(&ring, 16, 0, 2);
    push(&ring, 16, 0, 3);
    let mut calls = 0;
    let flow = ring.walk(u64::MAX, &mut Stats::default(), |_| {
        calls += 1;
        if calls == 2 { ControlFlow::Break(-7) } else { ControlFlow::Continue(()) }
    });
    assert_eq!(flow, ControlFlow::Break(-7));
    assert_eq!(consumer(&ring), second + 24, "the stopping record counts as read");
    assert_eq!(walk_all(&ring, &mut Stats::default()), vec![body(16, 3)]);
}

#[test]
fn limits_count_records_handed_out_and_zero_still_reads_one() {
    let ring = RingMemory::heap(SIZE);
    push(&ring, 8, DISCARD_BIT, 0);
    for i in 1..=5 {
        push(&ring, 8, 0, i);
    }
    let mut stats = Stats::default();
    // libbpf checks the limit after each record: a discarded one first
    // ends a walk limited to 0.
    assert_eq!(ring.walk(0, &mut stats, |_| ControlFlow::Continue(())), ControlFlow::Continue(0));
    assert_eq!(ring.walk(0, &mut stats, |_| ControlFlow::Continue(())), ControlFlow::Continue(1));
    assert_eq!(ring.walk(3, &mut stats, |_| ControlFlow::Continue(())), ControlFlow::Continue(3));
    assert_eq!(ring.walk(3, &mut stats, |_| ControlFlow::Continue(())), ControlFlow::Continue(1));
    assert_eq!((stats.records, stats.discarded), (5, 1));
}

#[test]
fn records_published_during_the_walk_are_read_in_the_same_call() {
    let ring = RingMemory::heap(SIZE);
    push(&ring, 8, 0, 0);
    let mut n = 0;
    // The callback plays the kernel, publishing the next record while the
    // walk is under way: libbpf's loop reloads the producer and reads it.
    let flow = ring.walk(u64::MAX, &mut Stats::default(), |_| {
        n += 1;
        if n < 10 {
            push(&ring, 8, 0, n as u8);
        }
        ControlFlow::Continue(())
    });
    assert_eq!(flow, ControlFlow::Continue(10));
}

#[test]
fn a_producer_that_never_stops_is_read_up_to_the_limit() {
    let ring = RingMemory::heap(SIZE);
    push(&ring, 8, 0, 0);
    let flow = ring.walk(100_000, &mut Stats::default(), |_| {
        push(&ring, 8, 0, 1);
        ControlFlow::Continue(())
    });
    assert_eq!(flow, ControlFlow::Continue(100_000));
}

/// Each corruption is detected and counted, nothing outside the ring is
/// read, the consumer jumps to the producer, and a record published
/// afterwards is read.
fn assert_recovers(what: &str, corrupt: impl Fn(&RingMemory)) {
    let ring = RingMemory::heap(SIZE);
    start_at(&ring, 1 << 20);
    push(&ring, 40, 0, 1);
    corrupt(&ring);
    let mut stats = Stats::default();
    let got = walk_all(&ring, &mut stats);
    assert!(got.len() <= 1, "{what}: {} records", got.len());
    assert_eq!(stats.resyncs, 1, "{what}: not detected");
    assert!(stats.skipped_bytes <= SIZE, "{what}");
    assert_eq!(consumer(&ring), ring.producer().load(Ordering::Relaxed), "{what}");
    // Back in step: the kernel's next record is read.
    if consumer(&ring) % 8 == 0 {
        push(&ring, 12, 0, 5);
        assert_eq!(walk_all(&ring, &mut stats), vec![body(12, 5)], "{what}");
    }
}

#[test]
fn hostile_positions_and_lengths_resync_instead_of_reading_out_of_bounds() {
    let pos = |r: &RingMemory| r.producer().load(Ordering::Relaxed);
    assert_recovers("misaligned consumer", |r| r.consumer().store(consumer(r) + 3, Ordering::Relaxed));
    assert_recovers("consumer inside a record", |r| r.consumer().store(consumer(r) + 8, Ordering::Relaxed));
    assert_recovers("producer behind the consumer", |r| r.store_producer(consumer(r) - 64));
    assert_recovers("producer more than a ring ahead", |r| r.store_producer(pos(r) + 2 * SIZE));
    assert_recovers("misaligned producer", |r| r.store_producer(pos(r) + 4));
    let at = 1u64 << 20;
    assert_recovers("length beyond the producer", |r| set_len(r, at, 41));
    assert_recovers("length of 2^30 - 1", |r| set_len(r, at, DISCARD_BIT - 1));
    assert_recovers("discarded, beyond the producer", |r| set_len(r, at, DISCARD_BIT | 4000));
    assert_recovers("length beyond the ring", |r| {
        r.store_producer(at + SIZE);
        set_len(r, at, SIZE as u32);
    });
}

#[test]
fn a_record_ending_exactly_at_the_producer_is_not_corrupt() {
    let ring = RingMemory::heap(SIZE);
    start_at(&ring, SIZE - 16);
    // Fills the ring exactly: the producer a whole ring ahead.
    push(&ring, SIZE as u32 - 8, 0, 3);
    let mut stats = Stats::default();
    assert_eq!(walk_all(&ring, &mut stats).len(), 1);
    assert_eq!(stats.resyncs, 0);
}

/// The fast mode's walk: `consumer_pos` stays at the start of the last
/// record read, the next walk from where reading stopped hands out only
/// new records and gives the held one back, and `publish` gives it back
/// when nothing new came.
#[test]
fn a_holding_walk_keeps_the_last_record_and_never_reads_it_twice() {
    use super::walk::Publish;
    let ring = RingMemory::heap(SIZE);
    start_at(&ring, 64);
    let first = push(&ring, 10, 0, 1);
    let second = push(&ring, 20, 0, 2);
    let mut stats = Stats::default();
    let got = std::cell::RefCell::new(Vec::new());
    let take = |data: &[u8]| {
        got.borrow_mut().push(data.to_vec());
        ControlFlow::Continue(())
    };
    let (flow, end) = ring.walk_from(None, Publish::HoldLast, u64::MAX, &mut stats, take);
    assert_eq!(flow, ControlFlow::Continue(2));
    assert_eq!(end, ring.producer().load(Ordering::Relaxed));
    assert!(first < second);
    assert_eq!(consumer(&ring), second, "held one record behind what was read");

    // Nothing new: nothing handed out, and the position held.
    let (flow, again) = ring.walk_from(Some(end), Publish::HoldLast, u64::MAX, &mut stats, take);
    assert_eq!((flow, again, consumer(&ring)), (ControlFlow::Continue(0), end, second));

    // A new record: only it is handed out, and the previous one is given back.
    let third = push(&ring, 30, 0, 3);
    let (flow, end) = ring.walk_from(Some(end), Publish::HoldLast, u64::MAX, &mut stats, take);
    assert_eq!((flow, consumer(&ring)), (ControlFlow::Continue(1), third));
    ring.publish(end);
    assert_eq!(consumer(&ring), ring.producer().load(Ordering::Relaxed));
    assert_eq!(*got.borrow(), vec![body(10, 1), body(20, 2), body(30, 3)]);
    assert_eq!(stats.records, 3);
}
