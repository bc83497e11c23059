//! perfbuf beside aya (built twice: aya 0.13 by 0.13/Cargo.toml, aya 0.14
//! by 0.14/Cargo.toml; the same code compiles on both). aya loads and
//! attaches examples/bpf/exec_events.bpf.c; perfbuf reads the `events`
//! map, first borrowing aya's fd (`MapData::fd()`, an `AsFd`; `MapData`
//! itself is not), then owning a duplicate of it
//! (`fd().as_fd().try_clone_to_owned()`), with aya's map dropped before
//! the records are read. Each read gets exactly the children's records.
//!
//! usage: perfbuf-interop-aya-0-1X EXEC_EVENTS_BPF_O

#[path = "../common/exec_check.rs"]
mod exec_check;

use aya::Ebpf;
use aya::maps::Map;
use aya::programs::RawTracePoint;
use exec_check::Records;
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(100);

fn main() {
    if let Err(e) = run() {
        eprintln!("perfbuf-interop-aya: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let path = std::env::args().nth(1).ok_or("usage: perfbuf-interop-aya-0-1X EXEC_EVENTS_BPF_O")?;
    let mut ebpf = Ebpf::load_file(&path).map_err(|e| format!("load {path}: {e}"))?;
    let program: &mut RawTracePoint = ebpf
        .program_mut("on_exec")
        .ok_or("no program on_exec")?
        .try_into()
        .map_err(|e| format!("on_exec: {e}"))?;
    program.load().map_err(|e| format!("load on_exec: {e}"))?;
    program.attach("sched_process_exec").map_err(|e| format!("attach on_exec: {e}"))?;

    // Borrowed: the reader lives within aya's map.
    let Some(Map::PerfEventArray(events)) = ebpf.map("events") else {
        return Err("no PERF_EVENT_ARRAY named events".into());
    };
    let records = Mutex::new(Records::default());
    let mut pb = perfbuf::PerfBuffer::builder(events.fd())
        .on_sample(|_cpu, data: &[u8]| exec_check::lock(&records).sample(data))
        .on_lost(|_cpu, n| exec_check::lock(&records).lost(n))
        .build()
        .map_err(|e| format!("perfbuf over events.fd(): {e}"))?;
    exec_check::run(concat!(env!("CARGO_PKG_NAME"), ": perfbuf over map.fd()"), &records, || {
        pb.poll(Some(POLL)).map(drop).map_err(|e| format!("perfbuf poll: {e}"))
    })?;
    drop(pb);

    // Owned: the reader keeps its own fd of the map, which outlives aya's.
    let Some(Map::PerfEventArray(events)) = ebpf.take_map("events") else {
        return Err("no PERF_EVENT_ARRAY named events".into());
    };
    let owned = events.fd().as_fd().try_clone_to_owned().map_err(|e| format!("dup the map fd: {e}"))?;
    drop(events);
    let records = Mutex::new(Records::default());
    let mut pb = perfbuf::PerfBuffer::builder(owned)
        .on_sample(|_cpu, data: &[u8]| exec_check::lock(&records).sample(data))
        .on_lost(|_cpu, n| exec_check::lock(&records).lost(n))
        .build()
        .map_err(|e| format!("perfbuf over an owned fd: {e}"))?;
    exec_check::run(concat!(env!("CARGO_PKG_NAME"), ": perfbuf over an owned fd"), &records, || {
        pb.poll(Some(POLL)).map(drop).map_err(|e| format!("perfbuf poll: {e}"))
    })
}
