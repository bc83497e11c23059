//! How `trace` writes a record: one text line with fields by name, or one
//! JSON object per line. The JSON schema (stable; fields are only added):
//!
//! - `{"type":"sample","event":"sched:sched_process_exec","time_ns":N,"cpu":N,"pid":N,"tid":N,"ip":N,"fields":{NAME:VALUE,...}}`
//!   where VALUE is a number (integers), a string (char arrays, lossy UTF-8)
//!   or a lowercase hex string (other byte arrays); `fields` holds a
//!   tracepoint's own fields, or the arguments a probe declared, and is `{}`
//!   for events without a format (probes without arguments). With
//!   `--all-fields` it holds the kernel's too: every tracepoint's
//!   `common_*`, a probe's `__probe_ip` (return probes: `__probe_func`,
//!   `__probe_ret_ip`).
//! - `{"type":"lost","event":NAME|null,"cpu":N,"lost":N}`: records the
//!   kernel dropped for lack of space in that CPU's ring.
//! - `{"type":"fork","time_ns":N,"cpu":N,"pid":N,"ppid":N,"tid":N,"ptid":N}`,
//!   `{"type":"exit",...}` with the same fields, and
//!   `{"type":"comm","time_ns":N,"cpu":N,"pid":N,"tid":N,"name":S,"exec":B}`:
//!   side-band process records (`--task`); `exec` is true when an exec set
//!   the name.
//! - `{"type":"other","event":NAME|null,"cpu":N,"record_type":N,"size":N}`.

use perfbuf::decode::Body;
use perfbuf::tracepoint::{Field, Value};
use serde_json::{Map, Value as Json, json};
use std::fmt::Write as _;

/// One decoded field.
pub fn json_value(v: Value<'_>) -> Json {
    match v {
        Value::Signed(n) => json!(n),
        Value::Unsigned(n) => json!(n),
        Value::Str(s) => json!(String::from_utf8_lossy(s)),
        Value::Bytes(b) => json!(hex(b)),
    }
}

/// How `trace` shows a field of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Show {
    Hide,
    Plain,
    /// An address, or an argument declared `x8`..`x64`: `0x...` in text.
    Hex,
}

/// How to show `field` of a sample: a tracepoint's own fields (pointers
/// in hex), or only the arguments a probe `declared` (name, in hex); the
/// fields the kernel adds (`common_*`, a probe's `__probe_*` addresses)
/// only with `all`.
pub fn show(field: &Field, declared: Option<&[(String, bool)]>, all: bool) -> Show {
    if field.is_common() {
        return if all { Show::Plain } else { Show::Hide };
    }
    // A pointer, or the kernel's own probe fields: the probe's address, a
    // return probe's function and caller.
    let address =
        field.name().starts_with("__probe_") || (field.c_type().contains('*') && !field.is_string());
    let natural = if address { Show::Hex } else { Show::Plain };
    match declared {
        Some(args) => match args.iter().find(|(name, _)| name == field.name()) {
            Some((_, true)) => Show::Hex,
            Some((_, false)) => Show::Plain,
            None if all => natural,
            None => Show::Hide,
        },
        None => natural,
    }
}

pub fn text_value(out: &mut String, v: Value<'_>, show: Show) {
    let _ = match v {
        Value::Unsigned(n) if show == Show::Hex => write!(out, "{n:#x}"),
        Value::Signed(n) if show == Show::Hex => write!(out, "{:#x}", n as u64),
        Value::Signed(n) => write!(out, "{n}"),
        Value::Unsigned(n) => write!(out, "{n}"),
        Value::Str(s) => write!(out, "{:?}", String::from_utf8_lossy(s)),
        Value::Bytes(b) => write!(out, "{}", hex(b)),
    };
}

pub fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// The common part of a sample.
pub struct Head<'a> {
    pub event: &'a str,
    pub time_ns: u64,
    pub cpu: u32,
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
}

/// `SECONDS.MICROS cpuN PID/TID`, the start of every timed line.
fn stamp(time_ns: u64, cpu: u32, pid: u32, tid: u32) -> String {
    format!("{}.{:06} cpu{cpu} {pid}/{tid}", time_ns / 1_000_000_000, time_ns % 1_000_000_000 / 1000)
}

/// A fork, exit or comm record as a line; `None` for other bodies.
pub fn task_line(json: bool, time_ns: u64, cpu: u32, body: &Body<'_>) -> Option<String> {
    let (kind, t) = match body {
        Body::Fork(t) => ("fork", t),
        Body::Exit(t) => ("exit", t),
        Body::Comm(c) => {
            let name = String::from_utf8_lossy(c.comm);
            return Some(if json {
                json!({"type": "comm", "time_ns": time_ns, "cpu": cpu, "pid": c.pid, "tid": c.tid,
                       "name": name, "exec": c.exec})
                .to_string()
            } else {
                format!(
                    "{} comm: pid={} tid={} name={name:?} exec={}",
                    stamp(time_ns, cpu, c.pid, c.tid),
                    c.pid,
                    c.tid,
                    u8::from(c.exec)
                )
            });
        }
        _ => return None,
    };
    Some(if json {
        json!({"type": kind, "time_ns": time_ns, "cpu": cpu, "pid": t.pid, "ppid": t.ppid, "tid": t.tid,
               "ptid": t.ptid})
        .to_string()
    } else {
        format!(
            "{} {kind}: pid={} ppid={} tid={} ptid={}",
            stamp(time_ns, cpu, t.pid, t.tid),
            t.pid,
            t.ppid,
            t.tid,
            t.ptid
        )
    })
}

/// A field to show: its name, its value (`None`: undecodable), how.
pub type Shown<'v> = (&'v str, Option<Value<'v>>, Show);

/// A sample as a text line: `TIME CPU PID/TID EVENT: name=value ...`.
pub fn sample_text<'v>(h: &Head<'_>, fields: impl Iterator<Item = Shown<'v>>) -> String {
    let mut line = format!("{} {}:", stamp(h.time_ns, h.cpu, h.pid, h.tid), h.event);
    let mut any = false;
    for (name, v, show) in fields {
        any = true;
        let _ = write!(line, " {name}=");
        match v {
            Some(v) => text_value(&mut line, v, show),
            None => line.push('?'),
        }
    }
    if !any {
        let _ = write!(line, " ip={:#x}", h.ip);
    }
    line
}

pub fn sample_json<'v>(h: &Head<'_>, fields: impl Iterator<Item = Shown<'v>>) -> String {
    let mut map = Map::new();
    for (name, v, _) in fields {
        map.insert(name.to_string(), v.map_or(Json::Null, json_value));
    }
    json!({
        "type": "sample", "event": h.event, "time_ns": h.time_ns, "cpu": h.cpu,
        "pid": h.pid, "tid": h.tid, "ip": h.ip, "fields": map,
    })
    .to_string()
}

pub fn lost_line(json: bool, event: Option<&str>, cpu: u32, lost: u64) -> String {
    if json {
        json!({"type": "lost", "event": event, "cpu": cpu, "lost": lost}).to_string()
    } else {
        format!("LOST {lost} records on cpu{cpu} ({})", event.unwrap_or("ring full"))
    }
}

pub fn other_line(json: bool, event: Option<&str>, cpu: u32, record: &[u8]) -> String {
    let kind =
        if record.len() >= 4 { u32::from_ne_bytes(record[..4].try_into().expect("4 bytes")) } else { 0 };
    if json {
        json!({"type": "other", "event": event, "cpu": cpu, "record_type": kind, "size": record.len()})
            .to_string()
    } else {
        format!("OTHER record type {kind} ({} bytes) on cpu{cpu}", record.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use perfbuf::tracepoint::Format;

    const FORMAT: &str = "name: e\nID: 7\nformat:\n\
        \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
        \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
        \tfield:unsigned long __probe_ip;\toffset:8;\tsize:8;\tsigned:0;\n\
        \tfield:u64 a;\toffset:16;\tsize:8;\tsigned:0;\n\
        \tfield:const void * ptr;\toffset:24;\tsize:8;\tsigned:0;\n\
        \tfield:__data_loc char[] name;\toffset:32;\tsize:4;\tsigned:0;\n\n\
        print fmt: \"\"\n";

    #[test]
    fn what_is_shown_and_how() {
        let format = Format::parse(FORMAT).unwrap();
        let how = |declared: Option<&[(String, bool)]>, all: bool| -> Vec<(String, Show)> {
            format.fields().iter().map(|f| (f.name().to_owned(), show(f, declared, all))).collect()
        };
        let named = |v: Vec<(String, Show)>| -> Vec<(String, Show)> {
            v.into_iter().filter(|(_, s)| *s != Show::Hide).collect()
        };
        // A tracepoint: its own fields, pointers in hex; the common ones with --all-fields.
        let tracepoint = named(how(None, false));
        assert_eq!(
            tracepoint.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            ["__probe_ip", "a", "ptr", "name"]
        );
        assert_eq!(tracepoint[2].1, Show::Hex);
        assert_eq!(tracepoint[3].1, Show::Plain);
        assert_eq!(named(how(None, true)).len(), 6);
        // A probe: what it declared (x-typed in hex); the kernel's addresses with --all-fields.
        let declared = [("a".to_owned(), true)];
        assert_eq!(named(how(Some(&declared), false)), [("a".to_owned(), Show::Hex)]);
        let all = named(how(Some(&[("a".to_owned(), false)]), true));
        assert_eq!(
            all.iter().map(|(n, s)| (n.as_str(), *s)).collect::<Vec<_>>(),
            [
                ("common_type", Show::Plain),
                ("common_pid", Show::Plain),
                ("__probe_ip", Show::Hex),
                ("a", Show::Plain),
                ("ptr", Show::Hex),
                ("name", Show::Plain)
            ]
        );
    }

    #[test]
    fn hex_values() {
        let mut out = String::new();
        text_value(&mut out, Value::Unsigned(4096), Show::Hex);
        out.push(' ');
        text_value(&mut out, Value::Unsigned(4096), Show::Plain);
        out.push(' ');
        text_value(&mut out, Value::Signed(-1), Show::Hex);
        assert_eq!(out, "0x1000 4096 0xffffffffffffffff");
    }
}
