//! A recording benchmark row: one thread calls getppid() in a loop for a
//! few seconds, its `syscalls:sys_enter_getppid` tracepoint is read (1)
//! only, counting records, (2) into a perf.data "file" on /dev/null (the
//! writer's own CPU: no file system behind it), (3) into a perf.data file
//! (on /dev/shm: tmpfs, whose page allocation and copy the reader thread
//! pays in its writes), and (4) by `perf record` of the same tracepoint on
//! the same thread, for scale. Prints records per second and the reader's
//! CPU per record.
//!
//! ```text
//! record_bench [SECONDS] [--json]   (root; tracefs with syscall tracepoints; perf for row 4)
//! ```
//!
//! `--json` prints one JSON object per row instead (`make bench`'s
//! `record` rows, read by bench/run.py).

use perfbuf::Wakeup;
use perfbuf::events::{Event, EventSet};
use perfbuf::perfdata::PerfDataWriter;
use std::ops::ControlFlow;
use std::os::fd::AsRawFd;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

const TRACEPOINT: &str = "syscalls:sys_enter_getppid";
const OUT: &str = "/dev/shm/perfbuf-record-bench.data";

/// The generator: a thread calling getppid() while `run` is set.
fn generator(run: Arc<AtomicBool>) -> (i32, std::thread::JoinHandle<u64>) {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() }).unwrap();
        while !run.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut calls = 0u64;
        while run.load(Ordering::Relaxed) {
            for _ in 0..64 {
                // SAFETY: getppid has no preconditions.
                unsafe { libc::getppid() };
            }
            calls += 64;
        }
        calls
    });
    (rx.recv().unwrap(), handle)
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn wait_readable(fd: i32, ms: i32) {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, ms) };
}

/// One run: records, seconds, reader CPU.
fn run(secs: f64, write: Option<&str>) -> Result<(u64, f64, Duration, u64), Box<dyn std::error::Error>> {
    let go = Arc::new(AtomicBool::new(false));
    let (tid, gen_thread) = generator(go.clone());
    let mut set = EventSet::builder()
        .pid(tid)
        .pages(1024)
        .wakeup(Wakeup::Bytes(1 << 20))
        .max_delay(Duration::from_millis(10))
        .build()?;
    set.add(&Event::tracepoint(TRACEPOINT))?;
    let mut out = write.map(|path| PerfDataWriter::for_set(path, &mut set)).transpose()?;
    let mut reader = set.reader(|_| {})?;
    let fd = reader.as_raw_fd();
    set.enable_all()?;
    let (cpu0, t0) = (thread_cpu(), Instant::now());
    go.store(true, Ordering::Relaxed);
    let mut records = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        wait_readable(fd, 10);
        records += match &mut out {
            Some(w) => w.drain(&mut reader)? as u64,
            None => reader.consume_batch(|b| {
                std::hint::black_box(b.samples);
                ControlFlow::Continue(())
            })? as u64,
        };
    }
    go.store(false, Ordering::Relaxed);
    set.disable_all()?;
    records += match &mut out {
        Some(w) => w.drain(&mut reader)? as u64,
        None => reader.consume_batch(|_| ControlFlow::Continue(()))? as u64,
    };
    let (cpu, wall) = (thread_cpu() - cpu0, t0.elapsed().as_secs_f64());
    if let Some(w) = out {
        w.finish()?;
    }
    let calls = gen_thread.join().unwrap();
    Ok((records, wall, cpu, calls))
}

/// `perf record` of the same tracepoint on a generator thread: its
/// samples, seconds and CPU.
fn perf_record(secs: f64) -> Option<(u64, f64, Duration)> {
    let go = Arc::new(AtomicBool::new(false));
    let (tid, gen_thread) = generator(go.clone());
    let t0 = Instant::now();
    let child = Command::new("perf")
        .args(["record", "-q", "-m", "1024", "-e", TRACEPOINT, "-o", OUT, "-t"])
        .arg(tid.to_string())
        .args(["--", "sleep"])
        .arg(format!("{secs}"))
        .spawn()
        .ok()?;
    std::thread::sleep(Duration::from_millis(300)); // perf attached
    go.store(true, Ordering::Relaxed);
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our child.
    let mut ru: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: valid pointers; the pid is our child's.
    unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut ru) };
    go.store(false, Ordering::Relaxed);
    gen_thread.join().unwrap();
    let wall = t0.elapsed().as_secs_f64() - 0.3;
    let cpu = Duration::new(ru.ru_utime.tv_sec as u64 + ru.ru_stime.tv_sec as u64, 0)
        + Duration::from_micros(ru.ru_utime.tv_usec as u64 + ru.ru_stime.tv_usec as u64);
    let script = Command::new("perf").args(["script", "-F", "event", "-i", OUT]).output().ok()?;
    let samples = String::from_utf8_lossy(&script.stdout).lines().count() as u64;
    Some((samples, wall, cpu))
}

fn row(json: bool, (name, mode): (&str, &str), records: u64, wall: f64, cpu: Duration) {
    let ns = if records > 0 { cpu.as_nanos() as f64 / records as f64 } else { f64::NAN };
    if json {
        println!(
            "{{\"row\": \"record\", \"lib\": \"{}\", \"mode\": \"{mode}\", \"records_per_s\": {:.0}, \
             \"reader_cpu_ns_per_record\": {:.1}, \"records\": {records}}}",
            if mode == "perf_record" { "perf" } else { "perfbuf" },
            records as f64 / wall,
            ns
        );
        return;
    }
    println!(
        "{name:<28} {:>12.0} records/s {:>8.1} ns CPU/record {:>10} records",
        records as f64 / wall,
        ns,
        records
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let json = args.iter().any(|a| a == "--json");
    let secs: f64 = args.iter().find_map(|s| s.parse().ok()).unwrap_or(2.0);
    for (name, out) in [
        (("read only", "read_only"), None),
        (("perf.data to /dev/null", "devnull"), Some("/dev/null")),
        (("perf.data on tmpfs", "tmpfs"), Some(OUT)),
    ] {
        let (n, wall, cpu, calls) = run(secs, out)?;
        row(json, name, n, wall, cpu);
        eprintln!("  (generator: {calls} calls)");
    }
    match perf_record(secs) {
        Some((n, wall, cpu)) => row(json, ("perf record (whole process)", "perf_record"), n, wall, cpu),
        None => eprintln!("perf record: not available"),
    }
    let _ = std::fs::remove_file(OUT);
    Ok(())
}
