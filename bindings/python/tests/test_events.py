"""Event sets on the real kernel: a tracepoint's samples with decoded
fields in time order, uprobes on a library built here, the profiler's
fallback and deferred enable with a BPF program, the kprobe PMU's absence,
lost samples, counter groups, events added and removed while reading,
lifetimes, errors, and the ctypes structs against the C compiler's layout.
Needs root and tracefs; under CI=true nothing is skipped."""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import perfbuf
from conftest import TESTS, OffsetTarget, bpf, kernel_lacks, need_root, run_python
from perfbuf import EventSample, EventSet, _lib

TOP = TESTS.parents[2]
INCLUDE = Path(os.environ.get("PERFBUF_INCLUDE_DIR", TOP / "include"))
PROFILE_OBJ = Path(os.environ.get("PERFBUF_PROFILE_BPF_OBJ", TOP / "build" / "profile.bpf.o"))
NCPUS = os.cpu_count() or 1


@pytest.fixture(autouse=True)
def _root_and_tracefs() -> None:
    if os.geteuid() != 0:
        need_root("event sets need root (CAP_PERFMON and access to tracefs)")
    if not any(Path(p, "events").is_dir() for p in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")):
        need_root("no tracefs at /sys/kernel/tracing (mount -t tracefs nodev /sys/kernel/tracing)")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def cc() -> str:
    path = shutil.which("cc")
    if path is None:
        need_root("needs a C compiler (cc)")
    return str(path)


# ---- the ctypes structs are the header's -------------------------------------------

def test_struct_layouts_match_c(tmp_path: Path) -> None:
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <perfbuf.h>", "int main(void) {"]
    for cname, cls in _lib.C_STRUCTS.items():
        lines.append(f'printf("{cname} %zu %zu\\n", sizeof(struct {cname}), _Alignof(struct {cname}));')
        for fname, _ in cls._fields_:
            lines.append(f'printf("{cname}.{fname} %zu %zu\\n", offsetof(struct {cname}, {fname}), '
                         f'sizeof(((struct {cname} *)0)->{fname}));')
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc(), "-std=gnu11", "-Wall", "-Werror", f"-I{INCLUDE}", "-o", str(exe), str(src)], check=True)
    c_layout = dict(line.split(" ", 1) for line in subprocess.run([str(exe)], check=True, capture_output=True,
                                                                  text=True).stdout.splitlines())
    py_layout = {}
    for cname, cls in _lib.C_STRUCTS.items():
        py_layout[cname] = f"{ctypes.sizeof(cls)} {ctypes.alignment(cls)}"
        for fname, _ in cls._fields_:
            desc = getattr(cls, fname)
            py_layout[f"{cname}.{fname}"] = f"{desc.offset} {desc.size}"
    assert py_layout == c_layout
    # The sizes libperfbuf itself asserts (capi/src/events.rs).
    assert ctypes.sizeof(_lib.EventsOpts) == 80 and ctypes.sizeof(_lib.EventDesc) == 112


def test_only_perfbuf_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Event sets call only perfbuf_* names too (libbpf exports perf_buffer__*)."""
    assert all(name.startswith("perfbuf_") for name in _lib.OPTIONAL_SIGNATURES)
    used: set[str] = set()

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            used.add(name)
            return getattr(real, name)

    real = perfbuf._LIB
    monkeypatch.setattr(perfbuf._library, "LIB", Recorder())  # every module calls the library through it
    with EventSet() as s:
        ev = s.add_tracepoint("sched:sched_process_exec")
        with s.reader(order_by_time=True) as r:
            s.enable()
            r.poll(0)
            r.consume()
            r.flush()
            s.info(ev)
            s.read(ev)
            s.disable()
    assert "perfbuf_events_decoded_reader" in used and all(n.startswith("perfbuf_") for n in used), sorted(used)


# ---- a tracepoint ----------------------------------------------------------------------

def exec_true(n: int) -> list[int]:
    """Runs /bin/true n times, alternating CPUs; returns the pids."""
    pids = []
    for i in range(n):
        cpu = i % NCPUS
        child = subprocess.Popen(["/bin/true"], preexec_fn=lambda cpu=cpu: os.sched_setaffinity(0, {cpu}))
        pids.append(child.pid)
        child.wait()
    return pids


def test_tracepoint_exec_in_time_order() -> None:
    fds = open_fds()
    n = 10
    got: list[EventSample] = []
    with EventSet() as s:
        ev = s.add_tracepoint("sched:sched_process_exec")
        with s.reader(got.append, order_by_time=True) as r:
            s.enable()
            t0 = time.monotonic_ns()
            pids = exec_true(n)
            t1 = time.monotonic_ns()
            deadline = time.monotonic() + 2
            while sum(g.pid in pids for g in got) < n and time.monotonic() < deadline:
                r.poll(50)
            s.disable()
            r.consume()
            r.flush()
            assert r.lost == 0 and r.unattributed == 0
        ours = [g for g in got if g.pid in pids]
        assert sorted(g.pid for g in ours) == sorted(pids)
        for g in ours:
            assert g.event == ev and g.tid == g.pid and g.lost == 0
            assert g.field("filename") == "/bin/true"
            assert g.fields() == {"filename": "/bin/true", "pid": g.pid, "old_pid": g.pid}
            assert t0 <= g.time <= t1  # CLOCK_MONOTONIC, as time.monotonic_ns()
        # Ours in time order: the children ran one after the other on
        # alternate CPUs, so reading one ring after the other would not
        # give it. (Other tasks' execs are not checked: one written by a CPU
        # the host held back between timestamp and commit comes late.)
        times = [g.time for g in ours]
        assert times == sorted(times), "not in time order"
        if NCPUS > 1:
            assert {g.cpu for g in ours} == set(range(min(NCPUS, n)))
        with pytest.raises(KeyError, match="no_such_field"):
            ours[0].field("no_such_field")
        info = s.info(ev)
        assert info.kind == "tracepoint" and info.instances == NCPUS and not info.enabled
        assert info.fallback_errno == 0 and info.fallback_reason is None
        assert s.decode_attr(ev)["sample_type"] & (1 << 10)  # PERF_SAMPLE_RAW
    assert open_fds() == fds


def test_filter_disable_enable() -> None:
    got: list[EventSample] = []
    with EventSet() as s:
        ev = s.add_tracepoint("sched:sched_process_exec", filter='filename ~ "/bin/true"')
        with s.reader(got.append) as r:
            s.enable(ev)
            pids = exec_true(2)
            sh = subprocess.Popen(["/bin/sh", "-c", ":"])
            sh.wait()
            r.consume()  # the tracepoint wrote in exec, before the child was reaped
            # The filter let only /bin/true through (anyone's: keep ours).
            assert all(g.field("filename") == "/bin/true" for g in got) and sh.pid not in {g.pid for g in got}
            assert [g.pid for g in got if g.pid in pids] == pids
            s.disable(ev)
            n = len(got)
            off = exec_true(2)
            r.consume()  # the tracepoint wrote in exec, before the child was reaped
            assert len(got) == n  # disabled: nothing at all
            s.enable(ev)
            pids = exec_true(1)
            r.consume()  # the tracepoint wrote in exec, before the child was reaped
            assert [g.pid for g in got[n:] if g.pid in pids + off] == pids
            with pytest.raises(OSError) as e:
                s.add_tracepoint("sched:sched_process_exec", filter="no_such_field == 1")
            assert e.value.errno == errno.EINVAL and "filter" in str(e.value)
        # Once the reader is freed, its rings are gone: no more events.
        with pytest.raises(OSError) as e:
            s.add_tracepoint("sched:sched_process_exec")
        assert e.value.errno == errno.EINVAL and "reader freed" in str(e.value)


def test_bad_tracepoint_is_enoent() -> None:
    with EventSet() as s:
        with pytest.raises(FileNotFoundError) as e:
            s.add_tracepoint("nope:no_such_tracepoint")
        assert e.value.errno == errno.ENOENT and "tracepoint" in str(e.value)
        with pytest.raises(OSError) as e:
            s.add_tracepoint("../../etc")
        assert e.value.errno == errno.EINVAL


# ---- uprobes on a library of our own ------------------------------------------------------

PROBE_C = """
__attribute__((noinline)) int perfbuf_py_probe(int x)
{
	__asm__ volatile("" ::: "memory");
	return x * 3 + 1;
}
"""


@pytest.fixture(scope="module")
def probe_lib(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ctypes.CDLL]:
    out = tmp_path_factory.mktemp("probe")
    (out / "probe.c").write_text(PROBE_C)
    path = out / "libperfbuf_py_probe.so"
    subprocess.run([cc(), "-O1", "-shared", "-fPIC", "-o", str(path), str(out / "probe.c")], check=True)
    lib = ctypes.CDLL(str(path))
    lib.perfbuf_py_probe.argtypes = [ctypes.c_int]
    lib.perfbuf_py_probe.restype = ctypes.c_int
    return path, lib


def call_probe(lib: ctypes.CDLL, n: int) -> None:
    for i in range(n):
        assert lib.perfbuf_py_probe(i) == i * 3 + 1


def test_uprobe_and_uretprobe(probe_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, lib = probe_lib
    fds = open_fds()
    n = 100
    got: list[EventSample] = []
    with EventSet(pids=[os.getpid()]) as s:
        up = s.add_uprobe(path, "perfbuf_py_probe")
        ret = s.add_uprobe(str(path), "perfbuf_py_probe", retprobe=True)
        with s.reader(got.append) as r:
            s.enable()
            call_probe(lib, n)
            r.consume()
        entry = ctypes.cast(lib.perfbuf_py_probe, ctypes.c_void_p).value
        ups, rets = [g for g in got if g.event == up], [g for g in got if g.event == ret]
        assert len(ups) == n and len(rets) == n and len(got) == 2 * n
        assert all(g.ip == entry for g in ups)  # at the function's first instruction
        assert all(g.ip != entry for g in rets)
        me, thread = os.getpid(), threading.get_native_id()
        assert all(g.pid == me and g.tid == thread for g in got)
        assert ups[0].fields() == {}  # not a tracepoint
        info = s.info(up)
        assert info.kind == "uprobe" and info.enabled and info.instances == len(s.cpus) == NCPUS
        assert s.fd(up, 0) >= 0
        with pytest.raises(FileNotFoundError):
            s.add_uprobe(path, "no_such_function")
        with pytest.raises(FileNotFoundError):
            s.add_uprobe("/nonexistent/binary", "perfbuf_py_probe")
    assert open_fds() == fds


def test_uprobes_inside_a_function(offset_target: OffsetTarget) -> None:
    t = offset_target
    inside = t.entry + t.inside
    fds = open_fds()
    got: list[EventSample] = []
    with EventSet(pids=[os.getpid()]) as s:
        at_symbol = s.add_uprobe(t.path, t.symbol, offset=t.inside)
        at_file_offset = s.add_uprobe(t.path, offset=t.file_offset + t.inside)
        returns = s.add_uprobe(t.path, offset=t.file_offset, retprobe=True)
        with pytest.raises(OSError) as e:
            s.add_uprobe(t.path, t.symbol, offset=t.inside, retprobe=True)
        assert e.value.errno == errno.EINVAL and f"uretprobe {t.path}:{t.symbol}+0x4" in str(e.value)
        with pytest.raises(OSError) as e:
            s.add_uprobe(t.path, t.symbol, offset=t.size)
        assert e.value.errno == errno.EINVAL and "past the end" in str(e.value)
        with s.reader(got.append) as r:
            s.enable()
            assert [t.lib.perfbuf_offset_target(i) for i in range(30)] == list(range(1, 31))
            r.consume()
    assert [g.ip for g in got if g.event == at_symbol] == [inside] * 30
    assert [g.ip for g in got if g.event == at_file_offset] == [inside] * 30
    back = [g.ip for g in got if g.event == returns]
    assert len(back) == 30 and not any(t.entry <= ip < t.entry + t.size for ip in back)
    assert open_fds() == fds


def test_pid_target_sees_only_that_process(probe_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, lib = probe_lib
    code = (f"import ctypes, sys\nlib = ctypes.CDLL({str(path)!r})\nsys.stdin.read()\n"
            "for i in range(20): lib.perfbuf_py_probe(i)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    got: list[EventSample] = []
    try:
        with EventSet(pids=[child.pid]) as s:
            ev = s.add_uprobe(path, "perfbuf_py_probe")
            with s.reader(got.append) as r:
                s.enable()
                call_probe(lib, 5)  # not watched
                child.communicate(b"", timeout=30)
                r.consume()
    finally:
        child.kill()
        child.wait()
    assert [g.pid for g in got] == [child.pid] * 20 and {g.event for g in got} == {ev}


def test_callback_exception_keeps_the_rest(probe_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, lib = probe_lib
    got: list[int] = []

    def on_sample(sample: EventSample) -> None:
        got.append(sample.event or 0)
        if len(got) == 1:
            raise ValueError("first")

    with EventSet(pids=[os.getpid()], cpus=[0]) as s:
        s.add_uprobe(path, "perfbuf_py_probe")
        with s.reader(on_sample) as r:
            s.enable()
            os.sched_setaffinity(0, {0})
            try:
                call_probe(lib, 5)
            finally:
                os.sched_setaffinity(0, range(NCPUS))
            with pytest.raises(ValueError, match="first"):
                r.consume()
            assert len(got) == 1
            r.consume()
            assert len(got) == 5


def test_lost_samples_add_up(probe_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, lib = probe_lib
    samples, lost = [0], [0]

    def on_lost(cpu: int, count: int) -> None:
        assert cpu == 0
        lost[0] += count

    os.sched_setaffinity(0, {0})
    try:
        with EventSet(cpus=[0], pages=1, pids=[os.getpid()]) as s:
            s.add_uprobe(path, "perfbuf_py_probe")
            with s.reader(lambda g: samples.__setitem__(0, samples[0] + 1), on_lost) as r:
                s.enable()
                call_probe(lib, 3000)
                r.consume()
                before = r.stats(0)
                call_probe(lib, 1)  # the kernel reports the loss with its next write
                r.consume()
                stats = r.stats(0)
    finally:
        os.sched_setaffinity(0, range(NCPUS))
    assert lost[0] > 0 and samples[0] + lost[0] == 3001
    assert r.lost == lost[0] == stats["lost"]
    # With PERF_FORMAT_LOST (Linux 6.0) the figures knew before the LOST record.
    if tuple(int(p) for p in os.uname().release.split(".")[:2]) >= (6, 0):
        assert before["lost"] == before["lost_unreported"] == lost[0]


def test_drain_final_reports_a_burst_no_record_reports(probe_lib: tuple[Path, ctypes.CDLL]) -> None:
    """A 1-page ring overflowed, then nothing: the figures know (an event
    set always counts), and drain_final hands on_lost exactly the missing
    samples once; the kernel's later LOST record adds nothing."""
    if tuple(int(p) for p in os.uname().release.split(".")[:2]) < (6, 0):
        need_root("counting lost samples (PERF_FORMAT_LOST) needs Linux 6.0")
    path, lib = probe_lib
    samples, lost = [0], []
    os.sched_setaffinity(0, {0})
    try:
        with EventSet(cpus=[0], pages=1, pids=[os.getpid()]) as s:
            s.add_uprobe(path, "perfbuf_py_probe")
            with s.reader(lambda g: samples.__setitem__(0, samples[0] + 1),
                          lambda cpu, n: lost.append((cpu, n))) as r:
                s.enable()
                call_probe(lib, 3000)
                r.consume()
                missing = 3000 - samples[0]
                assert missing > 0 and lost == []
                st = r.stats(0)
                assert st["lost"] == st["lost_unreported"] == missing
                assert r.drain_final() == missing
                assert lost == [(0, missing)] and r.lost == missing
                assert r.stats(0)["lost_unreported"] == 0
                assert r.drain_final() == 0
                call_probe(lib, 1)  # the kernel writes its LOST record now
                r.consume()
                assert r.stats(0)["lost"] == missing
    finally:
        os.sched_setaffinity(0, range(NCPUS))
    assert lost == [(0, missing)] and r.lost == missing
    assert samples[0] == 3001 - missing


def test_add_and_remove_while_reading(probe_lib: tuple[Path, ctypes.CDLL]) -> None:
    path, lib = probe_lib
    got: list[EventSample] = []
    with EventSet(pids=[os.getpid()]) as s:
        s.add_tracepoint("sched:sched_process_exec")
        with s.reader(got.append) as r:
            s.enable()
            up = s.add_uprobe(path, "perfbuf_py_probe")
            s.enable(up)
            call_probe(lib, 10)
            r.consume()
            assert sum(g.event == up for g in got) == 10
            call_probe(lib, 7)  # in the rings when the event goes
            s.remove(up)
            assert up not in s.events
            call_probe(lib, 10)
            r.consume()
            assert sum(g.event == up for g in got) == 10 and r.unattributed == 7


# ---- the profiler: fallback, BPF program, deferred enable -----------------------------------

SPIN = """
import os, select, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
start, deadline = time.process_time(), time.monotonic() + 60
while time.process_time() - start < float(sys.argv[2]) and time.monotonic() < deadline:
    pass
print("spun", flush=True)
# Busy until stdin closes: every spinner has had its time.
while not select.select([0], [], [], 0)[0] and time.monotonic() < deadline:
    pass
"""


def spin_all(cpus: list[int], seconds: float) -> None:
    """Keeps every CPU busy (an idle vCPU here takes no clock samples): a
    process pinned to each spins until it has had `seconds` of CPU time and
    every other has too (however long a loaded machine takes; 60 s against
    a hang)."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN, str(c), str(seconds)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for c in cpus]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline() == "spun\n"
    for p in procs:
        p.communicate("")


def busy_seconds() -> dict[int, float]:
    """Each CPU's time running tasks so far (/proc/stat: user, nice,
    system, irq and softirq; not idle, iowait or steal, when the vCPU ran
    nothing or did not run at all), in seconds."""
    busy = {}
    hz = os.sysconf("SC_CLK_TCK")
    for line in Path("/proc/stat").read_text().splitlines():
        f = line.split()
        if f[0].startswith("cpu") and f[0] != "cpu":
            user, nice, system, _idle, _iowait, irq, softirq = map(int, f[1:8])
            busy[int(f[0][3:])] = (user + nice + system + irq + softirq) / hz
    return busy


class Libbpf:
    """The few libbpf calls needed to load build/profile.bpf.o."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
        p = ctypes.c_void_p
        for name, res, args in (
            ("bpf_object__open_file", p, [ctypes.c_char_p, p]),
            ("bpf_object__load", ctypes.c_int, [p]),
            ("bpf_object__find_program_by_name", p, [p, ctypes.c_char_p]),
            ("bpf_program__fd", ctypes.c_int, [p]),
            ("bpf_object__find_map_fd_by_name", ctypes.c_int, [p, ctypes.c_char_p]),
            ("bpf_map_lookup_elem", ctypes.c_int, [ctypes.c_int, p, p]),
            ("bpf_object__close", None, [p]),
        ):
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = res, args

    def lookup_u64(self, map_fd: int, key: int) -> int:
        k, v = ctypes.c_uint32(key), ctypes.c_uint64(0)
        assert self.lib.bpf_map_lookup_elem(map_fd, ctypes.byref(k), ctypes.byref(v)) == 0
        return v.value


@pytest.fixture
def profile_prog():
    if not PROFILE_OBJ.is_file():
        pytest.fail(f"{PROFILE_OBJ} is missing (make build/profile.bpf.o)")
    bpf = Libbpf()
    obj = bpf.lib.bpf_object__open_file(str(PROFILE_OBJ).encode(), None)
    if not obj or bpf.lib.bpf_object__load(obj) != 0:
        if obj:
            bpf.lib.bpf_object__close(obj)
        need_root(f"cannot load {PROFILE_OBJ}: {os.strerror(ctypes.get_errno())}")
    prog = bpf.lib.bpf_program__fd(bpf.lib.bpf_object__find_program_by_name(obj, b"on_sample"))
    counts = bpf.lib.bpf_object__find_map_fd_by_name(obj, b"counts")
    assert prog >= 0 and counts >= 0
    yield bpf, prog, counts
    bpf.lib.bpf_object__close(obj)


def test_profiler_fallback_and_deferred_enable(profile_prog: tuple[Libbpf, int, int]) -> None:
    bpf, prog, counts = profile_prog
    fds = open_fds()
    per_cpu: dict[int, int] = {}

    def on_sample(sample: EventSample) -> None:
        per_cpu[sample.cpu] = per_cpu.get(sample.cpu, 0) + 1

    with EventSet() as s:
        ev = s.add_hardware("cycles", fallback="cpu-clock", freq=99)
        info = s.info(ev)
        has_pmu = any(Path("/sys/bus/event_source/devices", d).exists() for d in ("cpu", "armv8_pmuv3_0"))
        if has_pmu:
            assert info.kind == "hardware" and not info.fell_back
        else:  # a VM: the software CPU clock, and why
            assert info.kind == "software" and info.attr_type == 1 and info.config == 0  # PERF_COUNT_SW_CPU_CLOCK
            assert info.fell_back and info.fallback_name in ("ENOENT", "EOPNOTSUPP", "ENODEV", "EINVAL", "EACCES")
            assert info.fallback_reason == f"{os.strerror(info.fallback_errno)} ({info.fallback_name})"
        with s.reader(on_sample) as r:
            # Deferred enable: opened disabled, nothing is sampled before.
            spin_all(s.cpus, 0.3)
            r.consume()
            before = s.read(ev)
            assert per_cpu == {} and sum(bpf.lookup_u64(counts, c) for c in s.cpus) == 0
            assert before.value == 0 and before.time_enabled == 0 and before.values == {ev: 0}
            s.attach_bpf(ev, prog)
            with pytest.raises(FileExistsError):
                s.attach_bpf(ev, prog)
            assert s.info(ev).bpf_attached and not s.info(ev).enabled
            s.enable(ev)
            busy0 = busy_seconds()
            spin_all(s.cpus, 1.0)
            s.disable(ev)
            busy1 = busy_seconds()
            r.consume()
            for cpu in s.cpus:
                # 99 Hz of the CPU clock, give or take half, for the time
                # the CPU ran tasks (the spinners keep it busy; a vCPU the
                # host held back runs nothing and ticks not), not wall time.
                runs = bpf.lookup_u64(counts, cpu)
                busy = busy1[cpu] - busy0[cpu]
                assert 99 * busy * 0.5 <= runs <= 99 * busy * 1.5, f"cpu {cpu}: {runs} samples in {busy:.2f} s busy"
                assert per_cpu.get(cpu, 0) == runs  # the program returns 1: each sample reaches the ring too
            assert s.read(ev).time_enabled > 0
    assert open_fds() == fds


def test_samples_at_a_frequency_carry_their_period() -> None:
    # The kernel turns 999 Hz of cpu-clock into a period of 1e9 / 999 ns:
    # what each sample stands for (perf report's event count).
    got: list[EventSample] = []
    with EventSet(pids=[threading.get_native_id()]) as s:
        ev = s.add_software("cpu-clock", freq=999)
        assert s.info(ev).sample_type & (1 << 8)  # PERF_SAMPLE_PERIOD
        with s.reader(got.append) as r:
            s.enable(ev)
            start = time.thread_time()
            while time.thread_time() - start < 0.05:  # CPU time: a loaded machine may deschedule us
                sum(range(1000))
            s.disable(ev)
            r.consume()
    assert got and {g.period for g in got} == {1_001_001}, [g.period for g in got]


QUIET_TRACEPOINT = "syscalls:sys_enter_getpgid"  # only this test traces it
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_SYS_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}[os.uname().machine]
_PERF_EVENT_IOC_SET_BPF = 0x40042408


def load_drop_program(name: str) -> int:
    """A classic tracepoint program returning 0, loaded as ``name``: its fd."""
    insns = struct.pack("<QQ", 0xB7, 0x95)  # r0 = 0; exit
    buf, lic = ctypes.create_string_buffer(insns, len(insns)), ctypes.create_string_buffer(b"GPL")
    attr = struct.pack("<IIQQIIQII16s", 5, 2, ctypes.addressof(buf), ctypes.addressof(lic), 0, 0, 0, 0, 0,
                       name.encode())
    return bpf(5, attr)  # BPF_PROG_LOAD, BPF_PROG_TYPE_TRACEPOINT


def attach_elsewhere(prog: int, tracepoint: str) -> int:
    """Attaches ``prog`` to ``tracepoint`` through a perf event of its own,
    as another tool would: the event's fd (closing it detaches)."""
    system, name = tracepoint.split(":")
    config = int(Path(f"/sys/kernel/tracing/events/{system}/{name}/id").read_text())
    attr = ctypes.create_string_buffer(struct.pack("<IIQQ", 2, 128, config, 1), 128)  # TRACEPOINT, period 1
    fd = _libc.syscall(_SYS_PERF_EVENT_OPEN, attr, -1, 0, -1, 8)  # PERF_FLAG_FD_CLOEXEC
    if fd < 0 or fcntl.ioctl(fd, _PERF_EVENT_IOC_SET_BPF, prog) != 0:
        raise OSError(ctypes.get_errno(), "cannot attach the program")
    return int(fd)


def test_a_bpf_program_that_drops_the_tracepoints_hits_is_named(caplog: pytest.LogCaptureFixture) -> None:
    got: list[EventSample] = []
    with EventSet(pids=[threading.get_native_id()]) as s:
        ev = s.add_tracepoint(QUIET_TRACEPOINT)
        with s.reader(got.append) as r:
            s.enable(ev)

            def hits(n: int) -> int:
                before = len(got)
                for _ in range(n):
                    os.getpgid(0)
                r.consume()
                return len(got) - before

            assert s.info(ev).bpf_programs == () and hits(5) == 5
            prog = load_drop_program("perfbuf_py_drop")
            other = attach_elsewhere(prog, QUIET_TRACEPOINT)
            try:
                info = s.info(ev)
                assert len(info.bpf_programs) == 1 and info.other_bpf_programs == info.bpf_programs
                attached = info.bpf_programs[0]
                assert attached.name == "perfbuf_py_drop" and not attached.ours and attached.id > 0
                assert hits(5) == 0  # the kernel dropped them: what the warning is about
                s.info(ev)
            finally:
                os.close(other)
                os.close(prog)
            assert s.info(ev).bpf_programs == () and hits(5) == 5
    warned = [r.getMessage() for r in caplog.records if "perfbuf_py_drop" in r.getMessage()]
    assert len(warned) == 1 and f"BPF program {attached.id} " in warned[0], warned


def test_counter_group() -> None:
    with EventSet(pids=[os.getpid()], rings=False) as s:
        leader = s.add_software("task-clock", group_leader=True)
        member = s.add_software("page-faults", member_of=leader)
        s.enable()
        mem = bytearray(64 << 20)
        mem[::4096] = bytes(len(range(0, len(mem), 4096)))  # touch every page
        del mem
        s.disable()
        c = s.read(leader)
        assert list(c.values) == [leader, member]
        assert c.values[leader] > 0 and c.values[member] >= 16  # 64 MiB in 2 MiB huge pages at most
        assert c.time_enabled > 0 and c.time_running > 0
        assert s.read(leader, cpu=s.cpus[0]).time_enabled >= 0
        with pytest.raises(OSError) as e:
            s.remove(leader)
        assert e.value.errno == errno.EBUSY
        s.remove(member)
        s.remove(leader)
        assert s.events == []
        with pytest.raises(OSError) as e:
            s.reader()
        assert e.value.errno == errno.EINVAL  # no rings


def test_raw_attr() -> None:
    import struct
    # struct perf_event_attr (VER0, 64 bytes): type, size, config, sample_period, sample_type,
    # read_format, flags (bit 0 disabled), wakeup, bp_type, config1.
    attr = struct.pack("<IIQQQQQIIQ", 1, 64, 1, 0, 0, 0, 1, 0, 0, 0)  # software task-clock
    with EventSet(pids=[os.getpid()], rings=False) as s:
        ev = s.add_raw(attr)
        s.enable(ev)
        sum(range(200000))
        s.disable(ev)
        info = s.info(ev)
        assert info.kind == "raw" and info.attr_type == 1 and info.config == 1
        assert s.read(ev).value > 0


def test_kprobe_counts_this_process_calls_or_says_config_kprobes() -> None:
    fn = {"x86_64": "__x64_sys_getppid", "aarch64": "__arm64_sys_getppid"}.get(os.uname().machine, "sys_getppid")
    with EventSet(pids=[os.getpid()]) as s:
        if not Path("/sys/bus/event_source/devices/kprobe").exists():
            with pytest.raises(OSError) as e:
                s.add_kprobe(fn)
            assert e.value.errno == errno.EOPNOTSUPP and "CONFIG_KPROBES" in str(e.value) and fn in str(e.value)
            kernel_lacks("its success path, this process's 50 calls: the kernel has no kprobe PMU")
            return
        got: list[EventSample] = []
        ev = s.add_kprobe(fn)
        with s.reader(got.append) as r:
            s.enable(ev)
            for _ in range(50):
                os.getppid()
            s.disable(ev)
            r.consume()
        assert [(g.event, g.pid, g.tid) for g in got] == [(ev, os.getpid(), threading.get_native_id())] * 50


# ---- lifetimes and errors -------------------------------------------------------------------

LIFETIME = """
import gc, os, subprocess
from perfbuf import EventSet

def fds():
    return len(os.listdir("/proc/self/fd"))

def run_true(n):
    pids = []
    for _ in range(n):
        p = subprocess.Popen(["/bin/true"]); p.wait(); pids.append(p.pid)
    return pids

start = fds()
got = []
s = EventSet()
s.add_tracepoint("sched:sched_process_exec")
r = s.reader(got.append)
s.enable()
first = run_true(2)
s.close()                   # the reader is open: events disabled now, freed with it
assert s.closed
try:
    s.enable()
except ValueError as e:
    print("closed:", e)
later = run_true(2)          # not seen: the events are off
r.consume()                  # what was in the rings still decodes
mine = [g for g in got if g.pid in first + later]
# Unordered reading: each CPU's ring in turn, so compare as sets of pids.
assert sorted(g.pid for g in mine) == sorted(first), (first, later, [g.pid for g in mine])
assert mine[0].field("filename") == "/bin/true"
r.close()                    # frees the rings, then the set
try:
    mine[0].field("filename")
except ValueError as e:
    print("after both:", e)
assert fds() == start, (start, fds())

# Dropping the set while its reader lives: the reader keeps it.
s = EventSet()
s.add_tracepoint("sched:sched_process_exec")
r = s.reader(got.append)
s.enable()
del s
gc.collect()
pids = run_true(1)
r.consume()
ours = [g for g in got if g.pid in pids]   # the machine's other execs come too
assert len(ours) == 1 and ours[0].field("filename") == "/bin/true", ours
del r                        # the last reference to the set went with it (samples do not keep it)
gc.collect()
assert fds() == start, (start, fds())
try:
    ours[0].field("filename")
except ValueError as e:
    print("dropped:", e)
print("OK")
"""


def test_lifetimes_set_closed_before_its_reader() -> None:
    res = run_python(LIFETIME)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "closed: EventSet is closed" in res.stdout
    assert "after both: the EventSet this sample came from is closed" in res.stdout
    assert "dropped: the EventSet this sample came from is closed" in res.stdout
    assert res.stdout.rstrip().endswith("OK")


def test_errors() -> None:
    with pytest.raises(ValueError, match="power of two"):
        EventSet(pages=3)
    with pytest.raises(TypeError):
        EventSet(rings=1)  # type: ignore[arg-type]
    with pytest.raises(OSError) as e:
        EventSet(cpus=[4096])
    assert e.value.errno == errno.ENODEV
    with pytest.raises(ProcessLookupError):
        EventSet(pids=[0x3FFFFFFF])
    with EventSet() as s:
        with pytest.raises(ValueError, match="unknown software event 'nope'"):
            s.add_software("nope")
        with pytest.raises(ValueError, match="not both"):
            s.add_software("cpu-clock", period=1000, freq=99)
        with pytest.raises(FileNotFoundError):
            s.enable(42)
        with pytest.raises(TypeError):
            s.add_tracepoint(3)  # type: ignore[arg-type]
        r = s.reader()
        with pytest.raises(OSError) as e:
            s.reader()
        assert e.value.errno == errno.EBUSY
        r.close()
    with pytest.raises(ValueError, match="EventSet is closed"):
        s.add_tracepoint("sched:sched_process_exec")
    with pytest.raises(ValueError, match="EventReader is closed"):
        r.poll(0)
