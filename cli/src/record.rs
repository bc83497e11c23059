//! `perfbuf record`: sampling events, tracepoints and probes into a
//! perf.data file, through the library's writer, for `perf report` and
//! `perf script`.

use crate::child::Child;
use crate::fail::{Failure, Result, check_pages, need_root};
use crate::programs::ProgramWarnings;
use crate::run::{Status, catch_stop_signals, stop_requested};
use crate::spec::{self, Spec};
use crate::trace::{add_failure, backlog, build_failure, event_for};
use perfbuf::PerfBuffer;
use perfbuf::events::{Event, EventSet};
use perfbuf::perfdata::{PerfDataWriter, WriteStats};
use perfbuf::uapi::{PERF_COUNT_SW_TASK_CLOCK, PERF_SAMPLE_CALLCHAIN};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The default frequency: 999 Hz, as the library's example, rather than
/// perf record's 4000: a tenth of the data on a busy machine, enough for a
/// profile, and off the 1000 Hz tick so samples do not beat with it.
pub const DEFAULT_HZ: u64 = 999;

/// What `record` was asked.
pub struct RecordArgs {
    pub events: Vec<String>,
    pub freq: u64,
    pub callgraph: bool,
    pub pid: Option<i32>,
    pub all: bool,
    pub cpus: Option<Vec<u32>>,
    pub output: PathBuf,
    pub duration: Option<Duration>,
    pub pages: usize,
    pub command: Vec<String>,
}

/// One `-e`: a sampling event by perf's name, or what `trace` takes.
enum Wanted {
    Sampling(&'static str),
    Traced(Spec),
}

impl Wanted {
    fn parse(text: &str) -> Result<Wanted> {
        Ok(match text {
            "cpu-clock" => Wanted::Sampling("cpu-clock"),
            "task-clock" => Wanted::Sampling("task-clock"),
            "cycles" | "cpu-cycles" => Wanted::Sampling("cycles"),
            _ => Wanted::Traced(spec::parse(text).map_err(|why| {
                Failure::usage(format!("{why}; or a sampling event: cpu-clock, task-clock, cycles"))
            })?),
        })
    }

    fn name(&self) -> String {
        match self {
            Wanted::Sampling(n) => n.to_string(),
            Wanted::Traced(s) => s.to_string(),
        }
    }

    /// The library's event: sampling ones at `hz`, tracing ones every hit.
    fn event(&self, hz: u64, callgraph: bool) -> Result<Event> {
        let ev = match self {
            Wanted::Sampling("task-clock") => Event::software(PERF_COUNT_SW_TASK_CLOCK).frequency(hz),
            Wanted::Sampling("cycles") => Event::cpu_cycles_or_clock().frequency(hz),
            Wanted::Sampling(_) => Event::cpu_clock().frequency(hz),
            Wanted::Traced(s) => event_for(s, None)?,
        };
        Ok(if callgraph { ev.sample(PERF_SAMPLE_CALLCHAIN) } else { ev })
    }
}

/// The kernel refuses a frequency above this (EINVAL): said before.
fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate").ok()?.trim().parse().ok()
}

fn check_freq(hz: u64) -> Result<()> {
    if hz == 0 {
        return Err(Failure::usage("-F 0: give a frequency in Hz, e.g. -F 999"));
    }
    if let Some(max) = max_sample_rate().filter(|&m| hz > m) {
        return Err(Failure::usage(format!(
            "-F {hz} is above the kernel's limit {max} (/proc/sys/kernel/perf_event_max_sample_rate): use -F {max} \
             or less"
        )));
    }
    Ok(())
}

/// The output's directory must exist and be writable, checked before any
/// event is opened (the writer would say it only after).
fn check_output(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let fail = |why: String| {
        Err(Failure::run(format!("cannot write {}: {why} (choose another path with -o)", path.display())))
    };
    if !dir.is_dir() {
        return fail(format!("no directory {}", dir.display()));
    }
    if path.is_dir() {
        return fail("it is a directory".into());
    }
    let target = if path.exists() { path } else { dir };
    let c = std::ffi::CString::new(target.as_os_str().as_bytes())
        .map_err(|_| Failure::usage("-o: the path contains a NUL byte"))?;
    // SAFETY: a NUL-terminated path that lives across the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK) } != 0 {
        return fail(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

fn write_failure(e: perfbuf::perfdata::Error) -> Failure {
    match e {
        perfbuf::perfdata::Error::Read(e) => Failure::lib("reading the rings", &e),
        other => Failure::run(format!("{other} (free some room or choose another path with -o)")),
    }
}

pub fn run(args: RecordArgs) -> Result<()> {
    check_pages(args.pages)?;
    let texts = if args.events.is_empty() { vec!["cpu-clock".to_string()] } else { args.events.clone() };
    let wanted = texts.iter().map(|t| Wanted::parse(t)).collect::<Result<Vec<_>>>()?;
    if wanted.iter().any(|w| matches!(w, Wanted::Sampling(_))) {
        check_freq(args.freq)?;
    }
    let events = wanted.iter().map(|w| w.event(args.freq, args.callgraph)).collect::<Result<Vec<_>>>()?;
    check_output(&args.output)?;
    need_root("recording")?;
    let mut child = if args.command.is_empty() { None } else { Some(Child::fork(&args.command)?) };

    let mut builder = EventSet::builder().pages(args.pages);
    if let Some(cpus) = &args.cpus {
        builder = builder.cpus(cpus);
    }
    let watched = match (&child, args.pid) {
        (Some(c), _) if !args.all => {
            builder = builder.pid(c.pid).inherit(true);
            "the command's tasks".to_string()
        }
        (None, Some(pid)) => {
            builder = builder.pid(pid);
            format!("pid {pid}")
        }
        (Some(_), _) => "all tasks while the command runs".to_string(),
        _ => "all tasks".to_string(),
    };
    let mut set = builder.build().map_err(|e| build_failure(args.cpus.is_some(), args.pid, &e))?;
    let mut names = Vec::new();
    let mut added = Vec::new();
    for (w, ev) in wanted.iter().zip(&events) {
        let id = set.add(ev).map_err(|e| match w {
            Wanted::Traced(spec) => add_failure(spec, &e),
            Wanted::Sampling(name) => Failure::lib(&format!("cannot open {name}"), &e),
        })?;
        let mut name = w.name();
        if let Wanted::Sampling(_) = w {
            name.push_str(&format!(" at {} Hz", args.freq));
        }
        if set.info(id).is_ok_and(|info| info.fallback.is_some()) {
            name.push_str(" (no hardware PMU here: cpu-clock instead)");
        }
        added.push((id, w.name()));
        names.push(name);
    }
    let mut out = PerfDataWriter::for_set(&args.output, &mut set).map_err(write_failure)?;
    let mut pb = set.reader(|_| {}).map_err(|e| Failure::lib("cannot read the event set", &e))?;
    catch_stop_signals();
    set.enable_all().map_err(|e| Failure::lib("cannot enable the events", &e))?;
    if let Some(c) = &mut child {
        c.start();
    }
    eprintln!(
        "perfbuf record: recording {}{} of {watched} on CPUs {} to {} (Ctrl-C to stop)",
        names.join(", "),
        if args.callgraph { " with call chains" } else { "" },
        set.cpus().iter().map(u32::to_string).collect::<Vec<_>>().join(","),
        args.output.display()
    );
    let started = Instant::now();
    let mut status = Status::new();
    let mut programs = ProgramWarnings::new("record");
    programs.check(&set, &added, &mut status, true);
    let why = loop {
        out.poll(&mut pb, Duration::from_millis(100)).map_err(write_failure)?;
        programs.check(&set, &added, &mut status, false);
        status.tick(out.stats().samples, lost(&pb), || backlog(&pb));
        if stop_requested() {
            break "stopped by signal";
        }
        if args.duration.is_some_and(|d| started.elapsed() >= d) {
            break "duration reached";
        }
        if let Some(c) = &mut child
            && c.exited()
        {
            break "command ended";
        }
    };
    programs.check(&set, &added, &mut status, true);
    let _ = set.disable_all();
    out.drain(&mut pb).map_err(write_failure)?;
    let lost = lost(&pb);
    let stats = out.finish().map_err(write_failure)?;
    status.clear();
    eprintln!("{}", summary(why, started.elapsed(), &stats, lost, &args.output, child.as_ref()));
    Ok(())
}

/// Records the kernel dropped, all rings.
fn lost(pb: &PerfBuffer<'_>) -> u64 {
    (0..pb.rings()).filter_map(|i| pb.stats(i).ok()).map(|s| s.lost).sum()
}

fn summary(
    why: &str,
    took: Duration,
    stats: &WriteStats,
    lost: u64,
    path: &Path,
    child: Option<&Child>,
) -> String {
    let mut line = format!(
        "perfbuf record: {why} after {:.1}s: {} samples, {lost} lost, {} bytes written to {}",
        took.as_secs_f64(),
        stats.samples,
        stats.data_bytes,
        path.display()
    );
    if let Some(c) = child {
        line.push_str(&format!("; the command {}", c.describe()));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names() {
        assert!(matches!(Wanted::parse("cpu-clock"), Ok(Wanted::Sampling("cpu-clock"))));
        assert!(matches!(Wanted::parse("cpu-cycles"), Ok(Wanted::Sampling("cycles"))));
        assert!(matches!(Wanted::parse("sched:sched_switch"), Ok(Wanted::Traced(_))));
        let err = Wanted::parse("cpuclock").err().unwrap();
        assert!(err.usage && err.message.contains("task-clock"), "{err}");
        assert!(check_freq(0).is_err() && check_freq(u64::MAX).is_err() && check_freq(99).is_ok());
    }
}
