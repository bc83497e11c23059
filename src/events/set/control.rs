//! Running a set's events: enabling and disabling them, attaching BPF
//! programs, reading their counts.

use super::{EventKind, EventSet, Instance, hotplug};
use crate::error::{Error, Result, SetStep, What};
use crate::events::counts::Counts;
use crate::events::desc::{EventId, Group};
use crate::kernel::{self, sys};
use crate::log;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::Arc;

impl EventSet {
    /// Enables an event on every CPU and target. On failure those it
    /// enabled are disabled again.
    pub fn enable(&mut self, id: EventId) -> Result<()> {
        self.take_in();
        let opened = self.opened_mut(id)?;
        for (n, inst) in opened.instances.iter().enumerate() {
            if let Err(e) = sys::perf_ioctl(inst.fd.as_fd(), kernel::PERF_EVENT_IOC_ENABLE, 0) {
                for done in &opened.instances[..n] {
                    let _ = sys::perf_ioctl(done.fd.as_fd(), kernel::PERF_EVENT_IOC_DISABLE, 0);
                }
                return Err(log::failed(e.with(What::EventSet(SetStep::Enable, inst.cpu))));
            }
        }
        opened.enabled = true;
        // A program already on the tracepoint may drop every sample: say so now.
        opened.bpf_programs();
        self.publish();
        Ok(())
    }

    /// Disables an event on every CPU and target (all are tried; the
    /// first error is returned).
    pub fn disable(&mut self, id: EventId) -> Result<()> {
        self.take_in();
        let opened = self.opened_mut(id)?;
        let mut first = Ok(());
        for inst in &opened.instances {
            if let Err(e) = sys::perf_ioctl(inst.fd.as_fd(), kernel::PERF_EVENT_IOC_DISABLE, 0) {
                first = first.and(Err(log::failed(e.with(What::EventSet(SetStep::Disable, inst.cpu)))));
            }
        }
        opened.enabled = false;
        self.publish();
        first
    }

    /// Enables every event; on failure, those this call enabled are
    /// disabled again.
    pub fn enable_all(&mut self) -> Result<()> {
        let ids: Vec<EventId> = self.events.iter().filter(|(_, e)| !e.enabled).map(|(&id, _)| id).collect();
        for (n, &id) in ids.iter().enumerate() {
            if let Err(e) = self.enable(id) {
                for &done in &ids[..n] {
                    let _ = self.disable(done);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Disables every event (all are tried; the first error is returned).
    pub fn disable_all(&mut self) -> Result<()> {
        let mut first = Ok(());
        for id in self.events() {
            let done = self.disable(id);
            first = first.and(done);
        }
        first
    }

    /// Attaches a BPF program to the event: a BPF link (Linux 5.15), or
    /// `PERF_EVENT_IOC_SET_BPF` on older kernels. A sampling event gets it
    /// on every CPU and target, each running it on its own samples; a
    /// tracepoint runs it on every hit wherever it is attached, so it gets
    /// it once, and a kprobe or uprobe once per target. The program's type
    /// must suit the event (PERF_EVENT for sampling events, TRACEPOINT for
    /// tracepoints, KPROBE for probes).
    /// Attach before enabling: no sample escapes the program. On failure
    /// the links made are closed (with SET_BPF, the program stays on the
    /// CPUs done until the event is removed).
    pub fn attach_bpf(&mut self, id: EventId, prog: BorrowedFd<'_>) -> Result<()> {
        self.take_in();
        // Kept for the CPUs that come online later.
        let kept = prog
            .try_clone_to_owned()
            .map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EMFILE)))?;
        let opened = self.opened_mut(id)?;
        if opened.bpf_attached {
            return Err(Error::new(libc::EEXIST, What::EventSet(SetStep::AttachBpf, -1)));
        }
        let links = sys::bpf_perf_links_supported(prog);
        let kind = opened.kind;
        for n in 0..opened.instances.len() {
            let inst = &opened.instances[n];
            if !runs_program(kind, opened.type_, &opened.instances, n) {
                continue;
            }
            let attached = if links {
                sys::bpf_link_perf_event(prog, inst.fd.as_raw_fd()).map(Some)
            } else {
                sys::perf_ioctl(inst.fd.as_fd(), kernel::PERF_EVENT_IOC_SET_BPF, prog.as_raw_fd() as u64)
                    .map(|()| None)
            };
            match attached {
                Ok(link) => opened.instances[n].link = link,
                Err(e) => {
                    let cpu = inst.cpu;
                    opened.instances[..n].iter_mut().for_each(|i| drop(i.link.take()));
                    return Err(log::failed(e.with(What::EventSet(SetStep::AttachBpf, cpu))));
                }
            }
        }
        opened.bpf_attached = true;
        opened.prog = Some(Arc::new(kept));
        opened.programs.attached(prog);
        self.publish();
        Ok(())
    }

    /// The event's counts, summed over its CPUs and targets (a group
    /// leader's: with its members').
    pub fn read(&self, id: EventId) -> Result<Counts> {
        self.read_where(id, |_| true)
    }

    /// The event's counts on one CPU.
    pub fn read_cpu(&self, id: EventId, cpu: u32) -> Result<Counts> {
        if !self.cpus().contains(&cpu) {
            return Err(Error::invalid("the set has no events on this CPU"));
        }
        self.read_where(id, |i| i.cpu == cpu as i32)
    }

    fn read_where(&self, id: EventId, pick: impl Fn(&Instance) -> bool) -> Result<Counts> {
        let e = self.opened(id)?;
        let group = e.attr.read_format & kernel::PERF_FORMAT_GROUP != 0;
        let lost = e.attr.read_format & kernel::PERF_FORMAT_LOST != 0;
        let members =
            if group { self.events.values().filter(|m| m.group == Group::Member(id)).count() } else { 0 };
        let mut words = vec![0u64; 4 + 3 * (members + 1)];
        let mut counts = Counts::default();
        // With those its reader opened on CPUs that came online since (the
        // share locked before the decoder, as the reader locks them).
        let share = hotplug::lock(&self.share);
        let table = self.decoder.read();
        let late = share.instances.iter().filter(|(i, _)| *i == id).map(|(_, inst)| inst);
        for inst in e.instances.iter().chain(late).filter(|i| pick(i)) {
            let n = sys::read_counts(inst.fd.as_fd(), &mut words)
                .map_err(|err| log::failed(err.with(What::EventSet(SetStep::Read, inst.cpu))))?;
            counts.add_read(&words[..n], group, lost, |kid| table.event_of_id(kid))?;
        }
        Ok(counts)
    }
}

/// Whether instance `n` of an event takes the program. A sampling event
/// runs its program on its own overflows: every instance. A tracepoint
/// runs the programs of any of its perf events on every hit (and refuses
/// the same program twice with EEXIST): one instance. A kprobe or uprobe
/// instance is a probe of its own, firing on every CPU for its target:
/// one instance per target, or each hit would run the program once per CPU.
fn runs_program(kind: EventKind, type_: u32, instances: &[Instance], n: usize) -> bool {
    match kind {
        EventKind::Tracepoint => n == 0,
        EventKind::Raw if type_ == kernel::PERF_TYPE_TRACEPOINT => n == 0,
        EventKind::Kprobe | EventKind::Uprobe => {
            !instances[..n].iter().any(|i| i.target == instances[n].target)
        }
        _ => true,
    }
}
