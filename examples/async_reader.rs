//! An async reader: a `PerfBuffer` moved into a tokio task
//! (`AsyncPerfBuffer`, feature `tokio`), awaiting records on a multi-thread
//! runtime while the producer runs on a thread of its own. No `unsafe`.
//!
//! ```text
//! async_reader --demo RECORDS      the test producer (make rust-examples-test)
//! ```

#[path = "support/producer.rs"]
mod producer;

use perfbuf::{AsyncPerfBuffer, PerfBuffer};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("--demo") {
        return Err("usage: async_reader --demo RECORDS".into());
    }
    let records: u64 = args.get(1).ok_or("--demo RECORDS")?.parse()?;
    let producer = Arc::new(producer::Producer::open().map_err(|e| {
        eprintln!("{e}");
        std::process::exit(if producer::ci() { 1 } else { 77 })
    })?);

    // The task owns its buffer, so the buffer owns (a duplicate of) the
    // map's fd: a PerfBuffer<'static>, and Send since its closures are.
    let (samples, lost) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let pb = PerfBuffer::builder(producer.map().try_clone_to_owned()?)
        .pages(64)
        .on_sample({
            let samples = samples.clone();
            move |_cpu, _data| {
                samples.fetch_add(1, Relaxed);
            }
        })
        .on_lost({
            let lost = lost.clone();
            move |_cpu, n| {
                lost.fetch_add(n, Relaxed);
            }
        })
        .build()?;
    let mut reader = AsyncPerfBuffer::new(pb)?;
    let task = tokio::spawn({
        let (samples, lost) = (samples.clone(), lost.clone());
        async move {
            let mut wakeups = 0u64;
            while samples.load(Relaxed) + lost.load(Relaxed) < records {
                tokio::time::timeout(Duration::from_secs(10), reader.readable())
                    .await
                    .map_err(|_| "no record for 10 s".to_string())?
                    .map_err(|e| e.to_string())?;
                wakeups += 1;
            }
            Ok::<u64, String>(wakeups)
        }
    });

    let writer = std::thread::spawn({
        let p = producer.clone();
        move || {
            let mut left = records;
            while left > 0 {
                let n = left.min(500) as u32;
                p.emit(0, 16, 2, n).expect("emit");
                left -= u64::from(n);
            }
        }
    });
    let wakeups = task.await??;
    writer.join().map_err(|_| "the producer thread panicked")?;
    let (samples, lost) = (samples.load(Relaxed), lost.load(Relaxed));
    println!(
        "async_reader: {samples} of {records} records, {lost} lost, in {wakeups} reads from a tokio task"
    );
    if samples + lost != records {
        return Err("records missing".into());
    }
    Ok(())
}
