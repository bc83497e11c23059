"""Side-band records of an event set: what happens to processes and their
address spaces (``EventSet(sideband=...)``), decoded by the library
(``perfbuf_events_decoded_reader``) into :class:`SidebandRecord`; and
:class:`RawRecord` for any record the binding does not decode (handed
over whole, never dropped)."""
from __future__ import annotations

import ctypes
import errno
import os
from ctypes import c_int32, c_size_t, c_uint16, c_uint32, c_uint64, c_uint8, c_void_p
from typing import Iterable, Optional

__all__ = ["SidebandRecord", "RawRecord", "SIDEBAND"]

# perfbuf_events_opts.flags by name (PERFBUF_EVENTS_SB_*).
SIDEBAND = {
    "comm": 1 << 2, "task": 1 << 3, "mmap": 1 << 4, "mmap_data": 1 << 5, "build_id": 1 << 6,
    "switch": 1 << 7, "namespaces": 1 << 8, "cgroup": 1 << 9, "ksymbol": 1 << 10, "bpf_event": 1 << 11,
}

# PERF_RECORD_* of side-band records, by the names SidebandRecord.kind uses.
KINDS = {
    1: "mmap", 3: "comm", 4: "exit", 7: "fork", 10: "mmap2", 14: "switch", 15: "switch_cpu_wide",
    16: "namespaces", 17: "ksymbol", 18: "bpf_event", 19: "cgroup",
}

F_EXEC, F_DATA, F_BUILD_ID, F_SWITCH_OUT, F_PREEMPT, F_NEXT_PREV = 1, 2, 4, 8, 16, 32


class Sideband(ctypes.Structure):
    """struct perfbuf_sideband."""

    _fields_ = [
        ("sz", c_size_t), ("record_type", c_uint32), ("misc", c_uint16), ("size", c_uint16),
        ("flags", c_uint32), ("event", c_int32), ("pid", c_uint32), ("tid", c_uint32), ("ppid", c_uint32),
        ("ptid", c_uint32), ("next_prev_pid", c_uint32), ("next_prev_tid", c_uint32), ("time", c_uint64),
        ("cpu", c_uint32), ("prot", c_uint32), ("task_time", c_uint64), ("addr", c_uint64), ("len", c_uint64),
        ("pgoff", c_uint64), ("maj", c_uint32), ("min", c_uint32), ("ino", c_uint64),
        ("ino_generation", c_uint64), ("map_flags", c_uint32), ("build_id_size", c_uint32),
        ("build_id", ctypes.POINTER(c_uint8)), ("name", c_void_p), ("name_len", c_uint64), ("id", c_uint64),
        ("sub_type", c_uint16), ("sub_flags", c_uint16), ("reserved", c_uint32), ("tag", c_uint8 * 8),
        ("namespaces", ctypes.POINTER(c_uint64)), ("namespaces_nr", c_uint64), ("identifier", c_uint64),
    ]


SIGNATURES = {
    "perfbuf_events_decode_sideband": (ctypes.c_int, [c_void_p, c_void_p, c_size_t, ctypes.POINTER(Sideband)]),
}


def declare(lib: ctypes.CDLL) -> bool:
    """Declares the side-band functions; False if ``lib`` lacks them."""
    for name, (res, args) in SIGNATURES.items():
        if not hasattr(lib, name):
            return False
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return True


def flags_of(names: Iterable[str]) -> int:
    """The opts flags for side-band record names ("comm", "task", ...)."""
    if isinstance(names, str):
        names = [names]
    flags = 0
    for name in names:
        if name not in SIDEBAND:
            raise ValueError(f"unknown side-band record {name!r}: expected some of {', '.join(SIDEBAND)}")
        flags |= SIDEBAND[name]
    return flags


class SidebandRecord:
    """A side-band record: ``kind`` is "comm", "fork", "exit", "mmap",
    "mmap2", "switch", "switch_cpu_wide", "namespaces", "ksymbol",
    "bpf_event" or "cgroup"; ``event`` the id of the event that asked for
    it (None: the set's own); ``cpu`` the ring's CPU; ``time`` the
    CLOCK_MONOTONIC time of its trailer (ordered with samples).

    Task: ``pid``, ``tid`` (of the task the record is about), ``ppid``,
    ``ptid`` (fork, exit), ``exec`` (comm set by exec). Mappings: ``addr``,
    ``len``, ``pgoff`` (bytes), ``maj``, ``min``, ``ino``,
    ``ino_generation`` or ``build_id`` (bytes), ``prot``, ``map_flags``,
    ``data`` (a data mapping). ``name``: the comm, file, symbol or cgroup
    path. Switches: ``switch_out``, ``preempt``, ``next_prev_pid``,
    ``next_prev_tid``. ``id``: cgroup or BPF program id; ``sub_type``,
    ``sub_flags``, ``tag`` of ksymbol and bpf_event records; ``namespaces``:
    ``(dev, inode)`` pairs."""

    lost = 0  # never a lost record (the reader's dispatch asks)

    def __init__(self, cpu: int, s: Sideband) -> None:
        self.kind = KINDS.get(s.record_type, str(s.record_type))
        self.record_type = s.record_type
        self.event: Optional[int] = None if s.event < 0 else s.event
        self.cpu, self.time = cpu, s.time
        self.pid, self.tid, self.ppid, self.ptid = s.pid, s.tid, s.ppid, s.ptid
        self.exec = bool(s.flags & F_EXEC)
        self.addr, self.len, self.pgoff = s.addr, s.len, s.pgoff
        self.maj, self.min, self.ino, self.ino_generation = s.maj, s.min, s.ino, s.ino_generation
        self.build_id: Optional[bytes] = (
            ctypes.string_at(s.build_id, s.build_id_size) if s.flags & F_BUILD_ID else None)
        self.prot, self.map_flags, self.data = s.prot, s.map_flags, bool(s.flags & F_DATA)
        self.name = os.fsdecode(ctypes.string_at(s.name, s.name_len)) if s.name else ""
        self.switch_out, self.preempt = bool(s.flags & F_SWITCH_OUT), bool(s.flags & F_PREEMPT)
        self.next_prev_pid, self.next_prev_tid = s.next_prev_pid, s.next_prev_tid
        self.id, self.sub_type, self.sub_flags, self.tag = s.id, s.sub_type, s.sub_flags, bytes(s.tag)
        self.namespaces = tuple((s.namespaces[2 * i], s.namespaces[2 * i + 1]) for i in range(s.namespaces_nr))

    def __repr__(self) -> str:
        return (f"SidebandRecord({self.kind}, cpu={self.cpu}, time={self.time}, pid={self.pid}, tid={self.tid}, "
                f"name={self.name!r})")


class RawRecord:
    """A record of the rings the binding does not decode (throttling, a
    record of an event since removed, a kind this library does not know,
    a sample or side-band record it cannot decode): ``record_type``
    (``PERF_RECORD_*``), ``cpu`` and the whole record, header included, in
    ``data``; ``error`` is why decoding failed (an errno: ``EBADMSG`` for a
    malformed record, ``EOPNOTSUPP`` for a layout the library does not
    know), 0 for a kind the binding does not decode."""

    lost = 0

    def __init__(self, cpu: int, record_type: int, data: bytes, error: int = 0) -> None:
        self.cpu, self.record_type, self.data, self.error = cpu, record_type, data, error

    def __repr__(self) -> str:
        err = f", error={errno.errorcode.get(self.error, self.error)}" if self.error else ""
        return f"RawRecord(type={self.record_type}, cpu={self.cpu}, {len(self.data)} bytes{err})"

