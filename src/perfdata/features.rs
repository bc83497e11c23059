//! The header features written at a clean close: what the machine was
//! (hostname, OS release, architecture, CPUs, memory), what recorded
//! (command line), the events (`HEADER_EVENT_DESC`), when (`SAMPLE_TIME`)
//! and with which clock (`CLOCKID`, `CLOCK_DATA`).

use super::FileEvent;
use super::layout::{Feature, attr_bytes, put_string, put_u32, put_u64};

/// What the features describe beyond the events.
pub(crate) struct Facts<'a> {
    pub events: &'a [FileEvent],
    pub sample_times: Option<(u64, u64)>,
    /// The attrs' clock (`use_clockid`), if any.
    pub clockid: Option<i32>,
    /// `HEADER_TRACING_DATA`, read when the file was made (a probe's
    /// format is gone with the probe).
    pub tracing: Option<&'a [u8]>,
    /// `HEADER_BUILD_ID`'s payload, if any build id is known.
    pub build_ids: Option<Vec<u8>>,
}

/// Every feature this writer knows, each with its payload, in bit order.
pub(crate) fn features(facts: &Facts<'_>) -> Vec<(Feature, Vec<u8>)> {
    let mut out = Vec::new();
    if let Some(blob) = facts.tracing {
        out.push((Feature::TracingData, blob.to_vec()));
    }
    if let Some(ids) = &facts.build_ids {
        out.push((Feature::BuildId, ids.clone()));
    }
    let uts = uname();
    out.push((Feature::Hostname, string(&uts.0)));
    out.push((Feature::OsRelease, string(&uts.1)));
    out.push((Feature::Version, string(concat!("perfbuf ", env!("CARGO_PKG_VERSION")))));
    out.push((Feature::Arch, string(&uts.2)));
    let mut cpus = Vec::new();
    let possible = crate::kernel::cpu::possible_cpu_count().unwrap_or(1) as u32;
    let online = crate::kernel::cpu::online_mask().map(|m| m.iter().filter(|&&b| b).count() as u32);
    put_u32(&mut cpus, possible);
    put_u32(&mut cpus, online.unwrap_or(possible));
    out.push((Feature::NrCpus, cpus));
    if let Some(desc) = cpu_desc() {
        out.push((Feature::CpuDesc, string(&desc)));
    }
    if let Some(kb) = total_mem_kb() {
        out.push((Feature::TotalMem, kb.to_le_bytes().to_vec()));
    }
    out.push((Feature::Cmdline, cmdline()));
    out.push((Feature::EventDesc, event_desc(facts.events)));
    if let Some((first, last)) = facts.sample_times {
        let mut t = Vec::new();
        put_u64(&mut t, first);
        put_u64(&mut t, last);
        out.push((Feature::SampleTime, t));
    }
    if let Some(clockid) = facts.clockid {
        out.push((Feature::ClockId, clock_res_ns(clockid).to_le_bytes().to_vec()));
        out.push((Feature::ClockData, clock_data(clockid)));
    }
    out
}

fn string(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    put_string(&mut out, s);
    out
}

/// Nodename, release, machine.
fn uname() -> (String, String, String) {
    // SAFETY: utsname is plain bytes; uname fills it (all zeros is a valid value).
    let mut u: libc::utsname = unsafe { core::mem::zeroed() };
    // SAFETY: `u` is a valid, writable utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return Default::default();
    }
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (field(&u.nodename), field(&u.release), field(&u.machine))
}

fn cpu_desc() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_owned())
}

fn total_mem_kb() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `HEADER_CMDLINE`: the recording process's arguments.
fn cmdline() -> Vec<u8> {
    let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    let args: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let mut out = Vec::new();
    put_u32(&mut out, args.len() as u32);
    args.iter().for_each(|a| put_string(&mut out, a));
    out
}

/// `HEADER_EVENT_DESC`: each event's attr, name and ids.
fn event_desc(events: &[FileEvent]) -> Vec<u8> {
    let mut out = Vec::new();
    put_u32(&mut out, events.len() as u32);
    put_u32(&mut out, super::layout::ATTR_SIZE as u32);
    for e in events {
        out.extend_from_slice(&attr_bytes(&e.attr));
        put_u32(&mut out, e.ids.len() as u32);
        put_string(&mut out, &e.name);
        e.ids.iter().for_each(|&id| put_u64(&mut out, id));
    }
    out
}

fn clock_ns(clockid: i32) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(clockid, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn clock_res_ns(clockid: i32) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_getres(clockid, &mut ts) };
    (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64).max(1)
}

/// `HEADER_CLOCK_DATA`: the wall clock and the attrs' clock read at the
/// same moment (perf script --reltime / --clock-data turn sample times
/// into dates with it).
fn clock_data(clockid: i32) -> Vec<u8> {
    let mut out = Vec::new();
    put_u32(&mut out, 1);
    put_u32(&mut out, clockid as u32);
    put_u64(&mut out, clock_ns(libc::CLOCK_REALTIME));
    put_u64(&mut out, clock_ns(clockid));
    out
}
