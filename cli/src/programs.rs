//! Warnings about BPF programs on the tracepoints being traced. The kernel
//! runs them on every hit, and where one returns 0 it drops the hit for
//! every perf event on the tracepoint: the output would miss records
//! without a word. Each program is named once, when first seen.

use crate::run::Status;
use perfbuf::events::{EventId, EventSet};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How often a running command looks for programs attached since.
const EVERY: Duration = Duration::from_secs(1);

pub struct ProgramWarnings {
    command: &'static str,
    warned: HashSet<(EventId, u32)>,
    checked: Option<Instant>,
}

impl ProgramWarnings {
    /// For `perfbuf COMMAND`'s messages.
    pub fn new(command: &'static str) -> ProgramWarnings {
        ProgramWarnings { command, warned: HashSet::new(), checked: None }
    }

    /// Warns about the programs on `events`' tracepoints not warned about
    /// yet, at most once a second unless `now`.
    pub fn check(&mut self, set: &EventSet, events: &[(EventId, String)], status: &mut Status, now: bool) {
        if !now && self.checked.is_some_and(|at| at.elapsed() < EVERY) {
            return;
        }
        self.checked = Some(Instant::now());
        for (id, name) in events {
            let Ok(info) = set.info(*id) else { continue };
            for p in info.bpf_programs.iter().filter(|p| !p.ours) {
                if self.warned.insert((*id, p.id)) {
                    status.clear();
                    eprintln!("{}", warning(self.command, name, p.id, &p.name));
                }
            }
        }
    }
}

fn warning(command: &str, event: &str, id: u32, name: &str) -> String {
    let program =
        if name.is_empty() { format!("BPF program {id}") } else { format!("BPF program {id} \"{name}\"") };
    format!(
        "perfbuf {command}: warning: {program} is attached to {event}: where it returns 0 the kernel drops the \
         event for every perf event on it, so records of {event} may be missing (bpftool prog show id {id})"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_warning_names_the_program_and_the_event() {
        let text = super::warning("trace", "sched:sched_switch", 42, "drop_all");
        assert!(text.starts_with(
            "perfbuf trace: warning: BPF program 42 \"drop_all\" is attached to sched:sched_switch"
        ));
        assert!(text.ends_with("(bpftool prog show id 42)"), "{text}");
        assert!(super::warning("record", "a:b", 7, "").contains("BPF program 7 is attached"));
    }
}
