//! BPF programs on an event's tracepoint. The kernel runs every program
//! attached to a tracepoint on each hit, whichever perf event attached it,
//! and when a classic tracepoint program returns 0 it drops the hit for
//! every perf event on the tracepoint: a set's samples would vanish without
//! a word. The kernel tells which programs are attached
//! (`PERF_EVENT_IOC_QUERY_BPF`): a set lists them with each event
//! ([`super::EventInfo::bpf_programs`]) and warns once about each one it
//! did not attach itself.

use crate::kernel::sys;
use crate::log;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Mutex;

/// A BPF program the kernel runs on every hit of an event's tracepoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachedProgram {
    /// Its id (`bpftool prog show id ID`).
    pub id: u32,
    /// The name it was loaded with; empty when the kernel would not say
    /// (reading it needs CAP_SYS_ADMIN, and the program may be gone).
    pub name: String,
    /// Whether this set attached it ([`super::EventSet::attach_bpf`]).
    pub ours: bool,
}

/// What a set knows of the programs on one event's tracepoint: its own,
/// and those it has warned about.
#[derive(Debug, Default)]
pub(crate) struct ProgramWatch {
    own: Option<u32>,
    warned: Mutex<Vec<u32>>,
}

impl ProgramWatch {
    /// The set attached program `prog` to the event.
    pub(crate) fn attached(&mut self, prog: BorrowedFd<'_>) {
        self.own = sys::bpf_prog_info(prog).ok().map(|info| info.id);
    }

    /// The programs on the tracepoint of perf event `fd` (none where the
    /// kernel will not say: without CAP_PERFMON, before Linux 4.16); warns
    /// once about each one the set did not attach, naming `event`.
    pub(crate) fn check(&self, fd: BorrowedFd<'_>, event: &str) -> Vec<AttachedProgram> {
        let ids = match sys::perf_query_bpf(fd) {
            Ok(ids) => ids,
            Err(e) => {
                log::debug(format_args!("{event}: cannot list the BPF programs on its tracepoint: {e}"));
                return Vec::new();
            }
        };
        let programs: Vec<AttachedProgram> = ids
            .into_iter()
            .map(|id| AttachedProgram { id, name: name_of(id), ours: self.own == Some(id) })
            .collect();
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        for p in programs.iter().filter(|p| !p.ours) {
            if warned.contains(&p.id) {
                continue;
            }
            warned.push(p.id);
            log::warn(format_args!(
                "{event}: BPF program {} {:?} is attached to its tracepoint: where it returns 0 the kernel \
                 drops the hit for every perf event on the tracepoint, this set's samples included \
                 (bpftool prog show id {})",
                p.id, p.name, p.id
            ));
        }
        programs
    }
}

/// Program `id`'s name, or "" if the kernel will not say.
fn name_of(id: u32) -> String {
    let info = sys::bpf_prog_fd_by_id(id).and_then(|fd| sys::bpf_prog_info(fd.as_fd()));
    info.map(|i| i.name).unwrap_or_default()
}
