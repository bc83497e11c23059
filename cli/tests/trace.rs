//! `perfbuf trace` on the real kernel (root): a command's execs, the JSON
//! schema, SIGINT, uprobes, --cpu and --cgroup, usage errors. Without root
//! these fail under CI=true and are skipped (with a message) otherwise.

mod common;

use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
