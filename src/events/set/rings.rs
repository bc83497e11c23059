//! Each CPU's ring: the dummy event that owns it (and, with side-band
//! records, one per further target writing into it), what every event of
//! the set shares, and the rings handed to the set's reader.

use super::{BASE_SAMPLE_TYPE, EventSet, OpenTarget, counted_losses};
use crate::error::{Error, Result, SetStep, What};
use crate::kernel::sys::{self, AttrSource};
use crate::kernel::{self, PerfEventAttr, cpu};
use crate::log;
use crate::reader::OwnedRing;
use crate::reader::config::Wakeup;
use crate::reader::lost::{Counted, LostTally};
use crate::ring::PerfRing;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

/// One CPU's ring and the dummy event that owns it.
pub(super) struct RingOwner {
    pub(super) cpu: i32,
    /// What the events writing into this ring lost, for its reader.
    pub(super) tally: LostTally,
    /// The owner's and side-band events' counts in the tally: dropped
    /// before their fds (fields drop in order).
    pub(super) counted: Vec<Counted>,
    pub(super) fd: OwnedFd,
    /// Dummy events asking for side-band records of the set's other
    /// targets, writing into this ring.
    pub(super) sideband: Vec<OwnedFd>,
    /// The mapping, until a reader takes it.
    pub(super) ring: Option<PerfRing>,
}

/// How a CPU's ring is opened, fixed when the set is built.
pub(super) struct RingSpec {
    /// The dummy event owning the ring (its wake-up watermark included).
    pub(super) owner_attr: PerfEventAttr,
    /// The dummies asking for side-band records of the other targets.
    pub(super) sideband_attr: Option<PerfEventAttr>,
    /// Each target's `perf_event_open` pid and flags.
    pub(super) targets: Vec<(i32, libc::c_ulong)>,
    /// Copies of the cgroup fds those pids name, so that a reader
    /// outliving the set can still open events for them.
    pub(super) _cgroups: Vec<OwnedFd>,
    pub(super) pages: usize,
    pub(super) page_size: usize,
}

impl RingSpec {
    /// Opens and maps `cpu`'s ring: a dummy software event watching the
    /// first target (a per-CPU ring takes any target's events).
    pub(super) fn open(&self, cpu: i32) -> Result<RingOwner> {
        let attr = &self.owner_attr;
        let (pid, flags) = self.targets[0];
        let fd = sys::perf_event_open_on(AttrSource::Built(attr), pid, cpu, None, flags)
            .map_err(|e| log::failed(e.with(What::EventSet(SetStep::OpenRing, cpu))))?;
        let ring = PerfRing::map(fd.as_fd(), self.page_size, self.pages, true)
            .map_err(|e| log::failed(e.with(What::EventSet(SetStep::MapRing, cpu))))?;
        let tally = LostTally::default();
        // SAFETY: the guard is kept in the same owner, declared before `fd`.
        let counted = unsafe { tally.count(fd.as_fd(), attr.read_format) }.into_iter().collect();
        Ok(RingOwner { cpu, tally, counted, fd, sideband: Vec::new(), ring: Some(ring) })
    }

    /// With side-band records asked for, a dummy per target after the
    /// first writing into `owner`'s ring; then every dummy enabled.
    /// Returns their kernel ids, the owner's first.
    pub(super) fn start(&self, owner: &mut RingOwner) -> Result<Vec<u64>> {
        let cpu = owner.cpu;
        let step = |s| move |e: Error| log::failed(e.with(What::EventSet(s, cpu)));
        let mut ids = vec![sys::perf_event_id(owner.fd.as_fd()).map_err(step(SetStep::EventId))?];
        if let Some(attr) = &self.sideband_attr {
            for &(pid, flags) in &self.targets[1..] {
                let fd = sys::perf_event_open_on(AttrSource::Built(attr), pid, cpu, None, flags)
                    .map_err(step(SetStep::OpenRing))?;
                sys::perf_set_output(fd.as_fd(), owner.fd.as_fd()).map_err(step(SetStep::SetOutput))?;
                ids.push(sys::perf_event_id(fd.as_fd()).map_err(step(SetStep::EventId))?);
                // SAFETY: the guard is kept in the same owner, declared
                // before `sideband`, and side-band fds are never removed.
                owner.counted.extend(unsafe { owner.tally.count(fd.as_fd(), attr.read_format) });
                owner.sideband.push(fd);
            }
        }
        for fd in core::iter::once(&owner.fd).chain(&owner.sideband) {
            sys::perf_ioctl(fd.as_fd(), kernel::PERF_EVENT_IOC_ENABLE, 0).map_err(step(SetStep::Enable))?;
        }
        Ok(ids)
    }
}

impl EventSet {
    /// A dummy event's attr: what every event shares, and the side-band
    /// records asked for.
    pub(super) fn dummy_attr(&self) -> PerfEventAttr {
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
    pub(super) fn ring_spec(&self, pages: usize) -> Result<RingSpec> {
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
        Ok(RingSpec {
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
    pub(super) fn common_attr(&self, mut attr: PerfEventAttr) -> PerfEventAttr {
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
