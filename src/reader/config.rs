//! What a reader is opened with: the one set of options every face fills
//! (the Rust builder, libbpf's constructors, `perfbuf_new`, the bindings
//! through them), checked in one place.

use crate::error::{Error, Result, What};
use crate::kernel::sys::{self, CallerAttr};
use crate::kernel::{PERF_FORMAT_LOST, PERF_SAMPLE_RAW, PerfEventAttr};
use crate::log;
use std::os::fd::RawFd;
use std::time::Duration;

/// When the kernel wakes the reader.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Wakeup {
    /// After every record (libbpf's default).
    #[default]
    EveryRecord,
    /// After this many records (1 is [`Wakeup::EveryRecord`]).
    Records(u32),
    /// After this many bytes.
    Bytes(u32),
}

impl Wakeup {
    /// Whether the kernel may leave records unannounced for a while.
    pub fn batches(self) -> bool {
        match self {
            Wakeup::EveryRecord => false,
            Wakeup::Records(n) => n > 1,
            Wakeup::Bytes(n) => n > 0,
        }
    }
}

/// Default bound on how long a batched record may wait.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_millis(10);
/// Largest accepted delay bound.
pub const MAX_MAX_DELAY: Duration = Duration::from_secs(60);

/// Which CPUs get a ring.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CpuSelection {
    /// Every online CPU below the possible count (and below the map's
    /// `max_entries`); map key = CPU id. Offline CPUs are skipped.
    #[default]
    AllOnline,
    /// These CPUs, map key = CPU id; offline or absent ones are skipped.
    Subset(Vec<i32>),
    /// Exactly these `(cpu, map_key)` pairs, in order; none is skipped.
    Explicit(Vec<(i32, i32)>),
}

/// The event opened on each CPU.
#[derive(Clone, Copy)]
pub enum AttrChoice {
    /// A BPF output event built from the wake-up and overwrite options.
    Default,
    /// This one (the Rust builder's `attr`).
    Custom(PerfEventAttr),
    /// The caller's, passed to the kernel untouched (`perf_buffer__new_raw`),
    /// with its `sample_type`.
    Caller(CallerAttr, u64),
}

/// Everything a reader is opened with.
#[derive(Clone)]
pub struct Options {
    /// The `BPF_MAP_TYPE_PERF_EVENT_ARRAY` (borrowed, never closed).
    pub map_fd: RawFd,
    /// Data pages per CPU; a power of two.
    pub pages: usize,
    pub attr: AttrChoice,
    pub cpus: CpuSelection,
    pub wakeup: Wakeup,
    /// With batching: drain whatever is pending at least this often.
    pub max_delay: Option<Duration>,
    /// Overwritable rings (read-only mappings, backward writes).
    pub overwrite: bool,
    /// The opt-in fast mode (see `crate::adaptive`).
    pub adaptive: bool,
    /// Opt-in: the default event counts its losses (`PERF_FORMAT_LOST`,
    /// where the kernel has it), so the figures' `lost` is exact at any
    /// moment. Changes what a `read()` of the ring's event returns (16
    /// bytes: count and lost), so libbpf's constructors never set it. Not
    /// with a custom attr (give it `read_format = PERF_FORMAT_LOST`
    /// instead) nor the fast mode (its events keep libbpf's attr).
    pub count_lost: bool,
    /// CPUs that come online later get a ring, and CPUs that go offline
    /// and come back a fresh event (see `reader::hotplug`); the fast mode
    /// turns it on too. Off by default for libbpf's constructors (libbpf
    /// reads the CPUs online at creation, for good); the Rust builder and
    /// `perfbuf_new` turn it on. Only with a built attr, and not for
    /// explicit `(cpu, key)` pairs.
    pub hotplug: bool,
    /// Freeing the reader leaves the map's slots (and their events) as they
    /// are, as cilium/ebpf's Close does, so that a newer reader's slots on
    /// the same map survive an older reader's free.
    pub keep_slots: bool,
    /// perfbuf.bpf.h's output counts map (`BPF_MAP_TYPE_PERCPU_ARRAY`),
    /// borrowed for the constructor's call (the reader keeps a duplicate).
    pub counts_map: Option<RawFd>,
}

/// What [`Options::plan`] decided.
pub struct Plan {
    /// The attr to open each CPU's event with (`None`: the caller's).
    pub attr: Option<PerfEventAttr>,
    /// Its `sample_type` (where `PERF_SAMPLE_TIME` sits, for ordering).
    pub sample_type: u64,
    /// The delay timer's bound, when batching.
    pub max_delay: Option<Duration>,
    pub adaptive: bool,
    /// CPUs that come and go are served.
    pub hotplug: bool,
}

impl Options {
    /// Options for the map `map_fd` with libbpf's defaults: 8 pages.
    pub fn new(map_fd: RawFd) -> Options {
        Options {
            map_fd,
            pages: 8,
            attr: AttrChoice::Default,
            cpus: CpuSelection::AllOnline,
            wakeup: Wakeup::EveryRecord,
            max_delay: None,
            overwrite: false,
            adaptive: false,
            count_lost: false,
            hotplug: false,
            keep_slots: false,
            counts_map: None,
        }
    }

    /// Checks the options together and decides the attr and timers.
    pub fn plan(&self) -> Result<Plan> {
        if self.pages == 0 || !self.pages.is_power_of_two() {
            let e = Error::new(libc::EINVAL, What::PageCount(self.pages));
            log::warn(format_args!("{e}"));
            return Err(e);
        }
        let batched = self.wakeup.batches();
        let max_delay = match self.max_delay {
            Some(d) if d > MAX_MAX_DELAY => {
                return Err(log::invalid("max_delay is above 60 s"));
            }
            Some(d) if batched => Some(d.max(Duration::from_millis(1))),
            None if batched => Some(DEFAULT_MAX_DELAY),
            _ => None,
        };
        let (attr, sample_type) = match self.attr {
            AttrChoice::Default => {
                let (events, bytes) = match self.wakeup {
                    Wakeup::EveryRecord => (1, 0),
                    Wakeup::Records(n) => (n.max(1), 0),
                    Wakeup::Bytes(n) => (1, n),
                };
                let mut attr = PerfEventAttr::bpf_output_ext(events, bytes, self.overwrite);
                if self.count_lost && sys::format_lost_supported() {
                    attr.read_format = PERF_FORMAT_LOST;
                }
                (Some(attr), PERF_SAMPLE_RAW)
            }
            AttrChoice::Custom(a) => (Some(a), a.sample_type),
            AttrChoice::Caller(_, sample_type) => (None, sample_type),
        };
        if self.adaptive && (batched || self.overwrite || !matches!(self.attr, AttrChoice::Default)) {
            return Err(log::invalid(
                "the fast mode (adaptive wake-ups) needs libbpf's default event: per-record wake-ups, \
                 forward rings, no custom attr",
            ));
        }
        let hotplug = (self.hotplug || self.adaptive)
            && attr.is_some()
            && !matches!(self.cpus, CpuSelection::Explicit(_));
        Ok(Plan { attr, sample_type, max_delay, adaptive: self.adaptive, hotplug })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(f: impl FnOnce(&mut Options)) -> Result<Plan> {
        let mut o = Options::new(3);
        f(&mut o);
        o.plan()
    }

    #[test]
    fn pages_must_be_a_power_of_two() {
        assert_eq!(with(|o| o.pages = 3).err().map(|e| e.errno()), Some(libc::EINVAL));
        assert_eq!(with(|o| o.pages = 0).err().map(|e| e.errno()), Some(libc::EINVAL));
        assert!(with(|o| o.pages = 64).is_ok());
    }

    #[test]
    fn batching_gets_a_delay_bound() {
        let p = with(|_| ()).unwrap();
        assert_eq!((p.max_delay, p.attr.unwrap().wakeup), (None, 1));
        let p = with(|o| o.wakeup = Wakeup::Records(64)).unwrap();
        assert_eq!((p.max_delay, p.attr.unwrap().wakeup), (Some(DEFAULT_MAX_DELAY), 64));
        let p = with(|o| {
            o.wakeup = Wakeup::Bytes(4096);
            o.max_delay = Some(Duration::from_millis(2));
        })
        .unwrap();
        let attr = p.attr.unwrap();
        assert_eq!((p.max_delay, attr.wakeup), (Some(Duration::from_millis(2)), 4096));
        assert!(attr.has(crate::kernel::ATTR_FLAG_WATERMARK));
        // Without batching the bound has nothing to bound.
        assert_eq!(with(|o| o.max_delay = Some(Duration::from_millis(2))).unwrap().max_delay, None);
        assert!(with(|o| o.max_delay = Some(Duration::from_secs(61))).is_err());
    }

    #[test]
    fn the_fast_mode_needs_libbpfs_event() {
        assert!(with(|o| o.adaptive = true).unwrap().adaptive);
        for bad in [
            (|o: &mut Options| o.wakeup = Wakeup::Records(8)) as fn(&mut Options),
            |o| o.overwrite = true,
            |o| o.attr = AttrChoice::Custom(PerfEventAttr::bpf_output(1)),
        ] {
            let e = with(|o| {
                o.adaptive = true;
                bad(o);
            });
            assert_eq!(e.err().map(|e| e.errno()), Some(libc::EINVAL));
        }
    }

    #[test]
    fn overwrite_writes_backward() {
        let attr = with(|o| o.overwrite = true).unwrap().attr.unwrap();
        assert!(attr.has(crate::kernel::ATTR_FLAG_WRITE_BACKWARD));
    }
}
