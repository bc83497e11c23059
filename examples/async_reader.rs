//! An async reader: the buffer's epoll fd in tokio's `AsyncFd`, drained
//! with `consume` whenever the reactor says it is readable. Any reactor
//! that takes a file descriptor works the same way.
//!
//! ```text
//! async_reader --demo RECORDS      the test producer (make rust-examples-test)
//! ```

#[path = "support/producer.rs"]
mod producer;

use perfbuf::PerfBuffer;
use std::cell::Cell;
use std::time::Duration;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) != Some("--demo") {
        return Err("usage: async_reader --demo RECORDS".into());
    }
    let records: u64 = args.get(1).ok_or("--demo RECORDS")?.parse()?;
    let producer = std::sync::Arc::new(producer::Producer::open().map_err(|e| {
        eprintln!("{e}");
        std::process::exit(if producer::ci() { 1 } else { 77 })
    })?);
    let samples = Cell::new(0u64);
    let lost = Cell::new(0u64);
    let pb = PerfBuffer::builder(producer.map())
        .pages(64)
        .on_sample(|_cpu, _data| samples.set(samples.get() + 1))
        .on_lost(|_cpu, n| lost.set(lost.get() + n))
        .build()?;
    // SAFETY: a PerfBuffer owns its epoll fd for its whole life and always
    // returns that fd.
    let mut ready =
        unsafe { AsyncFd::register_with_interest(pb, Interest::READABLE) }.map_err(std::io::Error::from)?;

    // The producer runs on a thread of its own; the reader is this task.
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
    let mut wakeups = 0u64;
    while samples.get() + lost.get() < records {
        let readable = tokio::time::timeout(Duration::from_secs(10), ready.readable_mut()).await;
        let mut guard = readable.map_err(|_| "no record for 10 s")??;
        wakeups += 1;
        guard.get_inner_mut().consume()?;
        guard.clear_ready();
    }
    writer.join().map_err(|_| "the producer thread panicked")?;
    drop(ready);
    println!(
        "async_reader: {} of {records} records, {} lost, in {wakeups} reactor wake-ups",
        samples.get(),
        lost.get()
    );
    if samples.get() + lost.get() != records {
        return Err("records missing".into());
    }
    Ok(())
}
