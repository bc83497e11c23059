//! What an event set opens: events, their sampling, and the targets they
//! watch. Plain descriptions; nothing here touches the kernel.

use crate::kernel::{PERF_COUNT_HW_CPU_CYCLES, PERF_COUNT_SW_CPU_CLOCK, PERF_SAMPLE_RAW, PerfEventAttr};
use std::ffi::CString;
use std::path::PathBuf;

/// An event's id in its [`super::EventSet`]: dense, 0, 1, 2... in the
/// order events were added (a failed add takes none), never reused within
/// a set (a removed event's id stays a gap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub(crate) u32);

impl EventId {
    /// The id as a number (the C face's `int`).
    pub fn get(self) -> u32 {
        self.0
    }

    /// The id of this number (one a face passed as an integer, or saved
    /// from [`Self::get`]): one the set never gave names no event (ENOENT).
    pub fn from_raw(id: u32) -> EventId {
        EventId(id)
    }
}

/// How an event samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sampling {
    /// It only counts (read with [`super::EventSet::read`]); no samples.
    Count,
    /// A sample every `n` occurrences (nanoseconds for the clock events).
    Period(u64),
    /// About `hz` samples a second: the kernel adjusts the period, which
    /// each sample then carries (`PERF_SAMPLE_PERIOD`).
    Frequency(u64),
}

/// Where a uprobe goes in its binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum UprobeAt {
    /// A function, found in the ELF symbol tables.
    Symbol(String),
    /// A file offset the caller computed.
    Offset(u64),
}

/// The kinds of events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Software(u64),
    /// A hardware event, or this software event where the machine has
    /// no PMU for it.
    Hardware {
        config: u64,
        fallback: Option<u64>,
    },
    /// `subsystem:name`.
    Tracepoint(String),
    Kprobe {
        symbol: CString,
        offset: u64,
        retprobe: bool,
    },
    Uprobe {
        path: PathBuf,
        at: UprobeAt,
        /// Bytes into the function at `at` ([`Event::offset`]).
        offset: u64,
        retprobe: bool,
        ref_ctr_offset: u64,
    },
    Raw(PerfEventAttr),
}

/// An event's place in a counter group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Group {
    Alone,
    /// Reads with `PERF_FORMAT_GROUP`: its own count and its members'.
    Leader,
    /// Scheduled with this leader, on the same CPU and target.
    Member(EventId),
}

/// An event to add to an [`super::EventSet`]: a kind, how it samples, and
/// options. Tracing events (tracepoints, kprobes, uprobes) sample every
/// hit with their raw record by default; software and hardware events
/// only count until given a period or a frequency.
///
/// ```
/// use perfbuf::events::Event;
/// let exec = Event::tracepoint("sched:sched_process_exec").filter("common_pid != 1");
/// let profile = Event::cpu_cycles_or_clock().frequency(99);
/// # let _ = (exec, profile);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "an event does nothing until added to a set"]
pub struct Event {
    pub(crate) kind: Kind,
    pub(crate) sampling: Sampling,
    /// `PERF_SAMPLE_*` bits beyond the set's own.
    pub(crate) sample_type: u64,
    pub(crate) filter: Option<String>,
    pub(crate) group: Group,
    /// A probe's fetch arguments (kernel dynamic-event syntax).
    pub(crate) args: Option<String>,
    /// Enabled as it is added.
    pub(crate) enabled: bool,
}

impl Event {
    fn new(kind: Kind, sampling: Sampling, sample_type: u64) -> Event {
        Event { kind, sampling, sample_type, filter: None, group: Group::Alone, args: None, enabled: false }
    }

    fn tracing(kind: Kind) -> Event {
        Event::new(kind, Sampling::Period(1), PERF_SAMPLE_RAW)
    }

    /// A software event (`PERF_COUNT_SW_*`).
    pub fn software(config: u64) -> Event {
        Event::new(Kind::Software(config), Sampling::Count, 0)
    }

    /// The software CPU clock (`PERF_COUNT_SW_CPU_CLOCK`), which every
    /// machine has.
    pub fn cpu_clock() -> Event {
        Event::software(PERF_COUNT_SW_CPU_CLOCK)
    }

    /// A hardware event (`PERF_COUNT_HW_*`); fails where the machine has
    /// no PMU for it unless given a fallback ([`Self::or_software`]).
    pub fn hardware(config: u64) -> Event {
        Event::new(Kind::Hardware { config, fallback: None }, Sampling::Count, 0)
    }

    /// CPU cycles, or the software CPU clock where the hardware event
    /// cannot be opened (virtual machines): what profilers sample.
    /// [`super::EventInfo::fallback`] tells which one was opened and why.
    pub fn cpu_cycles_or_clock() -> Event {
        Event::hardware(PERF_COUNT_HW_CPU_CYCLES).or_software(PERF_COUNT_SW_CPU_CLOCK)
    }

    /// For a hardware event: open this software event instead when the
    /// hardware one fails with EOPNOTSUPP, ENOENT, ENODEV, EINVAL or
    /// EACCES (a machine or VM without the PMU); other errors stay errors.
    pub fn or_software(mut self, config: u64) -> Event {
        if let Kind::Hardware { fallback, .. } = &mut self.kind {
            *fallback = Some(config);
        }
        self
    }

    /// A tracepoint, `"subsystem:name"` (`"sched:sched_process_exec"`),
    /// found in tracefs; its samples carry the raw record, decoded by
    /// field name ([`super::EventSample::field`]).
    pub fn tracepoint(name: &str) -> Event {
        Event::tracing(Kind::Tracepoint(name.to_owned()))
    }

    /// A kprobe on a kernel function (`"module:symbol"` also works),
    /// through the kernel's kprobe PMU (no tracefs needed).
    pub fn kprobe(symbol: &str) -> Event {
        Event::tracing(Kind::Kprobe { symbol: c_string(symbol), offset: 0, retprobe: false })
    }

    /// A kretprobe: fires when `symbol` returns.
    pub fn kretprobe(symbol: &str) -> Event {
        Event::tracing(Kind::Kprobe { symbol: c_string(symbol), offset: 0, retprobe: true })
    }

    /// A uprobe on function `symbol` of the ELF binary at `path` (found in
    /// its symbol tables); at an instruction inside it with
    /// [`Self::offset`].
    pub fn uprobe(path: impl Into<PathBuf>, symbol: &str) -> Event {
        Event::uprobe_where(path.into(), UprobeAt::Symbol(symbol.to_owned()))
    }

    /// A uretprobe: fires when `symbol` of `path` returns.
    pub fn uretprobe(path: impl Into<PathBuf>, symbol: &str) -> Event {
        Event::uprobe(path, symbol).with_retprobe()
    }

    /// A uprobe at a file offset of the binary at `path` (an instruction's
    /// first byte: the kernel places its breakpoint there unchecked).
    pub fn uprobe_at(path: impl Into<PathBuf>, file_offset: u64) -> Event {
        Event::uprobe_where(path.into(), UprobeAt::Offset(file_offset))
    }

    /// A uretprobe on the function whose code starts at `file_offset` of
    /// the binary at `path`. The kernel takes the word on top of the stack
    /// when the probe fires for the return address, which holds only at
    /// a function's first instruction: anywhere else it overwrites another
    /// word and the probed program crashes.
    pub fn uretprobe_at(path: impl Into<PathBuf>, file_offset: u64) -> Event {
        Event::uprobe_at(path, file_offset).with_retprobe()
    }

    fn uprobe_where(path: PathBuf, at: UprobeAt) -> Event {
        Event::tracing(Kind::Uprobe { path, at, offset: 0, retprobe: false, ref_ctr_offset: 0 })
    }

    fn with_retprobe(mut self) -> Event {
        if let Kind::Uprobe { retprobe, .. } = &mut self.kind {
            *retprobe = true;
        }
        self
    }

    /// Any event, from the caller's attr. The set still imposes what
    /// sharing a ring needs: it opens the event disabled, with
    /// `sample_id_all`, `PERF_SAMPLE_IDENTIFIER | IP | TID | TIME | CPU`
    /// added to its `sample_type`, `CLOCK_MONOTONIC` and the set's wake-ups.
    ///
    /// The caller's `freq` and `sample_freq` (or `sample_period`; with
    /// `freq`, `PERF_SAMPLE_PERIOD` is added, see [`Self::frequency`]), its
    /// other flags (`exclude_*`, `inherit`, `precise_ip`, `mmap`...) and
    /// its `read_format` bits `GROUP` and `LOST` are kept; only the flags
    /// above, `write_backward` and `watermark` are the set's.
    pub fn raw(attr: PerfEventAttr) -> Event {
        let sampling = match attr.sample_period {
            0 => Sampling::Count,
            hz if attr.has(crate::kernel::ATTR_FLAG_FREQ) => Sampling::Frequency(hz),
            n => Sampling::Period(n),
        };
        Event::new(Kind::Raw(attr), sampling, attr.sample_type)
    }

    /// For a kprobe or uprobe: the probe goes `off` bytes into the
    /// function (an instruction's first byte; for a uprobe at a file
    /// offset, `off` bytes after it). A uprobe's offset at or past its
    /// symbol's size is EINVAL. A return probe fires when the function
    /// returns, so it takes no offset: a uretprobe with one is EINVAL
    /// (the kernel would take it, and the probed program would crash), a
    /// kretprobe with one fails as the kernel decides.
    pub fn offset(mut self, off: u64) -> Event {
        match &mut self.kind {
            Kind::Kprobe { offset, .. } | Kind::Uprobe { offset, .. } => *offset = off,
            _ => {}
        }
        self
    }

    /// For a uprobe: the file offset of a USDT semaphore the kernel counts
    /// up while the probe exists.
    pub fn ref_ctr_offset(mut self, off: u64) -> Event {
        if let Kind::Uprobe { ref_ctr_offset, .. } = &mut self.kind {
            *ref_ctr_offset = off;
        }
        self
    }

    /// A sample every `n` occurrences.
    pub fn period(mut self, n: u64) -> Event {
        self.sampling = Sampling::Period(n);
        self
    }

    /// About `hz` samples a second (at most
    /// `/proc/sys/kernel/perf_event_max_sample_rate`). The kernel adjusts
    /// the period as it goes, so each sample carries the period it stands
    /// for (`PERF_SAMPLE_PERIOD` is added), as `perf record -F` does.
    pub fn frequency(mut self, hz: u64) -> Event {
        self.sampling = Sampling::Frequency(hz);
        self
    }

    /// No samples: the event only counts.
    pub fn counting(mut self) -> Event {
        self.sampling = Sampling::Count;
        self
    }

    /// More `PERF_SAMPLE_*` fields in each sample (`PERF_SAMPLE_CALLCHAIN`,
    /// `PERF_SAMPLE_PERIOD`...), beyond the set's own.
    pub fn sample(mut self, bits: u64) -> Event {
        self.sample_type |= bits;
        self
    }

    /// An ftrace filter for a tracing event (`"common_pid != 1"`,
    /// `"filename ~ \"*/sh\""`), applied by the kernel. To change or
    /// clear it later: [`super::EventSet::set_filter`].
    pub fn filter(mut self, filter: &str) -> Event {
        self.filter = Some(filter.to_owned());
        self
    }

    /// For a kprobe, kretprobe, uprobe or uretprobe: what each hit
    /// fetches, in the kernel's dynamic-event syntax (`NAME=FETCHARG[:TYPE]`
    /// separated by spaces: `fd=%di:s32 path=+0(%si):string ret=$retval:s64`,
    /// `$arg1`, `$comm`, `+8(%di):u32`, bitfields `:b4@2/32`...; see the
    /// kernel's kprobetrace.rst and uprobetracer.rst). The probe is then
    /// created through tracefs (`kprobe_events`, `uprobe_events`) in a group
    /// of this process and set, `perfbuf_<pid>_<pidns>_<n>`, and its samples carry
    /// the values as tracepoint fields ([`super::EventSample::field`]). The
    /// probe is deleted when the event is removed or the set dropped, and a
    /// set created after a crash deletes the groups of processes that are
    /// gone. A definition the kernel rejects fails with EINVAL and the
    /// kernel's complaint (from tracefs `error_log`) in the error's text.
    /// Without arguments probes go through the PMUs and tracefs is not
    /// written. Adding an event of another kind with arguments fails with
    /// EINVAL.
    pub fn args(mut self, args: &str) -> Event {
        self.args = Some(args.to_owned());
        self
    }

    /// Enabled as soon as it is added (a failure to enable fails the add,
    /// with nothing left open).
    pub fn enabled(mut self) -> Event {
        self.enabled = true;
        self
    }

    /// Makes the event a counter group's leader: [`super::EventSet::read`]
    /// on it returns its members' counts too, measured over the same time.
    pub fn group_leader(mut self) -> Event {
        self.group = Group::Leader;
        self
    }

    /// Makes the event a member of `leader`'s group.
    pub fn member_of(mut self, leader: EventId) -> Event {
        self.group = Group::Member(leader);
        self
    }
}

/// A string for the kernel: cut at an interior NUL (which it would stop
/// at anyway).
fn c_string(s: &str) -> CString {
    let cut = s.split('\0').next().unwrap_or_default();
    CString::new(cut).unwrap_or_default()
}

/// Whose activity a set watches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// Every task, on each CPU (needs CAP_PERFMON or root).
    System,
    /// One process (or thread), on each CPU.
    Pid(i32),
    /// The tasks of a cgroup (v2 directory) and its descendants.
    Cgroup(PathBuf),
}
