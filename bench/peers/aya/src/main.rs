//! The aya row of the benchmark: aya's `PerfEventArray` (one
//! `PerfEventArrayBuffer` per online CPU, 64 pages each, aya's own
//! per-record wake-ups) over the PERF_EVENT_ARRAY of the same C producer
//! bench/perfbench.c uses (c-tests/producer.c, driven by
//! bench/peers/peer_producer.c on CPU 0). The reader, on CPU 1, waits with
//! epoll on the buffers' fds (100 ms timeout, as perfbench's
//! `perf_buffer__poll(pb, 100)`) and drains the signalled ones with
//! `for_each`; once the producer stops it drains every buffer once more.
//! Prints one JSON line per row in perfbench's stream format.
//!
//! usage: peer-aya [ROW_PREFIX]   (stream_full, stream_100k; default both)

use std::ffi::{c_int, c_uint};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

use aya::maps::perf::PerfEvent;
use aya::maps::{Map, MapData, PerfEventArray};

const PAGES: usize = 64; // per CPU, as perfbench's stream rows
const AYA_VERSION: &str = "0.14.0";

unsafe extern "C" {
    fn peer_producer_open() -> c_int;
    fn peer_producer_close();
    fn peer_pin(cpu: c_int);
    fn peer_now_ns() -> f64;
    fn peer_thread_cpu_ns() -> f64;
    fn peer_produce(seconds: f64, rate: c_uint, size: c_uint, done: *mut c_int) -> u64;
}

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn run_row(map_fd: c_int, row: &str, rate: u32, seconds: f64) -> Res<String> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new fd this function then owns.
    let dup = unsafe { libc::fcntl(map_fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let owned = unsafe { OwnedFd::from_raw_fd(dup) };
    let map = Map::from_map_data(MapData::from_fd(owned)?)?;
    let mut array: PerfEventArray<MapData> = PerfEventArray::try_from(map)?;
    let cpus = aya::util::online_cpus().map_err(|(_, e)| e)?;
    let mut bufs = Vec::new();
    for &cpu in &cpus {
        bufs.push(array.open(cpu, Some(PAGES))?);
    }
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    for (i, b) in bufs.iter().enumerate() {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: i as u64 };
        if unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, b.as_raw_fd(), &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
    }

    let done = AtomicI32::new(0);
    let (mut delivered, mut lost) = (0u64, 0u64);
    let mut drain = |b: &mut aya::maps::perf::PerfEventArrayBuffer<MapData>| {
        let before = delivered;
        b.for_each(|e| match e {
            PerfEvent::Sample { .. } => delivered += 1,
            PerfEvent::Lost { count } => lost += count,
        });
        delivered != before
    };
    // As perfbench: records/s over the time from the producer's start to
    // the last wake-up that delivered records (one clock read per such
    // wake-up), not to the end of the last idle 100 ms wait.
    let (cpu0, t0) = unsafe { (peer_thread_cpu_ns(), peer_now_ns()) };
    let mut last = 0.0;
    let (produced, wall) = std::thread::scope(|s| {
        let done_ptr = done.as_ptr() as usize;
        let producer = s.spawn(move || unsafe { peer_produce(seconds, rate, 64, done_ptr as *mut c_int) });
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 16];
        while done.load(Ordering::Acquire) == 0 {
            let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as c_int, 100) };
            let mut got = false;
            for ev in events.iter().take(n.max(0) as usize) {
                got |= drain(&mut bufs[ev.u64 as usize]);
            }
            if got {
                last = unsafe { peer_now_ns() };
            }
        }
        let wall = unsafe { peer_now_ns() } - t0;
        (producer.join().expect("producer thread"), wall)
    });
    let mut got = false;
    for b in bufs.iter_mut() {
        got |= drain(b);
    }
    if got {
        last = unsafe { peer_now_ns() };
    }
    let active = if last > 0.0 { last - t0 } else { wall };
    let cpu = unsafe { peer_thread_cpu_ns() } - cpu0;
    unsafe { libc::close(ep) };
    let per = if delivered > 0 { cpu / delivered as f64 } else { 0.0 };
    Ok(format!(
        "{{\"row\": \"{row}\", \"lib\": \"aya\", \"mode\": \"default\", \"version\": \"{AYA_VERSION}\", \
         \"produced\": {produced}, \"delivered\": {delivered}, \"lost\": {lost}, \"records_per_s\": {:.0}, \
         \"reader_cpu_ns_per_record\": {per:.1}, \"reader_cpu_ms\": {:.2}, \"wall_ms\": {:.1}}}",
        delivered as f64 / (active / 1e9),
        cpu / 1e6,
        wall / 1e6
    ))
}

fn main() {
    let only = std::env::args().nth(1).unwrap_or_default();
    let fd = unsafe { peer_producer_open() };
    if fd < 0 {
        eprintln!("cannot create the BPF producer: {}", std::io::Error::from_raw_os_error(-fd));
        std::process::exit(1);
    }
    unsafe { peer_pin(1) };
    for (row, rate) in [("stream_full", 0u32), ("stream_100k", 100_000)] {
        if !row.starts_with(&only) {
            continue;
        }
        match run_row(fd, row, rate, 1.0) {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("{row}: {e}");
                std::process::exit(1);
            }
        }
    }
    unsafe { peer_producer_close() };
}
