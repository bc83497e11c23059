"""Every field of C's decoded sample reaches Python's EventSample.

A cpu-clock group leader on the real kernel asks for every sample field a
software event can carry here (identifier, ids, CPU, a group READ with ids
and lost counts, user and interrupt registers, the user stack, weight or
weight struct, data_src, transaction, phys addr, cgroup, page sizes, aux):
each sample's bytes, caught as the reader's callback gets them, are
decoded three ways, by this file's own parser of the kernel's layout, by C
(``perfbuf_events_decode`` through ctypes) and by the binding, and must
agree; the values are checked against what the kernel must have written
(ids from PERF_EVENT_IOC_ID, the ring's CPU, this process's cgroup id, its
instruction pointer in the user registers). A branch stack (no software
event has one) is checked the same way on a record built here and decoded
by ``perfbuf_decode``. A sample the library cannot decode comes whole as a
RawRecord and is counted. Needs root; under CI=true nothing is skipped."""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import struct
import time
from typing import Any

import pytest

import perfbuf
from conftest import need_root
from perfbuf import Branch, EventSample, EventSet, RawRecord, ReadValue, ReadValues, _lib, _sample_fields
from perfbuf._sample_fields import (PERF_SAMPLE_AUX, PERF_SAMPLE_BRANCH_STACK, PERF_SAMPLE_CGROUP,
                                    PERF_SAMPLE_CODE_PAGE_SIZE, PERF_SAMPLE_CPU, PERF_SAMPLE_DATA_PAGE_SIZE,
                                    PERF_SAMPLE_DATA_SRC, PERF_SAMPLE_ID, PERF_SAMPLE_IDENTIFIER,
                                    PERF_SAMPLE_PHYS_ADDR, PERF_SAMPLE_READ, PERF_SAMPLE_REGS_INTR,
                                    PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER, PERF_SAMPLE_STREAM_ID,
                                    PERF_SAMPLE_TRANSACTION, PERF_SAMPLE_WEIGHT, PERF_SAMPLE_WEIGHT_STRUCT)

PERF_SAMPLE_IP, PERF_SAMPLE_TID, PERF_SAMPLE_TIME, PERF_SAMPLE_ADDR = 1, 2, 4, 8
PERF_SAMPLE_CALLCHAIN, PERF_SAMPLE_PERIOD, PERF_SAMPLE_RAW = 1 << 5, 1 << 8, 1 << 10
PERF_FORMAT_TOTAL_TIME_ENABLED, PERF_FORMAT_TOTAL_TIME_RUNNING, PERF_FORMAT_ID = 1, 2, 4
PERF_FORMAT_GROUP, PERF_FORMAT_LOST = 8, 16
PERF_RECORD_SAMPLE = 9
PERF_EVENT_IOC_ID = 0x80082407
PERF_SAMPLE_BRANCH_HW_INDEX, PERF_SAMPLE_BRANCH_COUNTERS = 1 << 17, 1 << 19
X86_64_SP, X86_64_IP = 7, 8  # bits of sample_regs_* (arch/x86/include/uapi/asm/perf_regs.h)
REGS_MASK = 0x1FF  # ax..ip
STACK_DUMP = 512

COMMON = (PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_READ
          | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_ID | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_STREAM_ID
          | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER | PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_IDENTIFIER
          | PERF_SAMPLE_TRANSACTION | PERF_SAMPLE_REGS_INTR | PERF_SAMPLE_PHYS_ADDR | PERF_SAMPLE_CGROUP
          | PERF_SAMPLE_DATA_PAGE_SIZE | PERF_SAMPLE_CODE_PAGE_SIZE)
# WEIGHT and WEIGHT_STRUCT exclude each other: one run each (AUX, empty
# without an AUX leader, with the second).
SAMPLE_TYPES = {"weight": COMMON | PERF_SAMPLE_WEIGHT,
                "weight_struct_aux": COMMON | PERF_SAMPLE_WEIGHT_STRUCT | PERF_SAMPLE_AUX}


@pytest.fixture(autouse=True)
def _root() -> None:
    if os.geteuid() != 0:
        need_root("event sets need root (CAP_PERFMON)")
    if os.uname().machine != "x86_64":
        need_root("the register checks know x86-64's perf_regs only")


# ---- the kernel's layout, parsed here (perf_output_sample's order) -----------------------

class Words:
    def __init__(self, data: bytes, at: int = 8) -> None:
        self.data, self.at = data, at

    def u64(self) -> int:
        v = struct.unpack_from("<Q", self.data, self.at)[0]
        self.at += 8
        return int(v)

    def u32s(self) -> tuple[int, int]:
        a, b = struct.unpack_from("<II", self.data, self.at)
        self.at += 8
        return int(a), int(b)

    def many(self, n: int) -> tuple[int, ...]:
        return tuple(self.u64() for _ in range(n))

    def bytes(self, n: int) -> bytes:
        out = self.data[self.at:self.at + n]
        self.at += (n + 7) & ~7
        return out


def parse(data: bytes, attr: dict[str, int]) -> dict[str, Any]:
    """The record's fields by EventSample's names."""
    st, rf = attr["sample_type"], attr["read_format"]
    w, f = Words(data), {}
    f["misc"] = struct.unpack_from("<H", data, 4)[0]
    f["present"] = st
    if st & PERF_SAMPLE_IDENTIFIER:
        f["identifier"] = w.u64()
    if st & PERF_SAMPLE_IP:
        f["ip"] = w.u64()
    if st & PERF_SAMPLE_TID:
        f["pid"], f["tid"] = w.u32s()
    if st & PERF_SAMPLE_TIME:
        w.u64()  # converted to CLOCK_MONOTONIC by the set's clock: not compared
    if st & PERF_SAMPLE_ADDR:
        f["addr"] = w.u64()
    if st & PERF_SAMPLE_ID:
        f["id"] = w.u64()
    if st & PERF_SAMPLE_STREAM_ID:
        f["stream_id"] = w.u64()
    if st & PERF_SAMPLE_CPU:
        f["sample_cpu"] = w.u32s()[0]
    if st & PERF_SAMPLE_PERIOD:
        f["period"] = w.u64()
    if st & PERF_SAMPLE_READ:
        nr = w.u64() if rf & PERF_FORMAT_GROUP else 1
        enabled = w.u64() if rf & PERF_FORMAT_TOTAL_TIME_ENABLED else 0
        running = w.u64() if rf & PERF_FORMAT_TOTAL_TIME_RUNNING else 0
        values = []
        for _ in range(nr):
            value = w.u64()
            vid = w.u64() if rf & PERF_FORMAT_ID else 0
            lost = w.u64() if rf & PERF_FORMAT_LOST else 0
            values.append(ReadValue(value, vid, lost))
        f["read"] = ReadValues(enabled, running, tuple(values), bool(rf & PERF_FORMAT_GROUP))
    if st & PERF_SAMPLE_CALLCHAIN:
        f["callchain"] = w.many(w.u64())
    if st & PERF_SAMPLE_RAW:
        size = struct.unpack_from("<I", data, w.at)[0]
        f["raw"] = data[w.at + 4:w.at + 4 + size]
        w.at += (4 + size + 7) & ~7
    if st & PERF_SAMPLE_BRANCH_STACK:
        nr = w.u64()
        bst = attr["branch_sample_type"]
        f["branch_hw_index"] = w.u64() if bst & PERF_SAMPLE_BRANCH_HW_INDEX else None
        words = w.many(3 * nr)
        f["branches"] = tuple(Branch(*words[i:i + 3]) for i in range(0, len(words), 3))
        f["branch_counters"] = w.many(nr) if bst & PERF_SAMPLE_BRANCH_COUNTERS else ()
    for bit, name in ((PERF_SAMPLE_REGS_USER, "user"), (PERF_SAMPLE_STACK_USER, "stack"),
                      (PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT, "weight"), (PERF_SAMPLE_DATA_SRC, "data_src"),
                      (PERF_SAMPLE_TRANSACTION, "transaction"), (PERF_SAMPLE_REGS_INTR, "intr"),
                      (PERF_SAMPLE_PHYS_ADDR, "phys_addr"), (PERF_SAMPLE_CGROUP, "cgroup"),
                      (PERF_SAMPLE_DATA_PAGE_SIZE, "data_page_size"), (PERF_SAMPLE_CODE_PAGE_SIZE, "code_page_size"),
                      (PERF_SAMPLE_AUX, "aux")):
        if not st & bit:
            continue
        if name in ("user", "intr"):
            abi = w.u64()
            mask = attr[f"sample_regs_{name}"]
            f[f"regs_{name}_abi"], f[f"regs_{name}_mask"] = abi, mask
            f[f"regs_{name}"] = w.many(bin(mask).count("1")) if abi else ()
        elif name == "stack":
            size = w.u64()
            dump = w.bytes(size)
            dyn = w.u64() if size else 0
            f["stack_user"], f["stack_user_size"] = dump[:dyn], size
        elif name == "weight":
            f["weight"] = word = w.u64()
            f["weight_struct"] = (word & 0xFFFFFFFF, (word >> 32) & 0xFFFF, word >> 48)
        elif name == "aux":
            f["aux"] = w.bytes(w.u64())
        else:
            f[name] = w.u64()
    assert w.at == len(data), f"parsed {w.at} of {len(data)} bytes"
    return f


def from_c(s: _lib.Sample, attr: dict[str, int]) -> dict[str, Any]:
    """C's struct perfbuf_sample, by EventSample's names (the struct's own
    fields read directly, not through the binding's conversion)."""
    def words(p: Any, n: int) -> tuple[int, ...]:
        return tuple(p[i] for i in range(n))

    st = s.present
    f: dict[str, Any] = {"misc": s.misc, "present": st, "identifier": s.identifier, "ip": s.ip, "pid": s.pid,
                         "tid": s.tid, "addr": s.addr, "id": s.id, "stream_id": s.stream_id, "sample_cpu": s.cpu,
                         "period": s.period, "callchain": words(s.callchain, s.callchain_nr)}
    if st & PERF_SAMPLE_READ:
        group = bool(s.flags & _sample_fields.F_READ_GROUP)
        if group:
            stride = s.read_stride
            assert stride == 1 + bin(attr["read_format"] & (PERF_FORMAT_ID | PERF_FORMAT_LOST)).count("1")
            flat = words(s.read_group, s.read_nr * stride)
            entries = [flat[i:i + stride] for i in range(0, len(flat), stride)]
            has_id = attr["read_format"] & PERF_FORMAT_ID
            values = tuple(ReadValue(e[0], e[1] if has_id else 0, e[-1] if stride == 3 or
                                     (stride == 2 and not has_id) else 0) for e in entries)
            assert values[0] == (s.read_value, s.read_id, s.read_lost)
        else:
            values = (ReadValue(s.read_value, s.read_id, s.read_lost),)
        f["read"] = ReadValues(s.read_time_enabled, s.read_time_running, values, group)
    if st & PERF_SAMPLE_BRANCH_STACK:
        flat = words(s.branch_entries, 3 * s.branch_nr)
        f["branches"] = tuple(Branch(*flat[i:i + 3]) for i in range(0, len(flat), 3))
        f["branch_hw_index"] = s.branch_hw_idx if s.flags & _sample_fields.F_BRANCH_HW_IDX else None
        f["branch_counters"] = words(s.branch_counters, s.branch_nr) \
            if s.flags & _sample_fields.F_BRANCH_COUNTERS else ()
    for name in ("user", "intr"):
        if st & (PERF_SAMPLE_REGS_USER if name == "user" else PERF_SAMPLE_REGS_INTR):
            f[f"regs_{name}_abi"] = getattr(s, f"regs_{name}_abi")
            f[f"regs_{name}"] = words(getattr(s, f"regs_{name}"), getattr(s, f"regs_{name}_nr"))
            f[f"regs_{name}_mask"] = attr[f"sample_regs_{name}"]
    if st & PERF_SAMPLE_STACK_USER:
        f["stack_user"] = ctypes.string_at(s.stack_user, s.stack_user_dyn_size) if s.stack_user_dyn_size else b""
        f["stack_user_size"] = s.stack_user_size
    if st & (PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT):
        f["weight"], f["weight_struct"] = s.weight, (s.weight_var1_dw, s.weight_var2_w, s.weight_var3_w)
    for name in ("data_src", "transaction", "phys_addr", "cgroup", "data_page_size", "code_page_size"):
        f[name] = getattr(s, name)
    if st & PERF_SAMPLE_AUX:
        f["aux"] = ctypes.string_at(s.aux, s.aux_size) if s.aux_size else b""
    return f


def of_sample(sample: Any, names: Any) -> dict[str, Any]:
    return {name: getattr(sample, name) for name in names}


# ---- the real kernel's samples -------------------------------------------------------------

def raw_attr(sample_type: int, read_format: int) -> bytes:
    """struct perf_event_attr (VER5, 112 bytes): software cpu-clock every
    200 µs, user and interrupt registers, a user stack dump."""
    attr = bytearray(112)
    struct.pack_into("<IIQQQQQ", attr, 0, 1, 112, 0, 200_000, sample_type, read_format, 0)
    struct.pack_into("<Q", attr, 80, REGS_MASK)  # sample_regs_user
    struct.pack_into("<I", attr, 88, STACK_DUMP)  # sample_stack_user
    struct.pack_into("<Q", attr, 96, REGS_MASK)  # sample_regs_intr
    return bytes(attr)


def kernel_ids(s: EventSet, ev: int) -> set[int]:
    ids = set()
    for i in range(s.info(ev).instances):
        buf = bytearray(8)
        fcntl.ioctl(s.fd(ev, i), PERF_EVENT_IOC_ID, buf)
        ids.add(struct.unpack("<Q", buf)[0])
    return ids


def cgroup_id() -> int:
    """This process's cgroup v2 id: the inode of its directory."""
    path = next(line.split("::", 1)[1].strip() for line in open("/proc/self/cgroup") if line.startswith("0::"))
    for line in open("/proc/self/mountinfo"):
        left, right = line.split(" - ", 1)
        if right.startswith("cgroup2 "):
            return os.stat(left.split()[4] + path).st_ino
    need_root("no cgroup v2 mount")
    return 0


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += sum(range(500))


@pytest.mark.parametrize("kind", sorted(SAMPLE_TYPES))
def test_every_field_of_a_kernel_sample(kind: str) -> None:
    sample_type = SAMPLE_TYPES[kind]
    names = [n for n in _sample_fields.SLOTS] + ["pid", "tid", "ip", "addr", "period", "callchain"]
    with EventSet(pids=[os.getpid()]) as s:
        leader = s.add_raw(raw_attr(sample_type, PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_LOST),
                           group_leader=True)
        member = s.add_software("page-faults", member_of=leader)
        attr = s.decode_attr(leader)
        assert attr["sample_type"] & sample_type == sample_type
        assert attr["read_format"] & (PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_LOST) == \
            PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_LOST
        with s.reader() as r:
            caught: list[tuple[int, bytes]] = []
            deliver = r._on_event_record

            def catching(rec: Any) -> None:  # the record the library decoded for the binding, whole
                caught.append((rec.cpu, ctypes.string_at(rec.record, rec.size)))
                deliver(rec)

            r._on_event_record = catching  # type: ignore[method-assign]
            s.enable()
            spin(0.3)
            s.disable()
            got = []
            while True:
                batch = r.read(0)
                if not batch:
                    break
                got += batch
            leader_ids, member_ids = kernel_ids(s, leader), kernel_ids(s, member)
            samples = [g for g in got if isinstance(g, EventSample) and not g.lost]
            caught_samples = [(cpu, b) for cpu, b in caught if struct.unpack_from("<I", b)[0] == PERF_RECORD_SAMPLE]
            assert len(samples) == len(caught_samples) >= 10, (len(samples), len(caught_samples), got[:5])
            assert not [g for g in got if isinstance(g, RawRecord)] and r.undecodable == 0
            cg, user_seen = cgroup_id(), 0
            for sample, (cpu, data) in zip(samples, caught_samples):
                mine = parse(data, attr)
                c = _lib.Sample(sz=ctypes.sizeof(_lib.Sample))
                buf = ctypes.create_string_buffer(data, len(data))
                with s._lock:
                    assert perfbuf._LIB.perfbuf_events_decode(s._h, buf, len(data), ctypes.byref(c)) == leader
                theirs = from_c(c, attr)
                ours = of_sample(sample, names)
                assert {k: ours[k] for k in mine} == mine  # the binding = the kernel's layout
                assert {k: ours[k] for k in theirs} == theirs  # the binding = C
                # What the kernel must have written.
                assert sample.event == leader and sample.cpu == cpu == sample.sample_cpu
                assert sample.identifier == sample.id == sample.stream_id and sample.id in leader_ids
                read = sample.read
                assert read.group and len(read.values) == 2 and read.time_enabled > 0
                assert read.values[0].id in leader_ids and read.values[1].id in member_ids
                assert read.values[0].value > 0 and read.values[0].lost == read.values[1].lost == 0
                assert sample.regs_user_mask == sample.regs_intr_mask == REGS_MASK
                assert sample.regs_user_abi == sample.regs_intr_abi == 2  # PERF_SAMPLE_REGS_ABI_64
                assert len(sample.regs_user) == len(sample.regs_intr) == bin(REGS_MASK).count("1")
                assert sample.regs_intr[X86_64_IP] == sample.ip
                assert sample.stack_user_size == STACK_DUMP and len(sample.stack_user) <= STACK_DUMP
                assert sample.cgroup == cg and sample.code_page_size >= 4096
                assert sample.pid == os.getpid()
                if sample.misc & 7 == 2:  # PERF_RECORD_MISC_USER: the user registers are the sample's
                    user_seen += 1
                    assert sample.regs_user[X86_64_IP] == sample.ip
                    assert len(sample.stack_user) > 0
                    sp = sample.regs_user[X86_64_SP]
                    assert sp > 0
            assert user_seen > 0, "no sample in user mode"
            if sample_type & PERF_SAMPLE_AUX:
                assert all(smp.aux == b"" and smp.present & PERF_SAMPLE_AUX for smp in samples)


# ---- a branch stack, built here -------------------------------------------------------------

def test_branch_stack_record() -> None:
    lib = perfbuf._LIB
    lib.perfbuf_decode.restype = ctypes.c_int
    lib.perfbuf_decode.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_lib.DecodeAttr),
                                   ctypes.POINTER(_lib.Sample)]
    for bst in (0, PERF_SAMPLE_BRANCH_HW_INDEX, PERF_SAMPLE_BRANCH_HW_INDEX | PERF_SAMPLE_BRANCH_COUNTERS):
        st = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_BRANCH_STACK | PERF_SAMPLE_WEIGHT_STRUCT
        branches = [(0x1000 + i, 0x2000 + i, (i << 4) | 1) for i in range(3)]
        body = struct.pack("<QII", 77, 10, 11) + struct.pack("<Q", len(branches))
        if bst & PERF_SAMPLE_BRANCH_HW_INDEX:
            body += struct.pack("<Q", 2)
        body += b"".join(struct.pack("<QQQ", *b) for b in branches)
        if bst & PERF_SAMPLE_BRANCH_COUNTERS:
            body += struct.pack("<3Q", 5, 6, 7)
        body += struct.pack("<IHH", 300, 40, 50)  # weight struct: var1_dw, var2_w, var3_w
        data = struct.pack("<IHH", PERF_RECORD_SAMPLE, 2, 8 + len(body)) + body
        attr = {"sample_type": st, "read_format": 0, "sample_regs_user": 0, "sample_regs_intr": 0,
                "branch_sample_type": bst}
        a = _lib.DecodeAttr(sz=ctypes.sizeof(_lib.DecodeAttr), sample_type=st, branch_sample_type=bst)
        c = _lib.Sample(sz=ctypes.sizeof(_lib.Sample))
        buf = ctypes.create_string_buffer(data, len(data))
        assert lib.perfbuf_decode(buf, len(data), ctypes.byref(a), ctypes.byref(c)) == 0
        sample = EventSample(lambda: None, 0, 0)  # type: ignore[arg-type]
        _sample_fields.fill(sample, c, None)
        ours = of_sample(sample, _sample_fields.SLOTS)
        mine, theirs = parse(data, attr), from_c(c, attr)
        assert (c.pid, c.tid) == (mine["pid"], mine["tid"]) == (10, 11)
        assert {k: ours[k] for k in mine if k in ours} == {k: v for k, v in mine.items() if k in ours}
        assert {k: ours[k] for k in theirs if k in ours} == {k: v for k, v in theirs.items() if k in ours}
        assert sample.branches == tuple(Branch(*b) for b in branches)
        assert sample.branch_hw_index == (2 if bst & PERF_SAMPLE_BRANCH_HW_INDEX else None)
        assert sample.branch_counters == ((5, 6, 7) if bst & PERF_SAMPLE_BRANCH_COUNTERS else ())
        assert sample.weight_struct == (300, 40, 50) and sample.weight == 300 | 40 << 32 | 50 << 48
        assert sample.read is None and sample.stack_user == b"" and sample.regs_user == ()  # not carried


# ---- nothing dropped -------------------------------------------------------------------------

def test_undecodable_sample_comes_raw_and_counted() -> None:
    with EventSet(pids=[os.getpid()], cpus=[0]) as s:
        ev = s.add_software("cpu-clock", period=1_000_000)
        (ident,) = kernel_ids(s, ev)
        short = struct.pack("<IHHQ", PERF_RECORD_SAMPLE, 0, 16, ident)  # its identifier, then nothing
        throttle = struct.pack("<IHH", 5, 0, 32) + bytes(24)
        with s.reader() as r:
            got: list[Any] = []
            r._collect = got
            for rec in (short, throttle):  # decoded by the library, as the reader's records are
                buf = ctypes.create_string_buffer(rec, len(rec))
                assert perfbuf._LIB.perfbuf_events_decode_record(s._h, 0, buf, len(rec), r._callback, None) == \
                    _lib.LIBBPF_PERF_EVENT_CONT
            r._collect = None
            assert [type(g) for g in got] == [RawRecord, RawRecord]
            assert got[0].data == short and got[0].record_type == PERF_RECORD_SAMPLE and got[0].error in (
                errno.EBADMSG, errno.EOPNOTSUPP)
            assert got[1].data == throttle and got[1].error == 0
            assert r.undecodable == 1 and r.other == 1
            assert "error=" in repr(got[0])
