//! The crate's one error type: an OS error number (what the C face
//! returns as `-errno`), what failed, and for the common failures a hint
//! at the fix. The context is a small typed value, formatted only when
//! shown; only errors about a named thing (a tracepoint, a binary and
//! symbol, a probe's arguments) carry that name, shared (`Arc`), so that
//! the paths that fail for lack of memory never allocate.

use core::fmt;
use std::sync::Arc;

/// Result of every fallible operation in the crate.
pub type Result<T, E = Error> = core::result::Result<T, E>;

/// An error from perfbuf.
///
/// [`Error::errno`] is the error number libbpf would report for the same
/// failure; [`Error::kind`] classifies it; `Display` says what failed, the
/// errno's name and text, and, where one helps, the likely fix:
///
/// ```
/// let e = perfbuf::Error::from_errno(libc::EACCES);
/// assert_eq!(e.kind(), perfbuf::ErrorKind::PermissionDenied);
/// assert!(e.to_string().contains("EACCES"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    errno: i32,
    what: What,
    /// What the failure was about, when it has a name: shown first.
    subject: Option<Arc<str>>,
}

/// What kind of failure an [`Error`] is.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// An argument or option was invalid (EINVAL, EBADF, ERANGE...).
    InvalidArgument,
    /// The process lacks a privilege (EPERM, EACCES).
    PermissionDenied,
    /// The kernel or the hardware lacks a feature (EOPNOTSUPP, ENOENT,
    /// ENODEV, ENOSYS...).
    Unsupported,
    /// Memory, file descriptors or locked memory ran out (ENOMEM, EMFILE,
    /// ENFILE).
    ResourceExhausted,
    /// A wake-up from another thread ended the wait (ECANCELED).
    Cancelled,
    /// A callback stopped the read with this value (libbpf's
    /// `bpf_perf_event_ret` other than `CONT` and `DONE`).
    Stopped(i32),
    /// A record of a type the sample/lost callbacks cannot take.
    UnknownRecord(u32),
    /// Anything else; see [`Error::errno`].
    Other,
}

/// What failed. Kept small and `Copy`; a name goes in the error's subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum What {
    /// Nothing more to say than the errno.
    Os,
    /// A named argument or option, with why it is invalid.
    Arg(&'static str),
    /// A page count that is not a power of two.
    PageCount(usize),
    /// A page count whose mapping size overflows.
    PageCountOverflow(usize),
    /// The map is not a `BPF_MAP_TYPE_PERF_EVENT_ARRAY` (its type).
    NotPerfEventArray(u32),
    /// `BPF_OBJ_GET_INFO_BY_FD` on the map failed.
    MapInfo(i32),
    /// Creating the epoll instance failed.
    EpollCreate,
    /// Reading the online CPU mask failed.
    OnlineCpus,
    /// `perf_event_open` on this CPU failed.
    OpenEvent(i32),
    /// Mapping this CPU's ring failed.
    MapRing(i32),
    /// Enabling this CPU's event failed.
    EnableEvent(i32),
    /// Storing this CPU's event in the map failed: cpu, key, fd.
    SetSlot(i32, i32, i32),
    /// Adding this CPU's event to the epoll set failed: cpu, fd.
    EpollAdd(i32, i32),
    /// A callback stopped the read with this value.
    Stopped(i32),
    /// A record of this type reached the sample/lost callbacks.
    UnknownRecord(u32),
    /// A ring index out of range.
    RingIndex(usize),
    /// A record that wraps the ring's end could not be copied.
    RecordCopy,
    /// The kernel has no such dynamic PMU (`"kprobe"`, `"uprobe"`).
    NoPmu(&'static str),
    /// A PMU's sysfs description could not be read or parsed.
    PmuSysfs(&'static str),
    /// tracefs is mounted nowhere we look.
    NoTracefs,
    /// A tracepoint tracefs does not list.
    NoTracepoint,
    /// A tracepoint's `format` file could not be read or parsed.
    TracepointFormat,
    /// A file that is not an ELF binary we can read.
    NotElf,
    /// A symbol the binary does not define.
    NoSymbol,
    /// A step of opening an event set failed on this CPU (-1: none).
    EventSet(SetStep, i32),
    /// None of the CPUs asked for is online.
    NoOnlineCpu,
    /// No event with this id in the set.
    NoEvent(u32),
    /// The event set was built without rings.
    NoRings,
    /// The map is not a `BPF_MAP_TYPE_RINGBUF` (its fd, its type).
    NotRingBuf(i32, u32),
    /// Mapping this ring buffer map failed (its fd, which part).
    MapRingBuf(i32, &'static str),
    /// A ring buffer map whose size the kernel could not have given it.
    RingBufSize(i32, u32),
    /// The map is not perfbuf.bpf.h's output counts map (its fd, type,
    /// value size).
    NotOutputCounts(i32, u32, u32),
    /// Adding or replacing the ring of a CPU that came online failed.
    Hotplug(i32),
    /// The map is neither a `BPF_MAP_TYPE_PERF_EVENT_ARRAY` nor a
    /// `BPF_MAP_TYPE_RINGBUF` (its fd, its type).
    NotEventMap(i32, u32),
    /// What a BPF ring buffer has nothing for (an operation of per-CPU
    /// perf rings).
    NotForRingBuf(&'static str),
    /// A ring buffer record too long to be made a perf record (its length).
    RingBufRecordTooLong(usize),
    /// A record larger than a batch read's whole data buffer: the bytes it
    /// needs, the buffer's size.
    BatchTooSmall(usize, usize),
    /// Batch reads take BPF output only (`PERF_SAMPLE_RAW` samples), not
    /// samples of this `sample_type`.
    BatchSampleType(u64),
}

/// The steps of opening an event set, for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetStep {
    /// Opening the CPU's ring owner (a software dummy event).
    OpenRing,
    /// Mapping the CPU's ring.
    MapRing,
    /// Opening an event.
    OpenEvent,
    /// Sending the event's records to the CPU's ring.
    SetOutput,
    /// Setting the event's filter.
    SetFilter,
    /// Asking the kernel for the event's id.
    EventId,
    /// Attaching the BPF program.
    AttachBpf,
    /// Enabling the event.
    Enable,
    /// Disabling the event.
    Disable,
    /// Reading the event's counts.
    Read,
    /// Opening the cgroup directory.
    OpenCgroup,
}

impl SetStep {
    fn text(self) -> &'static str {
        match self {
            SetStep::OpenRing => "open the ring owner event",
            SetStep::MapRing => "mmap the ring",
            SetStep::OpenEvent => "open the event",
            SetStep::SetOutput => "send the event's records to the ring (PERF_EVENT_IOC_SET_OUTPUT)",
            SetStep::SetFilter => "set the event's filter (PERF_EVENT_IOC_SET_FILTER)",
            SetStep::EventId => "get the event's id (PERF_EVENT_IOC_ID)",
            SetStep::AttachBpf => "attach the BPF program",
            SetStep::Enable => "enable the event",
            SetStep::Disable => "disable the event",
            SetStep::Read => "read the event's counts",
            SetStep::OpenCgroup => "open the cgroup directory",
        }
    }
}

impl Error {
    /// An error with only an errno (for callers that have nothing to add).
    pub fn from_errno(errno: i32) -> Error {
        Error { errno, what: What::Os, subject: None }
    }

    /// An error with `errno` about `what`.
    pub(crate) const fn new(errno: i32, what: What) -> Error {
        Error { errno, what, subject: None }
    }

    /// EINVAL for the argument or option described by `why`.
    pub const fn invalid(why: &'static str) -> Error {
        Error { errno: libc::EINVAL, what: What::Arg(why), subject: None }
    }

    /// EINVAL, with nothing to add.
    pub const INVAL: Error = Error::from_errno_const(libc::EINVAL);
    /// ENOMEM, with nothing to add.
    pub const NOMEM: Error = Error::from_errno_const(libc::ENOMEM);

    const fn from_errno_const(errno: i32) -> Error {
        Error { errno, what: What::Os, subject: None }
    }

    /// The errno of an I/O error (EIO when it has none).
    pub fn from_io(e: &std::io::Error) -> Error {
        Error::from_errno(e.raw_os_error().unwrap_or(libc::EIO))
    }

    /// The calling thread's `errno`, as a failed system call left it.
    pub fn last_os() -> Error {
        Error::from_errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    }

    /// The same errno, with what failed.
    pub fn with(self, what: What) -> Error {
        Error { what, ..self }
    }

    /// The same context, with another errno.
    pub fn with_errno(self, errno: i32) -> Error {
        Error { errno, ..self }
    }

    /// The same error, about `subject` (a tracepoint's name, a binary and
    /// symbol...), which its text names first. A subject already given is
    /// kept and `subject` put before it.
    pub fn about(self, subject: impl fmt::Display) -> Error {
        let subject = match &self.subject {
            Some(inner) => format!("{subject}: {inner}"),
            None => subject.to_string(),
        };
        Error { subject: Some(subject.into()), ..self }
    }

    /// What failed.
    #[cfg(test)]
    pub(crate) fn what(&self) -> What {
        self.what
    }

    /// What the error is about, if it names something (see [`Self::about`]).
    pub fn subject(&self) -> Option<&str> {
        self.subject.as_deref()
    }

    /// A callback stopped the read with `value`.
    pub const fn stopped(value: i32) -> Error {
        // libbpf returns the value; negative ones also set errno.
        Error {
            errno: if value < 0 { value.wrapping_neg() } else { 0 },
            what: What::Stopped(value),
            subject: None,
        }
    }

    /// A record of `type_` reached the sample/lost callbacks (libbpf
    /// stops with `LIBBPF_PERF_EVENT_ERROR`, i.e. -1 and errno EPERM).
    pub const fn unknown_record(type_: u32) -> Error {
        Error { errno: libc::EPERM, what: What::UnknownRecord(type_), subject: None }
    }

    /// The positive error number (0 only for a callback that stopped the
    /// read with a non-negative value).
    pub fn errno(&self) -> i32 {
        self.errno
    }

    /// What the C face returns for this error: `-errno`, or the value a
    /// callback stopped with (libbpf returns that value as is).
    pub fn code(&self) -> i32 {
        match self.what {
            What::Stopped(v) => v,
            What::UnknownRecord(_) | What::RecordCopy => -1,
            _ => -self.errno,
        }
    }

    /// The classification of this error.
    pub fn kind(&self) -> ErrorKind {
        match self.what {
            What::Stopped(v) => return ErrorKind::Stopped(v),
            What::UnknownRecord(t) => return ErrorKind::UnknownRecord(t),
            _ => {}
        }
        match self.errno {
            libc::EINVAL | libc::EBADF | libc::ERANGE | libc::E2BIG | libc::EBADFD | libc::ENODATA => {
                ErrorKind::InvalidArgument
            }
            libc::EPERM | libc::EACCES => ErrorKind::PermissionDenied,
            libc::EOPNOTSUPP | libc::ENOENT | libc::ENODEV | libc::ENOSYS | libc::ENXIO | libc::ENOEXEC => {
                ErrorKind::Unsupported
            }
            libc::ENOMEM | libc::EMFILE | libc::ENFILE | libc::ENOSPC => ErrorKind::ResourceExhausted,
            libc::ECANCELED => ErrorKind::Cancelled,
            _ => ErrorKind::Other,
        }
    }

    /// A hint at the fix, for the failures users meet most.
    pub fn hint(&self) -> Option<&'static str> {
        match (self.errno, self.what) {
            (_, What::NotPerfEventArray(_)) => {
                Some("pass the fd of a BPF_MAP_TYPE_PERF_EVENT_ARRAY map (bpftool map show lists map types)")
            }
            (_, What::PageCount(_)) => Some("use a power of two, e.g. 64"),
            (_, What::NotEventMap(..)) => Some(
                "pass the fd of a BPF_MAP_TYPE_PERF_EVENT_ARRAY or BPF_MAP_TYPE_RINGBUF map (bpftool map show \
                 lists map types)",
            ),
            (_, What::RingBufRecordTooLong(_)) => {
                Some("read it with on_sample (a sample callback), which takes records of any length")
            }
            (_, What::BatchTooSmall(..)) => Some(
                "read again with a data buffer at least that large: the record stays in the ring until then",
            ),
            (_, What::NotRingBuf(..)) => {
                Some("pass the fd of a BPF_MAP_TYPE_RINGBUF map (bpftool map show lists map types)")
            }
            (_, What::NotOutputCounts(..)) => {
                Some("declare it with PERFBUF_OUTPUT_COUNTS(name) from perfbuf.bpf.h and pass that map's fd")
            }
            (libc::EPERM | libc::EACCES, _) => {
                Some("run as root, or grant CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN on kernels before 5.8)")
            }
            (libc::EBADF | libc::EBADFD, What::MapInfo(_)) => Some("the map fd is not open"),
            (libc::EINVAL | libc::EBADF, What::SetSlot(..)) => Some(
                "is map_fd a BPF_MAP_TYPE_PERF_EVENT_ARRAY with a slot for this CPU? (this fd is not one, or the \
                 map has fewer entries)",
            ),
            (libc::EMFILE | libc::ENFILE, _) => {
                Some("raise the open-file limit (ulimit -n): each CPU needs an fd")
            }
            (libc::ENOMEM, What::MapRing(_)) => Some(
                "the rings exceed the locked-memory allowance: use fewer pages, raise RLIMIT_MEMLOCK \
                 (ulimit -l) or kernel.perf_event_mlock_kb, or grant CAP_IPC_LOCK",
            ),
            (_, What::NoPmu("kprobe")) => Some(
                "the kernel was built without CONFIG_KPROBES (or is older than 4.17): kprobes cannot be used",
            ),
            (_, What::NoPmu(_)) => Some(
                "the kernel was built without CONFIG_UPROBE_EVENTS (or is older than 4.17): uprobes cannot be used",
            ),
            (_, What::NoTracefs) => Some("mount it: mount -t tracefs nodev /sys/kernel/tracing"),
            (_, What::NoTracepoint) => {
                Some("names are subsystem:event, as listed by `ls /sys/kernel/tracing/events/*`")
            }
            (libc::ENOENT | libc::EOPNOTSUPP, What::EventSet(SetStep::OpenEvent, _)) => Some(
                "this kernel or machine lacks the event (a hardware event on a virtual machine without a PMU?)",
            ),
            (libc::EINVAL, What::EventSet(SetStep::SetOutput, _)) => Some(
                "was the set's reader freed? Its rings went with it: add events while a reader exists, or before \
                 making one",
            ),
            (libc::EINVAL, What::EventSet(SetStep::SetFilter, _)) => {
                Some("check the filter's syntax and field names against the tracepoint's format file")
            }
            (libc::EEXIST, What::EventSet(SetStep::AttachBpf, _)) => {
                Some("a BPF program is already attached to this event")
            }
            (libc::EINVAL, What::EventSet(SetStep::AttachBpf, _)) => Some(
                "the program type must match the event: BPF_PROG_TYPE_PERF_EVENT for sampling events, \
                 TRACEPOINT for tracepoints, KPROBE for kprobes and uprobes",
            ),
            (libc::ENOENT | libc::ENODEV, What::OpenEvent(_)) => Some(
                "this kernel lacks the event (CONFIG_PERF_EVENTS, CONFIG_BPF_EVENTS), or the CPU is offline",
            ),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(subject) = &self.subject {
            write!(f, "{subject}: ")?;
        }
        match self.what {
            What::Os => {}
            What::Arg(why) => write!(f, "{why}: ")?,
            What::PageCount(n) => write!(f, "page count should be power of two, but is {n}: ")?,
            What::PageCountOverflow(n) => write!(f, "page count {n} overflows the mapping size: ")?,
            What::NotPerfEventArray(t) => {
                write!(f, "map should be BPF_MAP_TYPE_PERF_EVENT_ARRAY (type 4), but is of type {t}: ")?
            }
            What::MapInfo(fd) => write!(f, "failed to get map info for map FD {fd}: ")?,
            What::EpollCreate => write!(f, "failed to create epoll instance: ")?,
            What::OnlineCpus => write!(f, "failed to get online CPU mask: ")?,
            What::OpenEvent(cpu) => write!(f, "failed to open perf buffer event on cpu #{cpu}: ")?,
            What::MapRing(cpu) => write!(f, "failed to mmap perf buffer on cpu #{cpu}: ")?,
            What::EnableEvent(cpu) => write!(f, "failed to enable perf buffer event on cpu #{cpu}: ")?,
            What::SetSlot(cpu, key, fd) => {
                write!(f, "failed to set cpu #{cpu}, key {key} -> perf FD {fd}: ")?
            }
            What::EpollAdd(cpu, fd) => write!(f, "failed to epoll_ctl cpu #{cpu} perf FD {fd}: ")?,
            What::Stopped(v) => return write!(f, "a callback stopped the read with {v}"),
            What::UnknownRecord(t) => return write!(f, "unknown perf sample type {t}"),
            What::RingIndex(i) => write!(f, "no ring at index {i}: ")?,
            What::RecordCopy => write!(f, "cannot copy a record that wraps the ring's end: ")?,
            What::NoPmu(pmu) => {
                write!(f, "the kernel has no {pmu} PMU (/sys/bus/event_source/devices/{pmu}): ")?
            }
            What::PmuSysfs(pmu) => write!(f, "cannot read the {pmu} PMU's sysfs description: ")?,
            What::NoTracefs => write!(
                f,
                "tracefs is not mounted (looked in /proc/self/mountinfo, /sys/kernel/tracing, /sys/kernel/debug/tracing): "
            )?,
            What::NoTracepoint => write!(f, "no such tracepoint in tracefs: ")?,
            What::TracepointFormat => write!(f, "cannot parse the tracepoint's format file: ")?,
            What::NotElf => write!(f, "not an ELF binary this library can read: ")?,
            What::NoSymbol => write!(f, "the binary does not define the symbol: ")?,
            What::EventSet(step, -1) => write!(f, "failed to {}: ", step.text())?,
            What::EventSet(step, cpu) => write!(f, "failed to {} on cpu #{cpu}: ", step.text())?,
            What::NoOnlineCpu => write!(f, "none of the CPUs asked for is online: ")?,
            What::NoEvent(id) => write!(f, "no event #{id} in the set: ")?,
            What::NoRings => write!(f, "the event set has no rings (built with pages(0)): ")?,
            What::NotRingBuf(fd, t) => write!(
                f,
                "ringbuf: map fd={fd} should be BPF_MAP_TYPE_RINGBUF (type 27), but is of type {t}: "
            )?,
            What::MapRingBuf(fd, part) => write!(f, "ringbuf: failed to mmap {part} for map fd={fd}: ")?,
            What::NotOutputCounts(fd, t, size) => write!(
                f,
                "map fd={fd} should be perfbuf.bpf.h's output counts (BPF_MAP_TYPE_PERCPU_ARRAY, type 6, of \
                 values of at least 32 bytes), but is of type {t} with values of {size} bytes: "
            )?,
            What::Hotplug(cpu) => write!(f, "cannot read cpu #{cpu}, which came online: ")?,
            What::RingBufSize(fd, size) => {
                write!(f, "ringbuf: map fd={fd} has a size of {size} bytes, not a power of two pages: ")?
            }
            What::NotEventMap(fd, t) => write!(
                f,
                "map fd={fd} should be BPF_MAP_TYPE_PERF_EVENT_ARRAY (type 4) or BPF_MAP_TYPE_RINGBUF \
                 (type 27), but is of type {t}: "
            )?,
            What::NotForRingBuf(what) => {
                write!(f, "{what}: a BPF ring buffer has none (one ring for all CPUs, no perf events): ")?
            }
            What::RingBufRecordTooLong(len) => write!(
                f,
                "a ring buffer record of {len} bytes is too long for a perf record (on_record, raw callbacks): "
            )?,
            What::BatchTooSmall(needed, have) => write!(
                f,
                "the next record needs {needed} bytes, more than the batch's whole data buffer ({have} bytes): "
            )?,
            What::BatchSampleType(t) => write!(
                f,
                "batch reads take BPF output (sample_type PERF_SAMPLE_RAW), not samples of sample_type {t:#x}: "
            )?,
        }
        let mut buf = [0u8; 128];
        write!(f, "{} ({})", strerror(self.errno, &mut buf), errno_name(self.errno))?;
        if let Some(hint) = self.hint() {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

impl From<Error> for std::io::Error {
    fn from(e: Error) -> std::io::Error {
        std::io::Error::new(std::io::Error::from_raw_os_error(e.errno).kind(), e)
    }
}

/// `strerror(errno)`, into `buf` (no allocation: errors are shown on
/// out-of-memory paths too).
fn strerror(errno: i32, buf: &mut [u8; 128]) -> &str {
    // SAFETY: `buf` is writable for its length; the XSI strerror_r writes a
    // NUL-terminated string of at most that length.
    let ret = unsafe { libc::strerror_r(errno, buf.as_mut_ptr().cast(), buf.len()) };
    let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match core::str::from_utf8(&buf[..len]) {
        Ok(text) if ret == 0 && !text.is_empty() => text,
        _ => "Unknown error",
    }
}

/// The symbolic name of an errno value, e.g. `"EACCES"`.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOEXEC => "ENOEXEC",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::EPROTO => "EPROTO",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOSPC => "ENOSPC",
        libc::EMSGSIZE => "EMSGSIZE",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::ENODATA => "ENODATA",
        libc::EBADFD => "EBADFD",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ECANCELED => "ECANCELED",
        524 => "ENOTSUPP",
        _ => "errno",
    }
}

/// Sets `errno` for the calling thread.
pub fn set_errno(value: i32) {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = value };
}

/// Reads `errno` of the calling thread.
pub fn get_errno() -> i32 {
    // SAFETY: __errno_location returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_what_failed_the_errno_and_the_fix() {
        let e = Error::from_errno(libc::EACCES).with(What::OpenEvent(0));
        assert_eq!(
            e.to_string(),
            "failed to open perf buffer event on cpu #0: Permission denied (EACCES); run as root, or grant \
             CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN on kernels before 5.8)"
        );
        assert_eq!((e.errno(), e.code(), e.kind()), (13, -13, ErrorKind::PermissionDenied));
        let e = Error::new(libc::EINVAL, What::NotPerfEventArray(1));
        assert!(
            e.to_string()
                .starts_with("map should be BPF_MAP_TYPE_PERF_EVENT_ARRAY (type 4), but is of type 1")
        );
        assert!(e.to_string().contains("(EINVAL); pass the fd of a BPF_MAP_TYPE_PERF_EVENT_ARRAY"));
    }

    #[test]
    fn stops_keep_the_callbacks_value() {
        assert_eq!(Error::stopped(5).code(), 5);
        assert_eq!(Error::stopped(5).errno(), 0);
        assert_eq!(Error::stopped(-1).errno(), 1);
        assert_eq!(Error::stopped(-1).kind(), ErrorKind::Stopped(-1));
        assert_eq!(Error::unknown_record(3).code(), -1);
        assert_eq!(Error::unknown_record(3).errno(), libc::EPERM);
    }

    #[test]
    fn converts_to_io_error() {
        let io: std::io::Error = Error::from_errno(libc::ENOMEM).into();
        assert_eq!(io.kind(), std::io::ErrorKind::OutOfMemory);
    }
}
