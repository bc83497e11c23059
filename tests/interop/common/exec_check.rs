//! The scenario every interop program runs once its BPF library has loaded
//! and attached `examples/bpf/exec_events.bpf.c`: spawn some `/bin/true`
//! children, then read the `events` map until each child's exec record
//! has arrived. Other processes on the machine exec too; their records are
//! counted and otherwise ignored. Shared by the programs with `#[path]`.

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many children each run spawns.
pub const CHILDREN: usize = 20;

/// Only to catch a hang: the records of a few execs arrive in milliseconds.
const DEADLINE: Duration = Duration::from_secs(10);

/// The program's record: `struct exec_event` of exec_events.bpf.c.
pub const RECORD_SIZE: usize = 24;

/// The records a reader's callbacks collect, shared in a `Mutex` so that
/// the callbacks are `Send` (perfbuf's builder asks for that by default).
#[derive(Debug, Default)]
pub struct Records {
    samples: Vec<(u32, String)>,
    lost: u64,
    malformed: u64,
}

impl Records {
    /// A sample as the BPF program sent it: pid, a pad, a NUL-padded comm.
    pub fn sample(&mut self, data: &[u8]) {
        // The kernel pads a sample to 8 bytes: the record may be longer.
        if data.len() < RECORD_SIZE {
            self.malformed += 1;
            return;
        }
        let pid = u32::from_ne_bytes(data[0..4].try_into().expect("4 bytes"));
        let comm = &data[8..24];
        let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
        self.samples.push((pid, String::from_utf8_lossy(&comm[..end]).into_owned()));
    }

    pub fn lost(&mut self, n: u64) {
        self.lost += n;
    }
}

/// Spawns the children, calls `poll` (a bounded wait and read filling
/// `records`) until every child has a record or the deadline passes, then
/// once more (a duplicate would show), and checks: exactly one record per
/// child, named "true", none lost. The reader must exist before this runs
/// (without one the kernel drops the records).
pub fn run(
    label: &str,
    records: &Mutex<Records>,
    mut poll: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let pids = spawn_children()?;
    let started = Instant::now();
    let has_all = |r: &Records| pids.iter().all(|p| r.samples.iter().any(|(q, _)| q == p));
    while !has_all(&lock(records)) && started.elapsed() < DEADLINE {
        poll()?;
    }
    poll()?;
    check(label, &pids, &lock(records))
}

fn spawn_children() -> Result<Vec<u32>, String> {
    let mut pids = Vec::with_capacity(CHILDREN);
    for _ in 0..CHILDREN {
        let mut child = Command::new("/bin/true").spawn().map_err(|e| format!("spawn /bin/true: {e}"))?;
        pids.push(child.id());
        let status = child.wait().map_err(|e| format!("wait: {e}"))?;
        if !status.success() {
            return Err(format!("/bin/true exited with {status}"));
        }
    }
    Ok(pids)
}

fn check(label: &str, pids: &[u32], records: &Records) -> Result<(), String> {
    let mut by_pid: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    let mut foreign = 0;
    for (pid, comm) in &records.samples {
        if pids.contains(pid) {
            by_pid.entry(*pid).or_default().push(comm);
        } else {
            foreign += 1;
        }
    }
    let mut errors = Vec::new();
    for pid in pids {
        match by_pid.get(pid).map(Vec::as_slice) {
            Some(["true"]) => {}
            Some(comms) => errors.push(format!("child {pid}: records {comms:?}, want [\"true\"]")),
            None => errors.push(format!("child {pid}: no record")),
        }
    }
    if records.lost != 0 {
        errors.push(format!("{} records lost", records.lost));
    }
    if records.malformed != 0 {
        errors.push(format!("{} records shorter than {RECORD_SIZE} bytes", records.malformed));
    }
    if !errors.is_empty() {
        return Err(format!("{label}: {}", errors.join("; ")));
    }
    println!(
        "{label}: {} children, one record named \"true\" from each, 0 lost ({foreign} records of other processes ignored)",
        pids.len()
    );
    Ok(())
}

/// The records, whether or not a callback panicked while holding them.
pub fn lock(records: &Mutex<Records>) -> std::sync::MutexGuard<'_, Records> {
    records.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}
