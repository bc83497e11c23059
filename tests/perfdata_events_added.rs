//! Events added to an event set after its perf.data writer was made are
//! in the file the writer finishes: `perf evlist` lists them and `perf
//! script` decodes their samples (without them perf would skip those
//! samples as of an unknown id). Needs root, tracefs and perf; skipped
//! otherwise, a failure under `CI=true`.

use perfbuf::events::{Event, EventSet};
use perfbuf::perfdata::PerfDataWriter;
use std::path::Path;
use std::process::Command;

fn ready() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let tracefs = Path::new("/sys/kernel/tracing/events/sched/sched_process_exec").exists();
    let perf = Command::new("perf").arg("--version").output().is_ok_and(|o| o.status.success());
    if root && tracefs && perf {
        return true;
    }
    let why = format!("needs root ({root}), tracefs ({tracefs}) and perf ({perf})");
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
    eprintln!("skipped: {why}");
    false
}

fn perf(args: &[&str], file: &Path) -> String {
    let out = Command::new("perf").args(args).arg("-i").arg(file).output().unwrap();
    assert!(out.status.success(), "perf {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_event_added_after_the_writer_is_in_the_finished_file() {
    if !ready() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("perfbuf-perfdata-added-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("added.data");
    let mut set = EventSet::builder().pages(64).build().unwrap();
    set.add(&Event::tracepoint("sched:sched_process_exec")).unwrap();
    let mut out = PerfDataWriter::for_set(&path, &mut set).unwrap();
    let mut reader = set.reader(|_| {}).unwrap();
    // Added after the writer, between two drains.
    let exit = set.add(&Event::tracepoint("sched:sched_process_exit")).unwrap();
    set.enable_all().unwrap();
    let mut pids = Vec::new();
    for _ in 0..3 {
        let mut child = Command::new("/bin/true").spawn().unwrap();
        pids.push(child.id());
        child.wait().unwrap();
    }
    set.disable_all().unwrap();
    out.drain(&mut reader).unwrap();
    assert_eq!(out.events().last().map(|e| e.name.as_str()), Some("sched:sched_process_exit"));
    assert_eq!(out.events().last().unwrap().ids, set.instance_ids(exit).unwrap());
    out.finish().unwrap();

    let evlist = perf(&["evlist"], &path);
    let names: Vec<&str> = evlist.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(names, ["sched:sched_process_exec", "dummy", "sched:sched_process_exit"], "{evlist}");
    let script = perf(&["script", "-F", "pid,event,trace"], &path);
    for pid in pids {
        let ours = |event: &str| {
            script.lines().any(|l| {
                l.split_whitespace().next() == Some(&pid.to_string()) && l.contains(&format!("{event}:"))
            })
        };
        assert!(ours("sched:sched_process_exec"), "{pid}'s exec: {script}");
        // Decoded with the format the file carries: the exiting task's fields.
        assert!(ours("sched:sched_process_exit"), "{pid}'s exit: {script}");
        assert!(
            script
                .lines()
                .any(|l| l.contains("sched:sched_process_exit:") && l.contains(&format!("pid={pid} ")))
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
