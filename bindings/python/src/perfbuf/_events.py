"""Event sets: perf events other than BPF output (tracepoints, kprobes,
uprobes, software and hardware sampling events, raw attrs) opened on every
CPU and target, sharing one ring per CPU, read through an
:class:`EventReader` whose callback gets decoded :class:`EventSample`
objects. Over libperfbuf's ``perfbuf_events_*`` functions."""
from __future__ import annotations

import ctypes
import errno
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NamedTuple, Optional, Union

from . import _lib, _library
from ._args import as_int, as_u32, callable_or_none
from ._library import os_error
from ._ring_reader import LostFn, RingReader
from . import _sideband
from . import _sample_fields
from ._sample_fields import Branch, ReadValue, ReadValues
from ._sideband import RawRecord, SidebandRecord

_HAS_SIDEBAND = _library.LIB is not None and _sideband.declare(_library.LIB.lib)

__all__ = ["EventSet", "EventReader", "EventSample", "EventInfo", "Counts", "HARDWARE", "SOFTWARE", "SidebandRecord",
           "RawRecord", "ReadValues", "ReadValue", "Branch"]

# PERF_COUNT_HW_* and PERF_COUNT_SW_* by perf's names: add_hardware("cycles"),
# add_software("cpu-clock"). Plain ints work too.
HARDWARE = {
    "cpu-cycles": 0, "cycles": 0, "instructions": 1, "cache-references": 2, "cache-misses": 3,
    "branch-instructions": 4, "branches": 4, "branch-misses": 5, "bus-cycles": 6,
    "stalled-cycles-frontend": 7, "stalled-cycles-backend": 8, "ref-cycles": 9,
}
SOFTWARE = {
    "cpu-clock": 0, "task-clock": 1, "page-faults": 2, "faults": 2, "context-switches": 3, "cs": 3,
    "cpu-migrations": 4, "migrations": 4, "minor-faults": 5, "major-faults": 6, "alignment-faults": 7,
    "emulation-faults": 8, "dummy": 9, "bpf-output": 10, "cgroup-switches": 11,
}

_KINDS = {
    _lib.PERFBUF_EVENT_SOFTWARE: "software", _lib.PERFBUF_EVENT_HARDWARE: "hardware",
    _lib.PERFBUF_EVENT_TRACEPOINT: "tracepoint", _lib.PERFBUF_EVENT_KPROBE: "kprobe",
    _lib.PERFBUF_EVENT_UPROBE: "uprobe", _lib.PERFBUF_EVENT_RAW: "raw",
}

# RawRecord.record_type of a sample handed over whole (the rest of the record is the library's to read).
PERF_RECORD_SAMPLE = 9
PERF_SAMPLE_ADDR, PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_PERIOD = 1 << 3, 1 << 5, 1 << 8


def _as_u64(name: str, value: Any) -> int:
    return as_u32(name, value, 0, 2**64 - 1)


def _need_library() -> None:
    missing = _lib.missing_optional(_library.LIB)
    if missing:
        raise OSError(errno.ENOSYS, f"this libperfbuf ({_library.LIB.perfbuf_version().decode()}) has no event sets: it "
                                    f"lacks {', '.join(missing)}; install a newer one")


def _config(table: dict[str, int], what: str, value: Union[int, str]) -> int:
    if isinstance(value, str):
        try:
            return table[value]
        except KeyError:
            raise ValueError(f"unknown {what} event {value!r}; one of {', '.join(sorted(table))}, "
                             "or a PERF_COUNT_* number") from None
    return _as_u64(f"{what} config", value)


def _optional_str(name: str, value: Any) -> Optional[bytes]:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    return value.encode()


def _path(name: str, value: Any) -> bytes:
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a path (str, bytes or os.PathLike), not {type(value).__name__}")
    return os.fsencode(value)


def _ints(name: str, values: Optional[Iterable[int]]) -> Optional[list[int]]:
    if values is None:
        return None
    out = [as_int(f"{name}[]", v) for v in values]
    if not out:
        raise ValueError(f"{name} is empty: give some, or None for all")
    return out


# ---- what the set reports ------------------------------------------------------------

class BpfProgram(NamedTuple):
    """A BPF program on an event's tracepoint: its ``id`` (``bpftool prog
    show id ID``), the ``name`` it was loaded with (``""`` when the kernel
    would not say) and whether this set attached it (``ours``)."""

    id: int
    name: str
    ours: bool


@dataclass(frozen=True)
class EventInfo:
    """What :meth:`EventSet.info` reports about an event: the kind opened
    (``"software"`` for a hardware event that fell back), the attr's type
    and config as opened, why a hardware event fell back (``fallback_errno``,
    0 if it did not), the kernel events open for it (CPUs × targets).

    ``bpf_programs``: for an event on a tracepoint (a tracepoint, a probe
    with arguments), the BPF programs the kernel runs on every hit, whoever
    attached them. Where one returns 0 the kernel drops the hit for every
    perf event on the tracepoint, this set's included: its samples vanish.
    Each one the set did not attach is also warned about once (the
    ``perfbuf`` logger). :attr:`other_bpf_programs` lists those."""

    kind: str
    attr_type: int
    config: int
    fallback_errno: int
    instances: int
    sample_type: int
    cpu_count: int
    enabled: bool
    bpf_attached: bool
    bpf_programs: tuple[BpfProgram, ...] = ()

    @property
    def other_bpf_programs(self) -> tuple[BpfProgram, ...]:
        """The programs on the event's tracepoint that this set did not attach."""
        return tuple(p for p in self.bpf_programs if not p.ours)

    @property
    def fell_back(self) -> bool:
        """True if a hardware event was opened as its software fallback."""
        return self.fallback_errno != 0

    @property
    def fallback_name(self) -> Optional[str]:
        """The errno name of the fallback's reason, e.g. ``"ENOENT"``; None without one."""
        if not self.fallback_errno:
            return None
        return errno.errorcode.get(self.fallback_errno, f"errno {self.fallback_errno}")

    @property
    def fallback_reason(self) -> Optional[str]:
        """Why the hardware event fell back, as libperfbuf words errors: e.g.
        ``"No such file or directory (ENOENT)"``; None if it did not."""
        if not self.fallback_errno:
            return None
        return f"{os.strerror(self.fallback_errno)} ({self.fallback_name})"


@dataclass(frozen=True)
class Counts:
    """Counts from :meth:`EventSet.read`: ``values`` maps each event id to
    its count (the event, then a group leader's members in the order they
    were added); times in nanoseconds, summed over CPUs and targets."""

    time_enabled: int
    time_running: int
    values: dict[int, int] = field(default_factory=dict)

    @property
    def value(self) -> int:
        """The count of the event read (the first of ``values``)."""
        return next(iter(self.values.values()), 0)


class EventSample:
    """One record of an event set's rings, decoded.

    ``event`` is the id :meth:`EventSet.add_tracepoint` and friends
    returned (None for a lost record of an event since removed), ``cpu``
    the ring's CPU, ``pid``/``tid`` the task, ``time`` its CLOCK_MONOTONIC
    timestamp in nanoseconds (comparable with ``time.monotonic_ns()``),
    ``ip`` the instruction pointer, ``raw`` a copy of the tracing data
    (tracepoints, kprobes, uprobes; ``b""`` otherwise). ``addr``,
    ``period`` and ``callchain`` are set when the event asked for them
    (``sample_type``; ``period`` also with ``freq``). A record of lost samples has ``lost`` > 0 and no
    other data.

    Every other field C's decoder gives is an attribute too, set when the
    event's ``sample_type`` asked for it (``present`` has its
    ``PERF_SAMPLE_*`` bit; else it reads 0, ``None``, ``()`` or ``b""``):
    ``misc`` (the header's), ``identifier``, ``id``, ``stream_id``,
    ``sample_cpu``; ``read`` (:class:`ReadValues`: times and one
    :class:`ReadValue` per counter, a group's with their ids and, with
    ``PERF_FORMAT_LOST``, lost counts); ``branches`` (:class:`Branch`
    tuples), ``branch_hw_index``, ``branch_counters``; ``regs_user`` and
    ``regs_intr`` (one value per bit of ``regs_user_mask`` /
    ``regs_intr_mask``, lowest first) with ``regs_user_abi`` /
    ``regs_intr_abi``; ``stack_user`` (the bytes copied) and
    ``stack_user_size`` (the dump's size); ``weight`` (the whole word) and
    ``weight_struct`` (``var1_dw, var2_w, var3_w``); ``data_src``,
    ``transaction``, ``phys_addr``, ``cgroup``, ``data_page_size``,
    ``code_page_size``; ``aux`` (bytes). A sample the library cannot
    decode is not an EventSample: it comes whole as a :class:`RawRecord`.

    :meth:`field` and :meth:`fields` decode a tracepoint's fields by name
    from its format file (strings as ``str``, arrays as ``bytes``). They
    work as long as the set (or its reader) is open: a sample does not keep
    the set alive."""

    __slots__ = ("event", "cpu", "pid", "tid", "time", "ip", "addr", "period", "callchain", "raw", "lost",
                 "_set") + _sample_fields.SLOTS

    def __init__(self, events: "weakref.ref[EventSet]", event: Optional[int], cpu: int, *, pid: int = 0,
                 tid: int = 0, time: int = 0, ip: int = 0, addr: int = 0, period: int = 0,
                 callchain: tuple[int, ...] = (), raw: bytes = b"", lost: int = 0) -> None:
        self._set = events
        self.event, self.cpu, self.pid, self.tid, self.time, self.ip = event, cpu, pid, tid, time, ip
        self.addr, self.period, self.callchain, self.raw, self.lost = addr, period, callchain, raw, lost

    def __getattr__(self, name: str) -> Any:
        # Only for the fields fill() did not set: the sample did not carry them.
        try:
            return _sample_fields.DEFAULTS[name]
        except KeyError:
            raise AttributeError(f"'EventSample' object has no attribute {name!r}") from None

    def field(self, name: str) -> Union[int, str, bytes]:
        """Tracepoint field ``name``: an int, a str (strings) or bytes
        (arrays, structs). KeyError if the event has no such field."""
        if not isinstance(name, str):
            raise TypeError(f"a field name must be a str, not {type(name).__name__}")
        if self.event is None or self.lost:
            raise KeyError(f"{name!r}: a record of lost samples has no fields")
        return self._events()._field(self.event, self.raw, name)

    def fields(self) -> dict[str, Union[int, str, bytes]]:
        """Every field of the tracepoint but the ``common_*`` ones, by name,
        in the format file's order; ``{}`` for other events."""
        if self.event is None or self.lost:
            return {}
        events = self._events()
        return {name: events._field(self.event, self.raw, name) for name in events._field_names(self.event)}

    def _events(self) -> "EventSet":
        events = self._set()
        if events is None:
            raise ValueError("the EventSet this sample came from is closed (and its reader too)")
        return events

    def __repr__(self) -> str:
        if self.lost:
            return f"EventSample(event={self.event}, cpu={self.cpu}, lost={self.lost})"
        return (f"EventSample(event={self.event}, cpu={self.cpu}, pid={self.pid}, tid={self.tid}, "
                f"time={self.time}, ip={self.ip:#x}, raw={len(self.raw)} bytes)")


class _Meta:
    __slots__ = ("kind", "name", "field_names", "layout")

    def __init__(self, kind: str, name: Optional[str]) -> None:
        self.kind, self.name = kind, name
        self.field_names: Optional[tuple[str, ...]] = None
        self.layout: Optional[_sample_fields.Layout] = None  # asked for once, by the first sample needing it


EventSampleFn = Callable[[EventSample], None]


# ---- the set --------------------------------------------------------------------------

class EventSet:
    """Perf events on every CPU (and target) sharing one ring per CPU.

    ``cpus``: only these CPUs (default: every online one). ``pids``: watch
    these processes (default: every task), following the children and
    threads they create later with ``inherit=True``. ``cgroups``: watch the
    tasks of these cgroup v2 directories. ``sideband``: side-band records to
    ask for, by name ("comm", "task", "mmap", "mmap_data", "build_id",
    "switch", "namespaces", "cgroup", "ksymbol", "bpf_event"): they flow
    from the set's creation and reach the reader as
    :class:`SidebandRecord` objects, in time order with the samples when
    ordered. ``pages``: data pages of each
    ring (a power of two). ``rings=False``: no rings, for events whose BPF
    program does all the work (a profiler). ``wakeup_events`` /
    ``wakeup_bytes`` batch the reader's wake-ups, ``max_delay_ms`` (default
    10) bounds how long a sample waits below the batch.

    Events are added disabled (``add_*`` return their ids); attach BPF
    programs, then :meth:`enable`. Read samples with :meth:`reader`.

    Errors of the library raise ``OSError(errno, text)`` (Python picks the
    subclass: ``FileNotFoundError`` for a tracepoint, symbol or binary that
    does not exist, ``PermissionError`` without privileges, ...), with
    libperfbuf's explanation as text.

    Closing the set while its reader is open disables every event at once
    and frees the set when the reader closes: the reader can still drain
    and decode what is in its rings. The methods may be called from any
    thread (they take the set's lock)."""

    _h: Optional[int] = None  # a class default, so that __del__ works whatever __init__ failed on

    def __init__(self, cpus: Optional[Iterable[int]] = None, pids: Optional[Iterable[int]] = None,
                 cgroups: Optional[Iterable[Union[str, "os.PathLike[str]"]]] = None, pages: int = 8,
                 rings: bool = True, inherit: bool = False, wakeup_events: int = 0, wakeup_bytes: int = 0,
                 max_delay_ms: int = 0, sideband: Iterable[str] = ()) -> None:
        _need_library()
        sideband_flags = _sideband.flags_of(sideband)
        if sideband_flags and not _HAS_SIDEBAND:
            raise OSError(errno.ENOSYS, "this libperfbuf has no side-band records")
        pages = as_int("pages", pages)
        if pages < 1 or pages & (pages - 1):
            raise ValueError(f"pages must be a power of two (1, 2, 4, 8, ...), got {pages}")
        for name, flag in (("rings", rings), ("inherit", inherit)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
        opts = _lib.EventsOpts(sz=ctypes.sizeof(_lib.EventsOpts), page_cnt=pages,
                               wakeup_events=as_u32("wakeup_events", wakeup_events),
                               wakeup_bytes=as_u32("wakeup_bytes", wakeup_bytes),
                               max_delay_ms=as_u32("max_delay_ms", max_delay_ms, 0, 60_000),
                               flags=(0 if rings else _lib.PERFBUF_EVENTS_NO_RINGS)
                               | (_lib.PERFBUF_EVENTS_INHERIT if inherit else 0) | sideband_flags)
        cpu_list, pid_list = _ints("cpus", cpus), _ints("pids", pids)
        if cpu_list is not None:
            cpu_arr = (ctypes.c_int * len(cpu_list))(*cpu_list)
            opts.cpus, opts.cpu_cnt = ctypes.cast(cpu_arr, ctypes.POINTER(ctypes.c_int)), len(cpu_list)
        if pid_list is not None:
            pid_arr = (ctypes.c_int * len(pid_list))(*pid_list)
            opts.pids, opts.pid_cnt = ctypes.cast(pid_arr, ctypes.POINTER(ctypes.c_int)), len(pid_list)
        if cgroups is not None:
            dirs = [_path("cgroups[]", d) for d in cgroups]
            if not dirs:
                raise ValueError("cgroups is empty: give some, or None for every task")
            dir_arr = (ctypes.c_char_p * len(dirs))(*dirs)
            opts.cgroups, opts.cgroup_cnt = ctypes.cast(dir_arr, ctypes.POINTER(ctypes.c_char_p)), len(dirs)
        self._lock = threading.Lock()  # every C call on the handle, decoding included
        self._closed = False
        self._reader_open = False
        self._events: dict[int, _Meta] = {}
        self._weak = weakref.ref(self)  # what samples hold
        h = _library.LIB.perfbuf_events_new(ctypes.byref(opts))  # the arrays above are alive until here
        if not h:
            raise os_error(ctypes.get_errno(), "perfbuf_events_new")
        self._h = h

    # -- internals --------------------------------------------------------------------

    def _handle(self) -> int:
        if self._h is None or self._closed:
            raise ValueError("EventSet is closed")
        return self._h

    def _call(self, fn: Callable[..., int], *args: Any) -> int:
        with self._lock:
            ret = fn(self._handle(), *args)
        if ret < 0:
            raise os_error(-ret, fn.__name__)
        return int(ret)

    def _event(self, ev: Any) -> int:
        ev = as_int("event id", ev)
        if ev < 0:
            raise ValueError(f"event ids are >= 0, got {ev}")
        return ev

    def _add(self, kind: int, *, flags: int = 0, config: int = 0, fallback_config: int = 0,
             name: Optional[bytes] = None, symbol: Optional[bytes] = None, offset: int = 0,
             ref_ctr_offset: int = 0, period: int = 0, freq: int = 0, sample_type: int = 0,
             filter: Optional[bytes] = None, attr: Optional[bytes] = None, group_leader: bool = False,
             member_of: Optional[int] = None, label: Optional[str] = None, args: Optional[bytes] = None,
             enabled: bool = False) -> int:
        period, freq = _as_u64("period", period), _as_u64("freq", freq)
        if period and freq:
            raise ValueError("give period (a sample every N occurrences) or freq (samples per second), not both")
        if not isinstance(group_leader, bool):
            raise TypeError(f"group_leader must be a bool, not {type(group_leader).__name__}")
        desc = _lib.EventDesc(sz=ctypes.sizeof(_lib.EventDesc), kind=kind, config=config,
                              fallback_config=fallback_config, name=name, symbol=symbol,
                              offset=_as_u64("offset", offset),
                              ref_ctr_offset=_as_u64("ref_ctr_offset", ref_ctr_offset),
                              period=freq or period, sample_type=_as_u64("sample_type", sample_type),
                              filter=filter, args=args)
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, not {type(enabled).__name__}")
        desc.flags = flags | (_lib.PERFBUF_EVENT_F_FREQ if freq else 0) \
            | (_lib.PERFBUF_EVENT_F_GROUP_LEADER if group_leader else 0) \
            | (_lib.PERFBUF_EVENT_F_ENABLED if enabled else 0)
        if member_of is not None:
            desc.flags |= _lib.PERFBUF_EVENT_F_MEMBER
            desc.leader = self._event(member_of)
        attr_buf = None
        if attr is not None:
            attr_buf = ctypes.create_string_buffer(attr, len(attr))
            desc.attr = ctypes.cast(attr_buf, ctypes.c_void_p)
        ev = self._call(_library.LIB.perfbuf_events_add, ctypes.byref(desc))
        meta = _Meta(_KINDS[kind], label)
        if kind == _lib.PERFBUF_EVENT_TRACEPOINT or args is not None:
            # A probe with arguments is a tracepoint too: its fields by name.
            meta.field_names = self._list_fields(ev)
        self._events[ev] = meta
        return ev

    def _field(self, ev: int, raw: bytes, name: str) -> Union[int, str, bytes]:
        f = _lib.Field(sz=ctypes.sizeof(_lib.Field))
        with self._lock:
            if self._h is None:
                raise ValueError("the EventSet this sample came from is closed (and its reader too)")
            ret = _library.LIB.perfbuf_events_field(self._h, ev, raw, len(raw), name.encode(), ctypes.byref(f))
            if ret == -errno.ENOENT:
                meta = self._events.get(ev)
                no_fields = meta and meta.kind != "tracepoint" and meta.field_names is None
                what = f"event {ev} is a {meta.kind} without arguments, not a tracepoint" if no_fields \
                    else f"tracepoint {meta.name if meta else ev} has no field {name!r}"
                raise KeyError(f"{name!r}: {what}")
            if ret < 0:
                raise os_error(-ret, "perfbuf_events_field")
            if f.kind == _lib.PERFBUF_FIELD_INT:
                return int(f.i)
            if f.kind == _lib.PERFBUF_FIELD_UINT:
                return int(f.u)
            data = ctypes.string_at(f.data, f.len) if f.len else b""  # inside `raw`, alive here
        return os.fsdecode(data) if f.kind == _lib.PERFBUF_FIELD_STR else data

    def _list_fields(self, ev: int) -> Optional[tuple[str, ...]]:
        """Tracepoint ``ev``'s own fields (not ``common_*``), in the order of
        the format file the library parsed; None if they cannot be listed."""
        names = []
        buf = ctypes.create_string_buffer(64)
        with self._lock:
            while True:
                n = _library.LIB.perfbuf_events_field_name(self._handle(), ev, len(names), buf, len(buf))
                if n == -errno.ENOENT:
                    return tuple(names)
                if n < 0:
                    return None
                if n >= len(buf):  # cut: again with room for it
                    buf = ctypes.create_string_buffer(n + 1)
                    continue
                names.append(buf.value.decode())

    def _field_names(self, ev: int) -> tuple[str, ...]:
        meta = self._events.get(ev)
        if meta is None or (meta.kind != "tracepoint" and meta.field_names is None):
            return ()
        if meta.field_names is None:
            raise OSError(errno.ENOENT, f"could not list the fields of tracepoint {meta.name}; "
                                        "field(name) still works")
        return meta.field_names

    def _layout(self, ev: int) -> Optional[_sample_fields.Layout]:
        """Event ``ev``'s read_format and register masks (cached), for the
        reader's callback; None if the library cannot tell."""
        meta = self._events.get(ev)
        if meta is not None and meta.layout is not None:
            return meta.layout
        a = _lib.DecodeAttr(sz=ctypes.sizeof(_lib.DecodeAttr))
        with self._lock:
            if self._h is None or _library.LIB.perfbuf_events_decode_attr(self._h, ev, ctypes.byref(a)) < 0:
                return None
        layout = _sample_fields.Layout(a.read_format, a.sample_regs_user, a.sample_regs_intr)
        if meta is not None:
            meta.layout = layout
        return layout

    def _reader_closed(self) -> None:
        """The reader freed its rings: free the set if it was closed meanwhile."""
        with self._lock:
            self._reader_open = False
            h = self._h if self._closed else None
            if h is not None:
                self._h = None
        if h is not None:
            _library.LIB.perfbuf_events_free(h)

    # -- adding events ------------------------------------------------------------------

    def add_tracepoint(self, name: str, filter: Optional[str] = None, *, sample_type: int = 0,
                       enabled: bool = False) -> int:
        """A tracepoint, ``"subsystem:name"`` (e.g. ``"sched:sched_process_exec"``),
        with an optional ftrace ``filter`` on its fields (e.g.
        ``'filename ~ "*/sh"'``; change it later with :meth:`set_filter`);
        every hit is a sample; ``enabled=True`` enables it as it is added.
        Returns its id. ``FileNotFoundError`` if there is no such tracepoint,
        ``OSError(EINVAL)`` for a filter the kernel refuses."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str such as 'sched:sched_process_exec', not {type(name).__name__}")
        return self._add(_lib.PERFBUF_EVENT_TRACEPOINT, name=name.encode(),
                         filter=_optional_str("filter", filter), sample_type=sample_type, label=name,
                         enabled=enabled)

    def add_kprobe(self, symbol: str, offset: int = 0, retprobe: bool = False, *, filter: Optional[str] = None,
                   sample_type: int = 0, args: Optional[str] = None, enabled: bool = False) -> int:
        """A kprobe (or kretprobe) on kernel function ``symbol`` (+``offset``).
        ``OSError(EOPNOTSUPP)`` on a kernel without the kprobe PMU
        (CONFIG_KPROBES). ``args``: fetch arguments, as for :meth:`add_uprobe`
        (``FileNotFoundError`` on a kernel without ``kprobe_events``)."""
        if not isinstance(symbol, str):
            raise TypeError(f"symbol must be a str, not {type(symbol).__name__}")
        return self._add(_lib.PERFBUF_EVENT_KPROBE, flags=_lib.PERFBUF_EVENT_F_RETPROBE if retprobe else 0,
                         name=symbol.encode(), offset=offset, filter=_optional_str("filter", filter),
                         sample_type=sample_type, label=symbol, args=_optional_str("args", args),
                         enabled=enabled)

    def add_uprobe(self, path: Union[str, "os.PathLike[str]"], symbol: Optional[str] = None, offset: int = 0,
                   retprobe: bool = False, ref_ctr_offset: int = 0, *, filter: Optional[str] = None,
                   sample_type: int = 0, args: Optional[str] = None, enabled: bool = False) -> int:
        """A uprobe (or uretprobe) on function ``symbol`` of the binary or
        shared library at ``path``, ``offset`` bytes into it (an
        instruction's first byte; ``OSError(EINVAL)`` past the function's
        end), or at file ``offset`` without a symbol. A uretprobe goes at a
        function's entry: with a symbol and an offset it is
        ``OSError(EINVAL)`` (the probed program would crash); without a
        symbol, ``offset`` must be a function's first byte.
        ``ref_ctr_offset``: a USDT semaphore's file offset.
        ``args``: what each hit fetches, in the kernel's dynamic-event syntax
        (``"n=%di:s32 name=+0(%si):ustring"``, ``"ret=$retval:s64"``): the
        probe is then made through tracefs and its samples carry the values
        as fields (``sample.field("n")``, ``sample.fields()``).
        ``OSError(EINVAL)`` with the kernel's complaint for arguments it
        rejects. ``FileNotFoundError`` for a missing binary or symbol."""
        place = hex(offset) if symbol is None else symbol if offset == 0 else f"{symbol}+{offset:#x}"
        return self._add(_lib.PERFBUF_EVENT_UPROBE, flags=_lib.PERFBUF_EVENT_F_RETPROBE if retprobe else 0,
                         name=_path("path", path), symbol=_optional_str("symbol", symbol), offset=offset,
                         ref_ctr_offset=ref_ctr_offset, filter=_optional_str("filter", filter),
                         sample_type=sample_type, label=f"{os.fsdecode(path)}:{place}",
                         args=_optional_str("args", args), enabled=enabled)

    def add_software(self, config: Union[int, str], period: int = 0, freq: int = 0, *, sample_type: int = 0,
                     group_leader: bool = False, member_of: Optional[int] = None) -> int:
        """A software event (``"cpu-clock"``, ``"task-clock"``,
        ``"page-faults"``, ... or a ``PERF_COUNT_SW_*`` number): a sample
        every ``period`` occurrences or ``freq`` times a second (each
        sample then carries the period the kernel chose, ``sample.period``);
        with neither it only counts (:meth:`read`). ``group_leader`` /
        ``member_of=leader_id`` make counter groups read together."""
        return self._add(_lib.PERFBUF_EVENT_SOFTWARE, config=_config(SOFTWARE, "software", config), period=period,
                         freq=freq, sample_type=sample_type, group_leader=group_leader, member_of=member_of,
                         label=str(config))

    def add_hardware(self, config: Union[int, str], fallback: Union[int, str, None] = None, period: int = 0,
                     freq: int = 0, *, sample_type: int = 0, group_leader: bool = False,
                     member_of: Optional[int] = None) -> int:
        """A hardware event (``"cycles"``, ``"instructions"``, ... or a
        ``PERF_COUNT_HW_*`` number). With ``fallback`` (a software event,
        e.g. ``"cpu-clock"``) it is opened instead where the hardware event
        cannot be (no PMU: a virtual machine); :meth:`info` tells which and
        why. Sampling and groups as for :meth:`add_software`."""
        flags, fb = 0, 0
        if fallback is not None:
            flags, fb = _lib.PERFBUF_EVENT_F_FALLBACK, _config(SOFTWARE, "software", fallback)
        return self._add(_lib.PERFBUF_EVENT_HARDWARE, flags=flags, config=_config(HARDWARE, "hardware", config),
                         fallback_config=fb, period=period, freq=freq, sample_type=sample_type,
                         group_leader=group_leader, member_of=member_of, label=str(config))

    def add_raw(self, attr: bytes, *, group_leader: bool = False, member_of: Optional[int] = None) -> int:
        """An event of the caller's ``struct perf_event_attr`` (its bytes;
        its ``size`` field says how many are read)."""
        if not isinstance(attr, (bytes, bytearray, memoryview)):
            raise TypeError(f"attr must be the bytes of a struct perf_event_attr, not {type(attr).__name__}")
        attr = bytes(attr)
        if len(attr) < 64:
            raise ValueError(f"attr is {len(attr)} bytes: a struct perf_event_attr has at least 64")
        return self._add(_lib.PERFBUF_EVENT_RAW, attr=attr, group_leader=group_leader, member_of=member_of,
                         label="raw")

    # -- controlling them -----------------------------------------------------------------

    def remove(self, ev: int) -> None:
        """Removes event ``ev`` (``OSError(EBUSY)`` for a group leader with
        members). Its samples still in the rings are not delivered."""
        self._call(_library.LIB.perfbuf_events_remove, self._event(ev))
        self._events.pop(ev, None)

    def set_filter(self, ev: int, filter: Optional[str]) -> None:
        """Changes the ftrace filter of tracing event ``ev`` (None clears it):
        the event is opened again with it (the kernel sets a filter once).
        ``OSError(EINVAL)`` for a filter the kernel refuses, nothing changed."""
        self._call(_library.LIB.perfbuf_events_set_filter, self._event(ev), _optional_str("filter", filter))

    def enable(self, ev: Optional[int] = None) -> None:
        """Enables event ``ev``, or every event."""
        self._call(_library.LIB.perfbuf_events_enable, -1 if ev is None else self._event(ev))

    def disable(self, ev: Optional[int] = None) -> None:
        """Disables event ``ev``, or every event."""
        self._call(_library.LIB.perfbuf_events_disable, -1 if ev is None else self._event(ev))

    def attach_bpf(self, ev: int, prog: Any) -> None:
        """Attaches BPF program ``prog`` (an fd, or an object with
        ``fileno()``) to event ``ev`` on every CPU and target; do it before
        :meth:`enable`. ``FileExistsError`` if one is attached already,
        ``OSError(EINVAL)`` if its type does not suit the event."""
        fd = prog.fileno() if hasattr(prog, "fileno") else as_int("prog", prog)
        self._call(_library.LIB.perfbuf_events_attach_bpf, self._event(ev), fd)

    # -- what was opened ------------------------------------------------------------------

    def info(self, ev: int) -> EventInfo:
        """What was opened for event ``ev``."""
        i = _lib.EventInfo(sz=ctypes.sizeof(_lib.EventInfo))
        self._call(_library.LIB.perfbuf_events_info, self._event(ev), ctypes.byref(i))
        progs = (_lib.BpfProg * 64)()  # the kernel attaches at most 64 to a tracepoint
        n = min(self._call(_library.LIB.perfbuf_events_bpf_progs, self._event(ev), progs, len(progs)), len(progs))
        attached = tuple(BpfProgram(p.id, p.name.decode(errors="replace"), bool(p.ours)) for p in progs[:n])
        return EventInfo(kind=_KINDS.get(i.kind, f"kind {i.kind}"), attr_type=i.attr_type, config=i.config,
                         fallback_errno=i.fallback_errno, instances=i.instances, sample_type=i.sample_type,
                         cpu_count=i.cpu_cnt, enabled=bool(i.enabled), bpf_attached=bool(i.bpf_attached),
                         bpf_programs=attached)

    def fd(self, ev: int, index: int = 0) -> int:
        """The fd of kernel event ``index`` of ``ev`` (CPU by CPU, each CPU's
        targets in order; ``info(ev).instances`` of them), for your own
        ioctls. The set keeps owning it."""
        return self._call(_library.LIB.perfbuf_events_fd, self._event(ev), as_int("index", index))

    def read(self, ev: int, cpu: Optional[int] = None) -> Counts:
        """Event ``ev``'s counts on ``cpu``, or summed over every CPU and
        target; a group leader's members come along."""
        ev, c = self._event(ev), -1 if cpu is None else as_int("cpu", cpu)
        cnt = 8
        while True:
            times = _lib.Counts(sz=ctypes.sizeof(_lib.Counts))
            values = (_lib.Count * cnt)()
            n = self._call(_library.LIB.perfbuf_events_read, ev, c, ctypes.byref(times), values, cnt)
            if n <= cnt:
                return Counts(times.time_enabled, times.time_running, {v.event: v.value for v in values[:n]})
            cnt = n

    def decode_attr(self, ev: int) -> dict[str, int]:
        """The layout of event ``ev``'s records (``struct
        perfbuf_decode_attr``): sample_type, read_format, ..."""
        a = _lib.DecodeAttr(sz=ctypes.sizeof(_lib.DecodeAttr))
        self._call(_library.LIB.perfbuf_events_decode_attr, self._event(ev), ctypes.byref(a))
        return {name: getattr(a, name) for name, _ in _lib.DecodeAttr._fields_ if name not in ("sz", "reserved")}

    def _cpu_list(self, offline: int) -> list[int]:
        n = self._call(_library.LIB.perfbuf_events_cpus, offline, None, 0)
        buf = (ctypes.c_int * max(n, 1))()
        n = min(n, self._call(_library.LIB.perfbuf_events_cpus, offline, buf, n))
        return list(buf[:n])

    @property
    def cpus(self) -> list[int]:
        """The CPUs the set's events are opened on."""
        return self._cpu_list(0)

    @property
    def offline_cpus(self) -> list[int]:
        """The CPUs asked for (or possible) that were offline, skipped."""
        return self._cpu_list(1)

    @property
    def events(self) -> list[int]:
        """The ids of the events in the set."""
        self._handle()
        return sorted(self._events)

    # -- reading ----------------------------------------------------------------------------

    def reader(self, on_sample: Optional[EventSampleFn] = None, on_lost: Optional[LostFn] = None, *,
               order_by_time: bool = False, on_other: Optional[Callable[[Any], None]] = None) -> "EventReader":
        """The reader of the set's rings (one per set): ``on_sample(sample)``
        gets each :class:`EventSample`, ``on_lost(cpu, count)`` each count
        of samples the kernel dropped. ``order_by_time=True`` delivers the
        samples of every CPU in time order (call :meth:`EventReader.flush`
        at the end for those still held back). ``OSError(EINVAL)`` for a set
        made with ``rings=False``, ``OSError(EBUSY)`` for a second reader.
        ``on_other(record)`` gets every other record: a
        :class:`SidebandRecord`, or a :class:`RawRecord` (see
        :class:`EventReader`)."""
        return EventReader(self, on_sample, on_lost, order_by_time=order_by_time, on_other=on_other)

    # -- lifetime ---------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._h is None or self._closed

    def close(self) -> None:
        """Closes every event (detaching their programs) and the rings
        (idempotent). With a reader still open, the events are disabled now
        and freed with the reader, which keeps draining and decoding."""
        if self._h is None:
            return
        with self._lock:
            if self._h is None or self._closed:
                return
            self._closed = True
            if self._reader_open:
                _library.LIB.perfbuf_events_disable(self._h, -1)
                return
            h, self._h = self._h, None
        _library.LIB.perfbuf_events_free(h)

    def __enter__(self) -> "EventSet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


class EventReader(RingReader):
    """The reader of an :class:`EventSet`'s rings: a ``struct perf_buffer``
    like :class:`~perfbuf.PerfBuffer`'s, with the same methods (``poll``,
    ``consume``, ``read``, ``records``, ``run``, ``wake``, ``pause``,
    ``stats``, ``ring``, ``close``, a context manager), whose records are
    :class:`EventSample` objects. Made by :meth:`EventSet.reader`.

    Samples of events removed from the set are counted in
    :attr:`unattributed`, not delivered; lost ones go to ``on_lost`` (and
    :attr:`lost`); with :meth:`read` and :meth:`records`, lost records come
    as samples with ``lost`` > 0. Every other record goes to ``on_other``
    (to ``on_sample`` without one), counted in :attr:`other`: side-band
    records as :class:`SidebandRecord`, the rest (throttling, kinds not
    decoded) whole as :class:`RawRecord`. A sample the library cannot
    decode goes there too, whole as a :class:`RawRecord` with its
    ``error``, counted in :attr:`undecodable`: nothing the rings hold is
    dropped silently."""

    def __init__(self, events: EventSet, on_sample: Optional[EventSampleFn] = None,
                 on_lost: Optional[LostFn] = None, *, order_by_time: bool = False,
                 on_other: Optional[Callable[[Any], None]] = None) -> None:
        if not isinstance(events, EventSet):
            raise TypeError(f"events must be an EventSet, not {type(events).__name__}")
        callable_or_none("on_sample", on_sample)
        callable_or_none("on_lost", on_lost)
        callable_or_none("on_other", on_other)
        self._on_other = on_other
        self.other = 0
        """Records other than samples and lost counts delivered (side-band, raw)."""
        if not isinstance(order_by_time, bool):
            raise TypeError(f"order_by_time must be a bool, not {type(order_by_time).__name__}")
        self._init_state(on_sample, on_lost)
        self._set: Optional[EventSet] = None
        self._ordered = order_by_time
        self.lost = 0
        """Samples the kernel reported lost."""
        self.unattributed = 0
        """Samples of events removed from the set, not delivered."""
        self.undecodable = 0
        """Records that could not be decoded, each handed over whole as a
        :class:`RawRecord` with its ``error`` (see ``stats(i)['malformed']``
        too)."""
        # The C callback holds only a weak reference, so that dropping the
        # last reference to the reader frees it at once.
        ref = weakref.ref(self)

        def record(_ctx: Optional[int], rec: Optional[int]) -> int:
            r = ref()
            if r is not None and rec is not None:
                r._on_event_record(_lib.EventRecord.from_address(rec))
            return _lib.LIBBPF_PERF_EVENT_CONT

        self._callback = _lib.RECORD_FN(record)  # alive as long as the handle
        with events._lock:
            h = events._handle()
            pb = _library.LIB.perfbuf_events_decoded_reader(h, self._callback, None)
            if not pb:
                raise os_error(ctypes.get_errno(), "perfbuf_events_decoded_reader")
            events._reader_open = True
        self._set = events  # kept alive (and unfreed) while the reader is open
        if order_by_time:
            order = _lib.OrderOpts(sz=ctypes.sizeof(_lib.OrderOpts), flags=_lib.PERFBUF_ORDER_SAMPLE_TIME)
            ret = _library.LIB.perfbuf_set_order(pb, ctypes.byref(order))
            if ret < 0:
                err = os_error(-ret, "perfbuf_set_order")
                _library.LIB.perfbuf_free(pb)
                self._set = None
                events._reader_closed()
                raise err
        self._adopt(pb)

    @property
    def events(self) -> EventSet:
        """The set this reader reads."""
        if self._set is None:
            raise ValueError("EventReader is closed")
        return self._set

    def _on_event_record(self, rec: _lib.EventRecord) -> None:
        # The library decoded the record (perfbuf_events_decoded_reader):
        # its kind, event and fields, valid during this call only.
        try:
            events = self._set
            if events is None:
                return
            kind, cpu, ev = rec.kind, rec.cpu, rec.event
            sample: EventSample
            if kind == _lib.PERFBUF_EVENT_RECORD_SAMPLE:
                s = _lib.Sample.from_address(rec.sample)
                chain: tuple[int, ...] = ()
                if s.present & PERF_SAMPLE_CALLCHAIN and s.callchain_nr:
                    chain = tuple(s.callchain[:s.callchain_nr])
                sample = EventSample(
                    events._weak, ev, cpu, pid=s.pid, tid=s.tid, time=s.time, ip=s.ip,
                    addr=s.addr if s.present & PERF_SAMPLE_ADDR else 0,
                    period=s.period if s.present & PERF_SAMPLE_PERIOD else 0, callchain=chain,
                    raw=ctypes.string_at(s.raw, s.raw_size) if s.raw and s.raw_size else b"")
                layout = events._layout(ev) if s.present & _sample_fields.NEEDS_LAYOUT else None
                _sample_fields.fill(sample, s, layout)
            elif kind == _lib.PERFBUF_EVENT_RECORD_LOST:
                self.lost += rec.lost
                sample = EventSample(events._weak, ev if ev >= 0 else None, cpu, lost=rec.lost)
            elif kind == _lib.PERFBUF_EVENT_RECORD_SIDEBAND:
                self.other += 1
                self._accept(SidebandRecord(cpu, _sideband.Sideband.from_address(rec.sideband)))
                return
            else:  # whole: rec.error says why
                err = rec.error
                if rec.record_type == PERF_RECORD_SAMPLE:
                    if err == errno.ENOENT:  # of an event removed from the set
                        self.unattributed += 1
                        return
                    self.undecodable += 1  # handed over whole, never dropped
                else:  # throttling, a kind not decoded, of no event, or malformed
                    if err in (errno.EOPNOTSUPP, errno.ENOENT):
                        err = 0
                    if err:
                        self.undecodable += 1
                    self.other += 1
                self._accept(RawRecord(cpu, rec.record_type, ctypes.string_at(rec.record, rec.size), err))
                return
        except BaseException as e:  # never let an exception reach C
            if self._error is None:
                self._error = e
            return
        self._accept(sample)

    def _deliver(self, rec: Any) -> None:
        if self._collect is not None:
            self._collect.append(rec)
        elif isinstance(rec, (SidebandRecord, RawRecord)) and self._on_other is not None:
            self._on_other(rec)
        elif rec.lost:
            if self._on_lost is not None:
                self._on_lost(rec.cpu, rec.lost)
        elif self._on_sample is not None:
            self._on_sample(rec)

    def flush(self) -> int:
        """With ``order_by_time``: delivers every sample still held back for
        ordering (at the end: disable the events, :meth:`consume`, then
        flush); returns how many. 0 without ordering."""
        if not self._ordered:
            self._handle()
            return 0
        return self._drain(_library.LIB.perfbuf_ordered_flush)

    def close(self) -> None:
        """Frees the rings (idempotent); frees the set too if it was closed
        first. See :meth:`PerfBuffer.close`."""
        super().close()
        if self._pb is None and self._set is not None:
            events, self._set = self._set, None
            events._reader_closed()
