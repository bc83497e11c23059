//! `perfbuf trace`: tracepoints and probes through an event set, read in
//! time order across CPUs.

use crate::child::Child;
use crate::fail::{Failure, Result, check_pages, need_root};
use crate::output::{self, Head};
use crate::programs::ProgramWarnings;
use crate::run::{Status, catch_stop_signals, poll_result, stop_requested};
use crate::spec::{self, Spec};
use perfbuf::events::{Event, EventId, EventRecord, EventSet, Sideband};
use perfbuf::{OrderKey, PerfBuffer};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What `trace` was asked.
pub struct TraceArgs {
    pub events: Vec<String>,
    pub filter: Option<String>,
    pub pid: Option<i32>,
    pub cgroup: Option<PathBuf>,
    pub cpus: Option<Vec<u32>>,
    pub duration: Option<Duration>,
    pub count: Option<u64>,
    pub json: bool,
    /// The fields the kernel adds too (`common_*`, a probe's `__probe_*`).
    pub all_fields: bool,
    /// Side-band process records too: fork, comm (exec), exit.
    pub task: bool,
    pub pages: usize,
    pub command: Vec<String>,
}

/// What the reader's closure shares with the loop.
struct Sink {
    out: std::io::BufWriter<std::io::Stdout>,
    names: HashMap<EventId, String>,
    /// A probe's declared arguments (name, shown in hex), by event.
    declared: HashMap<EventId, Vec<(String, bool)>>,
    all_fields: bool,
    json: bool,
    samples: u64,
    lost: u64,
    lost_per_cpu: HashMap<u32, u64>,
    others: u64,
    limit: Option<u64>,
    failed: Option<std::io::Error>,
}

impl Sink {
    fn emit(&mut self, line: String) {
        if self.failed.is_none()
            && let Err(e) = writeln!(self.out, "{line}")
        {
            self.failed = Some(e);
        }
    }

    fn take(&mut self, rec: EventRecord<'_>) {
        match rec {
            EventRecord::Sample(s) => {
                if self.limit.is_some_and(|n| self.samples >= n) {
                    return;
                }
                self.samples += 1;
                let name = self.names.get(&s.event()).map_or("?", String::as_str);
                let head = Head {
                    event: name,
                    time_ns: s.time(),
                    cpu: s.cpu(),
                    pid: s.pid(),
                    tid: s.tid(),
                    ip: s.ip(),
                };
                let declared = self.declared.get(&s.event()).map(Vec::as_slice);
                let fields = s.format().into_iter().flat_map(|f| f.fields()).filter_map(|field| {
                    match output::show(field, declared, self.all_fields) {
                        output::Show::Hide => None,
                        how => Some((field.name(), field.decode(s.raw()).ok(), how)),
                    }
                });
                let line = if self.json {
                    output::sample_json(&head, fields)
                } else {
                    output::sample_text(&head, fields)
                };
                self.emit(line);
            }
            EventRecord::Lost { event, cpu, lost } => {
                self.lost += lost;
                *self.lost_per_cpu.entry(cpu).or_default() += lost;
                let name = event.and_then(|e| self.names.get(&e)).map(String::as_str);
                let line = output::lost_line(self.json, name, cpu, lost);
                self.emit(line);
            }
            EventRecord::Sideband { cpu, record, .. } => {
                if self.limit.is_some_and(|n| self.samples >= n) {
                    return;
                }
                // Its time is the sample_id trailer's, the key the
                // reader ordered it by.
                let time = record.sample_id().and_then(|id| id.time).unwrap_or(0);
                if let Some(line) = output::task_line(self.json, time, cpu, &record.body) {
                    self.samples += 1;
                    self.emit(line);
                }
            }
            EventRecord::Other { event, cpu, record } => {
                self.others += 1;
                let name = event.and_then(|e| self.names.get(&e)).map(String::as_str);
                let line = output::other_line(self.json, name, cpu, record);
                self.emit(line);
            }
            _ => {}
        }
    }
}

/// The library's event for a spec, after the checks whose messages the
/// library cannot phrase for a command line.
pub fn event_for(spec: &Spec, filter: Option<&str>) -> Result<Event> {
    match spec {
        Spec::Tracepoint { system, name } => {
            let ev = Event::tracepoint(&format!("{system}:{name}"));
            Ok(match filter {
                Some(f) => ev.filter(f),
                None => ev,
            })
        }
        Spec::Probe(p) => match &p.binary {
            Some(bin) => {
                if !Path::new(bin).is_file() {
                    return Err(Failure::usage(format!(
                        "{spec}: no such binary {bin} (give the full path of an ELF file)"
                    )));
                }
                let ev = match (&p.symbol, p.ret) {
                    (Some(symbol), false) => Event::uprobe(bin, symbol).offset(p.offset),
                    (Some(symbol), true) => Event::uretprobe(bin, symbol).offset(p.offset),
                    (None, false) => Event::uprobe_at(bin, p.offset),
                    (None, true) => Event::uretprobe_at(bin, p.offset),
                };
                Ok(with_args(ev, p))
            }
            None => {
                if !Path::new("/sys/bus/event_source/devices/kprobe").exists() {
                    return Err(Failure::run(format!(
                        "{spec}: this kernel has no kprobes (built without CONFIG_KPROBES); use a tracepoint \
                             (ls /sys/kernel/tracing/events) or a uprobe"
                    )));
                }
                let symbol = p.symbol.as_deref().unwrap_or_default();
                let ev = if p.ret { Event::kretprobe(symbol) } else { Event::kprobe(symbol) };
                Ok(with_args(ev.offset(p.offset), p))
            }
        },
    }
}

/// The probe's arguments, if any, handed to the library (which then
/// defines the probe through tracefs, so its samples have fields).
fn with_args(ev: Event, p: &spec::Probe) -> Event {
    if p.args.is_empty() { ev } else { ev.args(&spec::kernel_args(&p.args)) }
}

/// Why adding `spec` failed, in the user's terms.
pub fn add_failure(spec: &Spec, e: &perfbuf::Error) -> Failure {
    let text = e.to_string();
    if let Spec::Probe(p) = spec
        && let (Some(binary), Some(symbol)) = (&p.binary, &p.symbol)
        && (e.errno() == libc::ENOENT || text.contains("symbol"))
    {
        return Failure::usage(format!(
            "{spec}: symbol {symbol} not found in {binary} ({text}); list symbols with `nm -D` or `readelf -Ws`"
        ));
    }
    if let Spec::Probe(p) = spec
        && p.symbol.is_some()
        && p.offset != 0
        && text.contains("past the end")
    {
        return Failure::usage(format!("{spec}: {text}; `nm -S` gives a function's size"));
    }
    if matches!(spec, Spec::Tracepoint { .. }) && text.contains("PERF_EVENT_IOC_SET_FILTER") {
        return Failure::usage(format!(
            "--filter rejected by the kernel for {spec}: check its syntax and the field names in \
             /sys/kernel/tracing/events/{}/format",
            spec.to_string().replace(':', "/")
        ));
    }
    if matches!(spec, Spec::Tracepoint { .. }) && e.hint().is_some_and(|h| h.contains("subsystem:event")) {
        return Failure::usage(format!("unknown event {spec}: {}", e.hint().unwrap_or_default()));
    }
    Failure::lib(&format!("cannot open {spec}"), e)
}

/// Why building the set failed; `--cpu` given: ENODEV is the user's;
/// `--pid` given: ESRCH is a process that is not there.
pub fn build_failure(cpus_given: bool, pid: Option<i32>, e: &perfbuf::Error) -> Failure {
    if let Some(pid) = pid
        && e.errno() == libc::ESRCH
    {
        return Failure::run(format!(
            "--pid {pid}: no such process (`ps -p {pid}` to check; give a running pid)"
        ));
    }
    if cpus_given && e.errno() == libc::ENODEV {
        return Failure::usage(format!(
            "--cpu: none of these CPUs is online; online: {}",
            std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default().trim()
        ));
    }
    Failure::lib("cannot open the event set", e)
}

pub fn run(args: TraceArgs) -> Result<()> {
    check_pages(args.pages)?;
    let specs =
        args.events.iter().map(|e| spec::parse(e).map_err(Failure::usage)).collect::<Result<Vec<_>>>()?;
    if args.filter.is_some() && !specs.iter().any(|s| matches!(s, Spec::Tracepoint { .. })) {
        return Err(Failure::usage("--filter applies to tracepoints: give at least one SUBSYSTEM:EVENT"));
    }
    let events = specs.iter().map(|s| event_for(s, args.filter.as_deref())).collect::<Result<Vec<_>>>()?;
    if let Some(cg) = &args.cgroup
        && !cg.join("cgroup.procs").is_file()
    {
        return Err(Failure::usage(format!(
            "--cgroup {}: not a cgroup v2 directory (`mount -t cgroup2` shows where they are)",
            cg.display()
        )));
    }
    need_root("tracing")?;
    let mut child = if args.command.is_empty() { None } else { Some(Child::fork(&args.command)?) };

    let mut builder = EventSet::builder().pages(args.pages);
    if args.task {
        builder = builder.sideband(Sideband::COMM | Sideband::TASK);
    }
    if let Some(cpus) = &args.cpus {
        builder = builder.cpus(cpus);
    }
    if let Some(c) = &child {
        builder = builder.pid(c.pid).inherit(true);
    } else if let Some(pid) = args.pid {
        builder = builder.pid(pid);
    }
    if let Some(cg) = &args.cgroup {
        builder = builder.cgroup(cg);
    }
    let mut set = builder.build().map_err(|e| build_failure(args.cpus.is_some(), args.pid, &e))?;
    let mut names = HashMap::new();
    let mut declared = HashMap::new();
    let mut added = Vec::new();
    for (spec, ev) in specs.iter().zip(&events) {
        let id = set.add(ev).map_err(|e| add_failure(spec, &e))?;
        names.insert(id, spec.to_string());
        if let Spec::Probe(p) = spec {
            let hex = |t: &spec::ArgType| matches!(t, spec::ArgType::Hex(_));
            declared.insert(id, p.args.iter().map(|a| (a.name.clone(), hex(&a.type_))).collect());
        }
        added.push((id, spec.to_string()));
    }
    let sink = Arc::new(Mutex::new(Sink {
        out: std::io::BufWriter::new(std::io::stdout()),
        names,
        declared,
        all_fields: args.all_fields,
        json: args.json,
        samples: 0,
        lost: 0,
        lost_per_cpu: HashMap::new(),
        others: 0,
        limit: args.count,
        failed: None,
    }));
    let shared = sink.clone();
    let mut pb = set
        .reader(move |rec| shared.lock().expect("sink").take(rec))
        .map_err(|e| Failure::lib("cannot read the event set", &e))?;
    pb.set_order(OrderKey::SampleTime, Duration::from_millis(20))
        .map_err(|e| Failure::lib("cannot order the records", &e))?;
    catch_stop_signals();
    set.enable_all().map_err(|e| Failure::lib("cannot enable the events", &e))?;
    if let Some(c) = &mut child {
        c.start();
    }
    let mut what: Vec<String> = specs.iter().map(Spec::to_string).collect();
    if args.task {
        what.push("fork/exec/exit".into());
    }
    eprintln!(
        "perfbuf trace: tracing {} on CPUs {} (Ctrl-C to stop)",
        what.join(", "),
        set.cpus().iter().map(u32::to_string).collect::<Vec<_>>().join(",")
    );
    let started = Instant::now();
    let mut status = Status::new();
    let mut programs = ProgramWarnings::new("trace");
    programs.check(&set, &added, &mut status, true);
    let why = loop {
        poll_result(pb.poll(Some(Duration::from_millis(100))))?;
        programs.check(&set, &added, &mut status, false);
        let (samples, lost, failed) = {
            let mut s = sink.lock().expect("sink");
            let _ = s.out.flush();
            (s.samples, s.lost, s.failed.take())
        };
        if let Some(e) = failed {
            // A closed pipe (| head) ends the run quietly.
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                break "output closed";
            }
            return Err(Failure::run(format!("cannot write the output: {e}")));
        }
        status.tick(samples, lost, || backlog(&pb));
        if stop_requested() {
            break "stopped by signal";
        }
        if args.count.is_some_and(|n| samples >= n) {
            break "count reached";
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
    drain(&mut pb)?;
    status.clear();
    let s = sink.lock().expect("sink");
    let mut s = s;
    let _ = s.out.flush();
    let mut summary = format!(
        "perfbuf trace: {why} after {:.1}s: {} records, {} lost",
        started.elapsed().as_secs_f64(),
        s.samples,
        s.lost
    );
    let mut per_cpu: Vec<_> = s.lost_per_cpu.iter().collect();
    per_cpu.sort();
    for (cpu, n) in per_cpu {
        summary.push_str(&format!(" (cpu{cpu}: {n})"));
    }
    if s.others > 0 {
        summary.push_str(&format!(", {} other records", s.others));
    }
    if let Some(c) = &child {
        summary.push_str(&format!("; the command {}", c.describe()));
    }
    drop(s);
    eprintln!("{summary}");
    Ok(())
}

/// Reads what is left in the rings, in order.
fn drain(pb: &mut PerfBuffer<'_>) -> Result<()> {
    pb.consume().map_err(|e| Failure::lib("draining the rings", &e))?;
    pb.flush_ordered().map_err(|e| Failure::lib("draining the rings", &e))?;
    Ok(())
}

/// Bytes waiting in each ring.
pub fn backlog<T: perfbuf::Threading>(pb: &PerfBuffer<'_, T>) -> Vec<(u32, u64)> {
    (0..pb.rings()).filter_map(|i| pb.stats(i).ok().map(|s| (s.cpu as u32, s.pending_bytes))).collect()
}
