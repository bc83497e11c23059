//! The set's options and its opening: each CPU's ring, no events yet.

use super::{EventSet, OpenTarget, decode_attr, hotplug};
use crate::error::{Error, Result, SetStep, What};
use crate::events::desc::Target;
use crate::events::probe_events;
use crate::events::sideband::Sideband;
use crate::events::table::Decoder;
use crate::events::tracefs::Tracefs;
use crate::kernel::{PerfEventAttr, cpu, sys};
use crate::log;
use crate::reader::config::Wakeup;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

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
    /// samples; readers get them as [`crate::events::EventRecord::Sideband`]. The
    /// kernel counts only samples towards a wake-up, so with the default
    /// [`Wakeup::EveryRecord`] the rings wake the reader at every byte
    /// written instead (a 1-byte watermark); with batching, the delay bound
    /// drains them. Needs rings (EINVAL with `pages(0)`).
    pub fn sideband(mut self, records: Sideband) -> Self {
        self.sideband = records;
        self
    }

    /// The attr fields every event added without its own attr (every
    /// kind but [`crate::events::Event::raw`]) takes: `sample_type` bits (added to the
    /// event's), the exclusion flags (`exclude_user`, `exclude_kernel`,
    /// `exclude_hv`, `exclude_idle`, `exclude_host`, `exclude_guest`,
    /// `exclude_callchain_*`), `inherit`, `sample_regs_user`,
    /// `sample_stack_user` and `sample_max_stack`; and, for a software or
    /// hardware event left counting, its `sample_period` or (with `freq`)
    /// `sample_freq`, which then adds `PERF_SAMPLE_PERIOD` as
    /// [`crate::events::Event::frequency`] does. Other fields are the set's
    /// or the event's.
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
}

fn open_cgroup(dir: &std::path::Path) -> Result<OwnedFd> {
    let c =
        CString::new(dir.as_os_str().as_bytes()).map_err(|_| log::invalid("a path cannot contain NUL"))?;
    sys::open_dir(&c).map_err(|e| {
        log::warn(format_args!("event set: cannot open cgroup {}: {e}", dir.display()));
        e.with(What::EventSet(SetStep::OpenCgroup, -1))
    })
}
