//! `perfbuf dump`: any BPF_MAP_TYPE_PERF_EVENT_ARRAY, read as
//! `bpftool map event_pipe` reads it, or BPF_MAP_TYPE_RINGBUF (which
//! `bpftool` cannot read), through the same PerfBuffer code.

use crate::bpf;
use crate::fail::{Failure, Result, check_pages, need_root};
use crate::metrics::{Exporter, MetricsOpts};
use crate::output::hex;
use crate::report;
use crate::run::{Status, catch_stop_signals, poll_result, stop_requested};
use crate::trace::{backlog, count_dropped};
use perfbuf::{OrderKey, PerfBuffer, Wakeup};
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How records are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `cpu N: SIZE bytes: xx xx ...`, one line per record.
    Hex,
    /// `{"type":"sample","cpu":N,"size":N,"data":"HEX"}` and
    /// `{"type":"lost","cpu":N,"lost":N}`, one object per line.
    Json,
}

/// What `dump` was asked.
pub struct DumpArgs {
    pub map: String,
    pub format: Format,
    pub raw: Option<PathBuf>,
    pub order: bool,
    pub fast: bool,
    pub wakeup_records: Option<u32>,
    pub wakeup_bytes: Option<u32>,
    pub max_delay: Option<Duration>,
    pub pages: usize,
    pub cpus: Option<Vec<u32>>,
    pub force: bool,
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    /// perfbuf.bpf.h's output counts map of the program writing `map`.
    pub output_counts: Option<String>,
    pub metrics: MetricsOpts,
}

struct Sink {
    out: Box<dyn Write + Send>,
    /// A ring buffer's records have no CPU: `ring:` instead of `cpu N:`,
    /// `"cpu": null` in JSON.
    ring_buffer: bool,
    format: Format,
    raw: bool,
    samples: u64,
    limit: Option<u64>,
    failed: Option<std::io::Error>,
    /// Records read after --count was reached (or the output failed), by
    /// CPU, not yet told to the reader: the dropped bucket.
    dropped: BTreeMap<u32, u64>,
}

impl Sink {
    fn sample(&mut self, cpu: u32, data: &[u8]) {
        if self.limit.is_some_and(|n| self.samples >= n) || self.failed.is_some() {
            *self.dropped.entry(cpu).or_default() += 1;
            return;
        }
        self.samples += 1;
        let r = if self.raw {
            self.out.write_all(data)
        } else if self.format == Format::Json {
            writeln!(
                self.out,
                "{}",
                json!({"type": "sample", "cpu": self.cpu(cpu), "size": data.len(), "data": hex(data)})
            )
        } else {
            let spaced: Vec<String> = data.iter().map(|b| format!("{b:02x}")).collect();
            writeln!(self.out, "{}: {} bytes: {}", self.source(cpu), data.len(), spaced.join(" "))
        };
        if let Err(e) = r {
            self.failed = Some(e);
        }
    }

    fn lost(&mut self, cpu: u32, lost: u64) {
        if self.raw || self.failed.is_some() {
            return;
        }
        let r = if self.format == Format::Json {
            writeln!(self.out, "{}", json!({"type": "lost", "cpu": self.cpu(cpu), "lost": lost}))
        } else {
            writeln!(self.out, "{}: LOST {lost} records", self.source(cpu))
        };
        if let Err(e) = r {
            self.failed = Some(e);
        }
    }

    fn cpu(&self, cpu: u32) -> Option<u32> {
        (!self.ring_buffer).then_some(cpu)
    }

    fn source(&self, cpu: u32) -> String {
        if self.ring_buffer { "ring".into() } else { format!("cpu {cpu}") }
    }
}

/// The map named by `id:N` or a pinned path, checked to be a perf event
/// array or a ring buffer.
fn open_map(name: &str) -> Result<(OwnedFd, bpf::MapInfo)> {
    let (fd, info) = open_any_map(name)?;
    if info.type_ != bpf::MAP_TYPE_PERF_EVENT_ARRAY && info.type_ != bpf::MAP_TYPE_RINGBUF {
        return Err(Failure::usage(format!(
            "{name} (map id {}, \"{}\") is a map of type {}, not a BPF_MAP_TYPE_PERF_EVENT_ARRAY (type 4) or a \
             BPF_MAP_TYPE_RINGBUF (type 27): dump reads these two kinds only",
            info.id, info.name, info.type_
        )));
    }
    Ok((fd, info))
}

/// The map named by `id:N` or a pinned path.
fn open_any_map(name: &str) -> Result<(OwnedFd, bpf::MapInfo)> {
    let fd = match name.strip_prefix("id:") {
        Some(id) => {
            let id: u32 =
                id.parse().map_err(|_| Failure::usage(format!("bad map id `{name}`: write id:N")))?;
            bpf::map_by_id(id).map_err(|e| match e.raw_os_error() {
                Some(libc::ENOENT) => {
                    Failure::usage(format!("no map with id {id} (bpftool map list shows ids)"))
                }
                _ => Failure::run(format!("cannot open map id {id}: {e}")),
            })?
        }
        None => bpf::map_by_path(name).map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => Failure::usage(format!(
                "nothing pinned at {name}: give a path in a mounted bpffs (e.g. /sys/fs/bpf/NAME) or id:N"
            )),
            Some(libc::EINVAL | libc::EPERM) if !std::path::Path::new(name).exists() => {
                Failure::usage(format!("nothing pinned at {name}: give a pinned map's path or id:N"))
            }
            Some(libc::EINVAL) => {
                Failure::usage(format!("{name} is not a pinned BPF object (is it in a bpffs?)"))
            }
            _ => Failure::run(format!("cannot open {name}: {e}")),
        })?,
    };
    let info = bpf::map_info(fd.as_raw_fd()).map_err(|e| match e.raw_os_error() {
        Some(libc::EINVAL) => {
            Failure::usage(format!("{name} is not a BPF map (a program or link?): give a map"))
        }
        _ => Failure::run(format!("cannot read {name}'s info: {e}")),
    })?;
    Ok((fd, info))
}

/// Who may hold the map's slots: the map's own answer when the kernel
/// gives one (a lookup of each slot: a taken slot is someone reading),
/// otherwise the processes holding the map and perf events open (kernels
/// answer ENOTSUPP for this map type), readers or not.
fn slot_holders(fd: std::os::fd::RawFd, info: &bpf::MapInfo) -> Result<Vec<bpf::Holder>> {
    let mut taken = false;
    for key in 0..info.max_entries {
        match bpf::slot_taken(fd, key) {
            Ok(Some(t)) => taken |= t,
            Ok(None) => return Ok(bpf::other_holders(info.id)),
            Err(e) => {
                return Err(Failure::run(format!("cannot look up slot {key} of map id {}: {e}", info.id)));
            }
        }
    }
    let reader = bpf::Holder { pid: 0, comm: "another reader".into(), reads: true };
    Ok(if taken { vec![reader] } else { Vec::new() })
}

/// `comm (pid N), ...` of the holders that read the map, or of the others.
fn named(holders: &[bpf::Holder], reads: bool) -> String {
    let names: Vec<String> =
        holders.iter().filter(|h| h.reads == reads).map(|h| format!("{} (pid {})", h.comm, h.pid)).collect();
    names.join(", ")
}

/// What taking the slots does to the others: a reader stops receiving; a
/// process that holds the map without mapping a ring (a loader that
/// attached its programs and waits) loses nothing.
fn taking_slots_note(info: &bpf::MapInfo, holders: &[bpf::Holder]) -> String {
    let mut note = format!(
        "perfbuf dump: taking the slots of map id {} (\"{}\", {} entries)",
        info.id, info.name, info.max_entries
    );
    let (readers, others) = (named(holders, true), named(holders, false));
    if !readers.is_empty() {
        note +=
            &format!(": {readers} stops receiving this map's records until it opens its perf buffer again");
    }
    if !others.is_empty() {
        note +=
            &format!("; {others} holds the map but maps no perf ring, so it reads nothing and loses nothing");
    }
    note
}

/// A perf event array: refuses to take the slots of another reader
/// without --force, and says what taking them does.
fn check_slot_holders(fd: std::os::fd::RawFd, info: &bpf::MapInfo, args: &DumpArgs) -> Result<()> {
    let holders = slot_holders(fd, info)?;
    let readers = named(&holders, true);
    if !readers.is_empty() && !args.force {
        return Err(Failure::run(format!(
            "map id {} (\"{}\") is read now by {readers} (it maps perf rings): dump would take its slots; pass \
             --force to take them anyway",
            info.id, info.name
        )));
    }
    eprintln!("{}", taking_slots_note(info, &holders));
    Ok(())
}

/// A ring buffer has one read position for all its readers: two readers
/// each get part of the records. Refuses beside a process that may be
/// reading it, without --force; refuses what cannot apply to it.
fn check_ring_buffer_readers(info: &bpf::MapInfo, args: &DumpArgs) -> Result<()> {
    if args.cpus.is_some() {
        return Err(Failure::usage(
            "--cpu: a BPF ring buffer is one ring for all CPUs; its records do not say which CPU wrote them",
        ));
    }
    let readers = named(&bpf::ring_buffer_readers(info.id), true);
    if readers.is_empty() {
        return Ok(());
    }
    let what = format!(
        "ring buffer map id {} (\"{}\") may be read now by {readers} (it holds the map and maps BPF map \
         memory): a ring buffer's readers share one read position, so each would get only part of the records",
        info.id, info.name
    );
    if !args.force {
        return Err(Failure::run(format!("{what}; pass --force to read it anyway")));
    }
    eprintln!("perfbuf dump: {what}");
    Ok(())
}

pub fn run(args: DumpArgs) -> Result<()> {
    check_pages(args.pages)?;
    if args.wakeup_records.is_some() && args.wakeup_bytes.is_some() {
        return Err(Failure::usage("give --wakeup-records or --wakeup-bytes, not both"));
    }
    if !args.map.starts_with("id:") && !std::path::Path::new(&args.map).exists() {
        return Err(Failure::usage(format!(
            "nothing pinned at {}: give a path in a mounted bpffs (e.g. /sys/fs/bpf/NAME) or id:N",
            args.map
        )));
    }
    need_root("dump")?;
    let (fd, info) = open_map(&args.map)?;
    let ring_buffer = info.type_ == bpf::MAP_TYPE_RINGBUF;
    if ring_buffer {
        check_ring_buffer_readers(&info, &args)?;
    } else {
        check_slot_holders(fd.as_raw_fd(), &info, &args)?;
    }
    let out: Box<dyn Write + Send> = match &args.raw {
        Some(path) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(path)
                .map_err(|e| Failure::run(format!("cannot create {}: {e}", path.display())))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout())),
    };
    let sink = Arc::new(Mutex::new(Sink {
        out,
        ring_buffer,
        format: args.format,
        raw: args.raw.is_some(),
        samples: 0,
        limit: args.count,
        failed: None,
        dropped: BTreeMap::new(),
    }));
    let counts = match &args.output_counts {
        Some(name) => Some(open_any_map(name)?.0),
        None => None,
    };
    let mut exporter = Exporter::start(&args.metrics, "dump")?;
    let (on_sample, on_lost) = (sink.clone(), sink.clone());
    let mut b = PerfBuffer::builder(fd)
        .pages(args.pages)
        .adaptive(args.fast)
        // Losses the kernel has not yet written as a LOST record show in
        // the status line and reach the output at the end (Linux 6.0+).
        .count_lost(true)
        .on_sample(move |cpu, data| on_sample.lock().expect("sink").sample(cpu, data))
        .on_lost(move |cpu, n| on_lost.lock().expect("sink").lost(cpu, n));
    if let Some(n) = args.wakeup_records {
        b = b.wakeup(Wakeup::Records(n));
    }
    if let Some(n) = args.wakeup_bytes {
        b = b.wakeup(Wakeup::Bytes(n));
    }
    if let Some(d) = args.max_delay {
        b = b.max_delay(d);
    }
    if let Some(cpus) = &args.cpus {
        b = b.cpus(cpus);
    }
    if let Some(counts) = &counts {
        b = b.output_counts(counts);
    }
    let mut pb = b.build().map_err(|e| Failure::lib("cannot open the perf buffer", &e))?;
    if args.order {
        pb.set_order(OrderKey::RawPrefix, Duration::from_millis(20))
            .map_err(|e| Failure::lib("cannot order the records", &e))?;
    }
    catch_stop_signals();
    if ring_buffer {
        eprintln!(
            "perfbuf dump: reading map id {} (ring buffer of {} bytes) (Ctrl-C to stop)",
            info.id, info.max_entries
        );
    } else {
        let cpus: Vec<String> =
            (0..pb.rings()).filter_map(|i| pb.ring_cpu(i).ok()).map(|c| c.to_string()).collect();
        eprintln!("perfbuf dump: reading map id {} on CPUs {} (Ctrl-C to stop)", info.id, cpus.join(","));
    }
    let started = Instant::now();
    let mut status = Status::new();
    let why = loop {
        poll_result(pb.poll(Some(Duration::from_millis(100))))?;
        let (samples, failed) = {
            let mut s = sink.lock().expect("sink");
            let _ = s.out.flush();
            count_dropped(&mut pb, &mut s.dropped);
            (s.samples, s.failed.take())
        };
        if let Some(x) = &mut exporter {
            x.update(&pb, false)?;
        }
        if let Some(e) = failed {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                break "output closed";
            }
            return Err(Failure::run(format!("cannot write the output: {e}")));
        }
        let lost: u64 = (0..pb.rings()).filter_map(|i| pb.stats(i).ok()).map(|s| s.lost).sum();
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
    };
    // Every record left, then what was lost with no record after it to
    // carry the kernel's LOST report (a burst that filled a ring at the end).
    pb.drain_final().map_err(|e| Failure::lib("draining the rings", &e))?;
    status.clear();
    let written = {
        let mut s = sink.lock().expect("sink");
        let _ = s.out.flush();
        count_dropped(&mut pb, &mut s.dropped);
        s.samples
    };
    if let Some(x) = &mut exporter {
        x.update(&pb, true)?;
    }
    let figures = report::Figures::of(&pb);
    eprintln!(
        "perfbuf dump: {why} after {:.1}s: {written} records written; {}",
        started.elapsed().as_secs_f64(),
        report::totals_text(&figures.totals())
    );
    for line in figures.lines(args.pages) {
        eprintln!("{line}");
    }
    if ring_buffer {
        // The kernel counts no losses of a ring buffer: a full ring fails
        // the program's output, which only perfbuf.bpf.h's counts see.
        eprintln!(
            "  the kernel counts no ring buffer losses: a full ring fails the program's output{}",
            if args.output_counts.is_some() { "" } else { " (give --output-counts to count it)" }
        );
    }
    Ok(())
}
