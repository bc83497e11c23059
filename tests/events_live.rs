//! Event sets through the Rust API on the real kernel: a tracepoint's
//! fields decoded by name and read in time order, uprobes on a function of
//! this test, a counter group, and the errors users meet. Needs root and a
//! mounted tracefs; skipped otherwise, a failure under `CI=true`.

mod getppid;
mod skip;
use getppid::GETPPID;
use perfbuf::events::{AttachedProgram, Event, EventKind, EventRecord, EventSet};
use perfbuf::{ErrorKind, OrderKey};
use skip::{kernel_lacks, skip};
use std::cell::RefCell;
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod drop_program;
mod offset_target;
mod thread_cpu;
use thread_cpu::thread_cpu;

/// Tests that count their own probe hits run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn set() -> Option<EventSet> {
    match EventSet::builder().build() {
        Ok(s) if std::path::Path::new("/sys/kernel/tracing/events").exists() => Some(s),
        other => {
            skip(format!("event sets need root and tracefs at /sys/kernel/tracing: {:?}", other.err()));
            None
        }
    }
}

/// The uprobe target.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn perfbuf_rust_probe_target(x: u64) -> u64 {
    std::hint::black_box(x.wrapping_mul(3).wrapping_add(1))
}

#[test]
fn tracepoint_fields_in_time_order() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    let exec = set.add(&Event::tracepoint("sched:sched_process_exec")).unwrap();
    assert_eq!(set.info(exec).unwrap().kind, EventKind::Tracepoint);
    let seen = RefCell::new(Vec::new());
    let mut pb = set
        .local_reader(|rec| {
            if let EventRecord::Sample(s) = rec {
                let file = s.field("filename").and_then(|v| v.as_str().map(str::to_owned));
                let pid = s.field("pid").and_then(|v| v.as_i64());
                seen.borrow_mut().push((s.time(), s.pid(), pid, file));
            }
        })
        .unwrap();
    pb.set_order(OrderKey::SampleTime, Duration::from_millis(5)).unwrap();
    set.enable(exec).unwrap();
    let mut children = Vec::new();
    for _ in 0..4 {
        let child = std::process::Command::new("/bin/true").spawn().unwrap();
        children.push(child.id());
        let mut child = child;
        child.wait().unwrap();
    }
    // Until our four arrived; the deadline only catches a hang.
    let deadline = Instant::now() + Duration::from_secs(10);
    let arrived = || seen.borrow().iter().filter(|s| children.contains(&s.1)).count();
    while arrived() < 4 && Instant::now() < deadline {
        pb.poll(Some(Duration::from_millis(100))).unwrap();
    }
    pb.flush_ordered().unwrap();
    drop(pb);
    let seen = seen.into_inner();
    let ours: Vec<_> = seen.iter().filter(|s| children.contains(&s.1)).collect();
    assert_eq!(ours.len(), 4, "{seen:?}");
    for (_, pid, field_pid, file) in &ours {
        assert_eq!(file.as_deref(), Some("/bin/true"));
        assert_eq!(*field_pid, Some(i64::from(*pid)));
    }
    // Ours in time order: the children ran one after the other, often on
    // both CPUs, so reading one ring after the other would not give it.
    // (Other tasks' execs are not checked: one written by a CPU the host
    // held back between timestamp and commit comes late, rightly.)
    assert!(ours.windows(2).all(|w| w[0].0 <= w[1].0), "time order: {seen:?}");
}

#[test]
fn uprobes_on_a_function_of_this_test() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    let exe = std::env::current_exe().unwrap();
    let entry = set.add(&Event::uprobe(&exe, "perfbuf_rust_probe_target")).unwrap();
    let exit = set.add(&Event::uretprobe(&exe, "perfbuf_rust_probe_target")).unwrap();
    let me = std::process::id();
    let (mut at_entry, mut at_exit) = (0, 0);
    let addr = perfbuf_rust_probe_target as extern "C" fn(u64) -> u64 as usize as u64;
    let mut pb = set
        .local_reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.pid() == me
            {
                if s.event == entry {
                    assert_eq!(s.ip(), addr);
                    at_entry += 1;
                } else if s.event == exit {
                    at_exit += 1;
                }
            }
        })
        .unwrap();
    set.enable_all().unwrap();
    for i in 0..100 {
        perfbuf_rust_probe_target(i);
    }
    set.disable_all().unwrap();
    pb.consume().unwrap();
    drop(pb);
    assert_eq!((at_entry, at_exit), (100, 100));
    let info = set.info(entry).unwrap();
    assert_eq!((info.kind, info.enabled, info.instances), (EventKind::Uprobe, false, set.cpus().len()));
    let missing = set.add(&Event::uprobe(&exe, "no_such_function")).unwrap_err();
    assert_eq!(missing.errno(), libc::ENOENT);
}

#[test]
fn uprobes_inside_a_function_land_at_their_offset() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    let exe = std::env::current_exe().unwrap();
    let entry = offset_target::address();
    let inside = entry + offset_target::INSIDE;
    let file_entry = file_offset_of(entry as usize);
    let at_symbol =
        set.add(&Event::uprobe(&exe, offset_target::SYMBOL).offset(offset_target::INSIDE)).unwrap();
    let at_file_offset = set.add(&Event::uprobe_at(&exe, file_entry + offset_target::INSIDE)).unwrap();
    let at_file_offset_plus =
        set.add(&Event::uprobe_at(&exe, file_entry).offset(offset_target::INSIDE)).unwrap();
    let returns = set.add(&Event::uretprobe_at(&exe, file_entry)).unwrap();
    // A uretprobe inside a function: refused, naming the probe.
    let inside_return = Event::uretprobe(&exe, offset_target::SYMBOL).offset(offset_target::INSIDE);
    let e = set.add(&inside_return).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    let text = e.to_string();
    assert!(text.contains(&format!("uretprobe {}:{}+0x4", exe.display(), offset_target::SYMBOL)), "{text}");
    assert!(text.contains("function's entry"), "{text}");
    let e = set.add(&Event::uretprobe_at(&exe, file_entry).offset(1)).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    // Past the function's end: refused, with its size.
    let e = set.add(&Event::uprobe(&exe, offset_target::SYMBOL).offset(offset_target::SIZE)).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    let text = e.to_string();
    assert!(
        text.contains("past the end") && text.contains(&format!("{:#x} bytes", offset_target::SIZE)),
        "{text}"
    );
    let last = set.add(&Event::uprobe(&exe, offset_target::SYMBOL).offset(offset_target::SIZE - 1)).unwrap();
    set.remove(last).unwrap();
    let me = std::process::id();
    let mut ips: std::collections::BTreeMap<_, Vec<u64>> = Default::default();
    let mut pb = set
        .local_reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.pid() == me
            {
                ips.entry(s.event).or_default().push(s.ip());
            }
        })
        .unwrap();
    set.enable_all().unwrap();
    for i in 0..50 {
        assert_eq!(offset_target::call(i), i + 1);
    }
    set.disable_all().unwrap();
    pb.consume().unwrap();
    drop(pb);
    for id in [at_symbol, at_file_offset, at_file_offset_plus] {
        assert_eq!(ips.get(&id), Some(&vec![inside; 50]), "event {id:?}: ip {inside:#x} expected");
    }
    // A return probe fires back in the caller: 50 returns, none inside.
    let back = ips.get(&returns).map(Vec::as_slice).unwrap_or_default();
    assert_eq!(back.len(), 50);
    assert!(back.windows(2).all(|w| w[0] == w[1]), "one call site: {back:x?}");
    assert!(back.iter().all(|&ip| !(entry..entry + offset_target::SIZE).contains(&ip)), "{back:x?}");
}

/// A tracepoint that only these tests trace, hit by `getpgid` calls.
const QUIET_TRACEPOINT: &str = "syscalls:sys_enter_getpgid";

/// Calls `getpgid` `calls` times; how many hits of [`QUIET_TRACEPOINT`]
/// the reader then delivered.
fn getpgid_samples(
    pb: &mut perfbuf::PerfBuffer<'_, perfbuf::Local>,
    delivered: &std::cell::Cell<usize>,
    calls: usize,
) -> usize {
    let before = delivered.get();
    for _ in 0..calls {
        // SAFETY: getpgid has no preconditions.
        unsafe { libc::getpgid(0) };
    }
    pb.consume().unwrap();
    delivered.get() - before
}

#[test]
fn a_bpf_program_that_drops_the_tracepoints_hits_is_named() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_) = set() else { return };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut set = EventSet::builder().pid(tid).build().unwrap();
    let ev = set.add(&Event::tracepoint(QUIET_TRACEPOINT).enabled()).unwrap();
    let delivered = std::cell::Cell::new(0);
    let mut pb = set
        .local_reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.tid() == tid as u32
            {
                delivered.set(delivered.get() + 1);
            }
        })
        .unwrap();
    let warnings = std::sync::Arc::new(Mutex::new(Vec::new()));
    let seen = warnings.clone();
    let previous = perfbuf::set_log(Some(Box::new(move |level, msg| {
        if level == perfbuf::LogLevel::Warn && msg.contains(QUIET_TRACEPOINT) {
            seen.lock().unwrap().push(msg.to_owned());
        }
    })));
    // Nothing attached: nothing reported, every hit sampled.
    assert_eq!(set.info(ev).unwrap().bpf_programs, vec![]);
    assert_eq!(getpgid_samples(&mut pb, &delivered, 5), 5);

    // Another tool's program that returns 0: the kernel drops every hit.
    let other = drop_program::DropProgram::attach(QUIET_TRACEPOINT, "perfbuf_drop").unwrap();
    let other_id = other.id;
    let named = AttachedProgram { id: other_id, name: "perfbuf_drop".into(), ours: false };
    assert_eq!(set.info(ev).unwrap().bpf_programs, vec![named.clone()]);
    assert_eq!(getpgid_samples(&mut pb, &delivered, 5), 0, "the program did not drop the hits");
    set.disable(ev).unwrap();
    set.enable(ev).unwrap();
    assert_eq!(set.info(ev).unwrap().bpf_programs, vec![named]);
    drop(other);
    assert_eq!(set.info(ev).unwrap().bpf_programs, vec![]);
    assert_eq!(getpgid_samples(&mut pb, &delivered, 5), 5);

    // The set's own program is listed as its own, without a warning.
    let (prog, own_id) = drop_program::load("perfbuf_own").unwrap();
    let own = set.add(&Event::tracepoint(QUIET_TRACEPOINT)).unwrap();
    set.attach_bpf(own, std::os::fd::AsFd::as_fd(&prog)).unwrap();
    let listed = set.info(own).unwrap().bpf_programs;
    assert_eq!(listed, vec![AttachedProgram { id: own_id, name: "perfbuf_own".into(), ours: true }]);
    set.remove(own).unwrap();
    drop(pb);
    perfbuf::set_log(previous);
    let warnings = warnings.lock().unwrap().clone();
    // One warning, at the first sight of the program, naming it.
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let text = &warnings[0];
    assert!(text.contains(&format!("BPF program {} \"perfbuf_drop\"", other_id)), "{text}");
    assert!(text.contains("returns 0") && text.contains("bpftool prog show id"), "{text}");
}

/// A USDT semaphore: the kernel counts it up in every process that maps
/// this file while a uprobe names it, so a probe site can test it and skip
/// costly argument set-up when nobody listens. In a section of its own, as
/// SystemTap's are (file-backed, writable: the kernel refuses others).
#[unsafe(no_mangle)]
#[unsafe(link_section = ".probes")]
static mut PERFBUF_RUST_SEMAPHORE: u16 = 0;

fn semaphore() -> u16 {
    // SAFETY: a plain read of a u16 the kernel may write (volatile: it is
    // changed behind the compiler's back); no reference is formed.
    unsafe { std::ptr::read_volatile(&raw const PERFBUF_RUST_SEMAPHORE) }
}

/// The file offset of `addr`, from the mapping of this executable that
/// holds it.
fn file_offset_of(addr: usize) -> u64 {
    let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(range), Some(off), Some(path)) = (f.first(), f.get(2), f.get(5)) else { continue };
        let (start, end) = range.split_once('-').unwrap();
        let start = usize::from_str_radix(start, 16).unwrap();
        let end = usize::from_str_radix(end, 16).unwrap();
        if (start..end).contains(&addr) && std::path::Path::new(path) == exe {
            return (addr - start) as u64 + u64::from_str_radix(off, 16).unwrap();
        }
    }
    panic!("{addr:#x} is in no mapping of {}", exe.display());
}

#[test]
fn a_usdt_semaphore_counts_while_the_probe_exists() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    let exe = std::env::current_exe().unwrap();
    let off = file_offset_of((&raw const PERFBUF_RUST_SEMAPHORE) as usize);
    assert_eq!(semaphore(), 0, "nobody probes yet");
    let probe = Event::uprobe(&exe, "perfbuf_rust_probe_target").ref_ctr_offset(off);
    let id = set.add(&probe).unwrap();
    set.enable(id).unwrap();
    let attached = semaphore();
    let me = std::process::id();
    let mut hits = 0;
    let mut pb = set
        .local_reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.pid() == me
            {
                hits += 1;
            }
        })
        .unwrap();
    perfbuf_rust_probe_target(7);
    pb.consume().unwrap();
    drop(pb);
    set.remove(id).unwrap();
    let removed = semaphore();
    assert!(attached > 0, "the semaphore did not rise while the probe existed");
    assert_eq!(hits, 1);
    assert_eq!(removed, 0, "the semaphore did not fall when the probe went away");
}

#[test]
fn a_counter_group_reads_together() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_) = set() else { return };
    // The kernel takes a thread id: this test's thread.
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut set = EventSet::builder().pid(tid).pages(0).build().unwrap();
    let clock = set.add(&Event::software(perfbuf::uapi::PERF_COUNT_SW_TASK_CLOCK).group_leader()).unwrap();
    let task_clock = Event::software(perfbuf::uapi::PERF_COUNT_SW_TASK_CLOCK);
    let member = set.add(&task_clock.member_of(clock)).unwrap();
    set.enable_all().unwrap();
    // 20 ms of this thread's CPU time, however long a loaded machine takes
    // to give it (a wall-clock spin could be descheduled for most of it).
    let start = thread_cpu();
    let deadline = Instant::now() + Duration::from_secs(10);
    while thread_cpu() - start < Duration::from_millis(20) && Instant::now() < deadline {
        std::hint::black_box(perfbuf_rust_probe_target(1));
    }
    set.disable_all().unwrap();
    let counts = set.read(clock).unwrap();
    assert_eq!(counts.values.iter().map(|v| v.0).collect::<Vec<_>>(), vec![clock, member]);
    // The thread ran for 20 ms of CPU time: both task clocks saw most of it.
    assert!(counts.values.iter().all(|v| v.1 >= 15_000_000), "{counts:?}");
    assert!(counts.time_enabled > 0 && counts.scaled(member).unwrap() >= counts.values[1].1);
    assert_eq!(set.remove(clock).unwrap_err().errno(), libc::EBUSY);
}

/// A kprobe through the kprobe PMU, watching this thread: exactly its 50
/// calls. Without the PMU (no CONFIG_KPROBES), the clear error, and the
/// success path is listed as not run on this kernel.
#[test]
fn a_kprobe_counts_this_threads_calls() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_) = set() else { return };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() };
    let mut set = EventSet::builder().pid(tid).build().unwrap();
    if !std::path::Path::new("/sys/bus/event_source/devices/kprobe").exists() {
        let e = set.add(&Event::kprobe(GETPPID)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.to_string().contains("CONFIG_KPROBES") && e.to_string().contains(GETPPID), "{e}");
        return kernel_lacks("its success path, this thread's 50 calls: the kernel has no kprobe PMU");
    }
    let id = set.add(&Event::kprobe(GETPPID)).unwrap();
    assert_eq!(set.info(id).unwrap().kind, EventKind::Kprobe);
    let mut hits = Vec::new();
    let mut pb = set
        .reader(|rec| {
            if let EventRecord::Sample(s) = rec {
                hits.push((s.event, s.pid(), s.tid()));
            }
        })
        .unwrap();
    set.enable(id).unwrap();
    for _ in 0..50 {
        // SAFETY: getppid has no preconditions (glibc makes the system call).
        unsafe { libc::getppid() };
    }
    set.disable(id).unwrap();
    pb.consume().unwrap();
    drop(pb);
    assert_eq!(hits, vec![(id, std::process::id(), tid as u32); 50]);
}

#[test]
fn errors_say_what_is_missing() {
    let Some(mut set) = set() else { return };
    let e = set.add(&Event::tracepoint("nope:nope")).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
    assert!(e.to_string().contains("tracepoint"), "{e}");
    let _pb = set.reader(|_| {}).unwrap();
    assert_eq!(set.reader(|_| {}).err().map(|e| e.errno()), Some(libc::EBUSY));
    let none = EventSet::builder().cpus(&[4096]).build().err().map(|e| e.errno());
    assert_eq!(none, Some(libc::ENODEV));
}
