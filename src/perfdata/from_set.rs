//! A file for an event set: the set's events as the file describes them,
//! the side-band event, the processes already running, and the events
//! added to the set after the file was made (taken in before each drain
//! and at close, their attrs then written after the data).

use super::{FileEvent, PerfDataWriter, Result, ids, procfs};
use crate::events::{AddObserver, Event, EventId, EventSet, IdsObserver, Target};
use crate::kernel::{self, PerfEventAttr};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The attr bits of the side-band event [`PerfDataWriter::for_set`] adds:
/// `mmap`, `comm`, `task`, `mmap2`, `comm_exec` (the kernel then writes
/// MMAP2, COMM, FORK and EXIT records of the watched tasks).
const SIDE_BAND_FLAGS: u64 = 1 << 8 | 1 << 9 | 1 << 13 | 1 << 23 | 1 << 24;
/// `build_id` (Linux 5.12): MMAP2 records carry the file's build id.
const BUILD_ID_FLAG: u64 = 1 << 34;

/// An event of a set as the file describes it, and the tracefs event
/// whose format decodes its samples (tracepoints, probes with arguments).
pub(super) type SetEvent = (FileEvent, Option<String>);

/// Ids of a known event opened on a CPU that came online or back.
pub(super) type NewIds = (EventId, Vec<u64>);

fn set_event(set: &EventSet, id: EventId) -> crate::Result<SetEvent> {
    let attr = set.attr(id)?;
    let name = match (ids::perf_name(attr.type_, attr.config), set.name(id)?) {
        (_, tp) if attr.type_ == kernel::PERF_TYPE_TRACEPOINT => tp.to_owned(),
        (Some(known), _) => known.to_owned(),
        (None, other) => other.to_owned(),
    };
    Ok((FileEvent { attr, name, ids: set.instance_ids(id)? }, set.tracefs_event(id)?))
}

/// Events added to a set since the writer was made (or opened again with
/// new kernel ids), waiting to be taken in.
pub(super) struct Following {
    added: Arc<Added>,
    /// Where each of the set's events is in the file's list.
    pub(super) at: HashMap<EventId, usize>,
    /// The set holds it weakly: it calls it while the writer lives.
    _observer: Arc<AddObserver>,
    /// Likewise, for the ids of events opened on a CPU that came online.
    _ids_observer: Arc<IdsObserver>,
}

#[derive(Default)]
struct Added {
    /// Set with each add: a drain looks at one flag, not a lock.
    pending: AtomicBool,
    events: Mutex<Vec<(EventId, SetEvent)>>,
    /// Ids of known events opened on a CPU that came online or back.
    ids: Mutex<Vec<NewIds>>,
}

impl Following {
    fn start(set: &mut EventSet, at: HashMap<EventId, usize>) -> Following {
        let added = Arc::new(Added::default());
        let queue = Arc::clone(&added);
        let observer: Arc<AddObserver> = Arc::new(move |set: &EventSet, id: EventId| {
            // A just-added (or re-opened) event has its attr, name and ids.
            if let Ok(e) = set_event(set, id) {
                queue.events.lock().unwrap_or_else(|p| p.into_inner()).push((id, e));
                queue.pending.store(true, Ordering::Release);
            }
        });
        set.observe_adds(&observer);
        let queue = Arc::clone(&added);
        let ids_observer: Arc<IdsObserver> = Arc::new(move |id: EventId, ids: &[u64]| {
            queue.ids.lock().unwrap_or_else(|p| p.into_inner()).push((id, ids.to_vec()));
            queue.pending.store(true, Ordering::Release);
        });
        set.observe_new_ids(&ids_observer);
        Following { added, at, _observer: observer, _ids_observer: ids_observer }
    }

    /// The events added or re-opened since the last call, and the ids of
    /// known events opened since on CPUs that came online or back.
    pub(super) fn take(&self) -> (Vec<(EventId, SetEvent)>, Vec<NewIds>) {
        if !self.added.pending.swap(false, Ordering::Acquire) {
            return (Vec::new(), Vec::new());
        }
        let events = std::mem::take(&mut *self.added.events.lock().unwrap_or_else(|p| p.into_inner()));
        let ids = std::mem::take(&mut *self.added.ids.lock().unwrap_or_else(|p| p.into_inner()));
        (events, ids)
    }
}

impl PerfDataWriter {
    /// A file for `set`'s events. Adds to the set (and enables) a software
    /// dummy event asking the kernel for side-band records (COMM, FORK,
    /// EXIT, MMAP2 of the watched tasks), then, like `perf record`,
    /// synthesizes COMM and MMAP2 records from /proc for the tasks the set
    /// watches (all, its pids, or its cgroups' tasks) and the kernel's map.
    /// Events added to the set later are in the file too once the writer
    /// finishes it (their attrs go after the data then); a file whose
    /// writer was killed describes only the events of its start, and perf
    /// skips the samples of the others, saying how many.
    pub fn for_set(path: impl AsRef<Path>, set: &mut EventSet) -> Result<PerfDataWriter> {
        let side_band = |flags| {
            Event::raw(PerfEventAttr {
                type_: kernel::PERF_TYPE_SOFTWARE,
                config: kernel::PERF_COUNT_SW_DUMMY,
                flags,
                ..PerfEventAttr::default()
            })
        };
        let dummy = match set.add(&side_band(SIDE_BAND_FLAGS | BUILD_ID_FLAG)) {
            Err(e) if e.errno() == libc::EINVAL => set.add(&side_band(SIDE_BAND_FLAGS))?, // before 5.12
            other => other?,
        };
        set.enable(dummy)?;
        let ids = set.events();
        let events = ids.iter().map(|&id| set_event(set, id)).collect::<crate::Result<Vec<_>>>()?;
        let mut w = PerfDataWriter::create_with(path.as_ref(), events)?;
        let at = ids.into_iter().enumerate().map(|(i, id)| (id, i)).collect();
        w.following = Some(Following::start(set, at));
        let mut pids = Vec::new();
        let mut all = false;
        for target in set.targets() {
            match target {
                Target::System => all = true,
                Target::Pid(p) => pids.push(p),
                Target::Cgroup(dir) => pids.extend(cgroup_pids(&dir)),
            }
        }
        let dummy_at = w.events.len() - 1;
        w.synthesize(if all { procfs::Tasks::All } else { procfs::Tasks::Pids(pids) }, dummy_at)?;
        Ok(w)
    }
}

/// The processes of a cgroup (v2) and its descendants.
fn cgroup_pids(dir: &Path) -> Vec<i32> {
    let mut pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                pids.extend(cgroup_pids(&e.path()));
            }
        }
    }
    pids
}
