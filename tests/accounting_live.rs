//! The loss identity and sizing from evidence on the real kernel: a BPF
//! program built with `include/perfbuf.bpf.h` (`c-tests/bpf/accounted.bpf.c`)
//! sends records into a perf event array and a BPF ring buffer through the
//! header's counted wrappers; every record it meant to send is delivered or
//! in exactly one loss bucket, each record's sequence number says which,
//! and a burst replayed with the size the reader suggests loses nothing.
//!
//! Needs root with BPF and `make accounted-lib`; skipped otherwise, a
//! failure under `CI=true`.

#[path = "../examples/support/accounted.rs"]
mod accounted;
#[path = "../examples/support/producer.rs"]
mod producer;
mod skip;

use accounted::{Accounted, Prog};
use perfbuf::{PerfBuffer, RingBuffer};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn program(rb_bytes: u32) -> Option<Accounted> {
    match Accounted::open(rb_bytes) {
        Ok(a) => Some(a),
        Err(e) => {
            skip::skip(e);
            None
        }
    }
}

/// One test at a time: bursts on CPU 0 and counted losses are steadier alone.
static SERIAL: Mutex<()> = Mutex::new(());

fn seq_of(data: &[u8]) -> u64 {
    u64::from_ne_bytes(data[..8].try_into().unwrap())
}

#[test]
fn perf_event_array_every_output_is_delivered_or_in_one_bucket() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(prog) = program(0) else { return };
    let seqs = Arc::new(Mutex::new(Vec::new()));
    let got = seqs.clone();
    // CPU 0 only, one page: CPU 1's slot stays empty (its outputs fail
    // with ENOENT, counted nowhere but in the header's map), and a burst
    // overflows CPU 0's ring (ENOSPC: the kernel's lost count).
    let mut pb = PerfBuffer::builder(prog.events())
        .pages(1)
        .cpus(&[0])
        .count_lost(true)
        .output_counts(prog.events_counts())
        .on_sample(move |_, data| got.lock().unwrap().push(seq_of(data)))
        .build()
        .unwrap();
    assert_eq!(prog.run(Prog::Perf, 0, 64, 300).unwrap(), -libc::ENOSPC, "the burst overflows");
    if common_cpus() > 1 {
        assert_eq!(prog.run(Prog::Perf, 1, 64, 20).unwrap(), -libc::ENOENT);
    }
    pb.poll(Some(Duration::ZERO)).unwrap();
    // The reader's own policy: it throws away every record with a seq
    // divisible by 7.
    let dropped = seqs.lock().unwrap().iter().filter(|&&s| s % 7 == 0).count() as u64;
    pb.count_dropped(0, dropped).unwrap();
    let s = pb.stats(0).unwrap();
    assert_eq!(s.produced, Some(300));
    assert!(s.lost_unreported > 0, "no record came after the overflow to carry the kernel's report");
    assert_eq!(s.produced.unwrap(), s.delivered() + s.lost_total(), "{s:?}");
    assert_eq!(s.samples, seqs.lock().unwrap().len() as u64);
    // The sequence numbers agree: what was read plus what was lost is
    // every number from 0.
    let read: BTreeSet<u64> = seqs.lock().unwrap().iter().copied().collect();
    assert_eq!(read.len() as u64 + s.lost, 300);
    assert_eq!(read.iter().copied().collect::<Vec<_>>(), (0..read.len() as u64).collect::<Vec<_>>());
    // Once the kernel writes its report, the losses move bucket.
    prog.run(Prog::Perf, 0, 64, 1).unwrap();
    pb.drain_final().unwrap();
    let s = pb.stats(0).unwrap();
    assert_eq!((s.lost_unreported, s.produced), (0, Some(301)));
    assert_eq!(s.produced.unwrap(), s.delivered() + s.lost_total(), "{s:?}");
    let counts = pb.output_counts().unwrap().unwrap();
    assert_eq!((counts[0].calls, counts[0].no_space), (301, s.lost_reported()));
    if common_cpus() > 1 {
        assert_eq!((counts[1].calls, counts[1].failed, counts[1].no_reader), (20, 20, 20));
    }
}

#[test]
fn ring_buffer_losses_are_countable_only_through_the_header() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(prog) = program(4 * 4096) else { return };
    let read = Arc::new(Mutex::new(0u64));
    let seen = read.clone();
    let mut rb = RingBuffer::builder()
        .add(prog.ringbuf(), move |_: &[u8]| *seen.lock().unwrap() += 1)
        .output_counts(prog.ringbuf_counts())
        .build()
        .unwrap();
    // 16 KiB, records of 128 (+8) bytes: 500 do not fit.
    assert_eq!(prog.run(Prog::Ringbuf, 0, 128, 500).unwrap(), -libc::EAGAIN);
    rb.consume().unwrap();
    // Reservations, every other one discarded by the program.
    prog.run(Prog::RingbufReserve, 0, 16, 40).unwrap();
    rb.consume().unwrap();
    rb.ring_mut(0).unwrap().count_dropped(3);
    let a = rb.ring(0).unwrap().accounts().unwrap();
    assert_eq!(a.produced, Some(500 + 20), "outputs and submissions; discards are the program's");
    assert_eq!((a.discarded, a.read), (20, *read.lock().unwrap()));
    assert!(a.output_failed > 0);
    assert_eq!(a.produced.unwrap(), a.delivered() + a.lost_total(), "{a:?}");
    let h = rb.ring(0).unwrap().health().unwrap();
    assert!(h.needed_bytes > 4 * 4096, "what was refused counts: {h:?}");
    assert!(h.suggested_pages > 4, "{h:?}");
}

#[test]
fn a_perf_buffer_over_a_ring_buffer_accounts_for_it_too() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(prog) = program(4 * 4096) else { return };
    let read = Arc::new(Mutex::new(0u64));
    let seen = read.clone();
    // The same PerfBuffer code over the ring buffer map (one ring, index 0).
    let mut pb = PerfBuffer::builder(prog.ringbuf())
        .output_counts(prog.ringbuf_counts())
        .on_sample(move |_, _| *seen.lock().unwrap() += 1)
        .build()
        .unwrap();
    assert!(pb.is_ring_buffer());
    // 16 KiB, records of 128 (+8) bytes: 500 do not fit.
    assert_eq!(prog.run(Prog::Ringbuf, 0, 128, 500).unwrap(), -libc::EAGAIN);
    pb.consume().unwrap();
    pb.count_dropped(0, 3).unwrap();
    let s = pb.stats(0).unwrap();
    assert_eq!(s.produced, Some(500));
    assert_eq!((s.samples, s.dropped), (*read.lock().unwrap(), 3));
    assert!(s.output_failed > 0, "{s:?}");
    assert_eq!(s.produced.unwrap(), s.delivered() + s.lost_total(), "{s:?}");
    let per_cpu = pb.output_counts().expect("the counts map").unwrap();
    assert_eq!(per_cpu[0].failed, s.output_failed, "all on CPU 0");
    let h = pb.health(0).unwrap();
    assert_eq!(h.cpu, -1);
    assert!(h.needed_bytes > 4 * 4096, "what was refused counts: {h:?}");
    assert!(h.suggested_pages > 4, "{h:?}");
    assert_eq!(pb.health(1).unwrap_err().errno(), libc::EINVAL);
}

#[test]
fn a_burst_replayed_with_the_suggested_size_loses_nothing() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(prog) = program(0) else { return };
    // 3,000 records of 96 bytes (+12) on CPU 0 while the reader is away:
    // about 316 KiB, which the default 8 pages cannot hold.
    let burst = |pages: usize| {
        let mut pb = PerfBuffer::builder(prog.events())
            .pages(pages)
            .cpus(&[0])
            .count_lost(true)
            .output_counts(prog.events_counts())
            .on_sample(|_, _| {})
            .build()
            .unwrap();
        let before = pb.output_counts().unwrap().unwrap()[0].calls;
        prog.run(Prog::Perf, 0, 96, 3000).unwrap();
        pb.poll(Some(Duration::ZERO)).unwrap();
        pb.drain_final().unwrap();
        let (s, h) = (pb.stats(0).unwrap(), pb.health(0).unwrap());
        assert_eq!(s.produced.unwrap() - before, s.delivered() + s.lost_total());
        (s, h)
    };
    let (s, h) = burst(8);
    assert!(s.lost > 0, "8 pages lose part of the burst: {s:?}");
    assert!(h.peak_pending_bytes > 8 * 4096 - 4096, "the ring was full: {h:?}");
    assert!(h.needed_bytes >= 3000 * 112, "{h:?}");
    eprintln!("8 pages: {} lost; needed {} bytes: {} pages", s.lost, h.needed_bytes, h.suggested_pages);
    let (s, h2) = burst(h.suggested_pages);
    assert_eq!((s.lost, s.samples), (0, 3000), "{} pages: {s:?}", h.suggested_pages);
    assert!(h2.suggested_pages <= h.suggested_pages, "{h2:?}");
}

fn common_cpus() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) as usize }
}
