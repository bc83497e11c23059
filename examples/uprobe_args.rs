//! A uprobe with fetch arguments through the Rust API: every hit of a
//! function carries the values the probe fetched (registers, memory,
//! strings, `$retval`), decoded by name like tracepoint fields.
//!
//! ```text
//! uprobe_args                          probes a function of this program
//!                                      called with known values, and stops
//! uprobe_args [--ret] BINARY SYMBOL ARGS
//!                                      prints every hit until killed, e.g.
//!     uprobe_args --ret /bin/bash readline 'line=+0($retval):ustring'
//!                                      (the lines interactive bashes read)
//! ```
//!
//! Needs root and tracefs with `uprobe_events`. Killed, it leaves its
//! probe in tracefs until the next event set of any program removes it.

use perfbuf::events::{Event, EventRecord, EventSet};
use perfbuf::tracepoint::Value;
use std::ffi::{CString, c_char};
use std::time::Duration;

/// The demo's probed function: a number and a string.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn perfbuf_example_greet(n: i32, name: *const c_char) -> i32 {
    std::hint::black_box(n + i32::from(!name.is_null()))
}

fn show(v: &Value<'_>) -> String {
    match (v.as_i64(), v.as_u64(), v.as_str()) {
        (_, _, Some(s)) => format!("{s:?}"),
        (Some(i), _, _) => i.to_string(),
        (_, Some(u), _) => u.to_string(),
        _ => format!("{v:?}"),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let ret = argv.first().is_some_and(|a| a == "--ret");
    let rest = if ret { &argv[1..] } else { &argv[..] };
    let demo = rest.is_empty();
    let (binary, symbol, args) = match rest {
        [] => {
            let regs = if cfg!(target_arch = "aarch64") { ("%x0", "%x1") } else { ("%di", "%si") };
            let args = format!("n={}:s32 name=+0({}):ustring", regs.0, regs.1);
            (std::env::current_exe()?, "perfbuf_example_greet".to_owned(), args)
        }
        [b, s, a] => (b.into(), s.clone(), a.clone()),
        _ => return Err("usage: uprobe_args [--ret] BINARY SYMBOL ARGS".into()),
    };
    let mut set = EventSet::builder().build()?;
    let probe = if ret { Event::uretprobe(&binary, &symbol) } else { Event::uprobe(&binary, &symbol) };
    let ev = set.add(&probe.args(&args).enabled())?;
    let format = set.format(ev)?.ok_or("the probe has no format")?;
    let names: Vec<String> = format.event_fields().iter().map(|f| f.name().to_owned()).collect();
    eprintln!("uprobe_args: {}:{symbol} fetches {}", binary.display(), names.join(", "));
    let mut pb = set.reader(|rec| {
        if let EventRecord::Sample(s) = rec {
            let fields: Vec<String> = names
                .iter()
                .filter(|n| *n != "__probe_ip" && *n != "__probe_func" && *n != "__probe_ret_ip")
                .filter_map(|n| s.field(n).map(|v| format!("{n}={}", show(&v))))
                .collect();
            println!("pid {} {}", s.pid(), fields.join(" "));
        }
    })?;
    if demo {
        for (n, name) in [(1, "ada"), (2, "grace"), (3, "")] {
            let name = CString::new(name)?;
            perfbuf_example_greet(n, name.as_ptr());
        }
        pb.consume()?;
        return Ok(());
    }
    loop {
        pb.poll(Some(Duration::from_secs(1)))?;
    }
}
