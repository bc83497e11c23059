//! `perf record` in a few lines: cpu-clock at 999 Hz with call chains on
//! every CPU, plus the scheduler's tracepoints, for the duration of a
//! command, into perf.data for `perf report` and `perf script`.
//!
//! ```text
//! record [-o FILE] COMMAND [ARGS...]   (root)
//! perf report -i perf.data --stdio
//! ```

use perfbuf::events::{Event, EventSet};
use perfbuf::perfdata::PerfDataWriter;
use perfbuf::uapi::PERF_SAMPLE_CALLCHAIN;
use std::process::Command;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut path = "perf.data".to_owned();
    if args.first().is_some_and(|a| a == "-o") && args.len() > 1 {
        path = args.remove(1);
        args.remove(0);
    }
    let Some((cmd, cmd_args)) = args.split_first() else {
        return Err("usage: record [-o FILE] COMMAND [ARGS...]".into());
    };
    let mut set = EventSet::builder().pages(128).build()?;
    set.add(&Event::cpu_clock().frequency(999).sample(PERF_SAMPLE_CALLCHAIN))?;
    for tp in ["sched:sched_switch", "sched:sched_process_exec", "sched:sched_process_exit"] {
        set.add(&Event::tracepoint(tp))?;
    }
    let mut out = PerfDataWriter::for_set(&path, &mut set)?;
    let mut reader = set.reader(|_| {})?;
    set.enable_all()?;
    let mut child = Command::new(cmd).args(cmd_args).spawn()?;
    while child.try_wait()?.is_none() {
        out.poll(&mut reader, Duration::from_millis(100))?;
    }
    set.disable_all()?;
    out.drain(&mut reader)?;
    let stats = out.finish()?;
    eprintln!(
        "[ perf.data: {} samples, {} records, {} bytes written to {path} ]",
        stats.samples, stats.records, stats.data_bytes
    );
    Ok(())
}
