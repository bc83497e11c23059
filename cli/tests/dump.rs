//! `perfbuf dump` on the real kernel (root): a pinned perf event array
//! fed by the BPF test producer (`make producer-lib`): every record,
//! order, raw files, lost records, --force, a loader beside a reader, a
//! map of another type, SIGINT.
//! Without root these fail under CI=true and are skipped otherwise.

mod common;

use common::producer::{self, Producer};
use common::*;
use serde_json::Value;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn dump_prints_every_record_and_drains_on_sigint() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_prints_every_record_and_drains_on_sigint") {
        return;
    }
    let producer = Producer::open().unwrap();
    let fs = Bpffs::mount("dump");
    let path = fs.pin(producer.map_fd(), "events");
    let (child, rx) = spawn_piped(Command::new(BIN).args(["dump", &path, "--json"]));
    let mut seen = Vec::new();
    wait_for(&rx, "taking the slots", &mut seen);
    wait_for(&rx, "reading map id", &mut seen);
    let (per_cpu, size, seed) = (1500u32, 40u32, 7u8);
    let cpus = online_cpus();
    for &cpu in &cpus {
        producer.emit(cpu, size, seed, per_cpu).unwrap();
    }
    // Straight after the burst: what is still in the rings must come out.
    sigint(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    wait_for(&rx, "stopped by signal", &mut seen);
    let expected = producer::Producer::expected(&producer, size, seed);
    let mut counts = vec![0u32; cpus.len()];
    for line in text(&out.stdout).lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["type"], "sample", "{r}");
        let data = r["data"].as_str().unwrap();
        let bytes: Vec<u8> =
            (0..data.len()).step_by(2).map(|i| u8::from_str_radix(&data[i..i + 2], 16).unwrap()).collect();
        assert_eq!(r["size"].as_u64().unwrap() as usize, bytes.len());
        assert_eq!(&bytes[..size as usize], &expected[..], "{r}");
        counts[r["cpu"].as_u64().unwrap() as usize] += 1;
    }
    assert_eq!(counts, vec![per_cpu; cpus.len()]);
    for cpu in &cpus {
        wait_for(&rx, &format!("cpu {cpu}: {per_cpu} records"), &mut seen);
        let line = seen.last().unwrap();
        assert!(line.contains(&format!(" {per_cpu} delivered, 0 lost (kernel 0, dropped 0)")), "{seen:?}");
        wait_for(&rx, &format!("cpu {cpu}: peak backlog"), &mut seen);
    }
}

#[test]
fn dump_hex_output_and_count() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_hex_output_and_count") {
        return;
    }
    let producer = Producer::open().unwrap();
    let fs = Bpffs::mount("hex");
    let path = fs.pin(producer.map_fd(), "events");
    let (child, rx) = spawn_piped(Command::new(BIN).args(["dump", &path, "--count", "5"]));
    wait_for(&rx, "reading map id", &mut Vec::new());
    producer.emit(0, 16, 3, 5).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let want: Vec<String> = producer.expected(16, 3).iter().map(|b| format!("{b:02x}")).collect();
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), 5, "{lines:?}");
    for l in &lines {
        assert!(l.starts_with("cpu 0: ") && l.contains(&want.join(" ")), "{l}");
    }
}

#[test]
fn dump_refuses_a_read_map_without_force() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_refuses_a_read_map_without_force") {
        return;
    }
    let producer = Producer::open().unwrap();
    let fs = Bpffs::mount("force");
    let path = fs.pin(producer.map_fd(), "events");
    // Without a reader: dump starts.
    let out = run(&["dump", &path, "--duration", "200ms"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // With this process reading the map: refused, then --force takes it.
    let pb = perfbuf::PerfBuffer::builder(producer.map()).on_sample(|_, _| {}).build().unwrap();
    let out = run(&["dump", &path, "--duration", "200ms"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--force") && err.contains(&format!("pid {}", std::process::id())), "{err}");
    let out = run(&["dump", &path, "--duration", "200ms", "--force"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("taking the slots"));
    drop(pb);
}

/// Another process with the pinned map open (`cli/tests/fixtures/map_holder.c`):
/// a loader that holds it and a perf event it does not map, or a reader
/// whose ring is mapped and in the map's slot. Ends when dropped.
struct MapHolder {
    child: std::process::Child,
}

impl MapHolder {
    fn start(path: &str, mode: &str) -> MapHolder {
        let dir = tempdir("holder");
        let bin = dir.join("map_holder");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/map_holder.c");
        let st =
            Command::new(cc).args(["-O1", "-Wall", "-Werror", "-o"]).arg(&bin).arg(src).status().unwrap();
        assert!(st.success(), "cannot compile {src}");
        let mut child = Command::new(&bin)
            .args([path, mode])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(child.stdout.as_mut().unwrap()), &mut line)
            .unwrap();
        assert_eq!(line, "ready\n", "map_holder {mode} did not start");
        let _ = std::fs::remove_dir_all(&dir);
        MapHolder { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for MapHolder {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// The common set-up: a loader that attached its program, pinned its map
/// and waits, never reading. dump starts beside it without --force and
/// says it loses nothing; a reader (its ring mapped) is refused without
/// --force, and with it is the one told it stops receiving.
#[test]
fn dump_starts_beside_a_loader_and_refuses_only_a_reader() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_starts_beside_a_loader_and_refuses_only_a_reader") {
        return;
    }
    let producer = Producer::open().unwrap();
    let fs = Bpffs::mount("holders");
    let path = fs.pin(producer.map_fd(), "events");
    let loader = MapHolder::start(&path, "hold");
    let holds = format!("map_holder (pid {}) holds the map but maps no perf ring", loader.pid());
    let out = run(&["dump", &path, "--duration", "200ms"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("taking the slots") && err.contains(&holds), "{err}");
    assert!(!err.contains("stops receiving"), "{err}");

    let reader = MapHolder::start(&path, "read");
    let out = run(&["dump", &path, "--duration", "200ms"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let refused = format!("is read now by map_holder (pid {}) (it maps perf rings)", reader.pid());
    assert!(err.contains(&refused) && err.contains("--force"), "{err}");
    assert!(!err.contains(&format!("pid {})", loader.pid())), "the loader is no reader: {err}");

    let out = run(&["dump", &path, "--duration", "200ms", "--force"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let stops = format!("map_holder (pid {}) stops receiving this map's records", reader.pid());
    assert!(err.contains(&stops) && err.contains(&holds), "{err}");
    assert!(!err.contains(&format!("map_holder (pid {}) stops", loader.pid())), "{err}");
}

#[test]
fn dump_refuses_a_map_of_another_type() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_refuses_a_map_of_another_type") {
        return;
    }
    // BPF_MAP_CREATE: an array of 4 u32 -> u64.
    let mut attr = [0u64; 8];
    attr[0] = 2 | (4 << 32); // map_type ARRAY, key_size 4
    attr[1] = 8 | (4 << 32); // value_size 8, max_entries 4
    let fd = bpf(0, &mut attr);
    assert!(fd >= 0, "BPF_MAP_CREATE: {}", std::io::Error::last_os_error());
    // SAFETY: the kernel just returned this fd.
    let map = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    let fs = Bpffs::mount("array");
    let path = fs.pin(map.as_raw_fd(), "array");
    let out = run(&["dump", &path]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("not a BPF_MAP_TYPE_PERF_EVENT_ARRAY") && err.lines().count() == 1, "{err}");
}

#[test]
fn dump_orders_by_timestamp_and_writes_raw_files() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_orders_by_timestamp_and_writes_raw_files") {
        return;
    }
    let producer = Producer::open().unwrap();
    let fs = Bpffs::mount("order");
    let path = fs.pin(producer.map_fd(), "events");
    let cpus = online_cpus();
    let per_cpu = 200u32;
    let total = (per_cpu as usize * cpus.len()).to_string();
    // --order: the first 8 bytes (the producer's CLOCK_MONOTONIC stamp)
    // never go backwards across CPUs; --fast reads the same records.
    // The first case's reader wakes only after a second, when every ring
    // holds records of several bursts: unordered, ring 0's later burst
    // would come before ring 1's earlier one.
    for extra in [
        &["--order", "--wakeup-records", "100000", "--max-delay", "1s"][..],
        &["--order", "--fast"],
        &["--wakeup-records", "16", "--max-delay", "5ms"],
    ] {
        let (child, rx) =
            spawn_piped(Command::new(BIN).args(["dump", &path, "--json", "--count", &total]).args(extra));
        wait_for(&rx, "reading map id", &mut Vec::new());
        // Interleave the CPUs so that each ring holds a spread of times.
        for _ in 0..per_cpu / 20 {
            for &cpu in &cpus {
                producer.emit_stamped(cpu, 16, 20).unwrap();
            }
        }
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{extra:?}");
        let stamps: Vec<u64> = text(&out.stdout)
            .lines()
            .map(|l| {
                let r: Value = serde_json::from_str(l).unwrap();
                let d = r["data"].as_str().unwrap();
                let b: Vec<u8> =
                    (0..16).step_by(2).map(|i| u8::from_str_radix(&d[i..i + 2], 16).unwrap()).collect();
                u64::from_ne_bytes(b.try_into().unwrap())
            })
            .collect();
        assert_eq!(stamps.len(), per_cpu as usize * cpus.len(), "{extra:?}");
        if extra.contains(&"--order") {
            assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{extra:?}: not in time order");
        }
    }
    // --raw: each record's bytes, back to back.
    let file = tempdir("raw").join("out.bin");
    let (child, rx) =
        spawn_piped(Command::new(BIN).args(["dump", &path, "--count", "4", "--raw", file.to_str().unwrap()]));
    wait_for(&rx, "reading map id", &mut Vec::new());
    producer.emit(0, 24, 9, 4).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty());
    let raw = std::fs::read(&file).unwrap();
    let rec = raw.len() / 4;
    assert_eq!(raw.len(), rec * 4);
    for chunk in raw.chunks(rec) {
        assert_eq!(&chunk[..24], &producer.expected(24, 9)[..]);
    }
    let _ = std::fs::remove_dir_all(file.parent().unwrap());
}

#[test]
fn dump_reports_lost_records_in_the_stream_and_summary() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_reports_lost_records_in_the_stream_and_summary") {
        return;
    }
    lost_burst(true);
}

/// With no record after the burst, the kernel never writes its LOST
/// report: dump's final drain reports what the kernel counted (Linux 6.0+).
#[test]
fn dump_reports_losses_no_later_record_carries() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_reports_losses_no_later_record_carries") {
        return;
    }
    lost_burst(false);
}

fn lost_burst(one_more: bool) {
    let producer = Producer::open().unwrap();
    let fs = Bpffs::mount("lost");
    let path = fs.pin(producer.map_fd(), "events");
    // One page per CPU and a reader that sleeps for a second: a burst of
    // 2000 records of 48 bytes cannot fit.
    let (child, rx) = spawn_piped(
        Command::new(BIN)
            .args(["dump", &path, "--json", "--cpu", "0", "--pages", "1", "--wakeup-records", "100000"])
            .args(["--max-delay", "1s"]),
    );
    let mut seen = Vec::new();
    wait_for(&rx, "reading map id", &mut seen);
    let sent = 2000u64;
    producer.emit(0, 40, 1, sent as u32).unwrap();
    // One more after the rings had room again carries the lost report
    // (unless a loaded machine delayed the reader's drain past it: then
    // the final drain reports both).
    std::thread::sleep(Duration::from_millis(1500));
    let sent = if one_more {
        producer.emit(0, 40, 1, 1).unwrap();
        std::thread::sleep(Duration::from_millis(1500));
        sent + 1
    } else {
        sent
    };
    sigint(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let (mut samples, mut lost) = (0u64, 0u64);
    for line in text(&out.stdout).lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        match r["type"].as_str().unwrap() {
            "sample" => samples += 1,
            "lost" => lost += r["lost"].as_u64().unwrap(),
            t => panic!("unexpected {t}"),
        }
    }
    assert!(lost > 0, "nothing lost: {samples} samples");
    assert_eq!(samples + lost, sent);
    wait_for(&rx, "cpu 0:", &mut seen);
    let line = seen.last().unwrap();
    assert!(
        line.contains(&format!(" {samples} delivered, {lost} lost (kernel {lost}, dropped 0)")),
        "{seen:?}"
    );
    // Sizing from evidence: the ring (one page) held at most a page, and
    // the burst needed about 96 KiB: 32 pages.
    wait_for(&rx, "cpu 0: peak backlog", &mut seen);
    let line = seen.last().unwrap();
    assert!(line.contains("give --pages 32") || line.contains("give --pages 64"), "{seen:?}");
}

#[test]
fn dump_reads_a_ring_buffer_with_the_same_output_and_no_cpu() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_reads_a_ring_buffer_with_the_same_output_and_no_cpu") {
        return;
    }
    let ring = producer::RingbufProducer::open(65536).unwrap();
    let fs = Bpffs::mount("ringbuf");
    let path = fs.pin(ring.map().as_raw_fd(), "events");
    // JSON: every record exactly as the program wrote it, no CPU.
    let sizes = [8u32, 13, 100, 3000];
    let (child, rx) =
        spawn_piped(Command::new(BIN).args(["dump", &path, "--json", "--count", &sizes.len().to_string()]));
    let mut seen = Vec::new();
    wait_for(&rx, "(ring buffer of 65536 bytes)", &mut seen);
    for (i, &n) in sizes.iter().enumerate() {
        assert_eq!(ring.emit(0, n, i as u8, 1).unwrap(), 0);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    wait_for(&rx, "ring buffer: 4 records", &mut seen);
    let lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
    assert_eq!(lines.len(), sizes.len(), "{lines:?}");
    for (i, (line, &n)) in lines.iter().zip(&sizes).enumerate() {
        let r: Value = serde_json::from_str(line).unwrap();
        assert_eq!(
            (r["type"].as_str(), r["cpu"].is_null(), r["size"].as_u64()),
            (Some("sample"), true, Some(n as u64))
        );
        let want: String = ring.expected(n, i as u8).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(r["data"].as_str().unwrap(), want);
    }
    // Hex: `ring:` where a perf event array says `cpu N:`.
    // Kept until the command exits: its summary goes to stderr.
    let (child, rx) = spawn_piped(Command::new(BIN).args(["dump", &path, "--count", "2"]));
    wait_for(&rx, "reading map id", &mut Vec::new());
    assert_eq!(ring.emit(0, 16, 3, 2).unwrap(), 0);
    let out = child.wait_with_output().unwrap();
    let want: Vec<String> = ring.expected(16, 3).iter().map(|b| format!("{b:02x}")).collect();
    let want = format!("ring: 16 bytes: {}", want.join(" "));
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), vec![want.as_str(); 2]);
    // --cpu cannot apply to it.
    let out = run(&["dump", &path, "--cpu", "0"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("one ring for all CPUs"), "{}", text(&out.stderr));
}

#[test]
fn dump_refuses_a_ring_buffer_another_process_reads_without_force() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_refuses_a_ring_buffer_another_process_reads_without_force") {
        return;
    }
    let ring = producer::RingbufProducer::open(65536).unwrap();
    let fs = Bpffs::mount("ringbuf-reader");
    let path = fs.pin(ring.map().as_raw_fd(), "events");
    // This process reads it: it holds the map and maps its memory.
    let mut reader = perfbuf::PerfBuffer::builder(ring.map()).on_sample(|_, _| {}).build().unwrap();
    let out = run(&["dump", &path, "--count", "1"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let who = format!("may be read now by {}", std::process::id());
    assert!(err.contains("share one read position") && err.contains("--force"), "{err}");
    assert!(err.contains(&format!("(pid {})", std::process::id())), "{err} ({who})");
    // With --force it reads (here, the records this process does not read first).
    // Kept until the command exits: its summary goes to stderr.
    let (child, rx) = spawn_piped(Command::new(BIN).args(["dump", &path, "--count", "1", "--force"]));
    wait_for(&rx, "reading map id", &mut Vec::new());
    assert_eq!(ring.emit(0, 8, 1, 1).unwrap(), 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout).lines().count(), 1);
    reader.consume().unwrap();
}
