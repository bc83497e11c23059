//! Probes with fetch arguments on the real kernel: a uprobe on a function of
//! this test reads an int, a string and a struct field at each call, a
//! uretprobe reads `$retval`, a definition the kernel rejects says why, the
//! probes of a killed process are removed by the next set, and failures
//! leave nothing behind. Needs root and tracefs with `uprobe_events`;
//! skipped otherwise, a failure under `CI=true`.

mod skip;
use perfbuf::events::{Event, EventKind, EventRecord, EventSet};
use skip::{kernel_lacks, skip};
use std::ffi::{CStr, c_char};
use std::path::Path;
use std::sync::Mutex;

mod offset_target;

static SERIAL: Mutex<()> = Mutex::new(());

const TRACEFS: &str = "/sys/kernel/tracing";

fn set() -> Option<EventSet> {
    let has_uprobe_events = Path::new(TRACEFS).join("uprobe_events").exists();
    match EventSet::builder().build() {
        Ok(s) if has_uprobe_events => Some(s),
        other => {
            skip(format!(
                "probe arguments need root and {TRACEFS}/uprobe_events ({has_uprobe_events}): {:?}",
                other.err()
            ));
            None
        }
    }
}

/// A struct whose second field a probe fetches (at offset 8).
#[repr(C)]
pub struct Item {
    /// Not fetched.
    pub tag: u64,
    /// Fetched as `+8(ARG3):u32`.
    pub count: u32,
}

/// The probed function: its arguments are what the probes fetch.
///
/// # Safety
/// `name` is a NUL-terminated string and `item` a valid `Item`.
#[unsafe(no_mangle)]
#[inline(never)]
pub unsafe extern "C" fn perfbuf_args_target(n: i32, name: *const c_char, item: *const Item) -> i64 {
    // SAFETY: the caller passes a valid string and item.
    let (len, count) = unsafe { (CStr::from_ptr(name).to_bytes().len(), (*item).count) };
    std::hint::black_box(i64::from(n) * 1000 + len as i64 + i64::from(count))
}

/// The three arguments, in this machine's registers (uprobes take no
/// `$argN`: the kernel cannot know the place is a function's entry).
#[cfg(target_arch = "x86_64")]
const ARGS: &str = "n=%di:s32 name=+0(%si):ustring count=+8(%dx):u32";
#[cfg(target_arch = "aarch64")]
const ARGS: &str = "n=%x0:s32 name=+0(%x1):ustring count=+8(%x2):u32";

/// This process's dynamic probes in `uprobe_events`.
fn our_probes() -> Vec<String> {
    let group = format!("perfbuf_{}_", std::process::id());
    let text = std::fs::read_to_string(Path::new(TRACEFS).join("uprobe_events")).unwrap_or_default();
    text.lines().filter(|l| l.contains(&group)).map(str::to_owned).collect()
}

#[test]
fn a_uprobe_with_arguments_reads_them_and_a_uretprobe_the_return_value() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    let exe = std::env::current_exe().unwrap();
    let entry = set.add(&Event::uprobe(&exe, "perfbuf_args_target").args(ARGS)).unwrap();
    let exit = set.add(&Event::uretprobe(&exe, "perfbuf_args_target").args("ret=$retval:s64")).unwrap();
    assert_eq!(our_probes().len(), 2, "{:?}", our_probes());
    assert_eq!(set.info(entry).unwrap().kind, EventKind::Uprobe);
    assert_eq!(set.info(entry).unwrap().type_, perfbuf::uapi::PERF_TYPE_TRACEPOINT);
    let names = ["alpha", "", "a longer name with spaces", "z"];
    let me = std::process::id();
    let (mut calls, mut returns) = (Vec::new(), Vec::new());
    let mut pb = set
        .reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.pid() == me
            {
                if s.event == entry {
                    let n = s.field("n").and_then(|v| v.as_i64());
                    let name = s.field("name").and_then(|v| v.as_str().map(str::to_owned));
                    let count = s.field("count").and_then(|v| v.as_u64());
                    calls.push((n, name, count));
                } else if s.event == exit {
                    returns.push(s.field("ret").and_then(|v| v.as_i64()));
                }
            }
        })
        .unwrap();
    set.enable_all().unwrap();
    let mut expected_calls = Vec::new();
    let mut expected_returns = Vec::new();
    for i in 0..40i32 {
        let name = names[i as usize % names.len()];
        let c_name = std::ffi::CString::new(name).unwrap();
        let item = Item { tag: 7, count: (i as u32) * 3 + 1 };
        let n = i - 20;
        // SAFETY: a valid string and item.
        let ret = unsafe { perfbuf_args_target(n, c_name.as_ptr(), &item) };
        expected_calls.push((Some(i64::from(n)), Some(name.to_owned()), Some(u64::from(item.count))));
        expected_returns.push(Some(ret));
    }
    set.disable_all().unwrap();
    pb.consume().unwrap();
    drop(pb);
    assert_eq!(calls, expected_calls);
    assert_eq!(returns, expected_returns);
    set.remove(entry).unwrap();
    assert_eq!(our_probes().len(), 1, "removing the event deletes its probe: {:?}", our_probes());
    drop(set);
    assert_eq!(our_probes(), Vec::<String>::new(), "dropping the set deletes its probes");
}

/// `perfbuf_offset_target`'s argument, in this machine's register.
#[cfg(target_arch = "x86_64")]
const OFFSET_TARGET_ARG: &str = "x=%di:u64";
#[cfg(target_arch = "aarch64")]
const OFFSET_TARGET_ARG: &str = "x=%x0:u64";

#[test]
fn a_uprobe_with_arguments_inside_a_function_lands_at_its_offset() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    let exe = std::env::current_exe().unwrap();
    let inside = offset_target::address() + offset_target::INSIDE;
    let probe =
        Event::uprobe(&exe, offset_target::SYMBOL).offset(offset_target::INSIDE).args(OFFSET_TARGET_ARG);
    let id = set.add(&probe).unwrap();
    let me = std::process::id();
    let mut seen = Vec::new();
    let mut pb = set
        .reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.pid() == me
                && s.event == id
            {
                let x = s.field("x").and_then(|v| v.as_u64());
                let probe_ip = s.field("__probe_ip").and_then(|v| v.as_u64());
                seen.push((s.ip(), probe_ip, x));
            }
        })
        .unwrap();
    set.enable_all().unwrap();
    for i in 0..20 {
        assert_eq!(offset_target::call(i * 7), i * 7 + 1);
    }
    set.disable_all().unwrap();
    pb.consume().unwrap();
    drop(pb);
    let expected: Vec<_> = (0..20).map(|i| (inside, Some(inside), Some(i * 7))).collect();
    assert_eq!(seen, expected, "ip {inside:#x} expected");
    // A uretprobe with arguments inside a function: refused before tracefs.
    let e = set
        .add(&Event::uretprobe(&exe, offset_target::SYMBOL).offset(offset_target::INSIDE).args("r=$retval"))
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(
        e.to_string().contains(&format!("uretprobe {}:{}+0x4", exe.display(), offset_target::SYMBOL)),
        "{e}"
    );
    drop(set);
    assert_eq!(our_probes(), Vec::<String>::new());
}

#[test]
fn a_rejected_definition_gives_the_kernels_complaint() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    let exe = std::env::current_exe().unwrap();
    let e = set.add(&Event::uprobe(&exe, "perfbuf_args_target").args("n=%nosuchreg:s32")).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    let text = e.to_string();
    // The kernel's own words (trace_probe.c), the arguments, and the subject.
    assert!(text.contains("Invalid register name"), "{text}");
    assert!(text.contains("n=%nosuchreg:s32"), "{text}");
    assert!(text.contains("perfbuf_args_target") && text.contains(&*exe.to_string_lossy()), "{text}");
    let e = set.add(&Event::uprobe(&exe, "perfbuf_args_target").args("n=$arg1\n-:x/y")).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    let e = set.add(&Event::tracepoint("sched:sched_process_exec").args("n=$arg1")).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(our_probes(), Vec::<String>::new());
}

#[test]
fn without_arguments_tracefs_is_not_written() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    // This process's definitions only: other processes on the machine
    // define and delete their own probes meanwhile.
    let before = our_probes();
    let exe = std::env::current_exe().unwrap();
    let id = set.add(&Event::uprobe(&exe, "perfbuf_args_target")).unwrap();
    assert_ne!(set.info(id).unwrap().type_, perfbuf::uapi::PERF_TYPE_TRACEPOINT, "the uprobe PMU");
    assert_eq!(our_probes(), before);
}

/// This thread's id: an event set watching it sees what it does only.
fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// A kprobe with arguments on the kernel's open, fetching the user's path
/// (its second argument: a kprobe at a function's entry knows them as
/// `$argN`, on every architecture with the kernel's argument API), on this
/// thread: exactly the paths it opens, in order. Without kprobe_events, a
/// clear error, and the success path is listed as not run on this kernel.
#[test]
fn kprobes_with_arguments() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_) = set() else { return };
    let mut set = EventSet::builder().pid(gettid()).build().unwrap();
    let event = Event::kprobe("do_sys_openat2").args("path=+0($arg2):ustring");
    if !Path::new(TRACEFS).join("kprobe_events").exists() {
        let e = set.add(&event).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT, "{e}");
        let text = e.to_string();
        assert!(text.contains("kprobe_events") && text.contains("do_sys_openat2"), "{text}");
        return kernel_lacks("its success path, this thread's opens: the kernel has no kprobe_events");
    }
    let id = set.add(&event).unwrap();
    let mut paths = Vec::new();
    let mut pb = set
        .reader(|rec| {
            if let EventRecord::Sample(s) = rec
                && s.event == id
            {
                paths.push(s.field("path").and_then(|v| v.as_str().map(str::to_owned)));
            }
        })
        .unwrap();
    set.enable(id).unwrap();
    let names: Vec<String> =
        (0..5).map(|i| format!("/tmp/perfbuf-kprobe-args-{}-{i}", std::process::id())).collect();
    for name in &names {
        // Missing files: the kernel's open is entered all the same.
        let _ = std::fs::File::open(name);
    }
    set.disable(id).unwrap();
    pb.consume().unwrap();
    drop(pb);
    let want: Vec<Option<String>> = names.into_iter().map(Some).collect();
    assert_eq!(paths, want, "the paths this thread opened, in order");
}

/// Not a test on its own: the process `a_killed_processs_probes_are_removed`
/// starts and kills.
#[test]
fn holder_of_probes() {
    if std::env::var("PERFBUF_HOLD_PROBES").is_err() {
        return;
    }
    let mut set = EventSet::builder().build().unwrap();
    let exe = std::env::current_exe().unwrap();
    set.add(&Event::uprobe(&exe, "perfbuf_args_target").args(ARGS)).unwrap();
    println!("holding");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

#[test]
fn a_killed_processs_probes_are_removed_by_the_next_set() {
    use std::io::BufRead;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_) = set() else { return };
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "holder_of_probes", "--nocapture", "--test-threads=1"])
        .env("PERFBUF_HOLD_PROBES", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("holding") {
        line.clear();
        assert_ne!(out.read_line(&mut line).unwrap(), 0, "the holder ended early");
    }
    let group = format!("perfbuf_{}_", child.id());
    let defined = || std::fs::read_to_string(Path::new(TRACEFS).join("uprobe_events")).unwrap();
    assert!(defined().contains(&group), "{}", defined());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(defined().contains(&group), "nobody removed them yet");
    let _next = EventSet::builder().build().unwrap();
    assert!(!defined().contains(&group), "{}", defined());
}

/// Mappings of files and kernel objects (perf rings are
/// `anon_inode:[perf_event]`); anonymous memory comes and goes with the
/// allocator and the harness's threads.
fn named_mappings() -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines().filter(|l| l.split_whitespace().nth(5).is_some_and(|name| !name.starts_with('['))).count()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn errors_name_their_subject_and_a_thousand_failures_leave_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(mut set) = set() else { return };
    let exe = std::env::current_exe().unwrap();
    let e = set.add(&Event::tracepoint("nosuch:tracepoint")).unwrap_err();
    assert!(e.to_string().contains("nosuch:tracepoint"), "{e}");
    let e = set.add(&Event::uprobe(&exe, "no_such_function")).unwrap_err();
    assert!(
        e.to_string().contains("no_such_function") && e.to_string().contains(&*exe.to_string_lossy()),
        "{e}"
    );
    let e = set.add(&Event::uprobe("/no/such/binary", "main")).unwrap_err();
    assert!(e.to_string().contains("/no/such/binary"), "{e}");
    let (fds, maps, probes) = (open_fds(), named_mappings(), our_probes().len());
    for i in 0..1000 {
        let event = match i % 5 {
            0 => Event::uprobe(&exe, "perfbuf_args_target").args("n=%nosuchreg"),
            1 => Event::uprobe(&exe, "no_such_function").args(ARGS),
            2 => Event::tracepoint("nosuch:tracepoint"),
            // Defined and opened, then refused: the definition goes again.
            3 => Event::uprobe(&exe, "perfbuf_args_target").args(ARGS).filter("no_such_field == 1"),
            _ => Event::uretprobe(&exe, "perfbuf_args_target").args("x=+0(%nope):u8"),
        };
        assert!(set.add(&event).is_err());
    }
    assert_eq!((open_fds(), named_mappings(), our_probes().len()), (fds, maps, probes));
}
