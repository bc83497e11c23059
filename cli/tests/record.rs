//! `perfbuf record` on the real kernel (root), its files read back by
//! Linux's `perf` (`perf report`, `perf script`): a command's profile, a
//! recording ended by SIGINT, tracepoints, usage errors. Without root or
//! perf these fail under CI=true and are skipped (with a message) otherwise.

mod common;

use common::*;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Root and Linux's perf, or a skip (a failure under CI=true).
fn ready(name: &str) -> bool {
    if !root_or_skip(name) {
        return false;
    }
    if Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success()) {
        return true;
    }
    skip::skip(format!("{name} needs perf (apt-get install linux-perf)"));
    false
}

/// tests/perfdata/spinner.c (spins in `perfbuf_spin_here` for its argument
/// in seconds), built with frame pointers into `dir` as `pbspin`.
fn spinner(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/perfdata/spinner.c");
    let bin = dir.join("pbspin");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(cc)
        .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&bin)
        .arg(src)
        .status()
        .unwrap();
    assert!(st.success(), "cannot compile the spinner");
    bin
}

fn perf(args: &[&str], file: &Path) -> String {
    let out: Output = Command::new("perf").args(args).arg("-i").arg(file).output().unwrap();
    assert!(out.status.success(), "perf {args:?}: {}", text(&out.stderr));
    text(&out.stdout)
}

/// The first entry of `perf report` for the comm `comm`, by symbol.
fn top_symbol(file: &Path, comm: &str) -> String {
    let report =
        perf(&["report", "--stdio", "--no-children", "-g", "none", "--comm", comm, "--sort", "sym"], file);
    report
        .lines()
        .find(|l| l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit()))
        .unwrap_or_else(|| panic!("no entry in perf report: {report}"))
        .to_owned()
}

/// `N samples` in the summary line.
fn summary_samples(summary: &str) -> usize {
    let words: Vec<&str> = summary.split_whitespace().collect();
    let at = words.iter().position(|w| w.starts_with("samples")).unwrap_or_else(|| panic!("{summary}"));
    words[at - 1].parse().unwrap()
}

/// Samples `perf script` lists (one line each without call chains).
fn script_samples(file: &Path, event: &str) -> Vec<String> {
    perf(&["script", "-F", "comm,pid,event,trace"], file)
        .lines()
        .filter(|l| l.contains(&format!("{event}:")))
        .map(str::to_owned)
        .collect()
}

#[test]
fn record_a_command_and_perf_report_shows_its_hot_function() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready("record_a_command_and_perf_report_shows_its_hot_function") {
        return;
    }
    let dir = tempdir("record");
    let bin = spinner(&dir);
    let file = dir.join("cmd.data");
    let out = run(&["record", "-g", "-o", file.to_str().unwrap(), "--", bin.to_str().unwrap(), "1.0"]);
    let summary = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    assert!(summary.contains("command ended") && summary.contains("exited with status 0"), "{summary}");
    assert!(summary.contains(&format!("written to {}", file.display())), "{summary}");
    let top = top_symbol(&file, "pbspin");
    assert!(top.contains("[.] perfbuf_spin_here"), "top of perf report: {top}");
    // perf reads every sample written, all of the command (nothing else is
    // watched), and -g gave them call chains through main.
    let samples = script_samples(&file, "cpu-clock");
    assert_eq!(samples.len(), summary_samples(&summary), "{summary}");
    assert!(samples.len() > 10 && samples.iter().all(|l| l.contains("pbspin")), "{samples:?}");
    let chains = perf(&["script", "-F", "comm,ip,sym"], &file);
    assert!(chains.contains("perfbuf_spin_here") && chains.contains("main"), "{chains}");
    // The header's build ids (HEADER_BUILD_ID): the program's, as perf reads
    // it from the ELF file, and the running kernel's.
    let header = perf(&["report", "--header-only"], &file);
    let missing = header.lines().find(|l| l.starts_with("# missing features:")).unwrap_or_default();
    assert!(!missing.contains(" BUILD_ID "), "{missing}");
    let listed = perf(&["buildid-list"], &file);
    let program_id = perf(&["buildid-list"], &bin);
    assert!(listed.contains(&format!("{} {}", program_id.trim(), bin.display())), "{listed}");
    let out = Command::new("perf").args(["buildid-list", "-k"]).output().unwrap();
    let kernel_id = text(&out.stdout);
    assert!(listed.contains(&format!("{} [kernel.kallsyms]", kernel_id.trim())), "{listed}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each sample's period, as `perf script -F period` lists them.
fn script_periods(file: &Path) -> Vec<u64> {
    perf(&["script", "-F", "period"], file).lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// `perf report`'s `# Event count (approx.): N`.
fn report_event_count(file: &Path) -> u64 {
    let report = perf(&["report", "--stdio", "--no-children", "-g", "none"], file);
    let line = report.lines().find(|l| l.starts_with("# Event count")).unwrap_or_else(|| panic!("{report}"));
    line.rsplit(' ').next().and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v[v.len() / 2]
}

#[test]
fn record_sample_periods_agree_with_perf_record() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready("record_sample_periods_agree_with_perf_record") {
        return;
    }
    let dir = tempdir("period");
    let bin = spinner(&dir);
    let ours = dir.join("perfbuf.data");
    let theirs = dir.join("perf.data");
    // The same spinner and frequency, recorded by each.
    let out = run(&["record", "-F", "999", "-o", ours.to_str().unwrap(), "--", bin.to_str().unwrap(), "0.5"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let out = Command::new("perf")
        .args(["record", "-e", "cpu-clock", "-F", "999", "-o"])
        .arg(&theirs)
        .arg("--")
        .arg(&bin)
        .arg("0.5")
        .output()
        .unwrap();
    assert!(out.status.success(), "perf record: {}", text(&out.stderr));
    let (our_periods, their_periods) = (script_periods(&ours), script_periods(&theirs));
    assert!(our_periods.len() > 10 && their_periods.len() > 10, "{our_periods:?} {their_periods:?}");
    // What each sample stands for: the period the kernel chose for 999 Hz
    // (about 1 ms of CPU clock), not the frequency.
    let (ours_median, theirs_median) = (median(our_periods.clone()), median(their_periods.clone()));
    let ratio = ours_median as f64 / theirs_median as f64;
    assert!((0.5..2.0).contains(&ratio), "median period {ours_median} against perf record's {theirs_median}");
    // perf report's event count: the periods summed, for about the same
    // CPU time of the same spinner (the sample counts vary with the load).
    let (our_count, their_count) = (report_event_count(&ours), report_event_count(&theirs));
    let per_sample = |count: u64, n: usize| count as f64 / n as f64;
    let ratio = per_sample(our_count, our_periods.len()) / per_sample(their_count, their_periods.len());
    assert!(
        (0.5..2.0).contains(&ratio),
        "event count {our_count} over {} samples against perf record's {their_count} over {}",
        our_periods.len(),
        their_periods.len()
    );
    // The totals themselves are not compared: each stands for the CPU time
    // its run of the spinner got, which the machine's load sets (seen 24
    // times apart with suites running beside it).
    eprintln!(
        "perfbuf record: {} samples, median period {ours_median}, event count {our_count}; \
         perf record: {} samples, median period {theirs_median}, event count {their_count}",
        our_periods.len(),
        their_periods.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn record_sigint_and_sigterm_finish_a_file_perf_reads() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready("record_sigint_and_sigterm_finish_a_file_perf_reads") {
        return;
    }
    let dir = tempdir("record-sigint");
    let bin = spinner(&dir);
    let file = dir.join("all.data");
    let summary = record_until(
        &["-o", file.to_str().unwrap()],
        "recording cpu-clock at 999 Hz of all tasks",
        &bin,
        "0.5",
        libc::SIGINT,
    );
    assert!(summary.contains(" lost, ") && summary.contains(" bytes written to "), "{summary}");
    // The file is whole: perf lists every sample, and the spinner, started
    // after the recording, is named and symbolized.
    assert_eq!(script_samples(&file, "cpu-clock").len(), summary_samples(&summary), "{summary}");
    let top = top_symbol(&file, "pbspin");
    assert!(top.contains("[.] perfbuf_spin_here"), "top of perf report: {top}");
    // SIGTERM ends a recording the same way.
    let file = dir.join("term.data");
    let args = ["-e", "sched:sched_switch", "-o", file.to_str().unwrap()];
    let summary = record_until(&args, "recording sched:sched_switch", &bin, "0.2", libc::SIGTERM);
    assert_eq!(script_samples(&file, "sched:sched_switch").len(), summary_samples(&summary), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs `perfbuf record ARGS` until it says `started`, the spinner `bin`
/// for `secs`, then sends `signal`: record must exit 0 saying it stopped by
/// signal. Returns that summary line.
fn record_until(args: &[&str], started: &str, bin: &Path, secs: &str, signal: i32) -> String {
    let (child, rx) = spawn_piped(Command::new(BIN).arg("record").args(args));
    let mut seen = Vec::new();
    wait_for(&rx, started, &mut seen);
    assert!(Command::new(bin).arg(secs).status().unwrap().success());
    // SAFETY: signals our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{seen:?}");
    wait_for(&rx, "stopped by signal", &mut seen);
    seen.pop().unwrap()
}

#[test]
fn record_tracepoints_of_a_command_for_perf_script() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready("record_tracepoints_of_a_command_for_perf_script") {
        return;
    }
    let dir = tempdir("record-tp");
    let mark = marked_binary(&dir);
    let pids = dir.join("pids");
    let file = dir.join("exec.data");
    let n = 12;
    let out = run(&[
        "record",
        "-e",
        "sched:sched_process_exec",
        "-o",
        file.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &exec_script(&mark, &pids, n),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // perf script decodes the fields (the file carries the formats).
    let name = mark.to_str().unwrap();
    let execs: Vec<String> = script_samples(&file, "sched:sched_process_exec")
        .into_iter()
        .filter(|l| l.contains(&format!("filename={name} ")))
        .collect();
    assert_eq!(execs.len(), n, "{execs:?}");
    let recorded: BTreeSet<u32> = execs
        .iter()
        .map(|l| l.split("pid=").nth(1).unwrap().split_whitespace().next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(recorded, read_pids(&pids));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn record_probe_arguments_for_perf_script() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !ready("record_probe_arguments_for_perf_script") {
        return;
    }
    let dir = tempdir("record-probe-args");
    let bin = marked_program(&dir);
    let name = bin.to_str().unwrap();
    let file = dir.join("args.data");
    let n = 6;
    // perfbuf_mark(i) for i in 1..=n returns 2i (x86_64: i in %di).
    let out = run(&[
        "record",
        "-e",
        &format!("u:{name}:perfbuf_mark n=%di:s32"),
        "-e",
        &format!("u:{name}:perfbuf_mark%return r=$retval:s32"),
        "-o",
        file.to_str().unwrap(),
        "--",
        name,
        &n.to_string(),
    ]);
    let summary = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    // perf script decodes each probe's arguments with the format the file
    // carries (the probe itself is gone by now), in call order.
    let field = |event: &str, arg: &str| -> Vec<i64> {
        script_samples(&file, event)
            .iter()
            .map(|l| {
                let value = l.split(&format!(" {arg}=")).nth(1).unwrap_or_else(|| panic!("no {arg}= in {l}"));
                value.trim().parse().unwrap_or_else(|_| panic!("{l}"))
            })
            .collect()
    };
    assert_eq!(field(&format!("uprobe {name}:perfbuf_mark"), "n"), (1..=n).collect::<Vec<i64>>());
    assert_eq!(
        field(&format!("uretprobe {name}:perfbuf_mark"), "r"),
        (1..=n).map(|i| 2 * i).collect::<Vec<i64>>()
    );
    assert_eq!(summary_samples(&summary), 2 * n as usize, "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn record_errors_are_one_line_with_the_fix() {
    for args in [
        &["record", "-F", "0"][..],
        &["record", "-e", "nonsense"],
        &["record", "--pages", "3"],
        &["record", "--pid", "1", "--", "true"],
        &["record", "-a"],
    ] {
        let out = run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
    let err = text(&run(&["record", "-e", "cpuclock"]).stderr);
    assert!(err.lines().count() == 1 && err.contains("cpu-clock, task-clock, cycles"), "{err}");
    let out = run(&["record", "-o", "/nonexistent-dir/x.data", "--", "true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.lines().count() == 1 && err.contains("/nonexistent-dir/x.data") && err.contains("-o"),
        "{err}"
    );
    let help = text(&run(&["record", "--help"]).stdout);
    assert!(help.contains("Examples:") && help.contains("perf report") && help.contains("999 Hz"), "{help}");
}
