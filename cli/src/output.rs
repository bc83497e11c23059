//! How `trace` writes a record: one text line with fields by name, or one
//! JSON object per line. The JSON schema (stable; fields are only added):
//!
//! - `{"type":"sample","event":"sched:sched_process_exec","time_ns":N,"cpu":N,"pid":N,"tid":N,"ip":N,"fields":{NAME:VALUE,...}}`
//!   where VALUE is a number (integers), a string (char arrays, lossy UTF-8)
//!   or a lowercase hex string (other byte arrays); `fields` is `{}` for
//!   events without a format (probes without arguments).
//! - `{"type":"lost","event":NAME|null,"cpu":N,"lost":N}`: records the
//!   kernel dropped for lack of space in that CPU's ring.
//! - `{"type":"fork","time_ns":N,"cpu":N,"pid":N,"ppid":N,"tid":N,"ptid":N}`,
//!   `{"type":"exit",...}` with the same fields, and
//!   `{"type":"comm","time_ns":N,"cpu":N,"pid":N,"tid":N,"name":S,"exec":B}`:
//!   side-band process records (`--task`); `exec` is true when an exec set
//!   the name.
//! - `{"type":"other","event":NAME|null,"cpu":N,"record_type":N,"size":N}`.

use perfbuf::decode::Body;
use perfbuf::tracepoint::Value;
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

pub fn text_value(out: &mut String, v: Value<'_>) {
    let _ = match v {
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

/// A sample as a text line: `TIME CPU PID/TID EVENT: name=value ...`.
pub fn sample_text<'v>(h: &Head<'_>, fields: impl Iterator<Item = (&'v str, Option<Value<'v>>)>) -> String {
    let mut line = format!("{} {}:", stamp(h.time_ns, h.cpu, h.pid, h.tid), h.event);
    let mut any = false;
    for (name, v) in fields {
        any = true;
        let _ = write!(line, " {name}=");
        match v {
            Some(v) => text_value(&mut line, v),
            None => line.push('?'),
        }
    }
    if !any {
        let _ = write!(line, " ip={:#x}", h.ip);
    }
    line
}

pub fn sample_json<'v>(h: &Head<'_>, fields: impl Iterator<Item = (&'v str, Option<Value<'v>>)>) -> String {
    let mut map = Map::new();
    for (name, v) in fields {
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
