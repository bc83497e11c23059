//! A stream reader with the builder: what a Rust BPF tool (on aya,
//! libbpf-rs or raw syscalls) writes to read its perf buffer.
//!
//! ```text
//! stream_reader /sys/fs/bpf/my_events [SECONDS]    a pinned PERF_EVENT_ARRAY
//! stream_reader --demo RECORDS [--fast]            the test producer (make rust-examples-test)
//! ```
//!
//! With `--fast`, the buffer uses the fast mode (`.adaptive(true)`).

#[path = "support/pinned.rs"]
mod pinned;
#[path = "support/producer.rs"]
mod producer;

use perfbuf::PerfBuffer;
use std::cell::Cell;
use std::time::{Duration, Instant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--demo") => {
            let records: u64 = args.get(1).ok_or("--demo RECORDS")?.parse()?;
            demo(records, args.iter().any(|a| a == "--fast"))
        }
        Some(path) => {
            let seconds: u64 = args.get(1).map_or(Ok(10), |s| s.parse())?;
            let map = pinned::open_pinned(path)?;
            let (samples, lost) = (Cell::new(0u64), Cell::new(0u64));
            // Cells are not Send: `local()` keeps the buffer on this thread.
            let mut pb = PerfBuffer::builder(&map)
                .local()
                .pages(64)
                .on_sample(|_cpu, _data| samples.set(samples.get() + 1))
                .on_lost(|_cpu, n| lost.set(lost.get() + n))
                .build()?;
            let end = Instant::now() + Duration::from_secs(seconds);
            while Instant::now() < end {
                pb.poll(Some(Duration::from_millis(100)))?;
            }
            drop(pb);
            println!("{} samples, {} lost", samples.get(), lost.get());
            Ok(())
        }
        None => Err("usage: stream_reader PINNED_MAP [SECONDS] | --demo RECORDS [--fast]".into()),
    }
}

/// Reads `records` the test producer writes on CPU 0 from another thread.
fn demo(records: u64, fast: bool) -> Result<(), Box<dyn std::error::Error>> {
    let producer = producer::Producer::open().map_err(|e| {
        eprintln!("{e}");
        std::process::exit(if producer::ci() { 1 } else { 77 })
    })?;
    let (samples, lost, bytes) = (Cell::new(0u64), Cell::new(0u64), Cell::new(0u64));
    let mut pb = PerfBuffer::builder(producer.map())
        .local()
        .pages(64)
        .adaptive(fast)
        .on_sample(|_cpu, data| {
            samples.set(samples.get() + 1);
            bytes.set(bytes.get() + data.len() as u64);
        })
        .on_lost(|_cpu, n| lost.set(lost.get() + n))
        .build()?;
    let start = Instant::now();
    std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
        let writer = s.spawn(|| {
            let mut left = records;
            while left > 0 {
                let n = left.min(1000) as u32;
                producer.emit(0, 16, 1, n).expect("emit");
                left -= u64::from(n);
            }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while samples.get() + lost.get() < records && Instant::now() < deadline {
            pb.poll(Some(Duration::from_millis(100)))?;
        }
        writer.join().map_err(|_| "the producer thread panicked")?;
        Ok(())
    })?;
    let secs = start.elapsed().as_secs_f64();
    let s = pb.stats(0)?;
    println!(
        "stream_reader{}: {} of {records} records ({} bytes), {} lost, {:.0} records/s; ring 0: {} wake-ups, \
         batched {} times",
        if fast { " --fast" } else { "" },
        samples.get(),
        bytes.get(),
        lost.get(),
        records as f64 / secs,
        s.wakeups,
        s.batch_switches,
    );
    if samples.get() + lost.get() != records {
        return Err(format!("delivered {} + lost {} != produced {records}", samples.get(), lost.get()).into());
    }
    Ok(())
}
