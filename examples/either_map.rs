//! One reading code for either of BPF's event channels: the same
//! `PerfBuffer` code reads a `BPF_MAP_TYPE_PERF_EVENT_ARRAY` or a
//! `BPF_MAP_TYPE_RINGBUF`. A tool moves from one to the other (a ring
//! buffer on Linux 5.8+, a perf buffer before) by changing its BPF map's
//! type, not this code.
//!
//! ```text
//! either_map /sys/fs/bpf/my_events [SECONDS]     a pinned map of either kind
//! either_map --demo perf|ringbuf RECORDS         the test producer (make rust-examples-test)
//! ```
//!
//! What differs is what the kernel gives: a ring buffer is one ring for
//! all CPUs (its records come with `cpu == perfbuf::NO_CPU`) and counts no
//! losses (a full ring makes the program's output fail instead).

#[path = "support/pinned.rs"]
mod pinned;
#[path = "support/producer.rs"]
mod producer;

use perfbuf::{NO_CPU, PerfBuffer, Wakeup};
use std::cell::Cell;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// What the reading code counted.
#[derive(Debug, Default)]
struct Counts {
    samples: u64,
    bytes: u64,
    lost: u64,
    /// Samples whose ring says no CPU (a ring buffer's).
    no_cpu: u64,
}

/// The tool's reading code, written once: knows nothing of the map's kind.
/// Calls `ready` once reading (a perf event array's slots are filled only
/// then: output before fails with ENOENT), polls until `done` says so
/// (told whether the last poll timed out), then drains what is left.
fn read_events(
    map: impl AsFd,
    ready: impl FnOnce(),
    mut done: impl FnMut(&Counts, bool) -> bool,
) -> perfbuf::Result<Counts> {
    let counts = Cell::new(Counts::default());
    let update = |f: &mut dyn FnMut(&mut Counts)| {
        let mut c = counts.take();
        f(&mut c);
        counts.set(c);
    };
    let mut pb = PerfBuffer::builder(map.as_fd())
        .local()
        .pages(64) // per CPU for a perf event array; a ring buffer's size is its map's
        .wakeup(Wakeup::Records(32)) // batching for a perf event array; a ring buffer's program decides
        .on_sample(|cpu, data| {
            update(&mut |c| {
                c.samples += 1;
                c.bytes += data.len() as u64;
                c.no_cpu += u64::from(cpu == NO_CPU);
            })
        })
        .on_lost(|_cpu, n| update(&mut |c| c.lost += n))
        .build()?;
    let kind = if pb.is_ring_buffer() { "a ring buffer" } else { "a perf event array" };
    eprintln!("either_map: reading {kind} ({} rings)", pb.rings());
    ready();
    loop {
        let idle = pb.poll(Some(Duration::from_millis(100)))? == 0;
        let c = counts.take();
        let stop = done(&c, idle);
        counts.set(c);
        if stop {
            break;
        }
    }
    pb.drain_final()?;
    drop(pb);
    Ok(counts.take())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--demo") => {
            let kind = args.get(1).ok_or("--demo perf|ringbuf RECORDS")?;
            let records: u64 = args.get(2).ok_or("--demo perf|ringbuf RECORDS")?.parse()?;
            demo(kind, records)
        }
        Some(path) => {
            let seconds: u64 = args.get(1).map_or(Ok(10), |s| s.parse())?;
            let map = pinned::open_pinned(path)?;
            let end = Instant::now() + Duration::from_secs(seconds);
            let c = read_events(&map, || {}, |_, _| Instant::now() >= end)?;
            println!("{} samples ({} bytes), {} lost", c.samples, c.bytes, c.lost);
            Ok(())
        }
        None => Err("usage: either_map PINNED_MAP [SECONDS] | --demo perf|ringbuf RECORDS".into()),
    }
}

/// Reads `records` of 16 bytes the test producer writes from another
/// thread into a map of `kind`, with the same [`read_events`].
fn demo(kind: &str, records: u64) -> Result<(), Box<dyn std::error::Error>> {
    let exit = |e: String| -> ! {
        eprintln!("{e}");
        std::process::exit(if producer::ci() { 1 } else { 77 })
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let written = AtomicBool::new(false);
    let read = AtomicU64::new(0);
    // Everything came, or the producer is done and the rings are idle
    // (the final drain then reports what the kernel lost).
    let until = |c: &Counts, idle: bool| {
        read.store(c.samples + c.lost, Relaxed);
        c.samples + c.lost >= records || (idle && written.load(Relaxed)) || Instant::now() >= deadline
    };
    // Bursts of 500, each once the reader has the one before: a demo of
    // the reading code, not of a full ring (see stream_reader for that).
    let emit_all = |emit: &dyn Fn(u32)| {
        let mut left = records;
        while left > 0 {
            let n = left.min(500) as u32;
            emit(n);
            left -= u64::from(n);
            while read.load(Relaxed) < records - left && Instant::now() < deadline {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        written.store(true, Relaxed);
    };
    let c = match kind {
        "perf" => {
            let p = producer::Producer::open().unwrap_or_else(|e| exit(e));
            std::thread::scope(|s| {
                let writer = || {
                    s.spawn(|| {
                        emit_all(&|n| {
                            let ret = p.emit(0, 16, 1, n).expect("emit");
                            assert_eq!(ret, 0, "bpf_perf_event_output failed");
                        })
                    });
                };
                read_events(p.map(), writer, until)
            })?
        }
        "ringbuf" => {
            // 4 MiB hold every record of the demo: none can fail to fit.
            let p = producer::RingbufProducer::open(4 << 20).unwrap_or_else(|e| exit(e));
            std::thread::scope(|s| {
                let writer = || {
                    s.spawn(|| emit_all(&|n| assert_eq!(p.emit(0, 16, 1, n).expect("emit"), 0, "ring full")));
                };
                read_events(p.map(), writer, until)
            })?
        }
        _ => return Err("--demo perf|ringbuf RECORDS".into()),
    };
    println!(
        "either_map --demo {kind}: {} of {records} records ({} bytes), {} lost, {} with no CPU",
        c.samples, c.bytes, c.lost, c.no_cpu
    );
    if c.samples + c.lost != records {
        return Err(format!("delivered {} + lost {} != produced {records}", c.samples, c.lost).into());
    }
    // A ring buffer's records have no CPU and exactly their 16 bytes; a
    // perf sample's are padded to 8 bytes with its 4-byte size (20).
    let (no_cpu, size) = if kind == "ringbuf" { (c.samples, 16) } else { (0, 20) };
    if c.no_cpu != no_cpu || c.bytes != c.samples * size {
        return Err(format!("{c:?}: expected {no_cpu} with no CPU, {size} bytes each").into());
    }
    Ok(())
}
