//! What both commands share while they run: the stop conditions (Ctrl-C,
//! SIGTERM, a duration), the status line on a terminal, CPU lists.

use crate::fail::{Failure, Result};
use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// SIGINT and SIGTERM set the stop flag (and interrupt a poll: no
/// SA_RESTART) instead of killing the process, so it drains and sums up.
pub fn catch_stop_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction with a handler that only stores to an
        // atomic (async-signal-safe); the struct outlives the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether a stop signal came.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// `5`, `2.5s`, `300ms`, `1m`.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let (num, unit) = match s.find(|c: char| c.is_ascii_alphabetic()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num.parse().map_err(|_| format!("bad duration `{s}`: write 10, 10s, 500ms or 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("bad duration unit in `{s}`: ms, s, m or h")),
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("bad duration `{s}`: must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// A CPU list argument (one value for clap, however many CPUs).
#[derive(Clone, Debug)]
pub struct CpuList(pub Vec<u32>);

/// `0,2-3`, for clap.
pub fn parse_cpu_list(s: &str) -> std::result::Result<CpuList, String> {
    parse_cpus(s).map(CpuList)
}

/// `0,2-3`.
pub fn parse_cpus(s: &str) -> std::result::Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let bad = || format!("bad CPU list `{s}`: write e.g. 0,2-3");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().map_err(|_| bad())?),
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// The status line: records/s, lost, per-CPU backlog, refreshed a few
/// times a second, only when stderr is a terminal.
pub struct Status {
    on: bool,
    last: Instant,
    last_records: u64,
    shown: bool,
}

impl Status {
    pub fn new() -> Status {
        Status { on: std::io::stderr().is_terminal(), last: Instant::now(), last_records: 0, shown: false }
    }

    /// Redraws when due; `backlog` is bytes waiting per CPU.
    pub fn tick(&mut self, records: u64, lost: u64, backlog: impl FnOnce() -> Vec<(u32, u64)>) {
        let since = self.last.elapsed();
        if !self.on || since < Duration::from_millis(250) {
            return;
        }
        let rate = (records - self.last_records) as f64 / since.as_secs_f64();
        let mut line = format!("{rate:.0} records/s, {records} records, {lost} lost, backlog");
        for (cpu, bytes) in backlog() {
            line.push_str(&format!(" cpu{cpu}={bytes}B"));
        }
        eprint!("\r\x1b[K{line}");
        let _ = std::io::stderr().flush();
        self.last = Instant::now();
        self.last_records = records;
        self.shown = true;
    }

    /// Clears the line before the summary.
    pub fn clear(&mut self) {
        if self.shown {
            eprint!("\r\x1b[K");
            self.shown = false;
        }
    }
}

/// A poll's EINTR (a stop signal) is not a failure.
pub fn poll_result(r: perfbuf::Result<usize>) -> Result<usize> {
    match r {
        Ok(n) => Ok(n),
        Err(e) if e.errno() == libc::EINTR => Ok(0),
        Err(e) => Err(Failure::lib("reading the rings", &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_cpus() {
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("300ms").unwrap(), Duration::from_millis(300));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(
            parse_duration("x").is_err() && parse_duration("-1").is_err() && parse_duration("3d").is_err()
        );
        assert_eq!(parse_cpus("0,2-3,2").unwrap(), vec![0, 2, 3]);
        assert!(parse_cpus("3-1").is_err() && parse_cpus("a").is_err());
    }
}
