//! Events added to an event set after its perf.data writer was made are
//! in the file the writer finishes: `perf evlist` lists them and `perf
//! script` decodes their samples (without them perf would skip those
//! samples as of an unknown id). Needs root, tracefs and perf; skipped
//! otherwise, a failure under `CI=true`.

mod skip;
use perfbuf::events::{Event, EventSet};
use perfbuf::perfdata::PerfDataWriter;
use skip::skip;
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
    skip(why);
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
    // The independent parser: the same events, every exit sample, and the
    // header's build ids (the children's /usr/bin/true, the kernel).
    let (names, exits, build_ids) = parse_with_linux_perf_data(&path);
    assert_eq!(names, ["sched:sched_process_exec", "dummy", "sched:sched_process_exit"]);
    let listed = script.lines().filter(|l| l.contains("sched:sched_process_exit:")).count();
    assert_eq!(exits, listed);
    assert!(build_ids.iter().any(|p| p.ends_with("/true")), "{build_ids:?}");
    assert!(build_ids.iter().any(|p| p == "[kernel.kallsyms]"), "{build_ids:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_event_opened_again_with_a_new_filter_keeps_its_samples_in_the_file() {
    if !ready() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("perfbuf-perfdata-refiltered-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("refiltered.data");
    let mut set = EventSet::builder().pages(64).build().unwrap();
    let exec = set.add(&Event::tracepoint("sched:sched_process_exec")).unwrap();
    let mut out = PerfDataWriter::for_set(&path, &mut set).unwrap();
    let mut reader = set.reader(|_| {}).unwrap();
    set.enable_all().unwrap();
    let spawn = || {
        let mut child = Command::new("/bin/true").spawn().unwrap();
        child.wait().unwrap();
        child.id()
    };
    let before = spawn();
    let first_ids = set.instance_ids(exec).unwrap();
    // New kernel events, new ids: without them in the file perf would
    // skip the later samples as of an unknown id.
    set.set_filter(exec, Some("pid > 0")).unwrap();
    assert!(set.instance_ids(exec).unwrap().iter().all(|id| !first_ids.contains(id)));
    let after = [spawn(), spawn()];
    set.disable_all().unwrap();
    out.drain(&mut reader).unwrap();
    out.finish().unwrap();

    let evlist = perf(&["evlist"], &path);
    let names: Vec<&str> = evlist.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(names, ["sched:sched_process_exec", "dummy"], "{evlist}");
    let script = perf(&["script", "-F", "pid,event"], &path);
    for pid in [before, after[0], after[1]] {
        assert!(
            script.lines().any(|l| l.split_whitespace().next() == Some(&pid.to_string())
                && l.contains("sched:sched_process_exec:")),
            "{pid}'s exec: {script}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Event names, exit samples and the paths with build ids, as the
/// `linux-perf-data` crate reads the file.
fn parse_with_linux_perf_data(path: &Path) -> (Vec<String>, usize, Vec<String>) {
    use linux_perf_data::linux_perf_event_reader::EventRecord as Rec;
    use linux_perf_data::{PerfFileReader, PerfFileRecord};
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let PerfFileReader { mut perf_file, mut record_iter } = PerfFileReader::parse_file(file).unwrap();
    let names: Vec<String> =
        perf_file.event_attributes().iter().map(|a| a.name().unwrap_or("?").to_owned()).collect();
    let build_ids = perf_file.build_ids().unwrap();
    let paths = build_ids.values().map(|d| String::from_utf8_lossy(&d.path).into_owned()).collect();
    let mut exits = 0;
    while let Some(rec) = record_iter.next_record(&mut perf_file).unwrap() {
        if let PerfFileRecord::EventRecord { attr_index, record } = rec
            && let Ok(Rec::Sample(_)) = record.parse()
            && names[attr_index] == "sched:sched_process_exit"
        {
            exits += 1;
        }
    }
    (names, exits, paths)
}
