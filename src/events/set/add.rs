//! Adding an event: opened on every CPU and target (a hardware event
//! falling back to software where there is no PMU), each instance sent
//! to its CPU's ring and its kernel id learnt; opened again for a new
//! filter; removed.

use super::resolve::Resolved;
use super::rings::RingOwner;
use super::{AddObserver, EventKind, EventSet, Instance, Opened, close, decode_attr, no_event};
use crate::error::{Error, Result, SetStep, What};
use crate::events::desc::{Event, EventId, Group};
use crate::events::programs::ProgramWatch;
use crate::events::table::Layout;
use crate::kernel;
use crate::kernel::sys::{self, AttrSource};
use crate::log;
use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Weak};

/// The errors a hardware event falls back to software on: a machine or
/// virtual machine without the PMU (what profilers check for).
const FALLBACK_ERRNOS: [i32; 5] = [libc::EOPNOTSUPP, libc::ENOENT, libc::ENODEV, libc::EINVAL, libc::EACCES];

impl EventSet {
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
}

/// Sends a new kernel event's records to its CPU's ring, sets its
/// filter, and learns its id. On failure the fd is closed (by drop).
pub(super) fn connect(
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

/// Whether a hardware event's failure means "no PMU here" and it has a
/// software fallback.
fn falls_back(e: &Error, r: &Resolved<'_>) -> bool {
    r.kind == EventKind::Hardware && r.fallback.is_some() && FALLBACK_ERRNOS.contains(&e.errno())
}
