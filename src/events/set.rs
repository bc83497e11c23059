//! Opening an event set: one ring per CPU, owned by a software dummy
//! event; every event opened once per CPU and target, disabled, its
//! records sent into its CPU's ring (`PERF_EVENT_IOC_SET_OUTPUT`), its
//! kernel ids recorded so that samples can be attributed. Every step undoes
//! itself on failure: an event is added whole or not at all.

use super::counts::Counts;
use super::desc::{Event, EventId, Group, Kind, Sampling, Target, UprobeAt};
use super::pmu::{DynamicPmu, EVENT_SOURCES, ProbePmu};
use super::probe_events::{self, Definition, ProbeEvent, ProbeType};
use super::programs::{AttachedProgram, ProgramWatch};
use super::sideband::Sideband;
use super::table::{Decoder, Layout};
use super::tracefs::Tracefs;
use super::{elf, format::Format};
use crate::decode::DecodeAttr;
use crate::error::{Error, Result, SetStep, What};
use crate::kernel::sys::{self, AttrSource};
use crate::kernel::{self, PerfEventAttr, cpu};
use crate::log;
use crate::reader::OwnedRing;
use crate::reader::config::Wakeup;
use crate::reader::lost::{Counted, LostTally};
use crate::ring::PerfRing;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

mod hotplug;
pub(crate) use hotplug::IdsObserver;

/// What every sample of a set carries, in this order: the event's id
/// first (to find its layout), then what ordering and users need.
pub(crate) const BASE_SAMPLE_TYPE: u64 = kernel::PERF_SAMPLE_IDENTIFIER
    | kernel::PERF_SAMPLE_IP
    | kernel::PERF_SAMPLE_TID
    | kernel::PERF_SAMPLE_TIME
    | kernel::PERF_SAMPLE_CPU;

/// The errors a hardware event falls back to software on: a machine or
/// virtual machine without the PMU (what profilers check for).
const FALLBACK_ERRNOS: [i32; 5] = [libc::EOPNOTSUPP, libc::ENOENT, libc::ENODEV, libc::EINVAL, libc::EACCES];

/// The caller's `read_format` bits a raw attr keeps (the counts reader
/// understands them).
const READ_FORMATS_KEPT: u64 = kernel::PERF_FORMAT_GROUP | kernel::PERF_FORMAT_LOST;

/// The flags a set's default attr gives its events: `inherit`,
/// `exclude_user`, `_kernel`, `_hv`, `_idle`, `_host`, `_guest`,
/// `_callchain_kernel`, `_callchain_user`.
const DEFAULT_ATTR_FLAGS: u64 = kernel::ATTR_FLAG_INHERIT | 0b1111 << 4 | 0b1111 << 19;

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

/// One CPU's ring and the dummy event that owns it.
struct RingOwner {
    cpu: i32,
    /// What the events writing into this ring lost, for its reader.
    tally: LostTally,
    /// The owner's and side-band events' counts in the tally: dropped
    /// before their fds (fields drop in order).
    counted: Vec<Counted>,
    fd: OwnedFd,
    /// Dummy events asking for side-band records of the set's other
    /// targets, writing into this ring.
    sideband: Vec<OwnedFd>,
    /// The mapping, until a reader takes it.
    ring: Option<PerfRing>,
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

/// Options of an [`EventSet`]: see [`EventSet::builder`].
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until built"]
pub struct EventSetBuilder {
    cpus: Option<Vec<u32>>,
    targets: Vec<Target>,
    pages: usize,
    wakeup: Wakeup,
    max_delay: Option<Duration>,
    inherit: bool,
    sideband: Sideband,
    default_attr: Option<PerfEventAttr>,
}

impl EventSetBuilder {
    /// Ask for these side-band records (process and mapping news: see
    /// [`Sideband`]) in each CPU's ring, for the set's targets (with
    /// [`Self::inherit`], their children's too). They flow from the moment
    /// the set is built, whatever events are enabled, each with the
    /// `sample_id` trailer (pid, tid, time, CPU) that orders it with the
    /// samples; readers get them as [`super::EventRecord::Sideband`]. The
    /// kernel counts only samples towards a wake-up, so with the default
    /// [`Wakeup::EveryRecord`] the rings wake the reader at every byte
    /// written instead (a 1-byte watermark); with batching, the delay bound
    /// drains them. Needs rings (EINVAL with `pages(0)`).
    pub fn sideband(mut self, records: Sideband) -> Self {
        self.sideband = records;
        self
    }

    /// The attr fields every event added without its own attr (every
    /// kind but [`Event::raw`]) takes: `sample_type` bits (added to the
    /// event's), the exclusion flags (`exclude_user`, `exclude_kernel`,
    /// `exclude_hv`, `exclude_idle`, `exclude_host`, `exclude_guest`,
    /// `exclude_callchain_*`), `inherit`, `sample_regs_user`,
    /// `sample_stack_user` and `sample_max_stack`; and, for a software or
    /// hardware event left counting, its `sample_period` or (with `freq`)
    /// `sample_freq`, which then adds `PERF_SAMPLE_PERIOD` as
    /// [`Event::frequency`] does. Other fields are the set's or the event's.
    pub fn default_attr(mut self, attr: PerfEventAttr) -> Self {
        self.default_attr = Some(attr);
        self
    }

    /// Only these CPUs (default: every online CPU). Offline ones are
    /// skipped ([`EventSet::offline_cpus`]); if none is online, building
    /// fails with ENODEV.
    pub fn cpus(mut self, cpus: &[u32]) -> Self {
        self.cpus = Some(cpus.to_vec());
        self
    }

    /// Watch this task (on every CPU of the set): a thread id, so a
    /// process's pid watches its main thread (and, with [`Self::inherit`],
    /// the threads and children it creates later). Several targets may be
    /// given; without any, the set watches every task.
    pub fn pid(mut self, pid: i32) -> Self {
        self.targets.push(Target::Pid(pid));
        self
    }

    /// Watch the tasks of this cgroup (a v2 directory, e.g.
    /// `/sys/fs/cgroup/my.slice`) and its descendants.
    pub fn cgroup(mut self, dir: impl Into<PathBuf>) -> Self {
        self.targets.push(Target::Cgroup(dir.into()));
        self
    }

    /// With [`Self::pid`]: follow the children the processes create
    /// after the events are added.
    pub fn inherit(mut self, on: bool) -> Self {
        self.inherit = on;
        self
    }

    /// Data pages of each CPU's ring, a power of two (default 8); 0 for no
    /// rings at all (a profiler whose BPF program does all the work).
    pub fn pages(mut self, pages: usize) -> Self {
        self.pages = pages;
        self
    }

    /// When the kernel wakes the reader (default: every sample).
    pub fn wakeup(mut self, wakeup: Wakeup) -> Self {
        self.wakeup = wakeup;
        self
    }

    /// With a batching [`Wakeup`], no sample waits longer than this to be
    /// read (default 10 ms).
    pub fn max_delay(mut self, bound: Duration) -> Self {
        self.max_delay = Some(bound);
        self
    }

    /// Opens the set: each CPU's ring, no events yet. Fails with ENODEV
    /// if no CPU asked for is online, and with the kernel's error
    /// otherwise; nothing stays open then.
    pub fn build(self) -> Result<EventSet> {
        EventSet::open(self)
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
    /// A builder with the defaults: every online CPU, every task, 8 pages
    /// per CPU, a wake-up per sample.
    pub fn builder() -> EventSetBuilder {
        EventSetBuilder {
            cpus: None,
            targets: Vec::new(),
            pages: 8,
            wakeup: Wakeup::EveryRecord,
            max_delay: None,
            inherit: false,
            sideband: Sideband::NONE,
            default_attr: None,
        }
    }

    fn open(b: EventSetBuilder) -> Result<EventSet> {
        if b.pages != 0 && !b.pages.is_power_of_two() {
            return Err(log::failed(Error::new(libc::EINVAL, What::PageCount(b.pages))));
        }
        if b.pages == 0 && !b.sideband.is_empty() {
            return Err(log::invalid("side-band records need rings: the set has none (pages 0)"));
        }
        if b.max_delay.is_some_and(|d| d > crate::reader::config::MAX_MAX_DELAY) {
            return Err(log::invalid("max_delay is above 60 s"));
        }
        let online = cpu::online_mask().map_err(|e| log::failed(e.with(What::OnlineCpus)))?;
        let asked: Vec<u32> = match b.cpus {
            Some(list) => list,
            None => (0..cpu::possible_cpu_count()? as u32).collect(),
        };
        let is_online = |c: u32| online.get(c as usize).copied().unwrap_or(false);
        let (on, off): (Vec<u32>, Vec<u32>) = asked.iter().partition(|&&c| is_online(c));
        if on.is_empty() {
            return Err(log::failed(Error::new(libc::ENODEV, What::NoOnlineCpu)));
        }
        for c in &off {
            log::info(format_args!("event set: cpu #{c} is offline, skipped"));
        }
        let mut targets = Vec::new();
        for target in if b.targets.is_empty() { vec![Target::System] } else { b.targets } {
            let cgroup = match &target {
                Target::Cgroup(dir) => Some(open_cgroup(dir)?),
                _ => None,
            };
            targets.push(OpenTarget { target, cgroup });
        }
        let mut set = EventSet {
            cpus: on.iter().map(|&c| c as i32).collect(),
            offline: off,
            targets,
            wakeup: b.wakeup,
            max_delay: b.max_delay,
            inherit: b.inherit,
            sideband: b.sideband,
            default_attr: b.default_attr,
            owners: Vec::new(),
            events: BTreeMap::new(),
            next_id: 0,
            decoder: Decoder::default(),
            tracefs: None,
            probe_group: None,
            add_observers: Vec::new(),
            asked: asked.iter().map(|&c| c as i32).collect(),
            share: Arc::default(),
        };
        // A crashed monitor's probes with arguments would stay forever.
        if let Ok(tracefs) = Tracefs::find() {
            probe_events::remove_orphans(&tracefs);
        }
        if b.pages > 0 {
            let spec = Arc::new(set.ring_spec(b.pages)?);
            let mut ids = Vec::new();
            for i in 0..set.cpus.len() {
                let mut owner = spec.open(set.cpus[i])?;
                ids.extend(spec.start(&mut owner)?);
                set.owners.push(owner);
            }
            set.decoder.write().insert_owners(decode_attr(&spec.owner_attr), ids.into_iter());
            hotplug::lock(&set.share).spec = Some(spec);
        }
        log::info(format_args!(
            "event set: {} cpus, {} targets, {} rings of {} pages",
            set.cpus.len(),
            set.targets.len(),
            set.owners.len(),
            b.pages
        ));
        Ok(set)
    }

    /// A dummy event's attr: what every event shares, and the side-band
    /// records asked for.
    fn dummy_attr(&self) -> PerfEventAttr {
        let mut attr = self.common_attr(PerfEventAttr {
            type_: kernel::PERF_TYPE_SOFTWARE,
            config: kernel::PERF_COUNT_SW_DUMMY,
            ..PerfEventAttr::default()
        });
        attr.flags |= self.sideband.attr_flags();
        attr.read_format = counted_losses();
        if !self.sideband.is_empty() && self.inherit {
            attr.flags |= kernel::ATTR_FLAG_INHERIT;
        }
        attr
    }

    /// How each CPU's ring is opened: a dummy software event watching the
    /// first target, with the ring's wake-up watermark; with side-band
    /// records asked for, a dummy per further target writing into it.
    fn ring_spec(&self, pages: usize) -> Result<hotplug::RingSpec> {
        let dummy = self.dummy_attr();
        let mut owner_attr = dummy;
        let watermark = match self.wakeup {
            Wakeup::Bytes(n) => Some(n),
            // The kernel counts only samples towards wakeup_events:
            // side-band records would wait for a half-full ring. A 1-byte
            // watermark wakes the reader on every record instead.
            Wakeup::EveryRecord if !self.sideband.is_empty() => Some(1),
            _ => None,
        };
        if let Some(n) = watermark {
            // The ring's byte watermark comes from the event that maps it.
            owner_attr.flags |= kernel::ATTR_FLAG_WATERMARK;
            owner_attr.wakeup = n;
        }
        let mut cgroups = Vec::new();
        for t in &self.targets {
            if let Some(fd) = &t.cgroup {
                cgroups.push(
                    fd.try_clone()
                        .map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EMFILE)))?,
                );
            }
        }
        Ok(hotplug::RingSpec {
            owner_attr,
            sideband_attr: (!self.sideband.is_empty()).then_some(dummy),
            targets: self.targets.iter().map(OpenTarget::pid_and_flags).collect(),
            _cgroups: cgroups,
            pages,
            page_size: cpu::page_size(),
        })
    }

    /// The attr fields every event of the set shares: what a shared ring
    /// demands (same clock, ids in every record) and the set's wake-ups.
    fn common_attr(&self, mut attr: PerfEventAttr) -> PerfEventAttr {
        attr.size = size_of::<PerfEventAttr>() as u32;
        attr.sample_type |= BASE_SAMPLE_TYPE;
        attr.flags |=
            kernel::ATTR_FLAG_DISABLED | kernel::ATTR_FLAG_SAMPLE_ID_ALL | kernel::ATTR_FLAG_USE_CLOCKID;
        attr.flags &= !(kernel::ATTR_FLAG_WRITE_BACKWARD | kernel::ATTR_FLAG_WATERMARK);
        attr.clockid = libc::CLOCK_MONOTONIC;
        attr.wakeup = match self.wakeup {
            Wakeup::EveryRecord => 1,
            Wakeup::Records(n) => n.max(1),
            Wakeup::Bytes(_) => 0,
        };
        attr
    }

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

    /// Opens `event` on every CPU and target of the set, disabled, its
    /// records going to each CPU's ring. Fails, with nothing left open,
    /// when the kernel refuses any of them (an offline CPU is skipped).
    pub fn add(&mut self, event: &Event) -> Result<EventId> {
        self.take_in();
        let resolved = self.resolve(event)?;
        let id = EventId(self.next_id);
        let leader = match event.group {
            Group::Member(leader) => Some(self.events.get(&leader).ok_or(no_event(leader))?),
            _ => None,
        };
        let mut attr = resolved.attr;
        if let Some(name) = &resolved.target_name {
            // The kept copy: the attr may be used again (`set_filter`).
            attr.config1 = name.as_ptr() as u64;
        }
        let mut fallback = None;
        let mut kind = resolved.kind;
        let mut instances: Vec<Instance> = Vec::new();
        for &cpu in &self.cpus {
            for (t, target) in self.targets.iter().enumerate() {
                let group_fd =
                    leader.and_then(|l| l.instances.iter().find(|i| i.cpu == cpu && i.target == t));
                let group_fd = group_fd.map(|i| i.fd.as_fd());
                let (pid, flags) = target.pid_and_flags();
                let opened = match sys::perf_event_open_on(
                    AttrSource::Built(&attr),
                    pid,
                    cpu,
                    group_fd,
                    flags,
                ) {
                    Err(e) if instances.is_empty() && fallback.is_none() && falls_back(&e, &resolved) => {
                        let sw = resolved.fallback.unwrap_or(kernel::PERF_COUNT_SW_CPU_CLOCK);
                        log::info(format_args!(
                            "event set: hardware event {:#x} unavailable ({}), using software event {sw:#x}",
                            attr.config,
                            crate::error::errno_name(e.errno())
                        ));
                        fallback = Some(e.with(What::EventSet(SetStep::OpenEvent, cpu)));
                        kind = EventKind::Software;
                        attr.type_ = kernel::PERF_TYPE_SOFTWARE;
                        attr.config = sw;
                        sys::perf_event_open_on(AttrSource::Built(&attr), pid, cpu, group_fd, flags)
                    }
                    other => other,
                };
                let fd = match opened {
                    Ok(fd) => fd,
                    Err(e) if e.errno() == libc::ENODEV => {
                        log::info(format_args!("event set: cpu #{cpu} went offline, skipped"));
                        continue;
                    }
                    Err(e) => {
                        let e = e.with(What::EventSet(SetStep::OpenEvent, cpu)).about(&resolved.name);
                        return Err(log::failed(e));
                    }
                };
                let owner = self.owners.iter().find(|o| o.cpu == cpu);
                let connected = connect(fd, attr.read_format, cpu, t, owner, event.filter.as_deref());
                instances.push(connected.map_err(|e| e.about(&resolved.name))?);
            }
        }
        if instances.is_empty() {
            return Err(log::failed(Error::new(libc::ENODEV, What::NoOnlineCpu)));
        }
        let layout = Layout { decode: decode_attr(&attr), format: resolved.format };
        self.decoder.write().insert(id, layout, instances.iter().map(|i| i.id));
        log::info(format_args!(
            "event set: event #{} ({}) open on {} cpus × {} targets",
            id.0,
            resolved.name,
            self.cpus.len(),
            self.targets.len()
        ));
        self.events.insert(
            id,
            Opened {
                kind,
                attr,
                name: resolved.name,
                fallback,
                type_: attr.type_,
                config: attr.config,
                sample_type: attr.sample_type,
                group: event.group,
                instances,
                enabled: false,
                bpf_attached: false,
                probe: resolved.probe,
                target_name: resolved.target_name.map(Arc::new),
                programs: ProgramWatch::default(),
                filter: event.filter.clone(),
                prog: None,
            },
        );
        self.next_id += 1;
        if event.enabled
            && let Err(e) = self.enable(id)
        {
            let _ = self.remove(id);
            // A failed add takes no id: ids stay dense.
            self.next_id -= 1;
            return Err(e);
        }
        self.publish();
        self.tell_observers(id);
        Ok(id)
    }

    fn tell_observers(&mut self, id: EventId) {
        self.add_observers.retain(|o| o.strong_count() > 0);
        for observer in self.add_observers.iter().filter_map(Weak::upgrade) {
            observer(self, id);
        }
    }

    /// Calls `observer` after each event added from now on, and after an
    /// event is opened again ([`Self::set_filter`]), while it lives
    /// elsewhere (the set keeps a weak reference).
    pub(crate) fn observe_adds(&mut self, observer: &Arc<AddObserver>) {
        self.add_observers.push(Arc::downgrade(observer));
    }

    /// Changes (`Some`) or clears (`None`) the ftrace filter of a tracing
    /// event. The kernel sets a perf event's filter once, so the event is
    /// opened again on every CPU and target with the new filter, and takes
    /// the old one's place: disabled then enabled CPU by CPU if it was
    /// enabled (a hit in between is not seen), its samples still in the
    /// rings attributed to it. Fails with nothing changed when the kernel
    /// refuses (EINVAL for a bad filter); EBUSY for an event with a BPF
    /// program or in a counter group.
    pub fn set_filter(&mut self, id: EventId, filter: Option<&str>) -> Result<()> {
        self.take_in();
        let opened = self.opened(id)?;
        if opened.bpf_attached || opened.group != Group::Alone {
            return Err(Error::new(
                libc::EBUSY,
                What::Arg("the filter of an event with a BPF program or in a counter group cannot change"),
            ));
        }
        let mut attr = opened.attr;
        if let Some(name) = &opened.target_name {
            attr.config1 = name.as_ptr() as u64;
        }
        let mut fresh = Vec::with_capacity(opened.instances.len());
        for old in &opened.instances {
            let (pid, flags) = self.targets[old.target].pid_and_flags();
            let fd = sys::perf_event_open_on(AttrSource::Built(&attr), pid, old.cpu, None, flags)
                .map_err(|e| log::failed(e.with(What::EventSet(SetStep::OpenEvent, old.cpu))))?;
            let owner = self.owners.iter().find(|o| o.cpu == old.cpu);
            fresh.push(connect(fd, attr.read_format, old.cpu, old.target, owner, filter)?);
        }
        self.decoder.write().add_ids(id, fresh.iter().map(|i| i.id));
        let opened = self.opened_mut(id)?;
        if opened.enabled {
            for (old, new) in opened.instances.iter().zip(&fresh) {
                let _ = sys::perf_ioctl(old.fd.as_fd(), kernel::PERF_EVENT_IOC_DISABLE, 0);
                if let Err(e) = sys::perf_ioctl(new.fd.as_fd(), kernel::PERF_EVENT_IOC_ENABLE, 0) {
                    log::warn(format_args!(
                        "event #{}: cannot enable it again on cpu #{}: {e}",
                        id.0, new.cpu
                    ));
                }
            }
        }
        for old in core::mem::replace(&mut opened.instances, fresh) {
            let _ = sys::perf_ioctl(old.fd.as_fd(), kernel::PERF_EVENT_IOC_DISABLE, 0);
        }
        opened.filter = filter.map(str::to_owned);
        self.publish();
        // A perf.data writer lists the new kernel ids under the event.
        self.tell_observers(id);
        Ok(())
    }

    /// The attr for `event` (before the per-CPU opens), and what else
    /// opening it needs.
    fn resolve<'e>(&mut self, event: &'e Event) -> Result<Resolved<'e>> {
        let mut format = None;
        let mut fallback = None;
        let mut target_name = None;
        let mut probe = None;
        if event.args.is_some() && !matches!(event.kind, Kind::Kprobe { .. } | Kind::Uprobe { .. }) {
            return Err(log::invalid("only kprobes and uprobes take arguments"));
        }
        let (base, kind, name) = match &event.kind {
            Kind::Software(config) => (
                typed(kernel::PERF_TYPE_SOFTWARE, *config),
                EventKind::Software,
                format!("software event {config:#x}"),
            ),
            Kind::Hardware { config, fallback: fb } => {
                fallback = *fb;
                (
                    typed(kernel::PERF_TYPE_HARDWARE, *config),
                    EventKind::Hardware,
                    format!("hardware event {config:#x}"),
                )
            }
            Kind::Tracepoint(name) => {
                let tracefs = self.tracefs()?;
                let tp = tracefs.tracepoint(name).map_err(log::failed)?;
                log::debug(format_args!("tracepoint {name}: id {} in {}", tp.id, tracefs.root().display()));
                format = Some(tp.format.clone());
                // Its name is `subsystem:name`, as perf and the perf.data
                // writer name it (errors about it still say which it is).
                (typed(kernel::PERF_TYPE_TRACEPOINT, tp.id), EventKind::Tracepoint, name.clone())
            }
            Kind::Kprobe { symbol, offset, retprobe } => {
                let what = format!(
                    "{} {}{}",
                    if *retprobe { "kretprobe" } else { "kprobe" },
                    symbol.to_string_lossy(),
                    if *offset == 0 { String::new() } else { format!("+{offset:#x}") }
                );
                let attr = match &event.args {
                    Some(args) => {
                        let location = match offset {
                            0 => symbol.to_string_lossy().into_owned(),
                            off => format!("{}+{off}", symbol.to_string_lossy()),
                        };
                        let def =
                            Definition { type_: ProbeType::Kprobe, retprobe: *retprobe, location, args };
                        let (attr, (tp_format, created)) =
                            self.define_probe(&def).map_err(|e| log::failed(e.about(&what)))?;
                        format = Some(tp_format);
                        probe = Some(created);
                        attr
                    }
                    None => {
                        let pmu = DynamicPmu::load(EVENT_SOURCES.as_ref(), ProbePmu::Kprobe)
                            .map_err(|e| log::failed(e.about(&what)))?;
                        let attr = *pmu
                            .attr(symbol, *offset, *retprobe, 0)
                            .map_err(|e| log::failed(e.about(&what)))?
                            .attr();
                        target_name = Some(symbol.clone());
                        attr
                    }
                };
                (attr, EventKind::Kprobe, what)
            }
            Kind::Uprobe { path, at, offset: into, retprobe, ref_ctr_offset } => {
                let what = uprobe_name(path, at, *into, *retprobe);
                let fail = |e: Error| log::failed(e.about(&what));
                if *retprobe && *into != 0 {
                    return Err(fail(Error::invalid(
                        "a uretprobe goes at the function's entry, without an offset (elsewhere the kernel \
                         takes another stack word for the return address and the probed program crashes)",
                    )));
                }
                let offset = match at {
                    UprobeAt::Symbol(s) => elf::function_file_offset(path, s, *into).map_err(fail)?,
                    UprobeAt::Offset(o) => {
                        o.checked_add(*into).ok_or_else(|| fail(Error::invalid("the offset is too large")))?
                    }
                };
                let attr = match &event.args {
                    Some(args) => {
                        let location = uprobe_location(path, offset, *ref_ctr_offset).map_err(fail)?;
                        let def =
                            Definition { type_: ProbeType::Uprobe, retprobe: *retprobe, location, args };
                        let (attr, (tp_format, created)) = self.define_probe(&def).map_err(fail)?;
                        format = Some(tp_format);
                        probe = Some(created);
                        attr
                    }
                    None => {
                        let c_path = CString::new(path.as_os_str().as_bytes())
                            .map_err(|_| fail(Error::invalid("a path cannot contain NUL")))?;
                        let pmu = DynamicPmu::load(EVENT_SOURCES.as_ref(), ProbePmu::Uprobe).map_err(fail)?;
                        let attr =
                            *pmu.attr(&c_path, offset, *retprobe, *ref_ctr_offset).map_err(fail)?.attr();
                        target_name = Some(c_path);
                        attr
                    }
                };
                (attr, EventKind::Uprobe, what)
            }
            Kind::Raw(attr) => {
                (*attr, EventKind::Raw, format!("raw event type {} config {:#x}", attr.type_, attr.config))
            }
        };
        let mut attr = self.common_attr(base);
        attr.sample_type |= event.sample_type;
        // A raw attr keeps the caller's read_format bits (the counts
        // reader follows them); every event gets what counts need.
        let callers_read_format =
            if kind == EventKind::Raw { base.read_format & READ_FORMATS_KEPT } else { 0 };
        attr.read_format = kernel::PERF_FORMAT_TOTAL_TIME_ENABLED
            | kernel::PERF_FORMAT_TOTAL_TIME_RUNNING
            | kernel::PERF_FORMAT_ID
            | callers_read_format
            | counted_losses()
            | if event.group == Group::Leader { kernel::PERF_FORMAT_GROUP } else { 0 };
        let mut sampling = event.sampling;
        if let Some(d) = self.default_attr.filter(|_| kind != EventKind::Raw) {
            attr.sample_type |= d.sample_type;
            attr.flags |= d.flags & DEFAULT_ATTR_FLAGS;
            attr.sample_regs_user |= d.sample_regs_user;
            attr.sample_stack_user = attr.sample_stack_user.max(d.sample_stack_user);
            attr.sample_max_stack = attr.sample_max_stack.max(d.sample_max_stack);
            let counts_only = matches!(event.kind, Kind::Software(_) | Kind::Hardware { .. });
            if counts_only && sampling == Sampling::Count && d.sample_period != 0 {
                sampling = if d.has(kernel::ATTR_FLAG_FREQ) {
                    Sampling::Frequency(d.sample_period)
                } else {
                    Sampling::Period(d.sample_period)
                };
            }
        }
        attr.flags &= !kernel::ATTR_FLAG_FREQ;
        attr.sample_period = match sampling {
            Sampling::Count => 0,
            Sampling::Period(n) => n,
            Sampling::Frequency(hz) => {
                attr.flags |= kernel::ATTR_FLAG_FREQ;
                // The kernel changes the period as it goes: each sample
                // says what it stands for (perf report's event counts, a
                // perf.data file), as `perf record -F` asks.
                attr.sample_type |= kernel::PERF_SAMPLE_PERIOD;
                hz
            }
        };
        if self.inherit && self.targets.iter().any(|t| matches!(t.target, Target::Pid(_))) {
            attr.flags |= kernel::ATTR_FLAG_INHERIT;
        }
        Ok(Resolved {
            attr,
            kind,
            name,
            format,
            fallback,
            probe,
            target_name,
            _event: core::marker::PhantomData,
        })
    }

    /// The set's tracefs, found once.
    fn tracefs(&mut self) -> Result<&Tracefs> {
        if self.tracefs.is_none() {
            self.tracefs = Some(Tracefs::find().map_err(log::failed)?);
        }
        Ok(self.tracefs.as_ref().unwrap_or_else(|| unreachable!()))
    }

    /// Defines a probe with arguments in the set's group, named after the
    /// event's id to be: its tracepoint attr and format, and the probe.
    fn define_probe(&mut self, def: &Definition<'_>) -> Result<(PerfEventAttr, (Arc<Format>, ProbeEvent))> {
        let group = self.probe_group.get_or_insert_with(probe_events::new_group).clone();
        let event = format!("e{}", self.next_id);
        let tracefs = self.tracefs()?;
        let (probe, tp) = ProbeEvent::create(tracefs, def, &group, &event)?;
        log::debug(format_args!("probe {group}/{event}: tracepoint id {}", tp.id));
        Ok((typed(kernel::PERF_TYPE_TRACEPOINT, tp.id), (tp.format, probe)))
    }

    fn opened(&self, id: EventId) -> Result<&Opened> {
        self.events.get(&id).ok_or(no_event(id))
    }

    fn opened_mut(&mut self, id: EventId) -> Result<&mut Opened> {
        self.events.get_mut(&id).ok_or(no_event(id))
    }

    /// Removes an event: its program detached, its kernel events closed.
    /// Its samples still in the rings are no longer attributed. A group
    /// leader goes after its members (EBUSY until then).
    pub fn remove(&mut self, id: EventId) -> Result<()> {
        self.take_in();
        self.opened(id)?;
        if self.events.values().any(|e| e.group == Group::Member(id)) {
            return Err(Error::new(libc::EBUSY, What::Arg("remove the group's members before its leader")));
        }
        self.decoder.write().remove(id);
        if let Some(opened) = self.events.remove(&id) {
            close(opened);
        }
        self.publish();
        Ok(())
    }

    /// The ids of the set's events, in the order they were added.
    pub fn events(&self) -> Vec<EventId> {
        self.events.keys().copied().collect()
    }

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

    /// Makes `reader` (over this set's rings) serve the set's CPUs that
    /// come and go: it asks the set for the ring and events of a CPU
    /// coming online or back (see `hotplug`).
    pub(crate) fn serve_cpus<H: crate::reader::deliver::Handler>(
        &mut self,
        reader: &mut crate::reader::Reader<H>,
    ) -> Result<()> {
        let source = self.ring_source();
        reader.watch_cpus(Box::new(source), self.asked.clone())
    }

    /// Each CPU's ring for a reader, once; EINVAL for a set without rings,
    /// EBUSY for the second call. The set keeps its own fd of each ring's
    /// owner, for events added later.
    pub(crate) fn take_rings(&mut self) -> Result<Vec<OwnedRing>> {
        if self.owners.is_empty() {
            return Err(log::failed(Error::new(libc::EINVAL, What::NoRings)));
        }
        if self.owners.iter().any(|o| o.ring.is_none()) {
            return Err(Error::new(libc::EBUSY, What::Arg("the event set's rings already have a reader")));
        }
        let mut rings = Vec::with_capacity(self.owners.len());
        for owner in &self.owners {
            let fd = owner
                .fd
                .try_clone()
                .map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EMFILE)))?;
            rings.push(fd);
        }
        Ok(self
            .owners
            .iter_mut()
            .zip(rings)
            .filter_map(|(o, fd)| {
                let tally = (!o.counted.is_empty()).then(|| o.tally.clone());
                Some((o.cpu, fd, o.ring.take()?, tally))
            })
            .collect())
    }

    /// Options for a reader over the set's rings: its delay bound, if it
    /// batches wake-ups.
    pub(crate) fn max_delay(&self) -> Option<Duration> {
        match (self.wakeup.batches(), self.max_delay) {
            (false, _) => None,
            (true, Some(d)) => Some(d.max(Duration::from_millis(1))),
            (true, None) => Some(crate::reader::config::DEFAULT_MAX_DELAY),
        }
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

/// Sends a new kernel event's records to its CPU's ring, sets its
/// filter, and learns its id. On failure the fd is closed (by drop).
fn connect(
    fd: OwnedFd,
    read_format: u64,
    cpu: i32,
    target: usize,
    owner: Option<&RingOwner>,
    filter: Option<&str>,
) -> Result<Instance> {
    let step = |s| move |e: Error| log::failed(e.with(What::EventSet(s, cpu)));
    if let Some(owner) = owner {
        sys::perf_set_output(fd.as_fd(), owner.fd.as_fd()).map_err(step(SetStep::SetOutput))?;
    }
    if let Some(filter) = filter {
        let filter = CString::new(filter).map_err(|_| log::invalid("a filter cannot contain NUL"))?;
        sys::perf_set_filter(fd.as_fd(), &filter).map_err(|e| {
            log::failed(
                e.with(What::EventSet(SetStep::SetFilter, cpu)).about(format_args!("filter {filter:?}")),
            )
        })?;
    }
    let id = sys::perf_event_id(fd.as_fd()).map_err(step(SetStep::EventId))?;
    // SAFETY: the guard is kept in the same instance, declared before
    // `fd`, and an instance is never taken apart.
    let counted = owner.and_then(|o| unsafe { o.tally.count(fd.as_fd(), read_format) });
    Ok(Instance { cpu, target, _counted: counted, fd, id, link: None })
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

/// A uprobe as errors and logs name it: `uprobe PATH:SYMBOL+0x4`,
/// `uretprobe PATH:0x1139`.
fn uprobe_name(path: &std::path::Path, at: &UprobeAt, into: u64, retprobe: bool) -> String {
    let kind = if retprobe { "uretprobe" } else { "uprobe" };
    let place = match at {
        UprobeAt::Symbol(s) => s.clone(),
        UprobeAt::Offset(o) => format!("{o:#x}"),
    };
    match into {
        0 => format!("{kind} {}:{place}", path.display()),
        n => format!("{kind} {}:{place}+{n:#x}", path.display()),
    }
}

/// A uprobe's place for `uprobe_events`: `PATH:0xOFFSET[(0xREF)]`, with
/// the path made absolute (the kernel splits the line at spaces).
fn uprobe_location(path: &std::path::Path, offset: u64, ref_ctr_offset: u64) -> Result<String> {
    let abs =
        std::fs::canonicalize(path).map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO)))?;
    let text = abs.to_str().filter(|t| !t.contains(char::is_whitespace)).ok_or(Error::invalid(
        "a uprobe with arguments needs a path without spaces or non-UTF-8 bytes (uprobe_events splits at spaces)",
    ))?;
    Ok(match ref_ctr_offset {
        0 => format!("{text}:{offset:#x}"),
        r => format!("{text}:{offset:#x}({r:#x})"),
    })
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

/// An event's attr before the set's common fields.
struct Resolved<'e> {
    attr: PerfEventAttr,
    kind: EventKind,
    name: String,
    format: Option<Arc<Format>>,
    fallback: Option<u64>,
    /// A probe with arguments, defined in tracefs.
    probe: Option<ProbeEvent>,
    /// A probe PMU's symbol or path, which `attr.config1` points to.
    target_name: Option<CString>,
    #[allow(dead_code, reason = "a kprobe's attr points into the event's symbol")]
    _event: core::marker::PhantomData<&'e Event>,
}

fn typed(type_: u32, config: u64) -> PerfEventAttr {
    PerfEventAttr { type_, config, ..PerfEventAttr::default() }
}

/// Whether a hardware event's failure means "no PMU here" and it has a
/// software fallback.
fn falls_back(e: &Error, r: &Resolved<'_>) -> bool {
    r.kind == EventKind::Hardware && r.fallback.is_some() && FALLBACK_ERRNOS.contains(&e.errno())
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

fn open_cgroup(dir: &std::path::Path) -> Result<OwnedFd> {
    let c =
        CString::new(dir.as_os_str().as_bytes()).map_err(|_| log::invalid("a path cannot contain NUL"))?;
    sys::open_dir(&c).map_err(|e| {
        log::warn(format_args!("event set: cannot open cgroup {}: {e}", dir.display()));
        e.with(What::EventSet(SetStep::OpenCgroup, -1))
    })
}
