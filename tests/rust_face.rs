//! The Rust face as Rust programs use it, on the real kernel: a buffer
//! moved into another thread, an async reader in a tokio task under load,
//! messages through the `log` facade and nothing printed by default.
//!
//! Needs root with BPF and `make producer-lib`, and the crate's `tokio`
//! and `log` features (`make cargo-test`); skipped otherwise, a failure
//! under `CI=true`.

#[path = "../examples/support/producer.rs"]
mod producer;

mod skip;
use perfbuf::PerfBuffer;
use producer::Producer;
use skip::skip;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

fn producer() -> Option<Producer> {
    match Producer::open() {
        Ok(p) => Some(p),
        Err(e) => {
            skip(e);
            None
        }
    }
}

/// Only one test at a time emits on the shared producer CPU.
static KERNEL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn features_for_these_tests_are_on() {
    if !cfg!(all(feature = "tokio", feature = "log")) {
        skip("the tokio and log tests: run with --features tokio,log (make cargo-test)");
    }
}

/// Counts what a buffer's closures saw, from any thread.
#[derive(Clone, Default)]
struct Counts {
    samples: Arc<AtomicU64>,
    lost: Arc<AtomicU64>,
}

impl Counts {
    fn total(&self) -> u64 {
        self.samples.load(Relaxed) + self.lost.load(Relaxed)
    }

    fn buffer(&self, map: std::os::fd::OwnedFd, pages: usize) -> perfbuf::Result<PerfBuffer<'static>> {
        let (samples, lost) = (self.samples.clone(), self.lost.clone());
        PerfBuffer::builder(map)
            .pages(pages)
            .on_sample(move |_cpu, _data| {
                samples.fetch_add(1, Relaxed);
            })
            .on_lost(move |_cpu, n| {
                lost.fetch_add(n, Relaxed);
            })
            .build()
    }
}

/// Emits `records` on CPU 0, then single records ("extras") every 2 ms
/// until `done`: the kernel reports a drop in the next record it writes, so
/// a reader that fell behind at the end gets its lost count. Returns how
/// many extras were sent in all (each is counted before it is sent).
fn emit_then_extras(p: &Producer, records: u64, extras: &AtomicU64, done: &dyn Fn() -> bool) {
    for _ in 0..records / 500 {
        p.emit(0, 16, 3, 500).unwrap();
    }
    while !done() {
        extras.fetch_add(1, Relaxed);
        p.emit(0, 16, 3, 1).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_buffer_moves_into_another_thread() {
    let _one = KERNEL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = producer() else { return };
    let counts = Counts::default();
    // Built here, polled there: PerfBuffer<'static> is Send.
    let mut pb = counts.buffer(p.map().try_clone_to_owned().unwrap(), 8).unwrap();
    let records = 10_000u64;
    let extras = Arc::new(AtomicU64::new(0));
    let reader = std::thread::spawn({
        let (counts, extras) = (counts.clone(), extras.clone());
        move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while counts.total() < records + extras.load(Relaxed) && Instant::now() < deadline {
                pb.poll(Some(Duration::from_millis(100))).unwrap();
            }
            pb
        }
    });
    emit_then_extras(&p, records, &extras, &|| reader.is_finished());
    let mut pb = reader.join().unwrap();
    // An extra sent between the reader's last count and its thread's end
    // is read here (the writer has stopped: the figure is final).
    let expected = records + extras.load(Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts.total() < expected && Instant::now() < deadline {
        pb.poll(Some(Duration::from_millis(100))).unwrap();
    }
    assert_eq!(counts.total(), expected, "every record delivered or counted lost");
    assert!(counts.samples.load(Relaxed) > 0);
    drop(pb);
}

#[cfg(feature = "tokio")]
#[test]
fn an_async_reader_in_a_tokio_task_under_load() {
    use std::sync::atomic::AtomicBool;
    let _one = KERNEL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(p) = producer() else { return };
    let p = Arc::new(p);
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let counts = Counts::default();
    // 1 page per CPU at full rate: the kernel drops records, and each drop
    // must come back as a lost count, as from poll. The kernel reports a
    // drop in the next record it writes, so after the load the writer
    // sends single records ("extras") until the reader has accounted for
    // everything sent.
    let records = 300_000u64;
    let extras = Arc::new(AtomicU64::new(0));
    let (loaded, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    // The buffer exists before the first record is sent (a record sent
    // before is refused by BPF, ENOENT, and never counted).
    let (mut pb, writer) = rt.block_on(async {
        let pb = counts.buffer(p.map().try_clone_to_owned().unwrap(), 1).unwrap();
        let mut reader = perfbuf::AsyncPerfBuffer::new(pb).unwrap();
        let writer = std::thread::spawn({
            let (p, extras, loaded, stop) = (p.clone(), extras.clone(), loaded.clone(), stop.clone());
            move || {
                emit_then_extras(&p, records, &extras, &|| {
                    loaded.store(true, Relaxed);
                    stop.load(Relaxed)
                })
            }
        });
        let task = tokio::spawn({
            let (counts, extras, loaded, stop) =
                (counts.clone(), extras.clone(), loaded.clone(), stop.clone());
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !(loaded.load(Relaxed) && counts.total() >= records + extras.load(Relaxed)) {
                    assert!(Instant::now() < deadline, "records unaccounted for after 60 s");
                    tokio::time::timeout(Duration::from_secs(30), reader.readable())
                        .await
                        .expect("no record for 30 s")
                        .unwrap();
                }
                // The writer stops now: extras sent while nobody reads
                // could fill the 1-page ring, and a drop with no record
                // after it would never be reported.
                stop.store(true, Relaxed);
                reader.into_inner()
            }
        });
        (task.await.unwrap(), writer)
    });
    stop.store(true, Relaxed);
    writer.join().unwrap();
    // The last extras, read synchronously.
    let expected = records + extras.load(Relaxed);
    let deadline = Instant::now() + Duration::from_secs(30);
    while counts.total() < expected && Instant::now() < deadline {
        pb.poll(Some(Duration::from_millis(100))).unwrap();
    }
    assert_eq!(counts.total(), expected, "every record delivered or counted lost");
    eprintln!(
        "async: {} delivered, {} lost of {expected}",
        counts.samples.load(Relaxed),
        counts.lost.load(Relaxed)
    );
}

#[cfg(feature = "log")]
mod log_facade {
    use super::*;
    use std::sync::Mutex;

    static SEEN: Mutex<Vec<(log::Level, String, String)>> = Mutex::new(Vec::new());

    struct Capture;

    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, r: &log::Record<'_>) {
            let entry = (r.level(), r.target().to_string(), r.args().to_string());
            SEEN.lock().unwrap_or_else(|e| e.into_inner()).push(entry);
        }
        fn flush(&self) {}
    }

    static CAPTURE: Capture = Capture;

    #[test]
    fn a_failure_is_returned_and_sent_to_log() {
        let Some(p) = producer() else { return };
        // Harmless if another test of this binary set it first.
        let _ = log::set_logger(&CAPTURE);
        log::set_max_level(log::LevelFilter::Debug);
        let e = PerfBuffer::builder(p.map()).pages(3).build().err().expect("3 pages is refused");
        assert_eq!(e.errno(), libc::EINVAL);
        let seen = SEEN.lock().unwrap();
        let warned = seen.iter().find(|(level, target, text)| {
            *level == log::Level::Warn && target == "perfbuf" && text.contains("power of two")
        });
        assert!(warned.is_some(), "no warning through log: {seen:?}");
    }
}

/// Run as a child by `nothing_is_printed_by_default`: a failing build with
/// no logger and no `set_log`.
#[test]
fn child_fails_a_build() {
    if std::env::var_os("PERFBUF_RUST_FACE_CHILD").is_none() {
        return;
    }
    let p = Producer::open().expect("producer");
    let e = PerfBuffer::builder(p.map()).pages(3).build().err().expect("3 pages is refused");
    println!("child: {e}");
}

#[test]
fn nothing_is_printed_by_default() {
    if producer().is_none() {
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_fails_a_build", "--nocapture", "--test-threads=1"])
        .env("PERFBUF_RUST_FACE_CHILD", "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child failed: {stdout}{stderr}");
    assert!(stdout.contains("child: ") && stdout.contains("power of two"), "the error is returned: {stdout}");
    assert!(!stderr.contains("power of two"), "the Rust API printed the error: {stderr}");
}
