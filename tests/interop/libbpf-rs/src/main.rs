//! perfbuf beside libbpf-rs 0.27 at its default features, whose static
//! libbpf defines the `perf_buffer__*` functions: the program links (perfbuf
//! defines no C symbol), libbpf-rs loads and attaches
//! examples/bpf/exec_events.bpf.c, and the same exec scenario is read first
//! by libbpf-rs's own perf buffer (libbpf's code), then by perfbuf over
//! libbpf-rs's `Map`, each getting exactly the children's records.
//!
//! usage: perfbuf-interop-libbpf-rs EXEC_EVENTS_BPF_O

#[path = "../../common/exec_check.rs"]
mod exec_check;

use exec_check::Records;
use libbpf_rs::{MapCore, ObjectBuilder, PerfBufferBuilder};
use std::sync::Mutex;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(100);

fn main() {
    if let Err(e) = run() {
        eprintln!("perfbuf-interop-libbpf-rs: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let path = std::env::args().nth(1).ok_or("usage: perfbuf-interop-libbpf-rs EXEC_EVENTS_BPF_O")?;
    let object = ObjectBuilder::default()
        .open_file(&path)
        .and_then(|open| open.load())
        .map_err(|e| format!("load {path}: {e}"))?;
    let program = object.progs_mut().find(|p| p.name() == "on_exec").ok_or("no program on_exec")?;
    let _link = program.attach().map_err(|e| format!("attach on_exec: {e}"))?;
    let events = object.maps().find(|m| m.name() == "events").ok_or("no map events")?;

    // libbpf's own reader, through libbpf-rs: the reference.
    let records = Mutex::new(Records::default());
    {
        let libbpf_pb = PerfBufferBuilder::new(&events)
            .sample_cb(|_cpu, data: &[u8]| exec_check::lock(&records).sample(data))
            .lost_cb(|_cpu, n| exec_check::lock(&records).lost(n))
            .build()
            .map_err(|e| format!("libbpf-rs PerfBuffer: {e}"))?;
        exec_check::run("libbpf-rs PerfBuffer", &records, || {
            libbpf_pb.poll(POLL).map_err(|e| format!("libbpf-rs poll: {e}"))
        })?;
    }

    // perfbuf over the same map: libbpf-rs's Map is AsFd.
    let records = Mutex::new(Records::default());
    let mut pb = perfbuf::PerfBuffer::builder(&events)
        .on_sample(|_cpu, data: &[u8]| exec_check::lock(&records).sample(data))
        .on_lost(|_cpu, n| exec_check::lock(&records).lost(n))
        .build()
        .map_err(|e| format!("perfbuf: {e}"))?;
    exec_check::run("perfbuf beside libbpf-rs", &records, || {
        pb.poll(Some(POLL)).map(drop).map_err(|e| format!("perfbuf poll: {e}"))
    })
}
