//! `perfbuf trace` on the real kernel (root): a command's execs, the JSON
//! schema, SIGINT, uprobes, --cpu and --cgroup, usage errors. Without root
//! these fail under CI=true and are skipped (with a message) otherwise.

mod common;
#[path = "../../tests/drop_program/mod.rs"]
mod drop_program;

use common::getppid::GETPPID;
use common::*;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    let (child, rx) = spawn_piped(Command::new(BIN).args([
        "trace",
        "sched:sched_process_exec",
        "--filter",
        &format!("filename == \"{}\"", mark.display()),
    ]));
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
        &["trace", "--task", "sched:sched_switch x=1"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
    let help = text(&run(&["trace", "--help"]).stdout);
    assert!(help.contains("Examples:") && help.contains("%return") && help.contains("\"type\":\"sample\""));
    assert!(
        help.contains("--task") && help.contains("\"type\":\"fork\"") && help.contains("$retval:s32"),
        "{help}"
    );
}

/// A program making the getppid system call as often as its argument says.
fn getppid_program(dir: &Path) -> PathBuf {
    let src = dir.join("getppid.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n#include <sys/syscall.h>\n#include <unistd.h>\n\
         int main(int argc, char **argv) { for (int i = atoi(argv[1]); i > 0; i--) syscall(SYS_getppid); return 0; }\n",
    )
    .unwrap();
    let bin = dir.join("getppid");
    let st = Command::new("cc").args(["-O1", "-o"]).arg(&bin).arg(&src).status().unwrap();
    assert!(st.success(), "cannot compile the kprobe test program");
    bin
}

/// `--json` records of a trace, by event.
fn records_of(out: &std::process::Output, event_prefix: &str) -> Vec<Value> {
    let all =
        text(&out.stdout).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()).collect::<Vec<_>>();
    all.into_iter().filter(|r| r["event"].as_str().is_some_and(|e| e.starts_with(event_prefix))).collect()
}

/// A kprobe (the kprobe PMU) on a command's getppid calls: exactly its 7,
/// by its pid; a kprobe with arguments on the kernel's open: the paths it
/// opened, in order. Where the kernel lacks them, the one-line error, and
/// the success paths are listed as not run on this kernel.
#[test]
fn trace_kprobes_of_a_command() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_kprobes_of_a_command") {
        return;
    }
    let dir = tempdir("kprobes");
    let prog = getppid_program(&dir);
    let calls = run(&["trace", "--json", &format!("k:{GETPPID}"), "--", prog.to_str().unwrap(), "7"]);
    let missing: Vec<String> =
        (0..3).map(|i| dir.join(format!("missing-{i}")).display().to_string()).collect();
    let open = "k:do_sys_openat2 path=+0($arg2):ustring";
    let script = format!("cat {} 2>/dev/null; true", missing.join(" "));
    let opens = run(&["trace", "--json", open, "--", "sh", "-c", &script]);
    let mut absent = Vec::new();
    if Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        assert_eq!(calls.status.code(), Some(0), "{}", text(&calls.stderr));
        let hits = records_of(&calls, "k:");
        let pids: BTreeSet<u64> = hits.iter().map(|r| r["pid"].as_u64().unwrap()).collect();
        assert_eq!((hits.len(), pids.len()), (7, 1), "{hits:?}");
    } else {
        let err = text(&calls.stderr);
        assert_eq!(calls.status.code(), Some(1), "{err}");
        assert!(err.contains("CONFIG_KPROBES") && err.lines().count() == 1, "{err}");
        absent.push("no kprobe PMU");
    }
    if Path::new("/sys/kernel/tracing/kprobe_events").exists() {
        assert_eq!(opens.status.code(), Some(0), "{}", text(&opens.stderr));
        let paths: Vec<String> = records_of(&opens, "k:")
            .iter()
            .filter_map(|r| r["fields"]["path"].as_str().map(str::to_owned))
            .filter(|p| p.starts_with(&*dir.to_string_lossy()))
            .collect();
        assert_eq!(paths, missing);
    } else {
        let err = text(&opens.stderr);
        assert_eq!(opens.status.code(), Some(1), "{err}");
        let why = err.contains("kprobe_events") || err.contains("CONFIG_KPROBES");
        assert!(why && err.contains("do_sys_openat2") && err.lines().count() == 1, "{err}");
        absent.push("no kprobe_events");
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !absent.is_empty() {
        skip::kernel_lacks(format!("its success paths: the kernel has {}", absent.join(" and ")));
    }
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
    // A symbol the binary lacks.
    let out = run(&["trace", &format!("u:{name}:no_such_symbol")]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no_such_symbol not found"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_uprobes_inside_a_function_fire_there() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_uprobes_inside_a_function_fire_there") {
        return;
    }
    let dir = tempdir("offset");
    let bin = offset_program(&dir);
    let name = bin.to_str().unwrap();
    let place = dir.join("place");
    let place_arg = place.to_str().unwrap();
    // A first run tells the function's file offset (the same every run).
    assert!(Command::new(&bin).args(["0", place_arg]).status().unwrap().success());
    let (_, file_entry) = offset_program_place(&place);
    let arg = if cfg!(target_arch = "aarch64") { "x=%x0:u64" } else { "x=%di:u64" };
    let at_symbol = format!("u:{name}:perfbuf_offset_target+4");
    let with_arg = format!("u:{name}:perfbuf_offset_target+4 {arg}");
    let at_file_offset = format!("u:{name}:{:#x}", file_entry + 4);
    let returns = format!("u:{name}:{file_entry:#x}%return");
    let n = 6;
    let out = run(&[
        "trace",
        "--json",
        &at_symbol,
        &with_arg,
        &at_file_offset,
        &returns,
        "--",
        name,
        &n.to_string(),
        place_arg,
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    // The probe as traced: at +0x4, not at the function's entry.
    let probe_name = at_symbol.replace("+4", "+0x4");
    assert!(err.contains(&format!("tracing {probe_name}, {probe_name}, ")), "{err}");
    let (entry, _) = offset_program_place(&place);
    let records: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |event: &str| -> Vec<&Value> { records.iter().filter(|r| r["event"] == event).collect() };
    let inside: Vec<&Value> = of(&probe_name);
    assert_eq!(inside.len(), 2 * n, "{records:?}");
    for r in &inside {
        assert_eq!(r["ip"].as_u64(), Some(entry + 4), "{r}");
    }
    let xs: Vec<u64> = inside.iter().filter_map(|r| r["fields"]["x"].as_u64()).collect();
    assert_eq!(xs, (0..n as u64).collect::<Vec<_>>());
    let by_offset = of(&at_file_offset);
    assert_eq!(by_offset.len(), n);
    assert!(by_offset.iter().all(|r| r["ip"].as_u64() == Some(entry + 4)), "{by_offset:?}");
    let back = of(&returns);
    assert_eq!(back.len(), n);
    assert!(
        back.iter().all(|r| r["ip"].as_u64().is_some_and(|ip| !(entry..entry + 9).contains(&ip))),
        "{back:?}"
    );
    // A return probe inside a function, an offset past its end: usage errors naming the probe.
    let out =
        run(&["trace", &format!("u:{name}:perfbuf_offset_target+4%return"), "--", name, "1", place_arg]);
    let err = text(&out.stderr);
    assert_eq!((out.status.code(), err.lines().count()), (Some(2), 1), "{err}");
    assert!(err.contains("perfbuf_offset_target+4%return") && err.contains("function's entry"), "{err}");
    let out = run(&["trace", &format!("u:{name}:perfbuf_offset_target+64"), "--", name, "1", place_arg]);
    let err = text(&out.stderr);
    assert_eq!((out.status.code(), err.lines().count()), (Some(2), 1), "{err}");
    assert!(err.contains("perfbuf_offset_target+0x40") && err.contains("past the end"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tracepoint that only these tests trace, hit by `getpgid` calls.
const QUIET_TRACEPOINT: &str = "syscalls:sys_enter_getpgid";

/// A program calling getpgid as often as its argument says.
fn getpgid_program(dir: &Path) -> PathBuf {
    let src = dir.join("getpgid.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n#include <unistd.h>\n\
         int main(int argc, char **argv) { for (int i = atoi(argv[1]); i > 0; i--) getpgid(0); return 0; }\n",
    )
    .unwrap();
    let bin = dir.join("getpgid");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    assert!(Command::new(cc).arg("-o").arg(&bin).arg(&src).status().unwrap().success());
    bin
}

#[test]
fn trace_names_a_bpf_program_that_drops_the_tracepoints_events() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_names_a_bpf_program_that_drops_the_tracepoints_events") {
        return;
    }
    let dir = tempdir("dropped");
    let bin = getpgid_program(&dir);
    let trace = || run(&["trace", QUIET_TRACEPOINT, "--", bin.to_str().unwrap(), "6"]);
    // Nothing attached: every call, no warning.
    let out = trace();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout).lines().count(), 6, "{}", text(&out.stdout));
    assert!(!err.contains("warning"), "{err}");
    // Another tool's program returning 0: the kernel drops every event, and
    // trace says which program does it, once.
    let other = drop_program::DropProgram::attach(QUIET_TRACEPOINT, "pbcli_drop").unwrap();
    let other_id = other.id;
    let out = trace();
    drop(other);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(text(&out.stdout), "", "the program dropped them");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    let want = format!(
        "perfbuf trace: warning: BPF program {other_id} \"pbcli_drop\" is attached to {QUIET_TRACEPOINT}"
    );
    assert!(warnings[0].starts_with(&want) && warnings[0].contains("returns 0"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_probe_arguments_print_the_values_passed_and_returned() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_probe_arguments_print_the_values_passed_and_returned") {
        return;
    }
    let dir = tempdir("probe-args");
    let bin = marked_program(&dir);
    let name = bin.to_str().unwrap();
    let n = 9;
    // perfbuf_mark(i) for i in 1..=n returns 2i: the first argument is
    // in %di (x86_64), the return value in $retval.
    let entry = format!("u:{name}:perfbuf_mark");
    let ret = format!("u:{name}:perfbuf_mark%return");
    let out = run(&[
        "trace",
        "--json",
        &format!("{entry} n=%di:s32"),
        &format!("{ret} r=$retval:s32"),
        "--",
        name,
        &n.to_string(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let records: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let passed: Vec<i64> = records
        .iter()
        .filter(|r| r["event"] == entry.as_str())
        .map(|r| r["fields"]["n"].as_i64().unwrap_or_else(|| panic!("no n in {r}")))
        .collect();
    let returned: Vec<i64> = records
        .iter()
        .filter(|r| r["event"] == ret.as_str())
        .map(|r| r["fields"]["r"].as_i64().unwrap_or_else(|| panic!("no r in {r}")))
        .collect();
    assert_eq!(passed, (1..=n).collect::<Vec<i64>>());
    assert_eq!(returned, (1..=n).map(|i| 2 * i).collect::<Vec<i64>>());
    assert_eq!(records.len(), 2 * n as usize);
    // What the user declared, and nothing the kernel adds (__probe_ip...).
    for r in &records {
        let keys: Vec<&String> = r["fields"].as_object().unwrap().keys().collect();
        assert!(keys == ["n"] || keys == ["r"], "{r}");
    }
    // Text: the arguments by name, in the order declared, x-typed in hex.
    let out = run(&["trace", &format!("{entry} n=%di:s32 h=%di:x32"), "--", name, "3"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    for (line, i) in lines.iter().zip(1..) {
        assert!(line.ends_with(&format!(" {entry}: n={i} h={i:#x}")), "{line}");
    }
    // --all-fields: the kernel's fields too, its addresses in hex.
    let out = run(&[
        "trace",
        "--all-fields",
        &format!("{entry} n=%di:s32"),
        &format!("{ret} r=$retval:s32"),
        "--",
        name,
        "1",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let hex_field = |line: &str, field: &str| {
        let v = line
            .split(' ')
            .find_map(|w| w.strip_prefix(&format!("{field}=")))
            .unwrap_or_else(|| panic!("{line}"));
        assert!(v.starts_with("0x") && u64::from_str_radix(&v[2..], 16).is_ok(), "{line}");
    };
    assert!(lines[0].contains(" common_pid=") && lines[0].ends_with(" n=1"), "{}", lines[0]);
    hex_field(&lines[0], "__probe_ip");
    hex_field(&lines[1], "__probe_func");
    hex_field(&lines[1], "__probe_ret_ip");
    assert!(lines[1].ends_with(" r=2"), "{}", lines[1]);
    let out = run(&["trace", "--json", "--all-fields", &format!("{entry} n=%di:s32"), "--", name, "1"]);
    let record: Value = serde_json::from_str(text(&out.stdout).trim()).unwrap();
    let fields = record["fields"].as_object().unwrap();
    assert!(
        fields.contains_key("__probe_ip") && fields.contains_key("common_pid") && fields["n"] == 1,
        "{record}"
    );
    assert_eq!(fields["__probe_ip"], record["ip"], "the probe's address is the sample's ip");
    // A definition the kernel refuses: one line with the probe and the
    // kernel's complaint (tracefs error_log).
    let out = run(&["trace", &format!("{entry} x=%nosuchreg:s32"), "--", name, "1"]);
    let err = text(&out.stderr);
    assert!(matches!(out.status.code(), Some(1 | 2)), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&entry) && err.contains("Invalid register"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_task_shows_fork_exec_exit_of_the_command_in_time_order() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_task_shows_fork_exec_exit_of_the_command_in_time_order") {
        return;
    }
    let dir = tempdir("task");
    let mark = marked_binary(&dir);
    let (shell, kid) = (dir.join("shell"), dir.join("kid"));
    let script =
        format!("echo $$ > {}; {} & echo $! > {}; wait", shell.display(), mark.display(), kid.display());
    let out = run(&["trace", "--task", "--json", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let shell = *read_pids(&shell).first().unwrap() as u64;
    let kid = *read_pids(&kid).first().unwrap() as u64;
    let records: Vec<Value> = text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut last = 0;
    for r in &records {
        let time = r["time_ns"].as_u64().unwrap_or_else(|| panic!("no time in {r}"));
        assert!(time >= last, "out of order: {r}");
        last = time;
        // Only the command's tree: the shell and its child.
        assert!(r["pid"] == shell || r["pid"] == kid, "{r}");
    }
    let at = |kind: &str, pid: u64| {
        records
            .iter()
            .position(|r| r["type"] == kind && r["pid"] == pid)
            .unwrap_or_else(|| panic!("no {kind} of {pid} in {records:?}"))
    };
    let (fork, exit) = (at("fork", kid), at("exit", kid));
    assert_eq!(records[fork]["ppid"], shell, "{}", records[fork]);
    assert_eq!(records[fork]["tid"], kid);
    let comm = records
        .iter()
        .position(|r| r["type"] == "comm" && r["pid"] == kid && r["exec"] == true)
        .unwrap_or_else(|| panic!("no exec comm of {kid} in {records:?}"));
    let base = mark.file_name().unwrap().to_str().unwrap();
    assert_eq!(records[comm]["name"], base[..base.len().min(15)], "{}", records[comm]);
    assert!(fork < comm && comm < exit, "{records:?}");
    assert_eq!(records[exit]["ppid"], shell);
    // The shell's own exec and exit are there too.
    assert!(records.iter().any(|r| r["type"] == "comm" && r["pid"] == shell && r["name"] == "sh"));
    at("exit", shell);
    // Text lines.
    let out = run(&["trace", "--task", "--", "sh", "-c", &format!("{} & wait", mark.display())]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for what in [" fork: pid=", " exit: pid=", &format!(" name=\"{}\" exec=1", &base[..base.len().min(15)])] {
        assert!(stdout.contains(what), "{what} in {stdout}");
    }
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
    let Some(root) = root else { return skip::skip("its cgroup part: no cgroup2 mount") };
    let cg = root.join(format!("perfbuf-cli-{}", std::process::id()));
    let _ = std::fs::create_dir(&cg);
    let dir = tempdir("cgroup");
    let mark = marked_binary(&dir);
    let pids = dir.join("pids");
    let (child, rx) =
        spawn_piped(Command::new(BIN).args(["trace", "sched:sched_process_exec", "--cgroup"]).arg(&cg));
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
