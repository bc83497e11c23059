//! An event set's CPUs that come and go. The set's reader hears of a CPU
//! coming online (or back, its events dead: see `crate::reader::hotplug`)
//! and asks the set, through a [`Share`] both hold, for that CPU's ring:
//! its dummy owner event (and side-band dummies), and every event of the
//! set opened there as on the other CPUs (same attr and filter, enabled if
//! the event is, a sampling event's BPF program attached, its ids known to
//! the decoder). The set keeps in the share what opening needs (a
//! [`Template`] per event, updated by every call that changes one) and
//! takes what the reader opened into its own lists at its next call, so
//! `enable`, `remove`, `read`... cover the new CPU too.

use super::add::connect;
use super::rings::{RingOwner, RingSpec};
use super::{EventKind, EventSet, Instance, decode_attr};
use crate::error::{Error, Result, SetStep, What};
use crate::events::desc::{EventId, Group};
use crate::events::table::Decoder;
use crate::kernel::sys::{self, AttrSource};
use crate::kernel::{self, PerfEventAttr};
use crate::log;
use crate::reader::OwnedRing;
use crate::reader::hotplug::RingSource;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

/// What opening one event on a new CPU needs.
pub(super) struct Template {
    pub(super) attr: PerfEventAttr,
    pub(super) kind: EventKind,
    pub(super) group: Group,
    pub(super) filter: Option<String>,
    pub(super) enabled: bool,
    /// A sampling event's program, attached on every CPU.
    pub(super) prog: Option<Arc<OwnedFd>>,
    /// What a probe PMU attr's `config1` points to, kept alive here.
    pub(super) _target_name: Option<Arc<CString>>,
}

/// What the set and its reader share.
#[derive(Default)]
pub(super) struct Share {
    pub(super) spec: Option<Arc<RingSpec>>,
    pub(super) templates: BTreeMap<EventId, Template>,
    /// What the reader opened, for the set to take in.
    pub(super) owners: Vec<RingOwner>,
    pub(super) instances: Vec<(EventId, Instance)>,
    /// CPUs that went offline (their events are dead): the set closes
    /// what it had there when a fresh ring replaces it.
    pub(super) replaced: Vec<i32>,
    /// The set is gone: nothing is opened any more.
    pub(super) closed: bool,
    /// Told of the kernel ids of events opened on a new CPU (the set's
    /// perf.data writers, which list every id of each event).
    pub(super) id_observers: Vec<Weak<IdsObserver>>,
}

/// What [`EventSet::observe_new_ids`] calls with an event's ids opened on
/// a CPU that came online or back.
pub(crate) type IdsObserver = dyn Fn(EventId, &[u64]) + Send + Sync;

/// A set's shared part, locked.
pub(super) fn lock(share: &Mutex<Share>) -> MutexGuard<'_, Share> {
    // Plain data and fds: a panic elsewhere leaves it whole.
    share.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The set's side of its reader's CPU changes.
pub(super) struct SetSource {
    pub(super) share: Arc<Mutex<Share>>,
    pub(super) decoder: Decoder,
}

impl RingSource for SetSource {
    fn open_cpu(&mut self, cpu: i32) -> Result<OwnedRing> {
        let mut share = lock(&self.share);
        if share.closed {
            return Err(log::invalid("the event set is gone: no events to open on a new cpu"));
        }
        let spec = share.spec.clone().ok_or(Error::INVAL)?;
        let mut owner = spec.open(cpu)?;
        let owner_ids = spec.start(&mut owner)?;
        let mut opened: Vec<(EventId, Instance)> = Vec::new();
        for (&id, t) in &share.templates {
            let mut attr = t.attr;
            if let Some(name) = &t._target_name {
                attr.config1 = name.as_ptr() as u64;
            }
            for (target, &(pid, flags)) in spec.targets.iter().enumerate() {
                let leader = match t.group {
                    Group::Member(leader) => opened.iter().find(|(i, n)| *i == leader && n.target == target),
                    _ => None,
                };
                let group_fd = leader.map(|(_, n)| n.fd.as_fd());
                let fd = sys::perf_event_open_on(AttrSource::Built(&attr), pid, cpu, group_fd, flags)
                    .map_err(|e| log::failed(e.with(What::EventSet(SetStep::OpenEvent, cpu))))?;
                let mut inst = connect(fd, attr.read_format, cpu, target, Some(&owner), t.filter.as_deref())?;
                // A sampling event runs its program on each CPU's own
                // overflows; tracepoints and probes run theirs on every hit
                // wherever it is attached: those have it already.
                let sampling = matches!(attr.type_, kernel::PERF_TYPE_SOFTWARE | kernel::PERF_TYPE_HARDWARE)
                    && matches!(t.kind, EventKind::Software | EventKind::Hardware | EventKind::Raw);
                if let Some(prog) = &t.prog
                    && sampling
                {
                    let prog = prog.as_fd();
                    inst.link = if sys::bpf_perf_links_supported(prog) {
                        Some(sys::bpf_link_perf_event(prog, inst.fd.as_raw_fd())?)
                    } else {
                        sys::perf_ioctl(
                            inst.fd.as_fd(),
                            kernel::PERF_EVENT_IOC_SET_BPF,
                            prog.as_raw_fd() as u64,
                        )?;
                        None
                    };
                }
                opened.push((id, inst));
            }
        }
        for (id, inst) in &opened {
            if share.templates.get(id).is_some_and(|t| t.enabled) {
                sys::perf_ioctl(inst.fd.as_fd(), kernel::PERF_EVENT_IOC_ENABLE, 0)
                    .map_err(|e| log::failed(e.with(What::EventSet(SetStep::Enable, cpu))))?;
            }
        }
        {
            let mut table = self.decoder.write();
            table.insert_owners(decode_attr(&spec.owner_attr), owner_ids.into_iter());
            for (id, inst) in &opened {
                table.add_ids(*id, core::iter::once(inst.id));
            }
        }
        share.id_observers.retain(|o| o.strong_count() > 0);
        for observer in share.id_observers.iter().filter_map(Weak::upgrade) {
            for (id, inst) in &opened {
                observer(*id, &[inst.id]);
            }
        }
        let fd =
            owner.fd.try_clone().map_err(|e| Error::from_errno(e.raw_os_error().unwrap_or(libc::EMFILE)))?;
        let ring = owner.ring.take().ok_or(Error::INVAL)?;
        let tally = (!owner.counted.is_empty()).then(|| owner.tally.clone());
        // What an earlier return of this CPU opened is dead now too.
        share.owners.retain(|o| o.cpu != cpu);
        share.instances.retain(|(_, i)| i.cpu != cpu);
        share.owners.push(owner);
        share.instances.extend(opened);
        share.replaced.push(cpu);
        log::info(format_args!(
            "event set: cpu #{cpu}: a ring and {} events opened there",
            share.templates.len() * spec.targets.len()
        ));
        Ok((cpu, fd, ring, tally))
    }
}

impl EventSet {
    /// Makes `reader` (over this set's rings) serve the set's CPUs that
    /// come and go: it asks the set for the ring and events of a CPU
    /// coming online or back.
    pub(crate) fn serve_cpus<H: crate::reader::deliver::Handler>(
        &mut self,
        reader: &mut crate::reader::RingSet<H>,
    ) -> Result<()> {
        let source = self.ring_source();
        reader.watch_cpus(Box::new(source), self.asked.clone())
    }

    /// Calls `observer` with the kernel ids of each event opened on a CPU
    /// that came online or back, while it lives elsewhere (the set keeps a
    /// weak reference).
    pub(crate) fn observe_new_ids(&mut self, observer: &Arc<IdsObserver>) {
        lock(&self.share).id_observers.push(Arc::downgrade(observer));
    }

    /// The set's side of its reader's CPU changes.
    pub(super) fn ring_source(&mut self) -> SetSource {
        self.publish();
        SetSource { share: self.share.clone(), decoder: self.decoder.clone() }
    }

    /// Takes what the reader opened on CPUs that came online or back into
    /// the set's own lists (closing what the set had on a CPU that came
    /// back: dead events).
    pub(super) fn take_in(&mut self) {
        let share = self.share.clone();
        let mut share = lock(&share);
        if share.owners.is_empty() && share.instances.is_empty() {
            return;
        }
        for cpu in core::mem::take(&mut share.replaced) {
            for opened in self.events.values_mut() {
                let (dead, live): (Vec<Instance>, Vec<Instance>) =
                    core::mem::take(&mut opened.instances).into_iter().partition(|i| i.cpu == cpu);
                opened.instances = live;
                for mut inst in dead {
                    drop(inst.link.take());
                }
            }
            self.owners.retain(|o| o.cpu != cpu);
            if !self.cpus.contains(&cpu) {
                self.cpus.push(cpu);
                self.cpus.sort_unstable();
            }
            self.offline.retain(|&c| c as i32 != cpu);
        }
        self.owners.append(&mut share.owners);
        for (id, inst) in share.instances.drain(..) {
            if let Some(opened) = self.events.get_mut(&id) {
                opened.instances.push(inst);
            }
        }
    }

    /// Tells the share what opening each event on a new CPU needs now.
    pub(super) fn publish(&mut self) {
        let mut share = lock(&self.share);
        share.templates = self
            .events
            .iter()
            .map(|(&id, e)| {
                let t = Template {
                    attr: e.attr,
                    kind: e.kind,
                    group: e.group,
                    filter: e.filter.clone(),
                    enabled: e.enabled,
                    prog: e.prog.clone(),
                    _target_name: e.target_name.clone(),
                };
                (id, t)
            })
            .collect();
    }
}
