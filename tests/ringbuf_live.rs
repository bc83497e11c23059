//! The Rust ring buffer reader on the real kernel: records written by BPF
//! programs (`bpf_ringbuf_output`, reserve + submit/discard) into
//! `BPF_MAP_TYPE_RINGBUF` maps, read by `perfbuf::RingBuffer` through
//! closures, moved between threads, stopped by a callback, and the map's
//! positions as `ring__*` gives them.
//!
//! Needs root with BPF and `make producer-lib`; skipped otherwise, a
//! failure under `CI=true`.

#[path = "../examples/support/producer.rs"]
mod producer;
mod skip;

use core::ops::ControlFlow;
use perfbuf::{ErrorKind, RingBuffer};
use producer::{RingbufOp, RingbufProducer};
use skip::skip;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn producer(bytes: u32) -> Option<RingbufProducer> {
    match RingbufProducer::open(bytes) {
        Ok(p) => Some(p),
        Err(e) => {
            skip(e);
            None
        }
    }
}

const WAIT: Option<Duration> = Some(Duration::from_secs(5));

#[test]
fn two_maps_deliver_every_record_whole_to_their_own_closure() {
    let (Some(a), Some(b)) = (producer(16384), producer(4096)) else { return };
    let got_a = Arc::new(Mutex::new(Vec::new()));
    let got_b = Arc::new(Mutex::new(Vec::new()));
    let (sink_a, sink_b) = (got_a.clone(), got_b.clone());
    let mut rb = RingBuffer::builder()
        .add(a.map(), move |data: &[u8]| sink_a.lock().unwrap().push(data.to_vec()))
        .add(b.map(), move |data: &[u8]| sink_b.lock().unwrap().push(data.to_vec()))
        .build()
        .unwrap();
    assert_eq!(rb.rings(), 2);
    let sizes = [8u32, 9, 100, 1000, 3000];
    for (i, &n) in sizes.iter().enumerate() {
        assert_eq!(a.emit(0, n, i as u8, 1).unwrap(), 0);
    }
    assert_eq!(b.emit(0, 24, 7, 1).unwrap(), 0);
    let mut n = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while n < 6 && Instant::now() < deadline {
        n += rb.poll(WAIT).unwrap();
    }
    assert_eq!(n, 6);
    let want: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| a.expected(n, i as u8)).collect();
    assert_eq!(*got_a.lock().unwrap(), want);
    assert_eq!(*got_b.lock().unwrap(), vec![b.expected(24, 7)]);
    assert_eq!(rb.consume().unwrap(), 0);
    assert_eq!(rb.poll(Some(Duration::ZERO)).unwrap(), 0);
}

#[test]
fn a_ring_buffer_moves_into_another_thread() {
    let Some(p) = producer(65536) else { return };
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    // RingBuffer<'static> is Send with Send closures.
    let mut rb = RingBuffer::builder()
        .add(p.map().try_clone_to_owned().unwrap(), move |_: &[u8]| {
            c.fetch_add(1, Relaxed);
        })
        .build()
        .unwrap();
    let total = 20_000u64;
    let reader = std::thread::spawn({
        let count = count.clone();
        move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while count.load(Relaxed) < total && Instant::now() < deadline {
                rb.poll(Some(Duration::from_millis(100))).unwrap();
            }
        }
    });
    let mut written = 0u64;
    while written < total {
        // A full ring makes the output fail: retry what failed.
        if p.emit(1, 32, 3, 1).unwrap() == 0 {
            written += 1;
        }
    }
    reader.join().unwrap();
    assert_eq!(count.load(Relaxed), total);
}

#[test]
fn a_callback_stops_the_read_with_its_value() {
    let Some(p) = producer(4096) else { return };
    let mut calls = 0;
    let mut rb = RingBuffer::builder()
        .local()
        .add(p.map(), move |_: &[u8]| -> i32 {
            calls += 1;
            if calls == 2 { -42 } else { 1 }
        })
        .build()
        .unwrap();
    p.emit(0, 16, 1, 3).unwrap();
    let err = rb.consume().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Stopped(-42));
    assert_eq!(rb.consume().unwrap(), 1, "the stopping record was consumed, the next one is read");

    // ControlFlow and a closure that is not Send (Local).
    let seen = Rc::new(RefCell::new(0));
    let s = seen.clone();
    let mut rb = RingBuffer::builder()
        .local()
        .add(p.map(), move |_: &[u8]| {
            *s.borrow_mut() += 1;
            ControlFlow::Break(7)
        })
        .build()
        .unwrap();
    p.emit(0, 16, 1, 2).unwrap();
    assert_eq!(rb.consume().unwrap_err().kind(), ErrorKind::Stopped(7));
    assert_eq!(*seen.borrow(), 1);
}

#[test]
fn discarded_records_are_stepped_over_and_positions_are_the_kernels() {
    let Some(p) = producer(8192) else { return };
    let metas = Arc::new(Mutex::new(Vec::new()));
    let m = metas.clone();
    let mut rb = RingBuffer::new().unwrap();
    rb.add(p.map(), move |data: &[u8]| {
        m.lock().unwrap().push(u64::from_ne_bytes(data[..8].try_into().unwrap()));
    })
    .unwrap();
    for (meta, op) in
        [(1, RingbufOp::Submit), (2, RingbufOp::Discard), (3, RingbufOp::Output), (4, RingbufOp::Discard)]
    {
        assert_eq!(p.ctl(0, op, 0, meta).unwrap(), 0);
    }
    let ring = rb.ring(0).unwrap();
    assert_eq!((ring.size(), ring.consumer_pos(), ring.producer_pos()), (8192, 0, 4 * 24));
    assert_eq!(ring.avail_data_size(), 96);
    use std::os::fd::AsRawFd;
    assert_eq!(ring.map_fd(), p.map().as_raw_fd());
    assert_eq!(rb.ring_mut(0).unwrap().consume_n(1).unwrap(), 1);
    assert_eq!(rb.consume().unwrap(), 1);
    assert_eq!(*metas.lock().unwrap(), vec![1, 3]);
    let ring = rb.ring(0).unwrap();
    assert_eq!((ring.consumer_pos(), ring.avail_data_size()), (96, 0));
    let stats = ring.stats();
    assert_eq!((stats.records, stats.discarded, stats.resyncs), (2, 2, 0));
    assert!(rb.ring(1).is_none());
}

#[test]
fn a_map_of_another_type_is_refused_with_a_clear_error() {
    let Some(_p) = producer(4096) else { return };
    // A perf event array: the other channel, not a ring buffer.
    let perf = match producer::Producer::open() {
        Ok(p) => p,
        Err(e) => panic!("{e}"),
    };
    let err = RingBuffer::builder().add(perf.map(), |_: &[u8]| {}).build().err().expect("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let text = err.to_string();
    assert!(text.contains("BPF_MAP_TYPE_RINGBUF") && text.contains("type 4"), "{text}");
}

#[test]
fn a_full_ring_fails_the_output_and_loses_nothing_that_was_written() {
    let Some(p) = producer(4096) else { return };
    let n = Arc::new(AtomicU64::new(0));
    let c = n.clone();
    let mut rb = RingBuffer::builder()
        .add(p.map(), move |_: &[u8]| {
            c.fetch_add(1, Relaxed);
        })
        .build()
        .unwrap();
    let results: Vec<i32> = (0..6).map(|i| p.emit(0, 1000, i, 1).unwrap()).collect();
    assert_eq!(results, [0, 0, 0, 0, -libc::EAGAIN, -libc::EAGAIN]);
    assert_eq!(rb.poll(WAIT).unwrap(), 4);
    assert_eq!(n.load(Relaxed), 4);
}

/// The fast mode (`Builder::fast`) delivers every record of a producer on
/// another thread once, in order, whole: reading on its tick while
/// records flow, waiting in epoll once they stop.
#[test]
fn the_fast_mode_delivers_every_record_once_in_order() {
    let Some(p) = producer(16384) else { return };
    let got = Arc::new(Mutex::new(Vec::new()));
    let sink = got.clone();
    let mut rb = RingBuffer::builder()
        .add(p.map(), move |data: &[u8]| sink.lock().unwrap().push(data.to_vec()))
        .fast()
        .build()
        .unwrap();
    assert!(rb.is_fast());
    let total = 20_000usize;
    let size = |i: usize| 8 + (i % 57) as u32;
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut i = 0;
            while i < total {
                // A full ring fails the output: write that record again.
                if p.emit(1, size(i), i as u8, 1).unwrap() == 0 {
                    i += 1;
                }
                if i % 1000 == 0 {
                    std::thread::sleep(Duration::from_millis(1)); // bursts, then pauses
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while got.lock().unwrap().len() < total && Instant::now() < deadline {
            rb.poll(Some(Duration::from_millis(100))).unwrap();
        }
    });
    let got = got.lock().unwrap();
    assert_eq!(got.len(), total);
    for (i, rec) in got.iter().enumerate() {
        assert_eq!(*rec, p.expected(size(i), i as u8), "record {i}");
    }
}

/// While records flow the fast mode publishes `consumer_pos` one record
/// behind what it read (no commit finds the reader caught up, so the
/// kernel sends no wake-up); a poll whose ticks find nothing new gives it
/// back,
/// and so does dropping the ring buffer: the next reader of the map reads
/// nothing twice.
#[test]
fn the_fast_mode_holds_one_record_while_records_flow_and_gives_it_back() {
    let Some(p) = producer(16384) else { return };
    let count = Rc::new(RefCell::new(0usize));
    let c = count.clone();
    let mut rb = RingBuffer::builder()
        .local()
        .add(p.map(), move |_: &[u8]| *c.borrow_mut() += 1)
        .fast()
        .build()
        .unwrap();
    assert_eq!(p.emit(0, 40, 1, 3).unwrap(), 0);
    assert_eq!(rb.poll(WAIT).unwrap(), 3);
    let ring = rb.ring(0).unwrap();
    // One 40-byte record (48 with its header) held.
    assert_eq!(ring.producer_pos() - ring.consumer_pos(), 48);
    // A poll whose timeout ends before the idle ticks keeps holding; one
    // that outlasts them (IDLE_TICKS of at most MAX_TICK) gives it back.
    assert_eq!(rb.poll(Some(Duration::ZERO)).unwrap(), 0);
    let ring = rb.ring(0).unwrap();
    assert_eq!(ring.producer_pos() - ring.consumer_pos(), 48);
    assert_eq!(rb.poll(Some(Duration::from_millis(50))).unwrap(), 0);
    let ring = rb.ring(0).unwrap();
    assert_eq!(ring.consumer_pos(), ring.producer_pos(), "given back once nothing new came");

    assert_eq!(p.emit(0, 40, 2, 2).unwrap(), 0);
    assert_eq!(rb.poll(WAIT).unwrap(), 2);
    let ring = rb.ring(0).unwrap();
    assert_eq!(ring.producer_pos() - ring.consumer_pos(), 48);
    drop(rb);
    assert_eq!(*count.borrow(), 5);
    let mut next =
        RingBuffer::builder().add(p.map(), |_: &[u8]| -> () { panic!("read twice") }).build().unwrap();
    assert_eq!(next.consume().unwrap(), 0);
}
