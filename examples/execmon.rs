//! A tracing monitor of process execs through the Rust API: the
//! `sched:sched_process_exec` tracepoint on every CPU, no BPF, samples read
//! in time order across CPUs with their fields decoded by name.
//!
//! ```text
//! execmon [COMMAND [ARGS...]]   runs COMMAND and stops once it has exited;
//!                                without one, runs until killed (root)
//! ```

use perfbuf::OrderKey;
use perfbuf::events::{Event, EventRecord, EventSet};
use std::process::Command;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut set = EventSet::builder().build()?;
    let exec = set.add(&Event::tracepoint("sched:sched_process_exec"))?;
    let mut execs = 0u64;
    let mut pb = set.reader(|rec| match rec {
        EventRecord::Sample(s) => {
            let file = s.field("filename").and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default();
            let old_pid = s.field("old_pid").and_then(|v| v.as_i64()).unwrap_or(-1);
            let t = s.time();
            println!(
                "{}.{:06} cpu {} pid {} (was {old_pid}) exec {file}",
                t / 1_000_000_000,
                t % 1_000_000_000 / 1000,
                s.cpu,
                s.pid()
            );
            execs += 1;
        }
        EventRecord::Lost { cpu, lost, .. } => eprintln!("cpu {cpu}: {lost} execs lost"),
        _ => {}
    })?;
    // Every CPU's samples merged by their CLOCK_MONOTONIC time.
    pb.set_order(OrderKey::SampleTime, Duration::from_millis(10))?;
    set.enable(exec)?;
    let mut child = match args.split_first() {
        Some((cmd, rest)) => Some(Command::new(cmd).args(rest).spawn()?),
        None => None,
    };
    let status = loop {
        pb.poll(Some(Duration::from_millis(100)))?;
        if let Some(c) = &mut child
            && let Some(status) = c.try_wait()?
        {
            break Some(status);
        }
    };
    set.disable(exec)?;
    pb.consume()?;
    pb.flush_ordered()?;
    drop(pb);
    eprintln!("execmon: {execs} execs");
    std::process::exit(status.and_then(|s| s.code()).unwrap_or(0));
}
