//! Parses every tracepoint `format` file of the running kernel, and decodes
//! records the kernel itself wrote. Needs root and tracefs (at
//! /sys/kernel/tracing or /sys/kernel/debug/tracing): skipped without, a
//! failure under `CI=true`.

mod skip;
use skip::skip;
use std::fs;
use std::path::{Path, PathBuf};

use perfbuf::tracepoint::{FieldKind, Format};

fn events_dir() -> Option<PathBuf> {
    ["/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("sched").is_dir() || p.join("header_page").is_file())
}

fn format_files(events: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for subsys in fs::read_dir(events).unwrap().flatten() {
        if !subsys.path().is_dir() {
            continue;
        }
        for event in fs::read_dir(subsys.path()).unwrap().flatten() {
            let f = event.path().join("format");
            if f.is_file() {
                out.push(f);
            }
        }
    }
    out.sort();
    out
}

/// The events directory, or `None` (skip) where tracefs is not mounted;
/// under `CI=true` a missing tracefs fails the test.
fn need_tracefs() -> Option<PathBuf> {
    let dir = events_dir();
    if dir.is_none() {
        skip("tracefs is not mounted");
    }
    dir
}

#[test]
fn every_format_file_on_this_machine_parses() {
    let Some(events) = need_tracefs() else { return };
    let files = format_files(&events);
    assert!(!files.is_empty());
    let mut failures = Vec::new();
    let mut fields = 0usize;
    let mut loc = 0usize;
    let mut gone = 0usize;
    for path in &files {
        // Dynamic events (probes other processes define and delete) can
        // go between the listing and the read.
        let text = match fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                gone += 1;
                continue;
            }
            Err(e) => panic!("{}: {e}", path.display()),
        };
        match Format::parse(&text) {
            Ok(f) => {
                fields += f.fields().len();
                assert_eq!(
                    path.parent().unwrap().file_name().unwrap().to_str(),
                    Some(f.name()),
                    "{}",
                    path.display()
                );
                let ct = f.field("common_type").expect("common_type");
                assert_eq!((ct.offset(), ct.size()), (0, 2));
                for fld in f.fields() {
                    if matches!(fld.kind(), FieldKind::DataLoc { .. } | FieldKind::RelLoc { .. }) {
                        loc += 1;
                        assert_eq!(fld.size(), 4, "{}: {}", path.display(), fld.name());
                    }
                }
                // Decoding a zero-filled record of the fixed size never fails
                // for the fixed part and never panics.
                let raw = vec![0u8; f.fixed_size()];
                for (name, v) in f.values(&raw) {
                    let fld = f.field(name).unwrap();
                    if fld.size() > 0 && !matches!(fld.kind(), FieldKind::FlexArray { .. }) {
                        assert!(v.is_ok(), "{}: {name}: {v:?}", path.display());
                    }
                }
            }
            Err(e) => failures.push(format!("{}: {e}", path.display())),
        }
    }
    eprintln!(
        "parsed {}/{} format files ({fields} fields, {loc} __data_loc/__rel_loc, {gone} gone) under {}",
        files.len() - gone - failures.len(),
        files.len() - gone,
        events.display()
    );
    assert!(failures.is_empty(), "{failures:#?}");
}

// ---------------------------------------------------------------------------
// End-to-end: decode records written by the kernel itself.
//
// A private tracefs instance records sched_process_exec, sched_switch,
// irq_handler_entry and sys_enter_openat while we spawn a few processes.
// The same ring buffer is then read twice: as text through `trace` (the
// kernel's own rendering of each event's print fmt) and as binary pages
// through `per_cpu/cpu*/trace_pipe_raw`. Each binary record is the same
// struct perf delivers as PERF_SAMPLE_RAW, so we decode it with our parser
// and render it like the print fmt; both multisets must be equal.
// ---------------------------------------------------------------------------

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;

use perfbuf::tracepoint::Value;

const O_NONBLOCK: i32 = 0o4000; // Linux, all mainstream architectures

struct Instance(PathBuf);

impl Instance {
    fn write(&self, rel: &str, value: &str) {
        fs::write(self.0.join(rel), value).unwrap_or_else(|e| panic!("{rel}: {e}"));
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = fs::write(self.0.join("events/enable"), "0");
        let _ = fs::remove_dir(&self.0);
    }
}

/// Splits one ring-buffer sub-buffer page into event payloads
/// (`events/header_page` / `header_event` layout; 64-bit `local_t`).
fn page_records(page: &[u8]) -> Vec<&[u8]> {
    let u32_at = |p: usize| -> Option<u32> { Some(u32::from_ne_bytes(page.get(p..p + 4)?.try_into().ok()?)) };
    let commit = page.get(8..16).map_or(0, |b| u64::from_ne_bytes(b.try_into().unwrap()));
    let commit = usize::try_from(commit & ((1 << 30) - 1)).unwrap(); // drop MISSED flags
    let end = (16 + commit).min(page.len());
    let mut out = Vec::new();
    let mut pos = 16;
    while pos + 4 <= end {
        let header = u32_at(pos).unwrap();
        let type_len = header & 0x1f;
        let time_delta = header >> 5;
        match type_len {
            0 => {
                let len = usize::try_from(u32_at(pos + 4).unwrap()).unwrap();
                out.push(&page[pos + 8..pos + 4 + len]);
                pos += 4 + len;
            }
            1..=28 => {
                let len = usize::try_from(type_len).unwrap() * 4;
                out.push(&page[pos + 4..pos + 4 + len]);
                pos += 4 + len;
            }
            29 => {
                if time_delta == 0 {
                    break; // null padding: rest of the page is unused
                }
                pos += 4 + usize::try_from(u32_at(pos + 4).unwrap()).unwrap();
            }
            _ => pos += 8, // 30: time extend, 31: absolute time stamp
        }
    }
    out
}

fn int(v: &Value<'_>) -> String {
    match *v {
        Value::Signed(x) => x.to_string(),
        Value::Unsigned(x) => x.to_string(),
        _ => panic!("not an integer: {v:?}"),
    }
}

fn text(v: &Value<'_>) -> String {
    String::from_utf8_lossy(v.as_bytes().expect("not a string")).into_owned()
}

/// Renders a decoded record like the kernel's print fmt (only the parts
/// that are plain field values).
fn render(f: &Format, raw: &[u8]) -> String {
    let v = |name: &str| {
        f.field(name).unwrap().decode(raw).unwrap_or_else(|e| panic!("{}.{name}: {e}", f.name()))
    };
    match f.name() {
        "sched_process_exec" => {
            format!("filename={} pid={} old_pid={}", text(&v("filename")), int(&v("pid")), int(&v("old_pid")))
        }
        "sched_switch" => format!(
            "prev_comm={} prev_pid={} prev_prio={} | ==> next_comm={} next_pid={} next_prio={}",
            text(&v("prev_comm")),
            int(&v("prev_pid")),
            int(&v("prev_prio")),
            text(&v("next_comm")),
            int(&v("next_pid")),
            int(&v("next_prio"))
        ),
        "irq_handler_entry" => format!("irq={} name={}", int(&v("irq")), text(&v("name"))),
        "sys_enter_openat" => {
            // Each argument's raw unsigned long, in the form the trace
            // text is brought to by `syscall_args`.
            let hex = |n: &str| format!("{:#x}", v(n).as_u64().unwrap());
            format!(
                "dfd: {}, filename: {}, flags: {}, mode: {}",
                hex("dfd"),
                hex("filename"),
                hex("flags"),
                hex("mode")
            )
        }
        other => panic!("unexpected event {other}"),
    }
}

/// `name: value, ...` of print_syscall_enter() with every value in hex.
/// Kernels differ in how they print a value: older ones 0x%lx for all,
/// newer ones (6.18 here) in decimal below 10 (`dfd: 3`, `flags: 1`).
fn syscall_args(body: &str) -> Option<String> {
    let args: Option<Vec<String>> = body
        .split(", ")
        .map(|arg| {
            let (name, value) = arg.split_once(": ")?;
            let value = match value.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok()?,
                None => value.parse().ok()?,
            };
            Some(format!("{name}: {value:#x}"))
        })
        .collect();
    Some(args?.join(", "))
}

/// The same rendering extracted from a line of the `trace` file.
fn from_trace_line(line: &str) -> Option<(String, String)> {
    // Syscall events are printed by print_syscall_enter(), not their print
    // fmt: `sys_openat(dfd: 0xffffff9c, filename: 0x..., flags: 0x..., mode: 0)`.
    if let Some(i) = line.find(" sys_openat(") {
        let body = line[i + " sys_openat(".len()..].strip_suffix(')')?;
        return Some(("sys_enter_openat".to_owned(), syscall_args(body)?));
    }
    for name in ["sched_process_exec", "sched_switch", "irq_handler_entry"] {
        let marker = format!(" {name}: ");
        if let Some(i) = line.find(&marker) {
            let body = &line[i + marker.len()..];
            let body = if name == "sched_switch" {
                let (a, rest) = body.split_once(" prev_state=")?;
                let (_, b) = rest.split_once(" ==> ")?;
                format!("{a} | ==> {b}")
            } else {
                body.to_owned()
            };
            return Some((name.to_owned(), body));
        }
    }
    None
}

#[test]
fn decodes_records_written_by_the_kernel() {
    let Some(events) = need_tracefs() else { return };
    let root = events.parent().unwrap();
    let wanted = [
        "sched/sched_process_exec",
        "sched/sched_switch",
        "irq/irq_handler_entry",
        "syscalls/sys_enter_openat",
    ];
    let formats: BTreeMap<u32, Format> = wanted
        .iter()
        .filter_map(|e| fs::read_to_string(events.join(e).join("format")).ok())
        .map(|t| Format::parse(&t).unwrap())
        .map(|f| (f.id(), f))
        .collect();
    assert!(formats.len() >= 2, "sched events missing");

    // Named after this process: another run of the test has its own.
    let dir = root.join(format!("instances/tracefs_format_selftest_{}", std::process::id()));
    let _ = fs::remove_dir(&dir);
    fs::create_dir(&dir).expect("cannot create tracefs instance");
    let inst = Instance(dir);
    for e in wanted {
        if inst.0.join("events").join(e).is_dir() {
            inst.write(&format!("events/{e}/enable"), "1");
        }
    }
    for program in ["/bin/true", "/usr/bin/env", "/bin/sh"] {
        let mut cmd = Command::new(program);
        if program.ends_with("env") {
            cmd.arg("true");
        } else if program.ends_with("sh") {
            cmd.args(["-c", "cat /proc/self/stat >/dev/null"]);
        }
        cmd.status().unwrap();
    }
    // Some block I/O to provoke a virtio/ATA interrupt or two.
    let tmp = std::env::temp_dir().join(format!("tracefs_format_selftest_{}.tmp", std::process::id()));
    let mut file = fs::File::create(&tmp).unwrap();
    std::io::Write::write_all(&mut file, &[0x5a; 65536]).unwrap();
    file.sync_all().unwrap();
    drop(file);
    // An openat with a small number for its flags (O_WRONLY alone): kernels
    // print such a value in hex or in decimal, the comparison must not care.
    let path = std::ffi::CString::new(tmp.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid C string; the descriptor is closed at once.
    let fd = unsafe { libc::openat(libc::AT_FDCWD, path.as_ptr(), libc::O_WRONLY) };
    assert!(fd >= 0, "openat: {}", std::io::Error::last_os_error());
    // SAFETY: our own descriptor, closed once.
    unsafe { libc::close(fd) };
    let _ = fs::remove_file(&tmp);
    std::thread::sleep(std::time::Duration::from_millis(100));
    inst.write("events/enable", "0");
    inst.write("tracing_on", "0");

    // Kernel-rendered text.
    let trace = fs::read_to_string(inst.0.join("trace")).unwrap();
    let mut expected: BTreeMap<(String, String), usize> = BTreeMap::new();
    for line in trace.lines().filter(|l| !l.starts_with('#')) {
        if let Some(key) = from_trace_line(line) {
            *expected.entry(key).or_default() += 1;
        }
    }

    // Binary records, decoded by us.
    let mut decoded: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut records = 0usize;
    for cpu in fs::read_dir(inst.0.join("per_cpu")).unwrap().flatten() {
        let mut file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NONBLOCK)
            .open(cpu.path().join("trace_pipe_raw"))
            .unwrap();
        let mut page = vec![0u8; 4096 * 16];
        loop {
            match file.read(&mut page) {
                Ok(0) | Err(_) => break, // EOF or EAGAIN: buffer drained
                Ok(n) => {
                    for raw in page_records(&page[..n]) {
                        records += 1;
                        let id = u32::from(u16::from_ne_bytes([raw[0], raw[1]]));
                        let f = formats.get(&id).expect("record of an event we did not enable");
                        assert_eq!(
                            f.field("common_type").unwrap().decode(raw),
                            Ok(Value::Unsigned(u64::from(id)))
                        );
                        *decoded.entry((f.name().to_owned(), render(f, raw))).or_default() += 1;
                    }
                }
            }
        }
    }

    let count = |m: &BTreeMap<(String, String), usize>, ev: &str| -> usize {
        m.iter().filter(|((e, _), _)| e == ev).map(|(_, n)| n).sum()
    };
    for ev in ["sched_process_exec", "sched_switch", "irq_handler_entry", "sys_enter_openat"] {
        eprintln!(
            "{ev}: {} from trace_pipe_raw, {} in trace text",
            count(&decoded, ev),
            count(&expected, ev)
        );
    }
    for ((ev, body), _) in decoded.iter().filter(|((e, _), _)| e == "sched_process_exec") {
        eprintln!("  {ev}: {body}");
    }
    assert!(records > 0, "no binary records read");
    assert!(count(&decoded, "sched_process_exec") >= 3, "execs not seen");
    // Where syscall events exist, the O_WRONLY openat is among them.
    if formats.values().any(|f| f.name() == "sys_enter_openat") {
        let small_flags =
            decoded.keys().any(|(e, body)| e == "sys_enter_openat" && body.contains("flags: 0x1,"));
        assert!(small_flags, "the O_WRONLY openat not seen");
    }
    assert_eq!(decoded, expected);
}
