//! Where operators look: the rings' figures as Prometheus metrics, served
//! over HTTP (`--metrics 127.0.0.1:PORT`, `/metrics`, in the OpenMetrics
//! text format when the scraper asks for it, Prometheus's text format
//! 0.0.4 otherwise) and written to a file in node_exporter's
//! textfile-collector format (`--metrics-file PATH`, replaced atomically).
//!
//! The command's loop refreshes a snapshot of every ring's figures a few
//! times a second; the server thread renders whatever snapshot is current,
//! so a scrape never waits on the reader.

use crate::fail::{Failure, Result};
use crate::report::Figures;
use perfbuf::{OutputCounts, PerfBuffer, RingHealth, RingStats, Threading};
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The options every command takes.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct MetricsOpts {
    /// Serve Prometheus/OpenMetrics metrics at http://ADDR/metrics (e.g. 127.0.0.1:9464; port 0 picks one)
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Write the metrics to PATH (node_exporter's textfile collector: a .prom file), every second and at exit
    #[arg(long, value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
}

/// One ring's figures at a moment.
#[derive(Clone, Copy, Debug)]
pub struct Ring {
    pub stats: RingStats,
    pub health: RingHealth,
}

/// Every ring's figures at a moment, and which command made them.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub command: &'static str,
    pub rings: Vec<Ring>,
    /// perfbuf.bpf.h's counts on CPUs no ring reads.
    pub unread: Vec<(usize, OutputCounts)>,
}

impl Snapshot {
    /// The figures of every ring of `pb` now.
    pub fn of<T: Threading>(command: &'static str, pb: &PerfBuffer<'_, T>) -> Snapshot {
        let f = Figures::of(pb);
        let rings = f.rings.into_iter().map(|(stats, health)| Ring { stats, health }).collect();
        Snapshot { command, rings, unread: f.unread }
    }
}

/// How a metric is exposed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
}

/// One metric: its name (a counter's without `_total`), kind, help, and
/// one value per ring (`None`: not known for that ring).
struct Metric {
    name: &'static str,
    kind: Kind,
    help: &'static str,
    /// A label that splits the metric, and its value for this series.
    label: Option<(&'static str, &'static str)>,
    value: fn(&Ring) -> Option<f64>,
}

const METRICS: &[Metric] = &[
    Metric {
        name: "perfbuf_records_produced",
        kind: Kind::Counter,
        help: "Records the BPF program sent on this CPU, refused ones included (perfbuf.bpf.h's counts).",
        label: None,
        value: |r| r.stats.produced.map(|n| n as f64),
    },
    Metric {
        name: "perfbuf_records_delivered",
        kind: Kind::Counter,
        help: "Records read from this CPU's ring and kept.",
        label: None,
        value: |r| Some(r.stats.delivered() as f64),
    },
    Metric {
        name: "perfbuf_records_lost",
        kind: Kind::Counter,
        help: "Records lost, by where: the kernel (ring full), refused at the BPF side (perfbuf.bpf.h), \
               dropped by the reader's own policy.",
        label: Some(("reason", "kernel")),
        value: |r| Some(r.stats.lost as f64),
    },
    Metric {
        name: "perfbuf_records_lost",
        kind: Kind::Counter,
        help: "",
        label: Some(("reason", "output_failed")),
        value: |r| Some(r.stats.output_failed as f64),
    },
    Metric {
        name: "perfbuf_records_lost",
        kind: Kind::Counter,
        help: "",
        label: Some(("reason", "dropped")),
        value: |r| Some(r.stats.dropped as f64),
    },
    Metric {
        name: "perfbuf_records_lost_unreported",
        kind: Kind::Gauge,
        help: "Of the kernel's lost records, those it counted and has not reported in a LOST record yet.",
        label: None,
        value: |r| Some(r.stats.lost_unreported as f64),
    },
    Metric {
        name: "perfbuf_read_bytes",
        kind: Kind::Counter,
        help: "Bytes of the records read, headers included.",
        label: None,
        value: |r| Some(r.stats.bytes as f64),
    },
    Metric {
        name: "perfbuf_wakeups",
        kind: Kind::Counter,
        help: "Times the kernel woke the reader for this ring.",
        label: None,
        value: |r| Some(r.stats.wakeups as f64),
    },
    Metric {
        name: "perfbuf_ring_size_bytes",
        kind: Kind::Gauge,
        help: "Size of the ring's data area.",
        label: None,
        value: |r| Some(r.health.data_size as f64),
    },
    Metric {
        name: "perfbuf_ring_backlog_bytes",
        kind: Kind::Gauge,
        help: "Bytes waiting in the ring now.",
        label: None,
        value: |r| Some(r.health.pending_bytes as f64),
    },
    Metric {
        name: "perfbuf_ring_backlog_peak_bytes",
        kind: Kind::Gauge,
        help: "The most bytes the reader found waiting in the ring (its fill high-water mark).",
        label: None,
        value: |r| Some(r.health.peak_pending_bytes as f64),
    },
    Metric {
        name: "perfbuf_ring_needed_bytes",
        kind: Kind::Gauge,
        help: "The backlog a ring losing nothing would have held: the peak, plus the bytes of records lost meanwhile.",
        label: None,
        value: |r| Some(r.health.needed_bytes as f64),
    },
    Metric {
        name: "perfbuf_ring_suggested_pages",
        kind: Kind::Gauge,
        help: "The smallest ring (data pages, a power of two) holding the needed backlog.",
        label: None,
        value: |r| Some(r.health.suggested_pages as f64),
    },
    Metric {
        name: "perfbuf_records_per_second",
        kind: Kind::Gauge,
        help: "Records read per second, over the last second.",
        label: None,
        value: |r| Some(r.health.records_per_sec),
    },
    Metric {
        name: "perfbuf_bytes_per_second",
        kind: Kind::Gauge,
        help: "Bytes read per second, over the last second.",
        label: None,
        value: |r| Some(r.health.bytes_per_sec),
    },
    Metric {
        name: "perfbuf_wakeups_per_second",
        kind: Kind::Gauge,
        help: "Wake-ups per second, over the last second.",
        label: None,
        value: |r| Some(r.health.wakeups_per_sec),
    },
    Metric {
        name: "perfbuf_seconds_since_last_record",
        kind: Kind::Gauge,
        help: "Seconds since the reader last found records in the ring.",
        label: None,
        value: |r| r.health.since_last_record.map(|d| d.as_secs_f64()),
    },
    Metric {
        name: "perfbuf_cpu_online",
        kind: Kind::Gauge,
        help: "1 while the ring's CPU is online (a ring whose CPU went offline is kept until it comes back).",
        label: None,
        value: |r| Some(f64::from(u8::from(r.health.online))),
    },
    Metric {
        name: "perfbuf_ring_replaced",
        kind: Kind::Counter,
        help: "Times the CPU came back online and its ring got a fresh event.",
        label: None,
        value: |r| Some(r.health.replaced as f64),
    },
];

/// The snapshot in the Prometheus text format (0.0.4), or OpenMetrics
/// 1.0.0 (counters' families named without `_total`, `# EOF` at the end).
pub fn render(snap: &Snapshot, openmetrics: bool) -> String {
    let mut out = String::new();
    let mut described = Vec::new();
    for m in METRICS {
        let series = if m.kind == Kind::Counter { format!("{}_total", m.name) } else { m.name.to_string() };
        if !described.contains(&m.name) {
            described.push(m.name);
            let family = if openmetrics { m.name } else { series.as_str() };
            let kind = if m.kind == Kind::Counter { "counter" } else { "gauge" };
            let _ = writeln!(out, "# HELP {family} {}", m.help);
            let _ = writeln!(out, "# TYPE {family} {kind}");
        }
        let extra = m.label.map(|(k, v)| format!(",{k}=\"{v}\"")).unwrap_or_default();
        let mut line = |cpu: i64, v: f64| {
            let _ =
                writeln!(out, "{series}{{command=\"{}\",cpu=\"{cpu}\"{extra}}} {}", snap.command, number(v));
        };
        for ring in &snap.rings {
            if let Some(v) = (m.value)(ring) {
                line(i64::from(ring.stats.cpu), v);
            }
        }
        // A CPU no ring reads: what it sent, all refused.
        for (cpu, c) in &snap.unread {
            let v = match (m.name, m.label) {
                ("perfbuf_records_produced", _) => c.calls,
                ("perfbuf_records_lost", Some((_, "output_failed"))) => c.failed,
                _ => continue,
            };
            line(*cpu as i64, v as f64);
        }
    }
    if openmetrics {
        out.push_str("# EOF\n");
    }
    out
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 { format!("{}", v as i64) } else { format!("{v}") }
}

/// Serves and writes the metrics of a running command.
pub struct Exporter {
    command: &'static str,
    shared: Arc<Mutex<Snapshot>>,
    file: Option<PathBuf>,
    refreshed: Option<Instant>,
    written: Option<Instant>,
}

/// The snapshot is refreshed at most this often.
const REFRESH: Duration = Duration::from_millis(250);
/// The file is rewritten at most this often.
const REWRITE: Duration = Duration::from_secs(1);

impl Exporter {
    /// Binds `--metrics`' address (printing where it serves) and starts
    /// serving; `None` when neither option was given.
    pub fn start(opts: &MetricsOpts, command: &'static str) -> Result<Option<Exporter>> {
        if opts.metrics.is_none() && opts.metrics_file.is_none() {
            return Ok(None);
        }
        let shared = Arc::new(Mutex::new(Snapshot { command, ..Snapshot::default() }));
        if let Some(addr) = opts.metrics {
            let listener = TcpListener::bind(addr)
                .map_err(|e| Failure::run(format!("--metrics {addr}: cannot listen there: {e}")))?;
            let bound = listener.local_addr().map_err(|e| Failure::run(format!("--metrics {addr}: {e}")))?;
            eprintln!("perfbuf {command}: serving metrics at http://{bound}/metrics");
            let snap = shared.clone();
            std::thread::Builder::new()
                .name("perfbuf-metrics".into())
                .spawn(move || serve(&listener, &snap))
                .map_err(|e| Failure::run(format!("cannot start the metrics server: {e}")))?;
        }
        Ok(Some(Exporter {
            command,
            shared,
            file: opts.metrics_file.clone(),
            refreshed: None,
            written: None,
        }))
    }

    /// Refreshes the figures from `pb` (a few times a second at most,
    /// always when `now` is set) and rewrites the file when due.
    pub fn update<T: Threading>(&mut self, pb: &PerfBuffer<'_, T>, now: bool) -> Result<()> {
        if !now && self.refreshed.is_some_and(|t| t.elapsed() < REFRESH) {
            return Ok(());
        }
        self.refreshed = Some(Instant::now());
        let snap = Snapshot::of(self.command, pb);
        if let Some(path) = &self.file
            && (now || self.written.is_none_or(|t| t.elapsed() >= REWRITE))
        {
            self.written = Some(Instant::now());
            write_file(path, &render(&snap, false))?;
        }
        *self.shared.lock().unwrap_or_else(|e| e.into_inner()) = snap;
        Ok(())
    }
}

/// Writes `text` to `path` through a temporary file in the same
/// directory, renamed over it: a collector never reads half a file.
fn write_file(path: &std::path::Path, text: &str) -> Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Failure::run(format!("--metrics-file {}: cannot write it: {e}", path.display()))
    })
}

/// Answers each connection in turn: `GET /metrics` with the current
/// snapshot, anything else with 404 (or 405 for other methods).
fn serve(listener: &TcpListener, snap: &Mutex<Snapshot>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let _ = answer(stream, snap);
    }
}

fn answer(mut stream: TcpStream, snap: &Mutex<Snapshot>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request = String::new();
    reader.read_line(&mut request)?;
    let mut openmetrics = false;
    // Headers, up to the blank line (bounded, against a client that never ends).
    for _ in 0..100 {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("accept")
        {
            openmetrics = value.contains("application/openmetrics-text");
        }
    }
    let mut parts = request.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let (status, kind, body) = match (method, path.split('?').next().unwrap_or("")) {
        ("GET" | "HEAD", "/metrics") => {
            let snap = snap.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let kind = if openmetrics {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            } else {
                "text/plain; version=0.0.4; charset=utf-8"
            };
            ("200 OK", kind, render(&snap, openmetrics))
        }
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain; charset=utf-8", "try /metrics\n".to_string()),
        _ => ("405 Method Not Allowed", "text/plain; charset=utf-8", "GET /metrics\n".to_string()),
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    if method != "HEAD" {
        stream.write_all(body.as_bytes())?;
    }
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> Snapshot {
        let mut stats = RingStats::default();
        stats.cpu = 1;
        stats.samples = 10;
        stats.dropped = 2;
        stats.lost = 5;
        stats.produced = Some(20);
        stats.output_failed = 3;
        let health = RingHealth::default();
        let mut unread = OutputCounts::default();
        unread.calls = 4;
        unread.failed = 4;
        Snapshot { command: "dump", rings: vec![Ring { stats, health }], unread: vec![(3, unread)] }
    }

    #[test]
    fn both_formats_carry_the_identity() {
        let text = render(&snapshot(), false);
        assert!(text.contains("# TYPE perfbuf_records_delivered_total counter\n"), "{text}");
        assert!(text.contains("perfbuf_records_delivered_total{command=\"dump\",cpu=\"1\"} 8\n"));
        assert!(text.contains("perfbuf_records_produced_total{command=\"dump\",cpu=\"1\"} 20\n"));
        assert!(
            text.contains("perfbuf_records_lost_total{command=\"dump\",cpu=\"1\",reason=\"kernel\"} 5\n")
        );
        assert!(
            text.contains(
                "perfbuf_records_lost_total{command=\"dump\",cpu=\"1\",reason=\"output_failed\"} 3\n"
            )
        );
        assert!(
            text.contains("perfbuf_records_lost_total{command=\"dump\",cpu=\"1\",reason=\"dropped\"} 2\n")
        );
        assert_eq!(text.matches("# TYPE perfbuf_records_lost_total").count(), 1, "one family");
        assert!(
            text.contains(
                "perfbuf_records_lost_total{command=\"dump\",cpu=\"3\",reason=\"output_failed\"} 4\n"
            )
        );
        assert!(text.contains("perfbuf_records_produced_total{command=\"dump\",cpu=\"3\"} 4\n"));
        assert!(!text.contains("perfbuf_records_delivered_total{command=\"dump\",cpu=\"3\""));
        assert!(!text.contains("seconds_since_last_record{"), "never read: no value");
        let om = render(&snapshot(), true);
        assert!(om.contains("# TYPE perfbuf_records_delivered counter\n"), "{om}");
        assert!(om.contains("perfbuf_records_delivered_total{command=\"dump\",cpu=\"1\"} 8\n"));
        assert!(om.ends_with("# EOF\n"));
    }
}
