//! One reader over both of BPF's event channels, on the real kernel: the
//! same `PerfBuffer` code reads a `BPF_MAP_TYPE_PERF_EVENT_ARRAY` and a
//! `BPF_MAP_TYPE_RINGBUF` written by BPF programs (`bpf_perf_event_output`
//! and `bpf_ringbuf_output`, run with `BPF_PROG_TEST_RUN`): records,
//! counts, the CPU a ring buffer cannot tell, pause and resume, wake-ups,
//! whole records, figures, and the clear errors for what a ring buffer
//! lacks or for a map of a third kind.
//!
//! Needs root with BPF and `make producer-lib`; skipped otherwise, a
//! failure under `CI=true`.

#[path = "../examples/support/producer.rs"]
mod producer;
mod skip;

use core::ops::ControlFlow;
use perfbuf::{Batch, ErrorKind, NO_CPU, PerfBuffer, Wakeup};
use producer::{Producer, RingbufOp, RingbufProducer};
use skip::skip;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const WAIT: Option<Duration> = Some(Duration::from_millis(200));

/// Both channels' producers, or a skip.
fn producers() -> Option<(Producer, RingbufProducer)> {
    match Producer::open().and_then(|p| RingbufProducer::open(65536).map(|r| (p, r))) {
        Ok(both) => Some(both),
        Err(e) => {
            skip(e);
            None
        }
    }
}

/// What a tool's reading code saw: `(cpu, data)` of each sample, each
/// lost report.
#[derive(Default)]
struct Seen {
    samples: Vec<(u32, Vec<u8>)>,
    lost: Vec<(u32, u64)>,
}

/// A tool's reading code, written once: builds a reader over `map` with
/// the options a perf buffer tool sets, and polls until `want` samples
/// came (or 5 s passed). Knows nothing of the map's kind.
fn read_with_one_code(map: BorrowedFd<'_>, emit: impl FnOnce(), want: usize) -> Seen {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (s, l) = (seen.clone(), seen.clone());
    let mut pb = PerfBuffer::builder(map)
        .pages(64)
        .wakeup(Wakeup::Records(4))
        .max_delay(Duration::from_millis(2))
        .on_sample(move |cpu, data| s.lock().unwrap().samples.push((cpu, data.to_vec())))
        .on_lost(move |cpu, n| l.lock().unwrap().lost.push((cpu, n)))
        .build()
        .unwrap();
    emit();
    let deadline = Instant::now() + Duration::from_secs(5);
    while seen.lock().unwrap().samples.len() < want && Instant::now() < deadline {
        pb.poll(WAIT).unwrap();
    }
    pb.consume().unwrap();
    drop(pb);
    Arc::try_unwrap(seen).ok().unwrap().into_inner().unwrap()
}

#[test]
fn the_same_code_reads_a_perf_event_array_and_a_ring_buffer() {
    let Some((perf, ring)) = producers() else { return };
    let sizes = [8u32, 13, 100, 1000, 3000];
    let emit_perf = || {
        for (i, &n) in sizes.iter().enumerate() {
            assert_eq!(perf.emit(0, n, i as u8, 1).unwrap(), 0);
        }
    };
    let emit_ring = || {
        for (i, &n) in sizes.iter().enumerate() {
            assert_eq!(ring.emit(0, n, i as u8, 1).unwrap(), 0);
        }
    };
    let from_perf = read_with_one_code(perf.map(), emit_perf, sizes.len());
    let from_ring = read_with_one_code(ring.map(), emit_ring, sizes.len());
    assert_eq!(from_perf.samples.len(), sizes.len());
    assert_eq!(from_ring.samples.len(), sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        // A perf sample is padded to 8 bytes with its 4-byte size; a ring
        // buffer's is exactly what the program wrote.
        let (cpu, data) = &from_perf.samples[i];
        assert_eq!((*cpu, &data[..n as usize]), (0, &perf.expected(n, i as u8)[..]));
        assert_eq!(data.len(), (n as usize + 4).next_multiple_of(8) - 4);
        assert_eq!(from_ring.samples[i], (NO_CPU, ring.expected(n, i as u8)));
    }
    assert!(from_perf.lost.is_empty() && from_ring.lost.is_empty());
}

#[test]
fn a_ring_buffer_reader_is_one_ring_with_figures_and_no_cpu() {
    let Some((_, ring)) = producers() else { return };
    let mut pb = PerfBuffer::builder(ring.map()).on_sample(|_, _| {}).build().unwrap();
    assert!(pb.is_ring_buffer());
    assert_eq!((pb.rings(), pb.ring_cpu(0).unwrap()), (1, NO_CPU));
    assert_eq!(pb.ring_cpu(1).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(ring.emit(0, 100, 1, 10).unwrap(), 0);
    let s = pb.stats(0).unwrap();
    assert_eq!((s.cpu, s.records, s.data_size, s.pending_bytes), (-1, 0, 65536, 10 * 112));
    assert_eq!(pb.poll(WAIT).unwrap(), 1, "one ring read");
    let s = pb.stats(0).unwrap();
    assert_eq!((s.records, s.bytes, s.pending_bytes, s.lost), (10, 10 * 112, 0, 0));
    assert!(s.wakeups >= 1);
    assert_eq!(pb.poll(Some(Duration::ZERO)).unwrap(), 0, "nothing left");
    // A discarded reservation is stepped over, not delivered.
    assert_eq!(ring.ctl(0, RingbufOp::Discard, 0, 7).unwrap(), 0);
    pb.consume().unwrap();
    assert_eq!(pb.stats(0).unwrap().records, 10);
}

#[test]
fn pause_drops_what_is_reserved_until_resume_and_reports_it_lost_in_order() {
    let Some((_, ring)) = producers() else { return };
    let events = Arc::new(Mutex::new(Vec::new()));
    let (s, l) = (events.clone(), events.clone());
    // Which emit a record came from: its seed.
    let seeds: Vec<Vec<u8>> = (0..6).map(|seed| ring.expected(8, seed)).collect();
    let seed_of = move |data: &[u8]| seeds.iter().position(|e| e == data).expect("a known record");
    let mut pb = PerfBuffer::builder(ring.map())
        .on_sample(move |_, data| s.lock().unwrap().push(format!("sample {}", seed_of(data))))
        .on_lost(move |cpu, n| l.lock().unwrap().push(format!("lost {n} on {cpu:#x}")))
        .build()
        .unwrap();
    // Before the pause: delivered even when read after it.
    assert_eq!(ring.emit(0, 8, 1, 3).unwrap(), 0);
    pb.pause().unwrap();
    // While paused: the program's output still succeeds (the reader, not
    // the kernel, drops them).
    assert_eq!(ring.emit(0, 8, 2, 5).unwrap(), 0);
    pb.consume().unwrap();
    let s = pb.stats(0).unwrap();
    assert_eq!((s.records, s.lost, s.lost_unreported, s.pending_bytes), (3, 5, 5, 0));
    assert_eq!(ring.emit(0, 8, 3, 2).unwrap(), 0);
    pb.resume().unwrap();
    assert_eq!(ring.emit(0, 8, 4, 2).unwrap(), 0);
    pb.consume().unwrap();
    let s = pb.stats(0).unwrap();
    assert_eq!((s.records, s.lost, s.lost_unreported), (5, 7, 0));
    let want: Vec<String> = ["sample 1"; 3]
        .into_iter()
        .map(String::from)
        .chain([format!("lost 7 on {NO_CPU:#x}")])
        .chain(["sample 4".into(), "sample 4".into()])
        .collect();
    assert_eq!(*events.lock().unwrap(), want);
    // Paused with nothing read past the window yet: the final drain reads
    // and reports once the window is closed and passed.
    pb.pause().unwrap();
    assert_eq!(ring.emit(0, 8, 5, 4).unwrap(), 0);
    pb.resume().unwrap();
    assert_eq!(pb.drain_final().unwrap(), 4);
    assert_eq!(events.lock().unwrap().last().unwrap(), &format!("lost 4 on {NO_CPU:#x}"));
}

#[test]
fn a_waker_cancels_a_ring_buffer_poll_from_another_thread() {
    let Some((_, ring)) = producers() else { return };
    let mut pb = PerfBuffer::builder(ring.map()).on_sample(|_, _| {}).build().unwrap();
    let waker = pb.waker().unwrap();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        waker.wake().unwrap();
    });
    let start = Instant::now();
    assert_eq!(pb.poll(Some(Duration::from_secs(10))).unwrap_err().kind(), ErrorKind::Cancelled);
    assert!(start.elapsed() < Duration::from_secs(5));
    t.join().unwrap();
    // Cleared: the next poll waits its timeout out again.
    assert_eq!(pb.poll(Some(Duration::from_millis(10))).unwrap(), 0);
}

#[test]
fn a_ring_buffer_reader_moves_into_another_thread() {
    let Some(_) = producers() else { return };
    // Room for every record even if the reader thread has not run yet.
    let ring = RingbufProducer::open(1 << 20).unwrap();
    let count = Arc::new(Mutex::new(0u64));
    let c = count.clone();
    let mut pb = PerfBuffer::builder(ring.map().try_clone_to_owned().unwrap())
        .on_sample(move |cpu, _| {
            assert_eq!(cpu, NO_CPU);
            *c.lock().unwrap() += 1;
        })
        .build()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            pb.poll(WAIT).unwrap();
            if pb.stats(0).unwrap().records == 2000 {
                break;
            }
        }
    });
    for _ in 0..20 {
        assert_eq!(ring.emit(0, 64, 3, 100).unwrap(), 0);
    }
    reader.join().unwrap();
    assert_eq!(*count.lock().unwrap(), 2000);
}

#[test]
fn on_record_gets_a_ring_buffers_records_as_perf_samples() {
    let Some((_, ring)) = producers() else { return };
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let mut pb = PerfBuffer::builder(ring.map())
        .on_record(move |cpu, rec| {
            assert_eq!(cpu, NO_CPU);
            assert_eq!(rec.len() % 8, 0);
            g.lock().unwrap().push(Batch::sample_data(rec).expect("a PERF_RECORD_SAMPLE").to_vec());
            ControlFlow::Continue(())
        })
        .build()
        .unwrap();
    for n in [8u32, 9, 2999] {
        assert_eq!(ring.emit(0, n, n as u8, 1).unwrap(), 0);
    }
    pb.consume().unwrap();
    let want: Vec<_> = [8u32, 9, 2999].iter().map(|&n| ring.expected(n, n as u8)).collect();
    assert_eq!(*got.lock().unwrap(), want);
}

#[test]
fn what_a_ring_buffer_cannot_honour_or_lacks_fails_naming_it() {
    let Some((_, ring)) = producers() else { return };
    let build_err = |b: perfbuf::Builder<'_>| b.build().err().expect("refused").to_string();
    assert!(build_err(PerfBuffer::builder(ring.map()).cpus(&[0])).contains("some CPUs"));
    assert!(build_err(PerfBuffer::builder(ring.map()).slots(&[(0, 0)])).contains("some CPUs"));
    assert!(build_err(PerfBuffer::builder(ring.map()).overwrite()).contains("overwritable"));
    let attr = perfbuf::PerfEventAttr::bpf_output(1);
    assert!(build_err(PerfBuffer::builder(ring.map()).attr(attr)).contains("perf_event_attr"));
    // Ignored: what sizes or batches per-CPU perf rings.
    let mut pb = PerfBuffer::builder(ring.map())
        .pages(1)
        .wakeup(Wakeup::Bytes(4096))
        .adaptive(true)
        .count_lost(true)
        .on_sample(|_, _| {})
        .build()
        .unwrap();
    let e = pb.ring_event(0).unwrap_err();
    assert_eq!((e.kind(), e.errno()), (ErrorKind::Unsupported, libc::EOPNOTSUPP));
    assert!(e.to_string().contains("per-CPU perf events: a BPF ring buffer has none"), "{e}");
    assert_eq!(pb.snapshot(0).unwrap_err().kind(), ErrorKind::Unsupported);
    assert_eq!(pb.consume_batch(|_| ControlFlow::Continue(())).unwrap_err().kind(), ErrorKind::Unsupported);
    assert!(pb.ring(0).is_err());
}

#[test]
fn a_map_of_a_third_kind_is_refused_naming_both() {
    let Some(_) = producers() else { return };
    #[repr(C)]
    struct Create {
        map_type: u32,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        rest: [u32; 28],
    }
    let mut attr = Create { map_type: 2, key_size: 4, value_size: 4, max_entries: 1, rest: [0; 28] };
    // SAFETY: a valid BPF_MAP_CREATE attr prefix.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, 0, &mut attr, size_of::<Create>()) };
    assert!(fd >= 0, "BPF_MAP_CREATE");
    // SAFETY: a new fd nothing else owns.
    let array = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let e = PerfBuffer::builder(&array).build().err().expect("an array map");
    assert_eq!(e.errno(), libc::EINVAL);
    let text = e.to_string();
    assert!(
        text.contains("BPF_MAP_TYPE_PERF_EVENT_ARRAY")
            && text.contains("BPF_MAP_TYPE_RINGBUF")
            && text.contains(&format!("fd={}", array.as_raw_fd()))
            && text.contains("type 2"),
        "{text}"
    );
}
