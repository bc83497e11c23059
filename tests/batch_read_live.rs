//! Batch reads on the real kernel (`Reader::read_batch` / `poll_batch`):
//! records whole and in order per CPU with their CPUs, partial reads that
//! leave the rest in the rings, losses reported as entries and counted as
//! a consume counts them, a record larger than the batch refused with
//! EMSGSIZE and read once the batch is large enough, and a BPF ring buffer
//! read the same way.
//!
//! Needs root with BPF and `make producer-lib`; skipped otherwise, a
//! failure under `CI=true`.

#[path = "../examples/support/producer.rs"]
mod producer;
mod skip;

use perfbuf::{BatchBuf, BatchEntry, ErrorKind, NO_CPU, PerfBuffer};
use producer::{Producer, RingbufProducer};
use skip::skip;
use std::time::Duration;

fn perf_producer() -> Option<Producer> {
    Producer::open().map_err(skip).ok()
}

/// What a series of batch reads gave: `(cpu, bytes)` of each sample,
/// `(cpu, n)` of each loss report, and the number of reads.
type Read = (Vec<(u32, Vec<u8>)>, Vec<(u32, u64)>, usize);

/// Reads everything with batches of `data` bytes and `entries` entries,
/// returning `(cpu, bytes)` of each sample and `(cpu, n)` of each loss,
/// and how many reads it took.
fn read_all(pb: &mut PerfBuffer<'_>, data: usize, entries: usize) -> Read {
    let (mut d, mut e) = (vec![0u8; data], vec![BatchEntry::default(); entries]);
    let mut batch = BatchBuf::new(&mut d, &mut e);
    let (mut samples, mut lost, mut reads) = (Vec::new(), Vec::new(), 0);
    loop {
        batch.clear();
        let n = pb.read_batch(&mut batch).unwrap();
        if n == 0 {
            return (samples, lost, reads);
        }
        reads += 1;
        assert!(batch.bytes_used() <= data);
        for (i, e) in batch.entries().iter().enumerate() {
            assert_eq!(e.offset % 8, 0, "{e:?}");
            match e.lost {
                0 => samples.push((e.cpu, batch.record(i).unwrap().to_vec())),
                n => {
                    assert_eq!(e.size, 0);
                    lost.push((e.cpu, n))
                }
            }
        }
    }
}

#[test]
fn batches_hold_whole_records_in_order_per_cpu_and_partial_reads_leave_the_rest() {
    let Some(prod) = perf_producer() else { return };
    let mut pb = PerfBuffer::builder(prod.map()).pages(64).on_sample(|_, _| {}).build().unwrap();
    let cpus = pb.rings().min(2) as u32;
    let sizes = [8u32, 13, 64, 100, 1000, 64];
    for round in 0..20u8 {
        for cpu in 0..cpus {
            let n = sizes[round as usize % sizes.len()];
            assert_eq!(prod.emit(cpu as i32, n, round.wrapping_add(cpu as u8 * 50), 1).unwrap(), 0);
        }
    }
    // 7 entries: the first read stops inside CPU 0's ring.
    let (mut d, mut e) = (vec![0u8; 1 << 16], vec![BatchEntry::default(); 7]);
    let mut batch = BatchBuf::new(&mut d, &mut e);
    assert_eq!(pb.read_batch(&mut batch).unwrap(), 7);
    let s = pb.stats(0).unwrap();
    assert_eq!(s.records, 7, "only what was delivered is read: {s:?}");
    assert!(s.pending_bytes > 0, "the rest stays in the ring: {s:?}");
    assert!(batch.entries().iter().all(|e| e.cpu == 0 && e.lost == 0));
    let mut firsts: Vec<(u32, Vec<u8>)> =
        (0..7).map(|i| (batch.entries()[i].cpu, batch.record(i).unwrap().to_vec())).collect();
    // The rest, in batches of 3 entries and 1200 bytes (a 1000-byte
    // record fills one alone).
    let (rest, lost, reads) = read_all(&mut pb, 1200, 3);
    assert!(lost.is_empty());
    assert!(reads >= (20 * cpus as usize - 7) / 3, "{reads} reads");
    firsts.extend(rest);
    for cpu in 0..cpus {
        let got: Vec<&Vec<u8>> = firsts.iter().filter(|(c, _)| *c == cpu).map(|(_, d)| d).collect();
        assert_eq!(got.len(), 20, "cpu {cpu}");
        for (round, data) in got.iter().enumerate() {
            let n = sizes[round % sizes.len()];
            let want = prod.expected(n, (round as u8).wrapping_add(cpu as u8 * 50));
            // Padded by the kernel with its 4-byte size to 8, as the sample
            // callback gets it.
            assert_eq!(data.len(), (n as usize + 4).next_multiple_of(8) - 4);
            assert_eq!(&data[..n as usize], &want[..], "cpu {cpu} record {round}");
        }
        let s = pb.stats(cpu as usize).unwrap();
        assert_eq!((s.records, s.samples, s.pending_bytes, s.lost), (20, 20, 0, 0), "{s:?}");
    }
}

#[test]
fn losses_come_as_entries_and_are_counted_as_a_consume_counts_them() {
    let Some(prod) = perf_producer() else { return };
    let mut pb = PerfBuffer::builder(prod.map()).pages(1).cpus(&[0]).on_sample(|_, _| {}).build().unwrap();
    // One page holds 51 records of 80 bytes: the rest of the burst is lost,
    // and the next output writes the kernel's LOST record first.
    assert_eq!(prod.emit(0, 64, 1, 300).unwrap(), -libc::ENOSPC);
    let (samples, lost, _) = read_all(&mut pb, 4096, 16);
    assert_eq!(prod.emit(0, 64, 2, 1).unwrap(), 0);
    let (after, lost_after, _) = read_all(&mut pb, 4096, 16);
    let lost: Vec<(u32, u64)> = lost.into_iter().chain(lost_after).collect();
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(samples.len() as u64 + lost[0].1, 300);
    assert_eq!(after.len(), 1);
    let s = pb.stats(0).unwrap();
    assert_eq!((s.samples, s.lost, s.lost_unreported), (samples.len() as u64 + 1, lost[0].1, 0), "{s:?}");
}

#[test]
fn a_record_larger_than_the_batch_is_refused_and_waits_for_a_larger_one() {
    let Some(prod) = perf_producer() else { return };
    let mut pb = PerfBuffer::builder(prod.map()).cpus(&[0]).on_sample(|_, _| {}).build().unwrap();
    assert_eq!(prod.emit(0, 1000, 9, 1).unwrap(), 0);
    let (mut d, mut e) = (vec![0u8; 512], vec![BatchEntry::default(); 4]);
    let mut small = BatchBuf::new(&mut d, &mut e);
    let err = pb.read_batch(&mut small).unwrap_err();
    assert_eq!(err.errno(), libc::EMSGSIZE, "{err}");
    assert_eq!(small.needed(), Some(1004));
    assert!(err.to_string().contains("1004 bytes"), "{err}");
    assert_eq!(pb.stats(0).unwrap().records, 0, "the record stays in the ring");
    let (samples, _, _) = read_all(&mut pb, 1004, 4);
    assert_eq!(samples.len(), 1);
    assert_eq!(&samples[0].1[..1000], &prod.expected(1000, 9)[..]);
    // Fewer than 2 entries is refused.
    let (mut d, mut e) = (vec![0u8; 512], vec![BatchEntry::default(); 1]);
    let err = pb.read_batch(&mut BatchBuf::new(&mut d, &mut e)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn poll_batch_waits_for_records_and_times_out_empty() {
    let Some(prod) = perf_producer() else { return };
    let mut pb = PerfBuffer::builder(prod.map()).on_sample(|_, _| panic!("no callback")).build().unwrap();
    let (mut d, mut e) = (vec![0u8; 4096], vec![BatchEntry::default(); 64]);
    let mut batch = BatchBuf::new(&mut d, &mut e);
    assert_eq!(pb.poll_batch(Some(Duration::from_millis(20)), &mut batch).unwrap(), 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(50));
            prod.emit(0, 64, 3, 5).unwrap();
        });
        assert!(pb.poll_batch(Some(Duration::from_secs(5)), &mut batch).unwrap() > 0);
    });
    // The first wake-up may come before all 5 were written.
    pb.read_batch(&mut batch).unwrap();
    assert_eq!(batch.len(), 5);
}

#[test]
fn a_ring_buffer_is_read_in_batches_too() {
    let ring = match RingbufProducer::open(4096) {
        Ok(r) => r,
        Err(e) => return skip(e),
    };
    let mut pb = PerfBuffer::builder(ring.map()).on_sample(|_, _| {}).build().unwrap();
    for (i, n) in [8u32, 13, 100, 1000].into_iter().cycle().take(12).enumerate() {
        assert_eq!(ring.emit(0, n, i as u8, 1).unwrap(), 0);
    }
    let (samples, lost, reads) = read_all(&mut pb, 1100, 3);
    assert!(lost.is_empty());
    assert!(reads >= 6, "1100 bytes and 3 entries (one kept for a loss) take 2 or fewer: {reads}");
    for (i, (cpu, data)) in samples.iter().enumerate() {
        let n = [8u32, 13, 100, 1000][i % 4];
        assert_eq!((*cpu, data), (NO_CPU, &ring.expected(n, i as u8)), "record {i}");
    }
    assert_eq!(samples.len(), 12);
    let s = pb.stats(0).unwrap();
    assert_eq!((s.records, s.pending_bytes), (12, 0));
}

#[test]
fn with_the_fast_mode_on_every_record_is_read_or_reported_lost() {
    let Some(prod) = perf_producer() else { return };
    let mut pb =
        PerfBuffer::builder(prod.map()).cpus(&[0]).adaptive(true).on_sample(|_, _| {}).build().unwrap();
    let (calls, per_call) = (3000u32, 64u32);
    let (mut d, mut e) = (vec![0u8; 1 << 18], vec![BatchEntry::default(); 4096]);
    let mut batch = BatchBuf::new(&mut d, &mut e);
    let (mut samples, mut lost) = (0u64, 0u64);
    let mut count = |batch: &BatchBuf<'_>| {
        for e in batch.entries() {
            assert_eq!(e.cpu, 0);
            match e.lost {
                0 => samples += 1,
                n => lost += n,
            }
        }
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..calls {
                let _ = prod.emit(0, 64, i as u8, per_call);
            }
            done.store(true, std::sync::atomic::Ordering::Release);
        });
        while !done.load(std::sync::atomic::Ordering::Acquire) {
            batch.clear();
            pb.poll_batch(Some(Duration::from_millis(10)), &mut batch).unwrap();
            count(&batch);
        }
    });
    // One more record carries the kernel's report of what it lost, if any.
    prod.emit(0, 64, 0, 1).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    loop {
        batch.clear();
        if pb.poll_batch(Some(Duration::from_millis(20)), &mut batch).unwrap() == 0 {
            break;
        }
        count(&batch);
    }
    let s = pb.stats(0).unwrap();
    assert_eq!(samples + lost, (calls * per_call) as u64 + 1, "{s:?}");
    assert_eq!((s.samples, s.lost), (samples, lost), "{s:?}");
    eprintln!("fast mode, batches: {samples} samples, {lost} lost, {} batch switches", s.batch_switches);
}
