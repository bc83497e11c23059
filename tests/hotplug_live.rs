//! CPUs that come and go, for real: CPU 1 is taken offline and brought
//! back through `/sys/devices/system/cpu/cpu1/online` while a `PerfBuffer`
//! reads a BPF program's output (`c-tests/bpf/accounted.bpf.c`, counted by
//! `include/perfbuf.bpf.h`).
//!
//! - CPU 1 comes online after the reader was built: its first successful
//!   output (outputs before fail with ENOENT: no slot) comes within 1 s,
//!   with the reader blocked in its poll, and every record is read.
//! - CPU 1 goes offline with records in its ring: they are read, the ring
//!   is kept.
//! - CPU 1 comes back: the kernel leaves the old event dead (outputs fail
//!   with EOPNOTSUPP) until the reader puts a fresh one in the slot, within
//!   1 s; the refusals meanwhile are in `output_failed`, and every record
//!   the program sent is delivered or in a loss bucket.
//!
//! - An event set (a tracepoint) built while CPU 1 is offline reads the
//!   execs of a program pinned to CPU 1 once it comes online, and again
//!   after it went offline and came back (fresh events).
//!
//! Disturbs the whole machine (tests pinned to CPU 1 run elsewhere
//! meanwhile), so it is `#[ignore]`d for `cargo test` and run alone by
//! `make hotplug-test`, which also puts CPU 1 back from a shell trap. Here a
//! guard restores CPU 1 on every exit path, panics included, and a signal
//! handler on SIGINT, SIGTERM and SIGHUP. Needs root and two CPUs; skipped
//! otherwise, a failure under `CI=true`.

#[path = "../examples/support/accounted.rs"]
mod accounted;
#[path = "../examples/support/producer.rs"]
mod producer;
mod skip;

use accounted::{Accounted, Prog};
use perfbuf::PerfBuffer;
use perfbuf::events::{Event, EventRecord, EventSet};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

const ONLINE: &str = "/sys/devices/system/cpu/cpu1/online";
const ONLINE_C: &[u8] = b"/sys/devices/system/cpu/cpu1/online\0";

/// Puts CPU 1 back online when dropped (panics included).
struct Cpu1Back;

impl Drop for Cpu1Back {
    fn drop(&mut self) {
        if std::fs::read_to_string(ONLINE).is_ok_and(|s| s.trim() == "0") {
            if let Err(e) = std::fs::write(ONLINE, "1") {
                eprintln!("cannot put cpu 1 back online: {e}");
            }
        }
    }
}

/// A signal ends the test: CPU 1 goes back online first (open, write and
/// close are async-signal-safe), then the signal does what it would have.
extern "C" fn put_cpu1_back(sig: libc::c_int) {
    // SAFETY: a NUL-terminated path and a 1-byte buffer; only system calls.
    unsafe {
        let fd = libc::open(ONLINE_C.as_ptr().cast(), libc::O_WRONLY);
        if fd >= 0 {
            libc::write(fd, b"1".as_ptr().cast(), 1);
            libc::close(fd);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

fn trap_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: installs a handler that makes only async-signal-safe calls.
        unsafe { libc::signal(sig, put_cpu1_back as *const () as libc::sighandler_t) };
    }
}

fn set_cpu1(online: bool) {
    std::fs::write(ONLINE, if online { "1" } else { "0" })
        .unwrap_or_else(|e| panic!("cannot set cpu 1 {}: {e}", if online { "online" } else { "offline" }));
}

fn can_run() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let why = if !root {
        "needs root"
    } else if !std::path::Path::new(ONLINE).exists() {
        "needs a CPU 1 that can go offline (/sys/devices/system/cpu/cpu1/online)"
    } else {
        return true;
    };
    skip::skip(why);
    false
}

/// One test at a time: each takes CPU 1 offline and back, and a test
/// running beside it would see CPU 1 come and go under it (the harness
/// runs tests in parallel).
static SERIAL: Mutex<()> = Mutex::new(());

/// What a test holds while it runs: CPU 1 put back online first, then the
/// next test let in (fields drop in order).
struct Running {
    _back: Cpu1Back,
    _serial: std::sync::MutexGuard<'static, ()>,
}

/// Where the test can run: alone, signals trapped, and a guard that puts
/// CPU 1 back online when dropped.
fn start() -> Option<Running> {
    if !can_run() {
        return None;
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    trap_signals();
    Some(Running { _back: Cpu1Back, _serial: serial })
}

/// Calls `step` every `every` until it gives a value (or panics after 5 s,
/// saying `what`); returns the time since `since` and that value.
fn until<T>(
    what: &str,
    since: Instant,
    every: Duration,
    mut step: impl FnMut() -> Option<T>,
) -> (Duration, T) {
    loop {
        if let Some(v) = step() {
            return (since.elapsed(), v);
        }
        assert!(since.elapsed() < Duration::from_secs(5), "{what} after 5 s");
        std::thread::sleep(every);
    }
}

/// A reader polling in its own thread until told to stop.
struct Polling {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<PerfBuffer<'static>>,
}

fn poll_in_thread(mut pb: PerfBuffer<'static>) -> Polling {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let thread = std::thread::spawn(move || {
        while !flag.load(Relaxed) {
            pb.poll(Some(Duration::from_millis(50))).expect("poll");
        }
        pb
    });
    Polling { stop, thread }
}

impl Polling {
    fn stop(self) -> PerfBuffer<'static> {
        self.stop.store(true, Relaxed);
        self.thread.join().expect("the polling thread")
    }
}

/// Runs the program on CPU 1 every 2 ms until an output succeeds; returns
/// the time it took, the helper's results before (each distinct one) and
/// how many outputs it refused.
fn until_an_output_succeeds(prog: &Accounted, since: Instant) -> (Duration, Vec<i32>, u64) {
    let (mut refused, mut count) = (Vec::new(), 0);
    let (took, ()) = until("cpu 1 still refused", since, Duration::from_millis(2), || {
        let ret = prog.run(Prog::Perf, 1, 32, 1).expect("run on cpu 1");
        if ret == 0 {
            return Some(());
        }
        count += 1;
        if !refused.contains(&ret) {
            refused.push(ret);
        }
        None
    });
    (took, refused, count)
}

#[test]
#[ignore = "takes CPU 1 offline: run alone by make hotplug-test"]
fn cpu1_offline_online_and_back_is_read_within_a_second() {
    let Some(_back) = start() else { return };
    let prog: &'static Accounted = Box::leak(Box::new(Accounted::open(0).expect("the accounted program")));
    let read = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let seen = read.clone();

    // 1. Built while CPU 1 is offline: one ring, CPU 0's.
    set_cpu1(false);
    let pb = PerfBuffer::builder(prog.events())
        .pages(16)
        .count_lost(true)
        .output_counts(prog.events_counts())
        .on_sample(move |cpu, _| {
            seen[cpu as usize].fetch_add(1, Relaxed);
        })
        .build()
        .expect("the perf buffer");
    assert_eq!(pb.rings(), 1);

    // 2. CPU 1 comes online while the reader waits in its poll.
    let polling = poll_in_thread(pb);
    let t0 = Instant::now();
    set_cpu1(true);
    let (came, refused, refused_online) = until_an_output_succeeds(prog, t0);
    eprintln!(
        "cpu 1 online: first output read {came:?} after the write to online (refused before: {refused:?})"
    );
    assert!(came < Duration::from_secs(1), "{came:?}");
    assert!(refused.iter().all(|&r| r == -libc::ENOENT), "no slot before: {refused:?}");
    prog.run(Prog::Perf, 1, 32, 999).unwrap();
    let mut pb = polling.stop();
    pb.consume().unwrap();
    assert_eq!(pb.rings(), 2);
    assert_eq!(read[1].load(Relaxed), 1000, "every record written on cpu 1 once it had a ring");

    // 3. CPU 1 goes offline with 500 records in its ring: read, ring kept.
    assert_eq!(prog.run(Prog::Perf, 1, 32, 500).unwrap(), 0);
    set_cpu1(false);
    let t1 = Instant::now();
    while read[1].load(Relaxed) < 1500 && t1.elapsed() < Duration::from_secs(5) {
        pb.poll(Some(Duration::from_millis(50))).unwrap();
    }
    assert_eq!(read[1].load(Relaxed), 1500, "what cpu 1's ring held when it went");
    let idx = (0..pb.rings()).find(|&i| pb.ring_cpu(i).unwrap() == 1).unwrap();
    while pb.health(idx).unwrap().online && t1.elapsed() < Duration::from_secs(5) {
        pb.poll(Some(Duration::from_millis(50))).unwrap();
    }
    assert!(!pb.health(idx).unwrap().online, "the reader saw cpu 1 go");
    assert_eq!(pb.rings(), 2, "its ring is kept");

    // 4. CPU 1 comes back: the old event is dead until the reader replaces it.
    let polling = poll_in_thread(pb);
    let t2 = Instant::now();
    set_cpu1(true);
    let (back, refused, refused_back) = until_an_output_succeeds(prog, t2);
    eprintln!(
        "cpu 1 back: first output read {back:?} after the write to online (refused before: {refused:?})"
    );
    assert!(back < Duration::from_secs(1), "{back:?}");
    assert!(refused.iter().all(|&r| r == -libc::EOPNOTSUPP), "a dead event before: {refused:?}");
    prog.run(Prog::Perf, 1, 32, 999).unwrap();
    let mut pb = polling.stop();
    pb.drain_final().unwrap();
    assert_eq!(read[1].load(Relaxed), 2500);
    let (s, h) = (pb.stats(idx).unwrap(), pb.health(idx).unwrap());
    eprintln!("cpu 1: {s:?}\n{h:?}");
    assert_eq!((h.replaced, h.online), (1, true));
    assert_eq!(s.samples, 2500);
    // The reader may replace the ring before the test's first output:
    // what perfbuf.bpf.h counted is exactly what the test saw refused.
    assert_eq!(s.output_failed, refused_online + refused_back, "the refusals before each ring: {s:?}");
    assert_eq!(s.produced.unwrap(), s.delivered() + s.lost_total(), "{s:?}");
    assert_eq!(s.lost, 0);
}

/// Runs `/bin/true` pinned to CPU 1 every 10 ms until the set's reader
/// (polling in its own thread) has seen one of its execs on CPU 1; returns
/// how long that took.
fn until_an_exec_on_cpu1_is_read(execs: &Mutex<Vec<u32>>, since: Instant) -> Duration {
    until("no exec on cpu 1 read", since, Duration::from_millis(10), || {
        if execs.lock().unwrap().contains(&1) {
            return Some(());
        }
        let st = std::process::Command::new("taskset").args(["-c", "1", "/bin/true"]).status();
        assert!(st.is_ok_and(|s| s.success()), "taskset -c 1 /bin/true");
        None
    })
    .0
}

#[test]
#[ignore = "takes CPU 1 offline: run alone by make hotplug-test"]
fn an_event_set_reads_cpu1_when_it_comes_online_and_back() {
    let Some(_back) = start() else { return };
    // The CPUs of the execs of /bin/true, as the set's reader sees them.
    let execs: &'static Mutex<Vec<u32>> = Box::leak(Box::new(Mutex::new(Vec::new())));
    set_cpu1(false);
    let mut set = EventSet::builder().build().expect("an event set");
    assert_eq!(set.cpus(), vec![0]);
    let exec = set.add(&Event::tracepoint("sched:sched_process_exec")).expect("sched_process_exec");
    let pb = set
        .reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.field("filename").and_then(|v| v.as_str().map(|f| f.ends_with("/true"))) == Some(true)
            {
                execs.lock().unwrap().push(s.cpu());
            }
        })
        .expect("the set's reader");
    set.enable(exec).unwrap();

    let polling = poll_in_thread(pb);
    let t0 = Instant::now();
    set_cpu1(true);
    let came = until_an_exec_on_cpu1_is_read(execs, t0);
    eprintln!("event set: cpu 1 online: an exec there read {came:?} after the write to online");
    assert!(came < Duration::from_secs(1), "{came:?}");
    assert_eq!(set.cpus(), vec![0, 1], "the set has events on cpu 1 now");

    set_cpu1(false);
    std::thread::sleep(Duration::from_millis(100));
    execs.lock().unwrap().clear();
    let t1 = Instant::now();
    set_cpu1(true);
    let back = until_an_exec_on_cpu1_is_read(execs, t1);
    eprintln!("event set: cpu 1 back: an exec there read {back:?} after the write to online");
    assert!(back < Duration::from_secs(1), "{back:?}");
    let pb = polling.stop();
    let idx = (0..pb.rings()).find(|&i| pb.ring_cpu(i).unwrap() == 1).unwrap();
    let h = pb.health(idx).unwrap();
    assert_eq!((h.replaced, h.online), (1, true), "{h:?}");
    // The set's own figures cover the new CPU too: enable/disable work.
    set.disable(exec).unwrap();
    assert!(set.info(exec).unwrap().cpus.contains(&1));
}
