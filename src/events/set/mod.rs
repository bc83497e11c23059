//! An event set, step by step: opened with its options (`builder`), one
//! ring per CPU owned by a software dummy event (`rings`); every event
//! resolved to an attr (`resolve`), opened once per CPU and target,
//! disabled, its records sent into its CPU's ring
//! (`PERF_EVENT_IOC_SET_OUTPUT`), its kernel ids recorded so that samples
//! can be attributed (`add`); enabled, attached to, read (`control`);
//! opened again on CPUs that come online or back, for its reader
//! (`hotplug`).
//! Every step undoes itself on failure: an event is added whole or not at
//! all. This file holds the set and what it says about its events.

mod add;
mod builder;
mod control;
mod hotplug;
mod resolve;
mod rings;

pub use builder::EventSetBuilder;
pub(crate) use hotplug::IdsObserver;

use super::desc::{EventId, Group, Target};
use super::format::Format;
use super::probe_events::ProbeEvent;
use super::programs::{AttachedProgram, ProgramWatch};
use super::sideband::Sideband;
use super::table::Decoder;
use super::tracefs::Tracefs;
use crate::decode::DecodeAttr;
use crate::error::{Error, Result, What};
use crate::kernel::{self, PerfEventAttr, sys};
use crate::reader::config::Wakeup;
use crate::reader::lost::Counted;
use rings::RingOwner;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

/// What every sample of a set carries, in this order: the event's id
/// first (to find its layout), then what ordering and users need.
pub(crate) const BASE_SAMPLE_TYPE: u64 = kernel::PERF_SAMPLE_IDENTIFIER
    | kernel::PERF_SAMPLE_IP
    | kernel::PERF_SAMPLE_TID
    | kernel::PERF_SAMPLE_TIME
    | kernel::PERF_SAMPLE_CPU;

/// What kind of event was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// A software event.
    Software,
    /// A hardware event.
    Hardware,
    /// A tracepoint.
    Tracepoint,
    /// A kprobe or kretprobe.
    Kprobe,
    /// A uprobe or uretprobe.
    Uprobe,
    /// The caller's attr.
    Raw,
}

/// What an event of a set is, as opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    /// The event's id.
    pub id: EventId,
    /// What was opened: for a hardware event with a fallback,
    /// [`EventKind::Software`] if it fell back.
    pub kind: EventKind,
    /// `perf_event_attr.type` as opened.
    pub type_: u32,
    /// `perf_event_attr.config` as opened.
    pub config: u64,
    /// Why a hardware event fell back to software: the hardware event's
    /// error (`None`: no fallback happened).
    pub fallback: Option<Error>,
    /// The `PERF_SAMPLE_*` bits of its samples.
    pub sample_type: u64,
    /// The CPUs it was opened on (one event per CPU and target).
    pub cpus: Vec<u32>,
    /// Kernel events open for it (CPUs × targets).
    pub instances: usize,
    /// Whether it is enabled.
    pub enabled: bool,
    /// Whether a BPF program is attached.
    pub bpf_attached: bool,
    /// For an event on a tracepoint (a tracepoint, a probe with arguments,
    /// a raw tracepoint attr): the BPF programs the kernel runs on every
    /// hit, whoever attached them (`PERF_EVENT_IOC_QUERY_BPF`; empty where
    /// the kernel will not say). A program that returns 0 makes the kernel
    /// drop the hit for every perf event on the tracepoint, this set's
    /// included: samples vanish. Each one the set did not attach is also
    /// warned about once (the `log` facade, `perfbuf_set_print`).
    pub bpf_programs: Vec<AttachedProgram>,
}

/// A set's target, opened.
struct OpenTarget {
    target: Target,
    /// A cgroup's directory, for `PERF_FLAG_PID_CGROUP`.
    cgroup: Option<OwnedFd>,
}

impl OpenTarget {
    /// `perf_event_open`'s pid argument and extra flags.
    fn pid_and_flags(&self) -> (i32, libc::c_ulong) {
        match (&self.target, &self.cgroup) {
            (Target::Pid(pid), _) => (*pid, 0),
            (Target::Cgroup(_), Some(fd)) => (fd.as_raw_fd(), kernel::PERF_FLAG_PID_CGROUP as libc::c_ulong),
            _ => (-1, 0),
        }
    }
}

/// One kernel event of a set's event: on one CPU, for one target.
struct Instance {
    cpu: i32,
    target: usize,
    /// Its losses in its ring's tally: dropped before `fd`.
    _counted: Option<Counted>,
    fd: OwnedFd,
    id: u64,
    /// Closed before `fd`, which detaches the program.
    link: Option<OwnedFd>,
}

/// A set's event, opened.
struct Opened {
    kind: EventKind,
    /// The attr as the kernel got it (CPU and target aside): for the
    /// perf.data writer, and to open the event again with another filter.
    attr: PerfEventAttr,
    /// What it is, for people (`"sched:sched_switch"`, `"software"`).
    name: String,
    fallback: Option<Error>,
    type_: u32,
    config: u64,
    sample_type: u64,
    group: Group,
    instances: Vec<Instance>,
    enabled: bool,
    bpf_attached: bool,
    /// A probe with arguments: its dynamic event, deleted after the
    /// instances are closed.
    probe: Option<ProbeEvent>,
    /// What a probe PMU attr's `config1` points to (symbol or path).
    target_name: Option<Arc<CString>>,
    /// The BPF programs on its tracepoint, its own and others'.
    programs: ProgramWatch,
    /// Its ftrace filter, for the CPUs that come online later.
    filter: Option<String>,
    /// The BPF program attached to it, for the CPUs that come online later.
    prog: Option<Arc<OwnedFd>>,
}

impl Opened {
    /// The programs on the event's tracepoint (none for other events).
    fn bpf_programs(&self) -> Vec<AttachedProgram> {
        match self.instances.first() {
            Some(inst) if self.type_ == kernel::PERF_TYPE_TRACEPOINT => {
                self.programs.check(inst.fd.as_fd(), &self.name)
            }
            _ => Vec::new(),
        }
    }
}

/// Perf events opened on every CPU (and target), sharing one ring per CPU:
/// tracepoints, kprobes and uprobes for a tracing monitor, sampling events
/// with a BPF program attached for a profiler. Samples are read by the
/// same reader as perf buffers ([`EventSet::reader`]), attributed to
/// their event and decoded ([`super::Decoder`]).
///
/// Events are opened disabled: add them, attach programs, then enable.
/// Dropping the set detaches programs, then closes every event and ring.
///
/// ```no_run
/// use perfbuf::events::{Event, EventRecord, EventSet};
/// # fn main() -> perfbuf::Result<()> {
/// let mut set = EventSet::builder().build()?;
/// let exec = set.add(&Event::tracepoint("sched:sched_process_exec"))?;
/// set.enable(exec)?;
/// let mut pb = set.reader(|rec| {
///     if let EventRecord::Sample(s) = rec {
///         let file = s.field("filename").and_then(|v| v.as_str().map(str::to_owned));
///         println!("{} exec {:?}", s.pid(), file);
///     }
/// })?;
/// pb.poll(None)?;
/// # Ok(()) }
/// ```
pub struct EventSet {
    cpus: Vec<i32>,
    offline: Vec<u32>,
    targets: Vec<OpenTarget>,
    wakeup: Wakeup,
    max_delay: Option<Duration>,
    inherit: bool,
    sideband: Sideband,
    default_attr: Option<PerfEventAttr>,
    owners: Vec<RingOwner>,
    events: BTreeMap<EventId, Opened>,
    next_id: u32,
    decoder: Decoder,
    tracefs: Option<Tracefs>,
    /// The tracefs group of this set's probes with arguments, once it has one.
    probe_group: Option<String>,
    /// Told of every event added, and of every event opened again with
    /// new kernel ids (the perf.data writers of this set).
    add_observers: Vec<Weak<AddObserver>>,
    /// The CPUs asked for, online or not: a reader serves those that come
    /// and go.
    asked: Vec<i32>,
    /// What the set shares with its reader for CPUs that come and go.
    share: Arc<Mutex<hotplug::Share>>,
}

/// What [`EventSet::observe_adds`] calls after each add, and after
/// [`EventSet::set_filter`] gave an event new instances (new kernel ids).
pub(crate) type AddObserver = dyn Fn(&EventSet, EventId) + Send + Sync;

impl EventSet {
    /// The side-band records the set asked for.
    pub fn sideband(&self) -> Sideband {
        self.sideband
    }

    /// The CPUs the set has events on.
    pub fn cpus(&self) -> Vec<u32> {
        let mut cpus: Vec<u32> = self.cpus.iter().map(|&c| c as u32).collect();
        // With CPUs its reader gave rings since (see `hotplug`).
        cpus.extend(hotplug::lock(&self.share).owners.iter().map(|o| o.cpu as u32));
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }

    /// The CPUs asked for that were offline, skipped.
    pub fn offline_cpus(&self) -> &[u32] {
        &self.offline
    }

    /// The decoder of this set's records (shared: it follows events
    /// added and removed later).
    pub fn decoder(&self) -> Decoder {
        self.decoder.clone()
    }

    fn opened(&self, id: EventId) -> Result<&Opened> {
        self.events.get(&id).ok_or(no_event(id))
    }

    fn opened_mut(&mut self, id: EventId) -> Result<&mut Opened> {
        self.events.get_mut(&id).ok_or(no_event(id))
    }

    /// The ids of the set's events, in the order they were added.
    pub fn events(&self) -> Vec<EventId> {
        self.events.keys().copied().collect()
    }

    /// What was opened for `id`.
    pub fn info(&self, id: EventId) -> Result<EventInfo> {
        let e = self.opened(id)?;
        let share = hotplug::lock(&self.share);
        let late = share.instances.iter().filter(|(i, _)| *i == id).map(|(_, inst)| inst);
        let all: Vec<&Instance> = e.instances.iter().chain(late).collect();
        let mut cpus: Vec<u32> = all.iter().map(|i| i.cpu as u32).collect();
        cpus.sort_unstable();
        cpus.dedup();
        Ok(EventInfo {
            id,
            kind: e.kind,
            type_: e.type_,
            config: e.config,
            fallback: e.fallback.clone(),
            sample_type: e.sample_type,
            cpus,
            instances: all.len(),
            enabled: e.enabled,
            bpf_attached: e.bpf_attached,
            bpf_programs: e.bpf_programs(),
        })
    }

    /// `id`'s `perf_event_attr` as the kernel opened it (the same for every
    /// CPU and target; a hardware event that fell back: the software one).
    /// With [`Self::instance_ids`], what a perf.data attr section holds.
    pub fn attr(&self, id: EventId) -> Result<PerfEventAttr> {
        Ok(self.opened(id)?.attr)
    }

    /// The kernel ids of `id`'s instances (`PERF_EVENT_IOC_ID`; CPU by
    /// CPU, each CPU's targets in order): the `PERF_SAMPLE_IDENTIFIER` its
    /// records carry.
    pub fn instance_ids(&self, id: EventId) -> Result<Vec<u64>> {
        Ok(self.opened(id)?.instances.iter().map(|i| i.id).collect())
    }

    /// `id`'s name: a tracepoint's `subsystem:name`, a probe's place, or
    /// its kind (`"software"`, `"hardware"`, `"raw"`).
    pub fn name(&self, id: EventId) -> Result<&str> {
        Ok(&self.opened(id)?.name)
    }

    /// The tracefs event `id` is (`subsystem:name`): a tracepoint's name,
    /// the dynamic event a probe with arguments was made (its format is
    /// what decodes its samples); `None` for other events.
    pub(crate) fn tracefs_event(&self, id: EventId) -> Result<Option<String>> {
        let opened = self.opened(id)?;
        Ok(match (&opened.probe, opened.kind) {
            (Some(probe), _) => Some(probe.tracefs_name()),
            (None, EventKind::Tracepoint) => Some(opened.name.clone()),
            _ => None,
        })
    }

    /// The targets the set watches (`Target::System` when none was given).
    pub fn targets(&self) -> Vec<Target> {
        self.targets.iter().map(|t| t.target.clone()).collect()
    }

    /// The fd of kernel event `idx` of `id` (CPU by CPU, each CPU's
    /// targets in order); the set keeps owning it.
    pub fn instance_fd(&self, id: EventId, idx: usize) -> Result<std::os::fd::RawFd> {
        let inst =
            self.opened(id)?.instances.get(idx).ok_or(Error::invalid("no such instance of the event"))?;
        Ok(inst.fd.as_raw_fd())
    }

    /// The layout of `id`'s records: what [`crate::decode`] needs to decode
    /// them (ENOENT for an id the set does not have).
    pub fn decode_attr(&self, id: EventId) -> Result<DecodeAttr> {
        self.decoder.read().layout(id).map(|l| l.decode).ok_or(no_event(id))
    }

    /// `id`'s tracepoint format (`None`: not a tracepoint).
    pub fn format(&self, id: EventId) -> Result<Option<Arc<Format>>> {
        self.decoder.read().layout(id).map(|l| l.format.clone()).ok_or(no_event(id))
    }
}

impl Drop for EventSet {
    /// Programs first (links closed), then the events, then the rings;
    /// a reader that outlives the set opens nothing more.
    fn drop(&mut self) {
        self.take_in();
        {
            let mut share = hotplug::lock(&self.share);
            share.closed = true;
            share.templates.clear();
        }
        let events = core::mem::take(&mut self.events);
        for opened in events.into_values().rev() {
            close(opened);
        }
        self.owners.clear();
    }
}

/// Closes an event: every link before any event fd, every fd before its
/// probe's definition (the kernel keeps a probe in use).
fn close(mut opened: Opened) {
    opened.instances.iter_mut().for_each(|i| drop(i.link.take()));
    for inst in opened.instances {
        let _ = sys::perf_ioctl(inst.fd.as_fd(), kernel::PERF_EVENT_IOC_DISABLE, 0);
    }
    drop(opened.probe);
}

fn decode_attr(attr: &PerfEventAttr) -> DecodeAttr {
    DecodeAttr {
        sample_type: attr.sample_type,
        read_format: attr.read_format,
        sample_id_all: attr.has(kernel::ATTR_FLAG_SAMPLE_ID_ALL),
        sample_regs_user: attr.sample_regs_user,
        sample_regs_intr: attr.sample_regs_intr,
        branch_sample_type: attr.branch_sample_type,
    }
}

/// `PERF_FORMAT_LOST` where the kernel has it: every event of a set
/// counts what it could not write, for exact lost figures of its ring.
fn counted_losses() -> u64 {
    if sys::format_lost_supported() { kernel::PERF_FORMAT_LOST } else { 0 }
}

fn no_event(id: EventId) -> Error {
    Error::new(libc::ENOENT, What::NoEvent(id.0))
}
