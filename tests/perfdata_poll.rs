//! The perf.data writer's poll sleeps while nothing comes: after a
//! wake-up of its reader, and with a delay bound (the reader's timerfd),
//! a poll of N ms takes N ms and little CPU, and records still arrive.
//! (A poll that only watched the epoll fd saw the wake-up eventfd and the
//! timerfd readable until something read them, and spun.) Needs root and
//! tracefs; skipped otherwise, a failure under `CI=true`.

mod skip;
use perfbuf::events::{Event, EventSet};
use perfbuf::perfdata::PerfDataWriter;
use perfbuf::{ErrorKind, PerfBuffer, Wakeup};
use skip::skip;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod thread_cpu;
use thread_cpu::thread_cpu;

const QUIET_POLL: Duration = Duration::from_millis(300);

fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tracefs = Path::new("/sys/kernel/tracing/events/sched/sched_process_exec").exists();
    if root && tracefs {
        return true;
    }
    let why = format!("the writer's poll tests need root ({root}) and tracefs ({tracefs}: make tracefs)");
    skip(why);
    false
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("perfbuf-perfdata-poll-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A shell that execs /bin/true once a line comes on its stdin: the one
/// task the set watches, quiet until then. Returned once it says it
/// waits (its own exec and loading are over: not recorded).
fn quiet_child() -> Child {
    let mut child = Command::new("/bin/sh")
        .args(["-c", "echo ready; read line; exec /bin/true"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    child
}

/// A set watching `child`'s exec, the writer, the reader.
fn recording(child: &Child, name: &str, batched: bool) -> (EventSet, PerfDataWriter, PerfBuffer<'static>) {
    let mut builder = EventSet::builder().pid(child.id() as i32);
    if batched {
        // One exec never reaches 64 records: only the delay timer reads it.
        builder = builder.wakeup(Wakeup::Records(64)).max_delay(Duration::from_millis(20));
    }
    let mut set = builder.build().unwrap();
    set.add(&Event::tracepoint("sched:sched_process_exec")).unwrap();
    let out = PerfDataWriter::for_set(scratch(name), &mut set).unwrap();
    let reader = set.reader(|_| {}).unwrap();
    set.enable_all().unwrap();
    (set, out, reader)
}

/// One poll of [`QUIET_POLL`] with nothing to read: it waits the whole
/// timeout, asleep (a busy loop would burn about all of it).
fn assert_sleeps(out: &mut PerfDataWriter, reader: &mut PerfBuffer<'_>) {
    let (start, cpu) = (Instant::now(), thread_cpu());
    let n = out.poll(reader, QUIET_POLL).unwrap();
    let (wall, cpu) = (start.elapsed(), thread_cpu() - cpu);
    assert_eq!(n, 0, "nothing to write");
    assert!(wall >= QUIET_POLL * 3 / 4, "the poll returned after {wall:?}, before its timeout");
    assert!(cpu < wall / 2, "the poll used {cpu:?} of CPU in {wall:?}: a busy loop");
}

/// The child execs; polls write its sample (within a deadline that only
/// catches a hang).
fn assert_records_arrive(out: &mut PerfDataWriter, reader: &mut PerfBuffer<'_>, mut child: Child) {
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.stats().samples == 0 && Instant::now() < deadline {
        out.poll(reader, Duration::from_secs(1)).unwrap();
    }
    assert_eq!(out.stats().samples, 1, "the child's exec, written");
}

#[test]
fn a_poll_after_a_wake_up_is_cancelled_once_then_sleeps() {
    if !ready() {
        return;
    }
    let child = quiet_child();
    let (_set, mut out, mut reader) = recording(&child, "woken.data", false);
    reader.waker().unwrap().wake().unwrap();
    let err = out.poll(&mut reader, QUIET_POLL).unwrap_err();
    assert_eq!(err.errno(), libc::ECANCELED, "{err}");
    assert!(matches!(err, perfbuf::perfdata::Error::Read(ref e) if e.kind() == ErrorKind::Cancelled));
    assert_sleeps(&mut out, &mut reader);
    assert_sleeps(&mut out, &mut reader);
    assert_records_arrive(&mut out, &mut reader, child);
    out.finish().unwrap();
}

#[test]
fn a_poll_with_a_delay_bound_sleeps_through_the_ticks_and_the_timer_delivers() {
    if !ready() {
        return;
    }
    let child = quiet_child();
    let (_set, mut out, mut reader) = recording(&child, "batched.data", true);
    assert_sleeps(&mut out, &mut reader);
    assert_records_arrive(&mut out, &mut reader, child);
    out.finish().unwrap();
}
