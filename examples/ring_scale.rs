//! How the reader scales with the number of rings, through the Rust API
//! (`make bench`'s rings rows; bench/rings.c measures libbpf and the C face
//! in raw mode, which has no fast mode): 1,024 rings on CPUs 0 and 1 (ring
//! i reads CPU i % 2 through map key i, `slots`), one page each, in the
//! default mode and in the fast mode. Prints one JSON line per mode:
//! - `first_record_ns`: the `consume_ring` that delivers the first record a
//!   fresh ring ever gets (a new buffer each time; ring 0, one record
//!   written on CPU 0), median of 9 (a fast-mode buffer of 1,024 rings takes
//!   seconds to set up);
//! - `empty_consume_ns`: one `consume` with every ring empty, 200 ms after
//!   the buffer opened, median over the 9 buffers of 2,000 each;
//! - `mapped_bytes_per_ring`, `fds_per_ring`: what a ring costs the process.
//!
//! ```text
//! ring_scale [default|fast]   (root with BPF; needs build/libperfbuf_producer.so)
//! ```

#[path = "support/producer.rs"]
mod producer;

use perfbuf::PerfBuffer;
use std::cell::Cell;
use std::time::Instant;

const RINGS: i32 = 1024;
const FRESH_BUFFERS: usize = 9;
const EMPTY_CONSUMES: u32 = 2000;

/// Bytes of perf ring mappings and open fds in this process now.
fn footprint() -> (u64, u64) {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mapped = maps
        .lines()
        .filter(|l| l.contains("[perf_event]"))
        .filter_map(|l| {
            let (lo, hi) = l.split_whitespace().next()?.split_once('-')?;
            Some(u64::from_str_radix(hi, 16).ok()? - u64::from_str_radix(lo, 16).ok()?)
        })
        .sum();
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64);
    (mapped, fds)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

fn measure(producer: &producer::Producer, fast: bool) -> Result<(), Box<dyn std::error::Error>> {
    let (mut first, mut empty) = (Vec::new(), Vec::new());
    let before = footprint();
    let mut per_ring = (0.0, 0.0);
    for b in 0..FRESH_BUFFERS {
        let count = Cell::new(0u64);
        let mut pb = PerfBuffer::builder(producer.map())
            .local()
            .pages(1)
            .slots(&(0..RINGS).map(|i| (i as u32 % 2, i as u32)).collect::<Vec<_>>())
            .adaptive(fast)
            .on_sample(|_cpu, _data| count.set(count.get() + 1))
            .build()?;
        if b == 0 {
            let after = footprint();
            per_ring = (
                (after.0 - before.0) as f64 / f64::from(RINGS),
                (after.1 - before.1) as f64 / f64::from(RINGS),
            );
        }
        if producer.emit(0, 16, b as u8, 1)? != 0 {
            return Err("the producer's write failed".into());
        }
        let t0 = Instant::now();
        pb.consume_ring(0)?;
        first.push(t0.elapsed().as_nanos() as f64);
        if count.get() != 1 {
            return Err(format!("the first record was not delivered ({})", count.get()).into());
        }
        // A reader runs for longer than this: 200 ms on (the fast mode
        // settles after 100 ms), then the first consumes warm the caches.
        std::thread::sleep(std::time::Duration::from_millis(200));
        for _ in 0..50 {
            pb.consume()?;
        }
        let t0 = Instant::now();
        for _ in 0..EMPTY_CONSUMES {
            pb.consume()?;
        }
        empty.push(t0.elapsed().as_nanos() as f64 / f64::from(EMPTY_CONSUMES));
    }
    println!(
        "{{\"row\": \"rings_1024\", \"lib\": \"libperfbuf\", \"mode\": \"rust_{}\", \"first_record_ns\": {:.0}, \
         \"empty_consume_ns\": {:.0}, \"mapped_bytes_per_ring\": {:.0}, \"fds_per_ring\": {:.2}}}",
        if fast { "fast" } else { "default" },
        median(&mut first),
        median(&mut empty),
        per_ring.0,
        per_ring.1
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Each ring is an fd, four in the fast mode: room for them.
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `lim` is a live rlimit to fill, then to read.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let producer = producer::Producer::with_slots(RINGS as u32)?;
    let only = std::env::args().nth(1);
    for (fast, name) in [(false, "default"), (true, "fast")] {
        if only.as_deref().is_none_or(|o| o == name) {
            measure(&producer, fast)?;
        }
    }
    Ok(())
}
