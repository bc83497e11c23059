//! The `perfbuf` command on the real kernel (root): trace over a command's
//! execs, JSON schema, dump of a pinned perf event array fed by the BPF
//! test producer (`make producer-lib`), --force, a non-perf map refused,
//! SIGINT mid-stream. Without root these fail under CI=true and are
//! skipped (with a message) otherwise.

#[path = "../../examples/support/producer.rs"]
mod producer;

use producer::Producer;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_perfbuf");

/// One test at a time: the dump's reader check looks at this process's
/// fds, which another test's perf buffer would change.
static SERIAL: Mutex<()> = Mutex::new(());

fn root_or_skip(name: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(!producer::ci(), "{name}: needs root (CI=true)");
    eprintln!("{name}: skipped, needs root");
    false
}

fn tempdir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("perfbuf-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A copy of /bin/true under a name no other process on the machine uses.
fn marked_binary(dir: &Path) -> PathBuf {
    let mark = dir.join(format!("perfbuf-mark-{}", std::process::id()));
    std::fs::copy("/bin/true", &mark).unwrap();
    mark
}

/// `sh -c` running the marked binary `n` times, each pid appended to `pids`.
fn exec_script(mark: &Path, pids: &Path, n: usize) -> String {
    format!("for i in $(seq {n}); do {} & echo $! >> {}; wait; done", mark.display(), pids.display())
}

fn read_pids(pids: &Path) -> BTreeSet<u32> {
    std::fs::read_to_string(pids).unwrap().lines().map(|l| l.trim().parse().unwrap()).collect()
}

fn run(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn trace_prints_exactly_the_commands_execs() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_prints_exactly_the_commands_execs") {
        return;
    }
    let dir = tempdir("trace");
    let mark = marked_binary(&dir);
    let pids = dir.join("pids");
    let n = 25;
    let out = run(&["trace", "sched:sched_process_exec", "--", "sh", "-c", &exec_script(&mark, &pids, n)]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let name = mark.to_str().unwrap();
    let mut seen = BTreeSet::new();
    for line in stdout.lines().filter(|l| l.contains(name)) {
        // SECONDS cpuN PID/TID sched:sched_process_exec: filename="..." pid=N old_pid=N
        assert!(line.contains(&format!("filename=\"{name}\"")), "{line}");
        let pid: u32 = line.split_whitespace().nth(2).unwrap().split('/').next().unwrap().parse().unwrap();
        assert!(line.contains(&format!(" pid={pid} ")), "{line}");
        seen.insert(pid);
    }
    assert_eq!(stdout.lines().filter(|l| l.contains(name)).count(), n, "{stdout}");
    assert_eq!(seen, read_pids(&pids));
    let summary = text(&out.stderr);
    assert!(summary.contains("command ended") && summary.contains(" 0 lost"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_json_has_the_schema_and_time_order() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_json_has_the_schema_and_time_order") {
        return;
    }
    let dir = tempdir("json");
    let mark = marked_binary(&dir);
    let pids = dir.join("pids");
    let n = 10;
    let out = run(&[
        "trace",
        "--json",
        "sched:sched_process_exec",
        "--",
        "sh",
        "-c",
        &exec_script(&mark, &pids, n),
    ]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    let records: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut last = 0;
    let mut marked = BTreeSet::new();
    for r in &records {
        assert_eq!(r["type"], "sample");
        assert_eq!(r["event"], "sched:sched_process_exec");
        for key in ["time_ns", "cpu", "pid", "tid", "ip"] {
            assert!(r[key].is_u64(), "{key} in {r}");
        }
        let time = r["time_ns"].as_u64().unwrap();
        assert!(time >= last, "out of order: {r}");
        last = time;
        let fields = r["fields"].as_object().unwrap();
        assert!(
            fields["filename"].is_string() && (fields["old_pid"].is_u64() || fields["old_pid"].is_i64()),
            "{r}"
        );
        if fields["filename"] == mark.to_str().unwrap() {
            assert_eq!(fields["pid"], r["pid"]);
            marked.insert(r["pid"].as_u64().unwrap() as u32);
        }
    }
    assert_eq!(marked, read_pids(&pids));
    assert_eq!(marked.len(), n);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Stderr lines of a running command, as they come.
fn stderr_lines(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Waits (up to a generous deadline, against hangs) for a line containing `what`.
fn wait_for(rx: &Receiver<String>, what: &str, seen: &mut Vec<String>) {
    loop {
        let line =
            rx.recv_timeout(Duration::from_secs(30)).unwrap_or_else(|_| panic!("no `{what}` in {seen:?}"));
        seen.push(line.clone());
        if line.contains(what) {
            return;
        }
    }
}

fn sigint(child: &Child) {
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
}

#[test]
fn trace_sigint_drains_and_exits_zero() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_sigint_drains_and_exits_zero") {
        return;
    }
    let dir = tempdir("sigint");
    let mark = marked_binary(&dir);
    let pids = dir.join("pids");
    let mut child = Command::new(BIN)
        .args([
            "trace",
            "sched:sched_process_exec",
            "--filter",
            &format!("filename == \"{}\"", mark.display()),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    wait_for(&rx, "tracing", &mut seen);
    let n = 20;
    assert!(Command::new("sh").args(["-c", &exec_script(&mark, &pids, n)]).status().unwrap().success());
    sigint(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    wait_for(&rx, "stopped by signal", &mut seen);
    assert!(seen.last().unwrap().contains(&format!("{n} records, 0 lost")), "{seen:?}");
    assert_eq!(text(&out.stdout).lines().count(), n);
    let _ = std::fs::remove_dir_all(&dir);
}

fn bpf(cmd: i32, attr: &mut [u64]) -> i64 {
    // SAFETY: attr is a zeroed buffer as large as the command reads.
    unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), size_of_val(attr) as u32) }
}

/// A bpffs mounted in a fresh directory, unmounted on drop.
struct Bpffs(PathBuf);

impl Bpffs {
    fn mount(tag: &str) -> Bpffs {
        let dir = tempdir(tag);
        let st = Command::new("mount").args(["-t", "bpf", "bpf"]).arg(&dir).status().unwrap();
        assert!(st.success(), "mount -t bpf failed");
        Bpffs(dir)
    }

    /// Pins `fd` as `name` (BPF_OBJ_PIN).
    fn pin(&self, fd: RawFd, name: &str) -> String {
        let path = self.0.join(name);
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        let mut attr = [0u64; 2];
        attr[0] = c.as_ptr() as u64;
        attr[1] = fd as u64;
        assert_eq!(bpf(6, &mut attr), 0, "BPF_OBJ_PIN: {}", std::io::Error::last_os_error());
        path.to_str().unwrap().to_string()
    }
}

impl Drop for Bpffs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn online_cpus() -> Vec<i32> {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) } as i32;
    (0..n).collect()
}

#[test]
fn dump_prints_every_record_and_drains_on_sigint() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_prints_every_record_and_drains_on_sigint") {
        return;
    }
    let producer = Producer::open().unwrap();
    let fs = Bpffs::mount("dump");
    let path = fs.pin(producer.map_fd(), "events");
    let mut child = Command::new(BIN)
        .args(["dump", &path, "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
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
        assert!(seen.last().unwrap().ends_with(" 0 lost"), "{seen:?}");
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
    let mut child = Command::new(BIN)
        .args(["dump", &path, "--count", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
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
fn usage_errors_exit_2_with_one_line() {
    for args in [
        &["trace", "nonsense"][..],
        &["trace", "--pages", "3", "sched:sched_switch"],
        &["trace", "u:relative:sym"],
        &["trace", "u:/bin/sh:main r=$retval"],
        &["dump", "/nonexistent/map"],
        &["trace"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
    let out = run(&["trace", "k:do_sys_open"]);
    let err = text(&out.stderr);
    if !Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        assert_eq!(out.status.code(), Some(1));
        assert!(err.contains("CONFIG_KPROBES") && err.lines().count() == 1, "{err}");
    }
    let help = text(&run(&["trace", "--help"]).stdout);
    assert!(help.contains("Examples:") && help.contains("%return") && help.contains("\"type\":\"sample\""));
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
        let mut child = Command::new(BIN)
            .args(["dump", &path, "--json", "--count", &total])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let rx = stderr_lines(&mut child);
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
    let mut child = Command::new(BIN)
        .args(["dump", &path, "--count", "4", "--raw", file.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
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

/// A program calling `perfbuf_mark(i)` for i in 1..=n (n its argument),
/// built with the C compiler into `dir`.
fn marked_program(dir: &Path) -> PathBuf {
    let src = dir.join("mark.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n\
         __attribute__((noinline)) int perfbuf_mark(int i) { __asm__ volatile(\"\" ::: \"memory\"); return i * 2; }\n\
         int main(int argc, char **argv) { int n = atoi(argv[1]), s = 0;\n\
         for (int i = 1; i <= n; i++) s += perfbuf_mark(i); return s == n * (n + 1) ? 0 : 1; }\n",
    )
    .unwrap();
    let bin = dir.join("mark");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(cc).args(["-O1", "-o"]).arg(&bin).arg(&src).status().unwrap();
    assert!(st.success(), "cannot compile the uprobe test program");
    bin
}

#[test]
fn trace_uprobe_and_uretprobe_of_a_command() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_uprobe_and_uretprobe_of_a_command") {
        return;
    }
    let dir = tempdir("uprobe");
    let bin = marked_program(&dir);
    let name = bin.to_str().unwrap();
    let n = 7;
    let entry = format!("u:{name}:perfbuf_mark");
    let ret = format!("u:{name}:perfbuf_mark%return");
    let out = run(&["trace", "--json", &entry, &ret, "--", name, &n.to_string()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("exited with status 0"), "{}", text(&out.stderr));
    let records: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let events: Vec<&str> = records.iter().map(|r| r["event"].as_str().unwrap()).collect();
    // Entry and return alternate, n times, in time order, all from the command.
    let want: Vec<&str> = (0..n).flat_map(|_| [entry.as_str(), ret.as_str()]).collect();
    assert_eq!(events, want);
    let pids: BTreeSet<u64> = records.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
    assert_eq!(pids.len(), 1);
    // Probe arguments: parsed, then refused by this build with a clear line.
    let out = run(&["trace", &format!("{ret} r=$retval:s32"), "--", name, "1"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("not supported") && err.lines().count() == 1, "{err}");
    // A symbol the binary lacks.
    let out = run(&["trace", &format!("u:{name}:no_such_symbol")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no_such_symbol not found"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The cgroup v2 mount (`/sys/fs/cgroup` or a hybrid's `unified`).
fn cgroup2_root() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == "cgroup2")
        .map(|f| f[1].into())
}

#[test]
fn trace_cgroup_and_cpu_select_what_is_traced() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_cgroup_and_cpu_select_what_is_traced") {
        return;
    }
    // --cpu: every record from that CPU.
    let out =
        run(&["trace", "--json", "--cpu", "0", "--count", "5", "--duration", "20s", "sched:sched_switch"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let cpus: Vec<u64> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["cpu"].as_u64().unwrap())
        .collect();
    assert_eq!(cpus, vec![0; 5]);
    // --cgroup: the marked execs of a shell inside the cgroup, none of
    // the one outside.
    let root = cgroup2_root();
    assert!(root.is_some() || !producer::ci(), "no cgroup2 mount (CI=true)");
    let Some(root) = root else { return eprintln!("cgroup part skipped: no cgroup2 mount") };
    let cg = root.join(format!("perfbuf-cli-{}", std::process::id()));
    let _ = std::fs::create_dir(&cg);
    let dir = tempdir("cgroup");
    let mark = marked_binary(&dir);
    let pids = dir.join("pids");
    let mut child = Command::new(BIN)
        .args(["trace", "sched:sched_process_exec", "--cgroup"])
        .arg(&cg)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    wait_for(&rx, "tracing", &mut seen);
    let n = 6;
    assert!(Command::new(&mark).status().unwrap().success()); // outside
    let inside = format!("echo $$ > {}/cgroup.procs && {}", cg.display(), exec_script(&mark, &pids, n));
    assert!(Command::new("sh").args(["-c", &inside]).status().unwrap().success());
    sigint(&child);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let name = mark.to_str().unwrap();
    let traced: BTreeSet<u32> = text(&out.stdout)
        .lines()
        .filter(|l| l.contains(name))
        .map(|l| l.split_whitespace().nth(2).unwrap().split('/').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(traced, read_pids(&pids));
    assert_eq!(text(&out.stdout).lines().filter(|l| l.contains(name)).count(), n);
    let _ = std::fs::remove_dir(&cg);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dump_reports_lost_records_in_the_stream_and_summary() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("dump_reports_lost_records_in_the_stream_and_summary") {
        return;
    }
    let producer = Producer::open().unwrap();
    let fs = Bpffs::mount("lost");
    let path = fs.pin(producer.map_fd(), "events");
    // One page per CPU and a reader that sleeps for a second: a burst of
    // 2000 records of 48 bytes cannot fit.
    let mut child = Command::new(BIN)
        .args(["dump", &path, "--json", "--cpu", "0", "--pages", "1", "--wakeup-records", "100000"])
        .args(["--max-delay", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    wait_for(&rx, "reading map id", &mut seen);
    let sent = 2000u64;
    producer.emit(0, 40, 1, sent as u32).unwrap();
    // One more after the rings had room again carries the lost report.
    std::thread::sleep(Duration::from_millis(1500));
    producer.emit(0, 40, 1, 1).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
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
    assert_eq!(samples + lost, sent + 1);
    wait_for(&rx, "cpu 0:", &mut seen);
    assert!(seen.last().unwrap().ends_with(&format!(" {lost} lost")), "{seen:?}");
}
