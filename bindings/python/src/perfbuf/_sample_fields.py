"""A sample's fields beyond pid, tid, time, IP, address, period,
callchain and raw data: every field of C's ``struct perfbuf_sample``
(``perfbuf_events_decode``), copied out of the ring into Python values.
:class:`~perfbuf.EventSample` carries them as attributes; those the
sample did not carry (their ``PERF_SAMPLE_*`` bit is not in ``present``)
read as their defaults here."""
from __future__ import annotations

import ctypes
from typing import Any, NamedTuple, Optional

from . import _lib

__all__ = ["ReadValue", "ReadValues", "Branch", "Layout", "DEFAULTS", "fill"]

PERF_SAMPLE_READ, PERF_SAMPLE_ID, PERF_SAMPLE_CPU, PERF_SAMPLE_STREAM_ID = 1 << 4, 1 << 6, 1 << 7, 1 << 9
PERF_SAMPLE_BRANCH_STACK, PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER = 1 << 11, 1 << 12, 1 << 13
PERF_SAMPLE_WEIGHT, PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_IDENTIFIER = 1 << 14, 1 << 15, 1 << 16
PERF_SAMPLE_TRANSACTION, PERF_SAMPLE_REGS_INTR, PERF_SAMPLE_PHYS_ADDR = 1 << 17, 1 << 18, 1 << 19
PERF_SAMPLE_AUX, PERF_SAMPLE_CGROUP, PERF_SAMPLE_DATA_PAGE_SIZE = 1 << 20, 1 << 21, 1 << 22
PERF_SAMPLE_CODE_PAGE_SIZE, PERF_SAMPLE_WEIGHT_STRUCT = 1 << 23, 1 << 24
PERF_FORMAT_ID, PERF_FORMAT_LOST = 1 << 2, 1 << 4
# perfbuf_sample.flags
F_BRANCH_HW_IDX, F_BRANCH_COUNTERS, F_READ_GROUP = 1, 2, 4


class ReadValue(NamedTuple):
    """One counter of ``PERF_SAMPLE_READ``: its value, its id (with
    ``PERF_FORMAT_ID``, else 0) and lost count (with ``PERF_FORMAT_LOST``,
    else 0)."""

    value: int
    id: int = 0
    lost: int = 0


class ReadValues(NamedTuple):
    """``PERF_SAMPLE_READ``: the times (with ``PERF_FORMAT_TOTAL_TIME_*``,
    else 0) and one :class:`ReadValue` per counter; ``group`` when the
    event read its whole group (``PERF_FORMAT_GROUP``: the leader first)."""

    time_enabled: int
    time_running: int
    values: tuple[ReadValue, ...]
    group: bool


class Branch(NamedTuple):
    """One ``struct perf_branch_entry``: source and target addresses, and
    the flags word (mispred, predicted, in_tx, abort, cycles, type...)."""

    from_addr: int
    to_addr: int
    flags: int


class Layout(NamedTuple):
    """What of an event's attr the decoding needs beyond the record:
    ``read_format`` (what a group entry's second word is) and the register
    masks (which register each value is)."""

    read_format: int
    regs_user_mask: int
    regs_intr_mask: int


# Every field's value when the sample did not carry it.
DEFAULTS: dict[str, Any] = {
    "misc": 0, "present": 0, "identifier": 0, "id": 0, "stream_id": 0, "sample_cpu": 0, "read": None,
    "branches": (), "branch_hw_index": None, "branch_counters": (), "regs_user_abi": 0, "regs_user": (),
    "regs_user_mask": 0, "regs_intr_abi": 0, "regs_intr": (), "regs_intr_mask": 0, "stack_user": b"",
    "stack_user_size": 0, "weight": 0, "weight_struct": (0, 0, 0), "data_src": 0, "transaction": 0,
    "phys_addr": 0, "cgroup": 0, "data_page_size": 0, "code_page_size": 0, "aux": b"",
}
SLOTS = tuple(DEFAULTS)


def _words(p: Any, n: int) -> tuple[int, ...]:
    return tuple(p[:n]) if p and n else ()


def _bytes(p: Optional[int], n: int) -> bytes:
    return ctypes.string_at(p, n) if p and n else b""


def _read(s: _lib.Sample, read_format: int) -> ReadValues:
    if not s.flags & F_READ_GROUP:
        values: tuple[ReadValue, ...] = (ReadValue(s.read_value, s.read_id, s.read_lost),)
    else:
        stride, n = s.read_stride, s.read_nr
        words = _words(s.read_group, n * stride)
        if stride == 3:
            values = tuple(ReadValue(*words[i:i + 3]) for i in range(0, len(words), 3))
        elif stride == 2 and read_format & PERF_FORMAT_ID:
            values = tuple(ReadValue(words[i], words[i + 1]) for i in range(0, len(words), 2))
        elif stride == 2:
            values = tuple(ReadValue(words[i], 0, words[i + 1]) for i in range(0, len(words), 2))
        else:
            values = tuple(ReadValue(w) for w in words)
    return ReadValues(s.read_time_enabled, s.read_time_running, values, bool(s.flags & F_READ_GROUP))


def fill(sample: Any, s: _lib.Sample, layout: Optional[Layout]) -> None:
    """Sets on ``sample`` the fields ``s`` (decoded in the ring, valid only
    now) carries, as Python values; the others keep :data:`DEFAULTS`."""
    p = s.present
    sample.misc, sample.present = s.misc, p
    if p & PERF_SAMPLE_IDENTIFIER:
        sample.identifier = s.identifier
    if p & PERF_SAMPLE_ID:
        sample.id = s.id
    if p & PERF_SAMPLE_STREAM_ID:
        sample.stream_id = s.stream_id
    if p & PERF_SAMPLE_CPU:
        sample.sample_cpu = s.cpu
    if p & PERF_SAMPLE_READ:
        sample.read = _read(s, layout.read_format if layout else 0)
    if p & PERF_SAMPLE_BRANCH_STACK:
        words = _words(s.branch_entries, 3 * s.branch_nr)
        sample.branches = tuple(Branch(*words[i:i + 3]) for i in range(0, len(words), 3))
        if s.flags & F_BRANCH_HW_IDX:
            sample.branch_hw_index = s.branch_hw_idx
        if s.flags & F_BRANCH_COUNTERS:
            sample.branch_counters = _words(s.branch_counters, s.branch_nr)
    if p & PERF_SAMPLE_REGS_USER:
        sample.regs_user_abi, sample.regs_user = s.regs_user_abi, _words(s.regs_user, s.regs_user_nr)
        sample.regs_user_mask = layout.regs_user_mask if layout else 0
    if p & PERF_SAMPLE_REGS_INTR:
        sample.regs_intr_abi, sample.regs_intr = s.regs_intr_abi, _words(s.regs_intr, s.regs_intr_nr)
        sample.regs_intr_mask = layout.regs_intr_mask if layout else 0
    if p & PERF_SAMPLE_STACK_USER:
        sample.stack_user = _bytes(s.stack_user, s.stack_user_dyn_size)
        sample.stack_user_size = s.stack_user_size
    if p & (PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT):
        sample.weight = s.weight
        sample.weight_struct = (s.weight_var1_dw, s.weight_var2_w, s.weight_var3_w)
    if p & PERF_SAMPLE_DATA_SRC:
        sample.data_src = s.data_src
    if p & PERF_SAMPLE_TRANSACTION:
        sample.transaction = s.transaction
    if p & PERF_SAMPLE_PHYS_ADDR:
        sample.phys_addr = s.phys_addr
    if p & PERF_SAMPLE_CGROUP:
        sample.cgroup = s.cgroup
    if p & PERF_SAMPLE_DATA_PAGE_SIZE:
        sample.data_page_size = s.data_page_size
    if p & PERF_SAMPLE_CODE_PAGE_SIZE:
        sample.code_page_size = s.code_page_size
    if p & PERF_SAMPLE_AUX:
        sample.aux = _bytes(s.aux, s.aux_size)


NEEDS_LAYOUT = PERF_SAMPLE_READ | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_REGS_INTR
