//! `--metrics` and `--metrics-file` with a real Prometheus (Debian's
//! `prometheus` package): `perfbuf dump` reads a BPF program's perf event
//! array (`c-tests/bpf/accounted.bpf.c`, counted by `include/perfbuf.bpf.h`)
//! while a Prometheus started here on localhost, with its own config and
//! data directory, scrapes it; its HTTP API then gives the delivered and
//! lost counts the command's own summary states, and the textfile
//! collector's file says the same (`promtool check metrics` finds nothing
//! to fix). Needs root, BPF and prometheus; skipped otherwise, a failure
//! under `CI=true`.

mod common;

#[path = "../../examples/support/accounted.rs"]
mod accounted;

use accounted::{Accounted, Prog};
use common::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A GET over HTTP/1.0: (status line, headers and body).
fn http_get(addr: SocketAddr, path: &str, accept: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept: {accept}\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    (head.to_string(), body.to_string())
}

/// `%`-escapes a PromQL query for a URL.
fn escape(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus on localhost scraping `target` every second, with a config
/// and data directory of its own; stopped and removed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    fn start(dir: &Path, target: SocketAddr) -> Prometheus {
        std::fs::create_dir_all(dir).unwrap();
        // A free port: bound, read, released (Prometheus binds it next).
        let addr = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: perfbuf\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("prometheus.log")).unwrap())
            .spawn()
            .expect("prometheus (apt-get install prometheus)");
        Prometheus { child, addr, dir: dir.to_path_buf() }
    }

    /// The value of an instant query that gives one sample, if it does.
    fn query(&self, q: &str) -> Option<f64> {
        let (head, body) = http_get(self.addr, &format!("/api/v1/query?query={}", escape(q)), "*/*");
        if !head.contains(" 200 ") {
            return None;
        }
        let v: Value = serde_json::from_str(&body).ok()?;
        let result = v["data"]["result"].as_array()?;
        result.first()?["value"][1].as_str()?.parse().ok()
    }

    /// Waits (up to 60 s) until `q` gives `want`.
    fn until(&self, q: &str, want: f64) {
        let start = Instant::now();
        loop {
            let got = self.query(q);
            if got == Some(want) {
                return;
            }
            let log = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "{q}: {got:?}, want {want}; prometheus says:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `D delivered, L lost` in the summary's first line.
fn summary_counts(summary: &str) -> (u64, u64) {
    let words: Vec<&str> = summary.split_whitespace().collect();
    let at = |w: &str| -> u64 {
        let i =
            words.iter().position(|x| x.trim_end_matches(',') == w).unwrap_or_else(|| panic!("{summary}"));
        words[i - 1].parse().unwrap()
    };
    (at("delivered"), at("lost"))
}

/// The sum over CPUs of `name{labels}` in a Prometheus text exposition.
fn sum_of(text: &str, name: &str, label: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[test]
fn prometheus_scrapes_what_the_summary_says() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("prometheus_scrapes_what_the_summary_says") {
        return;
    }
    if Command::new("prometheus").arg("--version").output().is_err() {
        skip::skip("prometheus is not installed: apt-get install prometheus");
        return;
    }
    let prog = Accounted::open(0).expect("the accounted program (make accounted-lib)");
    let fs = Bpffs::mount("metrics");
    let events = fs.pin(prog.events_fd(), "events");
    let counts = fs.pin(prog.events_counts_fd(), "events_counts");
    let dir = tempdir("metrics-files");
    let prom_file = dir.join("perfbuf.prom");
    let mut child = Command::new(BIN)
        .args(["dump", &events, "--cpu", "0", "--pages", "1", "--output-counts", &counts])
        .args(["--metrics", "127.0.0.1:0", "--metrics-file"])
        .arg(&prom_file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx = stderr_lines(&mut child);
    let mut seen = Vec::new();
    wait_for(&rx, "serving metrics at http://", &mut seen);
    let url = seen.last().unwrap().split("http://").nth(1).unwrap().trim_end_matches("/metrics").to_string();
    let target: SocketAddr = url.parse().unwrap();
    wait_for(&rx, "reading map id", &mut seen);

    let prom = Prometheus::start(&dir.join("prometheus"), target);
    // A burst one page cannot hold (the kernel's bucket), then outputs on
    // a CPU this dump does not read (refused: counted by the header only).
    prog.run(Prog::Perf, 0, 200, 400).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    prog.run(Prog::Perf, 0, 200, 1).unwrap();
    let on_cpu1 = if online_cpus().len() > 1 { 20 } else { 0 };
    if on_cpu1 > 0 {
        assert_eq!(prog.run(Prog::Perf, 1, 200, on_cpu1).unwrap(), -libc::ENOENT);
    }
    let produced_all = 401.0 + f64::from(on_cpu1);

    // The command's own endpoint, once it has read the burst: every
    // record delivered or lost.
    let start = Instant::now();
    let (head, text) = loop {
        let (head, text) = http_get(target, "/metrics", "text/plain");
        let accounted = sum_of(&text, "perfbuf_records_delivered_total", "")
            + sum_of(&text, "perfbuf_records_lost_total", "");
        if accounted == produced_all {
            break (head, text);
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{text}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(head.contains("200 OK") && head.contains("text/plain; version=0.0.4"), "{head}");
    let (head, om) = http_get(target, "/metrics", "application/openmetrics-text;version=1.0.0");
    assert!(head.contains("application/openmetrics-text; version=1.0.0"), "{head}");
    assert!(om.ends_with("# EOF\n") && om.contains("# TYPE perfbuf_records_delivered counter"), "{om}");
    let produced = sum_of(&text, "perfbuf_records_produced_total", "cpu=\"0\"");
    assert_eq!(produced, 401.0, "{text}");
    // Prometheus has scraped the figures once the burst is read: the
    // identity holds there too.
    prom.until("sum(perfbuf_records_produced_total)", produced_all);
    let delivered = sum_of(&text, "perfbuf_records_delivered_total", "");
    prom.until("sum(perfbuf_records_delivered_total)", delivered);
    let lost = prom.query("sum(perfbuf_records_lost_total)").unwrap();
    assert!(lost > 0.0, "one page lost part of the burst");
    assert_eq!(delivered + lost, produced_all);
    let refused = prom.query("sum(perfbuf_records_lost_total{reason=\"output_failed\"})").unwrap();
    assert_eq!(refused, f64::from(on_cpu1), "cpu 1's outputs: no slot, counted by perfbuf.bpf.h only");

    sigint(&child);
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    wait_for(&rx, "stopped by signal", &mut seen);
    let summary = seen.last().unwrap().clone();
    let (d, l) = summary_counts(&summary);
    eprintln!("summary: {summary}\nprometheus: delivered {delivered}, lost {lost}");
    assert_eq!((d as f64, l as f64), (delivered, lost), "{summary}");
    assert!(summary.contains(&format!("of {produced_all} produced")), "{summary}");
    assert!(summary.contains(&format!("refused at the BPF side {on_cpu1}")), "{summary}");
    // Per reason, as Prometheus has them.
    let kernel = prom.query("sum(perfbuf_records_lost_total{reason=\"kernel\"})").unwrap();
    assert_eq!(kernel + refused, lost, "a full ring's losses are the kernel's");

    // The textfile collector's file, written at exit: the same figures,
    // and nothing promtool would have fixed.
    let file = std::fs::read_to_string(&prom_file).unwrap();
    assert_eq!(sum_of(&file, "perfbuf_records_delivered_total", ""), delivered);
    assert_eq!(sum_of(&file, "perfbuf_records_lost_total", ""), lost);
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check.stdin.take().unwrap().write_all(file.as_bytes()).unwrap();
    let checked = check.wait_with_output().unwrap();
    assert!(
        checked.status.success(),
        "promtool check metrics: {}{}",
        text_of(&checked.stdout),
        text_of(&checked.stderr)
    );
    drop(prom);
    let _ = std::fs::remove_dir_all(&dir);
}

fn text_of(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn trace_and_record_write_their_figures_for_the_textfile_collector() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !root_or_skip("trace_and_record_write_their_figures_for_the_textfile_collector") {
        return;
    }
    let dir = tempdir("metrics-trace");
    let mark = marked_binary(&dir);
    let file = dir.join("trace.prom");
    let out = run(&[
        "trace",
        "--json",
        "--metrics-file",
        file.to_str().unwrap(),
        "sched:sched_process_exec",
        "--",
        "sh",
        "-c",
        &exec_script(&mark, &dir.join("pids"), 8),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let samples = text(&out.stdout).lines().filter(|l| l.contains("\"type\":\"sample\"")).count();
    assert!(samples >= 8, "{}", text(&out.stdout));
    let prom = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        sum_of(&prom, "perfbuf_records_delivered_total", "command=\"trace\""),
        samples as f64,
        "{prom}"
    );
    assert_eq!(sum_of(&prom, "perfbuf_records_lost_total", ""), 0.0);
    assert!(
        text(&out.stderr).contains(&format!("samples: {samples} delivered, 0 lost")),
        "{}",
        text(&out.stderr)
    );

    let data = dir.join("perf.data");
    let file = dir.join("record.prom");
    let out = run(&[
        "record",
        "-o",
        data.to_str().unwrap(),
        "--metrics-file",
        file.to_str().unwrap(),
        "-e",
        "sched:sched_process_exec",
        "--",
        "sh",
        "-c",
        &exec_script(&mark, &dir.join("pids2"), 8),
    ]);
    let summary = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{summary}");
    let words: Vec<&str> = summary.split_whitespace().collect();
    let at = words.iter().position(|w| w.starts_with("samples")).unwrap();
    let written: f64 = words[at - 1].parse().unwrap();
    let prom = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        sum_of(&prom, "perfbuf_records_delivered_total", "command=\"record\""),
        written,
        "{prom}\n{summary}"
    );
    assert!(summary.contains("peak backlog"), "{summary}");
    let _ = std::fs::remove_dir_all(&dir);
}
