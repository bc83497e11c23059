//! The perf.data writer on the real kernel, read back by Debian's `perf`
//! (`perf script`, `perf evlist`, `perf report`) and by an independent
//! parser (the `linux-perf-data` crate). Needs root, tracefs and `perf`;
//! skipped otherwise, a failure under `CI=true`.

mod skip;
use perfbuf::events::{Event, EventId, EventRecord, EventSet};
use perfbuf::perfdata::PerfDataWriter;
use perfbuf::uapi::PERF_SAMPLE_CALLCHAIN;
use perfbuf::{PerfBuffer, PerfEventAttr};
use skip::skip;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[path = "../examples/support/producer.rs"]
mod producer;

/// One recording at a time: they watch the whole system.
static SERIAL: Mutex<()> = Mutex::new(());

/// Whether the machine can run these tests (root, tracefs, perf).
fn ready() -> bool {
    let root = is_root();
    let tracefs = Path::new("/sys/kernel/tracing/events/sched").exists();
    let perf = Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success());
    if root && tracefs && perf {
        return true;
    }
    let why = format!(
        "perf.data tests need root ({root}), tracefs ({tracefs}) and perf ({perf}: apt-get install linux-perf)"
    );
    skip(why);
    false
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|v| v.split_whitespace().nth(1).map(|e| e == "0"))
        .unwrap_or(false)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("perfbuf-perfdata-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A sample as the reader delivered it (and as `perf script` should list it).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Seen {
    time: u64,
    cpu: u32,
    pid: u32,
    tid: u32,
    event: String,
}

/// Records `set` into `path` while `work` runs, decoding every record the
/// reader delivers as it is written: returns the samples and the tracepoint
/// fields (`name=value`) of each exec sample.
fn record(
    set: &mut EventSet,
    names: &BTreeMap<EventId, String>,
    path: &Path,
    work: impl FnOnce(),
) -> (Vec<Seen>, Vec<(Seen, String, i64)>) {
    let mut out = PerfDataWriter::for_set(path, set).unwrap();
    let decoder = set.decoder();
    let mut reader = set.reader(|_| {}).unwrap();
    set.enable_all().unwrap();
    work();
    set.disable_all().unwrap();
    let mut seen = Vec::new();
    let mut execs = Vec::new();
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        reader
            .consume_batch(|batch| {
                for rec in batch.records() {
                    decoder.decode(batch.cpu as u32, rec, |r| {
                        if let EventRecord::Sample(s) = r {
                            let one = Seen {
                                time: s.time(),
                                cpu: s.cpu,
                                pid: s.pid(),
                                tid: s.tid(),
                                event: names[&s.event].clone(),
                            };
                            if let Some(file) =
                                s.field("filename").and_then(|v| v.as_str().map(str::to_owned))
                            {
                                let pid = s.field("pid").and_then(|v| v.as_i64()).unwrap_or(-1);
                                execs.push((one.clone(), file, pid));
                            }
                            seen.push(one);
                        }
                    });
                }
                out.write_batch(batch).unwrap();
                ControlFlow::Continue(())
            })
            .unwrap();
        out.end_round().unwrap();
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = out.finish().unwrap();
    assert_eq!(stats.samples, seen.len() as u64);
    (seen, execs)
}

/// `perf script`'s samples: pid/tid [cpu] secs.ns: event: fields.
fn perf_script(path: &Path) -> Vec<(Seen, String)> {
    let out = Command::new("perf")
        .args(["script", "--ns", "-F", "pid,tid,cpu,time,event,trace", "-i"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "perf script: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| parse_script_line(l).unwrap_or_else(|| panic!("{l}")))
        .collect()
}

fn parse_script_line(line: &str) -> Option<(Seen, String)> {
    let (ids, rest) = line.trim_start().split_once(" [")?;
    let (pid, tid) = ids.trim().split_once('/')?;
    let (cpu, rest) = rest.split_once(']')?;
    let (time, rest) = rest.trim_start().split_once(": ")?;
    let (secs, ns) = time.split_once('.')?;
    let rest = rest.trim_start();
    let (event, fields) = rest.split_once(':').map(|(e, f)| {
        // A tracepoint's name has a colon of its own.
        if e.contains(' ') || !f.starts_with(' ') && !f.is_empty() {
            let mut parts = rest.splitn(3, ':');
            let (sys, name, f) =
                (parts.next().unwrap_or(""), parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            (format!("{sys}:{name}"), f.trim().to_owned())
        } else {
            (e.to_owned(), f.trim().to_owned())
        }
    })?;
    // perf prints the sample's u32 pid and tid with %d: a sample taken as
    // a thread exits, once the kernel has released its pid, shows -1.
    let id = |s: &str| s.parse::<i32>().ok().map(|v| v as u32);
    let seen = Seen {
        time: secs.parse::<u64>().ok()? * 1_000_000_000 + ns.parse::<u64>().ok()?,
        cpu: cpu.trim().parse().ok()?,
        pid: id(pid)?,
        tid: id(tid)?,
        event,
    };
    Some((seen, fields))
}

/// perf's names of `PERF_SAMPLE_*` bits, as `perf evlist -v` prints them.
fn sample_type_text(t: u64) -> String {
    let names = [
        "IP",
        "TID",
        "TIME",
        "ADDR",
        "READ",
        "CALLCHAIN",
        "ID",
        "CPU",
        "PERIOD",
        "STREAM_ID",
        "RAW",
        "BRANCH_STACK",
        "REGS_USER",
        "STACK_USER",
        "WEIGHT",
        "DATA_SRC",
        "IDENTIFIER",
    ];
    names.iter().enumerate().filter(|(i, _)| t & 1 << i != 0).map(|(_, n)| *n).collect::<Vec<_>>().join("|")
}

fn spawn_true(n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| {
            let mut c = Command::new("/bin/true").spawn().unwrap();
            let pid = c.id();
            c.wait().unwrap();
            pid
        })
        .collect()
}

#[test]
fn perf_script_lists_exactly_what_the_reader_delivered() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let mut set = EventSet::builder().pages(256).build().unwrap();
    let mut names = BTreeMap::new();
    let clock = set.add(&Event::cpu_clock().frequency(999)).unwrap();
    names.insert(clock, "cpu-clock".to_owned());
    let exec = set.add(&Event::tracepoint("sched:sched_process_exec")).unwrap();
    names.insert(exec, "sched:sched_process_exec".to_owned());
    let path = scratch("script.data");
    let mut children = Vec::new();
    let (seen, execs) = record(&mut set, &names, &path, || {
        children = spawn_true(5);
        std::thread::sleep(Duration::from_millis(200));
    });
    assert!(
        seen.iter().filter(|s| s.event == "cpu-clock").count() > 100,
        "cpu-clock samples: {}",
        seen.len()
    );
    let ours: Vec<_> = execs.iter().filter(|e| children.contains(&e.0.pid)).collect();
    assert_eq!(ours.len(), 5, "{execs:?}");

    let listed = perf_script(&path);
    let mut from_perf: Vec<Seen> = listed.iter().map(|(s, _)| s.clone()).collect();
    let mut from_reader = seen.clone();
    from_perf.sort();
    from_reader.sort();
    assert_eq!(from_perf.len(), from_reader.len(), "sample count: perf script vs the reader");
    assert_eq!(from_perf, from_reader, "pid, tid, cpu, time and event of every sample");
    // Tracepoint fields, as perf formats them from the file's formats.
    for (s, file, pid) in &execs {
        let (_, fields) = listed.iter().find(|(p, _)| p == s).unwrap();
        assert!(fields.contains(&format!("filename={file} ")), "{fields}");
        assert!(fields.contains(&format!(" pid={pid} ")), "{fields}");
    }

    // perf evlist -v: every event with its attr as opened.
    let out = Command::new("perf").args(["evlist", "-v", "-i"]).arg(&path).output().unwrap();
    let evlist = String::from_utf8_lossy(&out.stdout);
    for (id, name) in &names {
        let attr = set.attr(*id).unwrap();
        let line =
            evlist.lines().find(|l| l.starts_with(&format!("{name}:"))).unwrap_or_else(|| panic!("{evlist}"));
        assert!(line.contains(&format!("type: {},", attr.type_)), "{line}");
        assert!(line.contains(&format!("sample_type: {},", sample_type_text(attr.sample_type))), "{line}");
        if attr.config != 0 {
            assert!(line.contains(&format!("config: {:#x},", attr.config)), "{line}");
        }
        assert!(line.contains(&format!("sample_freq }}: {},", attr.sample_period)), "{line}");
    }
    assert!(evlist.lines().any(|l| l.starts_with("dummy:") && l.contains("mmap2: 1")), "{evlist}");

    // The same file through an independent parser: the same counts.
    let counts = parse_with_linux_perf_data(&path);
    assert_eq!(
        counts.get("cpu-clock").copied().unwrap_or(0),
        seen.iter().filter(|s| s.event == "cpu-clock").count()
    );
    assert_eq!(
        counts.get("sched:sched_process_exec").copied().unwrap_or(0),
        seen.iter().filter(|s| s.event == "sched:sched_process_exec").count()
    );
    let _ = std::fs::remove_file(&path);
}

/// Samples per event name, as `linux-perf-data` reads the file.
fn parse_with_linux_perf_data(path: &Path) -> BTreeMap<String, usize> {
    use linux_perf_data::linux_perf_event_reader::EventRecord as Rec;
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let PerfFileReader { mut perf_file, mut record_iter } = PerfFileReader::parse_file(file).unwrap();
    let names: Vec<String> =
        perf_file.event_attributes().iter().map(|a| a.name().unwrap_or("?").to_owned()).collect();
    let mut counts = BTreeMap::new();
    while let Some(rec) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { attr_index, record } = rec {
            if let Ok(Rec::Sample(_)) = record.parse() {
                *counts.entry(names[attr_index].clone()).or_insert(0) += 1;
            }
        }
    }
    counts
}

/// tests/perfdata/spinner.c, built once into the scratch directory.
fn spinner() -> PathBuf {
    let exe = scratch("pdspinner");
    if !exe.exists() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/perfdata/spinner.c");
        let st = Command::new("cc")
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
            .arg(&exe)
            .arg(src)
            .status();
        assert!(st.is_ok_and(|s| s.success()), "cc failed");
    }
    exe
}

/// `perf report`'s top entry (pid, comm, dso, symbol) for `pid`. The pid
/// is a sort key because perf filters merged entries: without it, samples
/// of another process with the same comm, dso and symbol (a second
/// spinner on the machine) make one entry that `--pid` keeps or drops whole.
fn top_of_report(path: &Path, pid: u32) -> String {
    let out = Command::new("perf")
        .args(["report", "--stdio", "--no-children", "-g", "none", "--sort", "pid,comm,dso,sym", "--pid"])
        .arg(pid.to_string())
        .arg("-i")
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or(&text)
        .to_owned()
}

fn profiling_set(pid: Option<u32>) -> (EventSet, BTreeMap<EventId, String>) {
    let b = EventSet::builder().pages(256);
    let mut set = match pid {
        Some(p) => b.pid(p as i32).build().unwrap(),
        None => b.build().unwrap(),
    };
    let clock = set.add(&Event::cpu_clock().frequency(999).sample(PERF_SAMPLE_CALLCHAIN)).unwrap();
    (set, BTreeMap::from([(clock, "cpu-clock".to_owned())]))
}

#[test]
fn perf_report_names_and_symbolizes_a_program_started_during_the_recording() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let exe = spinner();
    let (mut set, names) = profiling_set(None);
    let path = scratch("after.data");
    let mut pid = 0;
    record(&mut set, &names, &path, || {
        let mut child = Command::new(&exe).arg("1.0").spawn().unwrap();
        pid = child.id();
        child.wait().unwrap();
    });
    let top = top_of_report(&path, pid);
    assert!(
        top.contains("pdspinner") && top.contains("[.] perfbuf_spin_here"),
        "top of perf report for pid {pid}: {top}"
    );
    let _ = std::fs::remove_file(&path);
}

/// Waits until `pid` runs `exe` and its loader has mapped libc (exec and
/// the kernel's mappings of `exe` are over), however long a loaded machine
/// takes to get it there; the deadline only catches a hang.
fn wait_for_exec(pid: u32, exe: &Path) {
    let exe = std::fs::canonicalize(exe).unwrap();
    let loaded = || {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        std::fs::read_link(format!("/proc/{pid}/exe")).ok().as_deref() == Some(&*exe)
            && maps.contains("/libc.so")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !loaded() {
        assert!(Instant::now() < deadline, "{pid} did not exec {} in 30 s", exe.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The CPU time (user + system) `pid` has used, from /proc/PID/stat.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the parenthesised comm: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

#[test]
fn perf_report_names_and_symbolizes_a_program_started_before_the_recording() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let exe = spinner();
    // Spins until killed: the recording lasts as long as a loaded machine
    // needs to give it CPU time.
    let mut child = Command::new(&exe).arg("600").spawn().unwrap();
    let pid = child.id();
    wait_for_exec(pid, &exe);
    let (mut set, names) = profiling_set(Some(pid));
    let path = scratch("before.data");
    let (seen, _) = record(&mut set, &names, &path, || {
        // 400 ms of the spinner's CPU time at 999 Hz: about 400 samples.
        let (start, deadline) = (cpu_time(pid), Instant::now() + Duration::from_secs(60));
        while cpu_time(pid) - start < Duration::from_millis(400) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(seen.iter().all(|s| s.pid == pid) && seen.len() > 100, "{} samples", seen.len());
    let top = top_of_report(&path, pid);
    assert!(
        top.contains("pdspinner") && top.contains("[.] perfbuf_spin_here"),
        "top of perf report for pid {pid} (COMM and MMAP2 synthesized from /proc): {top}"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn bpf_output_samples_are_shown_by_perf_script_with_their_bytes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let producer = match producer::Producer::open() {
        Ok(p) => p,
        Err(e) => return skip(format!("the BPF producer: {e} (make producer-lib)")),
    };
    let attr = PerfEventAttr::bpf_output(1);
    let mut pb = PerfBuffer::builder(producer.map()).attr(attr).build().unwrap();
    let path = scratch("bpf.data");
    let mut out = PerfDataWriter::for_bpf_output(&path, attr).unwrap();
    producer.emit(0, 24, 7, 10).unwrap();
    producer.emit(1, 24, 7, 10).unwrap();
    let written = out.drain(&mut pb).unwrap();
    assert_eq!(written, 20);
    out.finish().unwrap();
    // libbpf's attr samples nothing but the raw data: perf script's
    // default ip and symbol fields have to go.
    let o = Command::new("perf")
        .args(["script", "-F", "-ip,-sym,-dso,-symoff", "-i"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(text.matches("bpf-output").count(), 20, "{text}");
    let hex: String = producer.expected(24, 7).iter().take(8).map(|b| format!("{b:02x} ")).collect();
    assert_eq!(text.matches(hex.trim_end()).count(), 20, "raw bytes {hex} in: {text}");
    let _ = std::fs::remove_file(&path);
}

/// Samples in the data section up to the header's `data.size`.
fn committed_samples(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap()) as usize;
    let (start, size) = (word(40), word(48));
    let mut at = start;
    let mut samples = 0;
    while at + 8 <= start + size {
        let len = u16::from_le_bytes([bytes[at + 6], bytes[at + 7]]) as usize;
        samples += usize::from(u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) == 9);
        at += len.max(8);
    }
    samples
}

/// The writer of [`a_killed_writer_leaves_every_complete_round_readable`],
/// run in a child process (in a normal run it returns at once: not an
/// ignored test, which `make test` would count as skipped).
#[test]
fn killed_writer_child() {
    let Ok(path) = std::env::var("PERFBUF_PERFDATA_KILLED") else { return };
    let (mut set, _) = profiling_set(None);
    let mut out = PerfDataWriter::for_set(&path, &mut set).unwrap();
    let mut reader = set.reader(|_| {}).unwrap();
    set.enable_all().unwrap();
    loop {
        out.poll(&mut reader, Duration::from_millis(10)).unwrap();
    }
}

#[test]
fn a_killed_writer_leaves_every_complete_round_readable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let path = scratch("killed.data");
    let _ = std::fs::remove_file(&path);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "killed_writer_child", "--nocapture"])
        .env("PERFBUF_PERFDATA_KILLED", &path)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&path).map_or(0, |m| m.len()) < 256 << 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap(); // SIGKILL, mid-recording
    child.wait().unwrap();
    let committed = committed_samples(&path);
    assert!(committed > 0);
    let listed = perf_script(&path);
    assert_eq!(listed.len(), committed, "perf script lists every sample of the complete rounds");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn a_full_disk_is_an_error_naming_the_file_and_room_lets_it_go_on() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready() {
        return;
    }
    let dir = scratch("tmpfs");
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("mount").args(["-t", "tmpfs", "-o", "size=4m", "perfbuf-test"]).arg(&dir).status();
    assert!(st.is_ok_and(|s| s.success()), "mount a small tmpfs");
    let path = dir.join("full.data");
    let filler = dir.join("filler");
    let outcome = std::panic::catch_unwind(|| {
        let (mut set, _) = profiling_set(None);
        let mut out = PerfDataWriter::for_set(&path, &mut set).unwrap();
        let mut reader = set.reader(|_| {}).unwrap();
        // All but 64 KiB taken.
        let free = statvfs_free(&dir);
        std::fs::write(&filler, vec![1u8; (free - (64 << 10)) as usize]).unwrap();
        set.enable_all().unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let err = loop {
            assert!(Instant::now() < deadline, "64 KiB should fill up");
            if let Err(e) = out.poll(&mut reader, Duration::from_millis(10)) {
                break e;
            }
        };
        assert_eq!(err.errno(), libc::ENOSPC, "{err}");
        let text = err.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        // Room again: the writer goes on from its last whole record.
        std::fs::remove_file(&filler).unwrap();
        out.drain(&mut reader).unwrap();
        set.disable_all().unwrap();
        out.drain(&mut reader).unwrap();
        out.finish().unwrap();
        let committed = committed_samples(&path);
        assert_eq!(perf_script(&path).len(), committed, "perf script reads the file after the error");
    });
    let _ = Command::new("umount").arg(&dir).status();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn statvfs_free(dir: &Path) -> u64 {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: an all-zero statvfs is valid; the call fills it.
    let mut st: libc::statvfs = unsafe { core::mem::zeroed() };
    // SAFETY: a valid C string and a writable statvfs.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut st) }, 0);
    st.f_bavail * st.f_frsize
}
