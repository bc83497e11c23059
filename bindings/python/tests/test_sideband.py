"""Side-band records through the Python face on the real kernel: a child
that execs a marked binary, maps a file and exits shows up as FORK, COMM
with the exec bit, MMAP2 of that file and EXIT, in time order with the
exec tracepoint's sample. Needs root and tracefs; under CI=true nothing
is skipped."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import need_root
from perfbuf import EventSample, EventSet, RawRecord, SidebandRecord

MARKER = "pb_sb_marker"

@pytest.fixture(autouse=True)
def _root_and_tracefs() -> None:
    if os.geteuid() != 0:
        need_root("event sets need root")
    if not Path("/sys/kernel/tracing/events/sched").is_dir():
        need_root("no tracefs at /sys/kernel/tracing")


def marked_child(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the Python interpreter named MARKER, and a script for it
    that maps two pages of a file from offset 4096 and prints where."""
    exe = tmp_path / MARKER
    shutil.copy(os.path.realpath(sys.executable), exe)
    script = tmp_path / "child.py"
    script.write_text(
        "import ctypes, ctypes.util, os, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.mmap.restype = ctypes.c_void_p\n"
        "libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,"
        " ctypes.c_long]\n"
        "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "addr = libc.mmap(None, 8192, 1, 2, fd, 4096)  # PROT_READ, MAP_PRIVATE\n"
        "print(hex(addr))\n")
    return exe, script


def test_fork_exec_mmap_exit_in_time_order(tmp_path: Path) -> None:
    exe, script = marked_child(tmp_path)
    data = tmp_path / "mapped.bin"
    data.write_bytes(b"\7" * 4 * 4096)
    st = data.stat()
    got: list[Any] = []
    with EventSet(sideband=["comm", "task", "mmap", "mmap_data"], pages=64) as s:
        ev = s.add_tracepoint("sched:sched_process_exec")
        with s.reader(got.append, order_by_time=True) as r:
            s.enable()
            # Read while the child runs: an interpreter maps many files.
            p = subprocess.Popen([str(exe), "-S", str(script), str(data)], stdout=subprocess.PIPE, text=True,
                                 env={**os.environ, "PYTHONHOME": sys.base_prefix, "PYTHONPATH": ""})
            while p.poll() is None:
                r.poll(10)
            assert p.returncode == 0 and p.stdout is not None
            addr = int(p.stdout.read().strip(), 16)
            p.stdout.close()
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline:
                r.poll(50)
            r.consume()
            r.flush()
            # Losses elsewhere on a busy machine (every task's mappings
            # come) are no failure; the child's records must all be there.
            assert r.other > 0
            lost = r.lost
    child = next((g.pid for g in got if isinstance(g, SidebandRecord) and g.kind == "comm" and g.exec
                  and g.name == MARKER), None)
    assert child is not None, f"no COMM {MARKER} with the exec bit ({lost} records lost)"

    def ours(g: Any) -> bool:
        if isinstance(g, EventSample):
            return g.pid == child and g.event == ev
        if isinstance(g, SidebandRecord):
            if g.kind == "mmap2":
                return g.pid == child and g.name == str(data)
            return g.kind in ("fork", "comm", "exit") and g.tid == child
        return False

    mine = [g for g in got if ours(g)]
    kinds = [g.kind if isinstance(g, SidebandRecord) else "exec" for g in mine]
    assert kinds == ["fork", "comm", "exec", "mmap2", "exit"], f"{lost} records lost: {mine}"
    times = [g.time for g in mine]
    assert times == sorted(times) and all(times)
    fork, comm, _, mm, exit_ = mine
    assert (fork.pid, fork.ppid) == (child, os.getpid())
    assert comm.exec and comm.name == MARKER
    assert (mm.addr, mm.len, mm.pgoff, mm.ino) == (addr, 8192, 4096, st.st_ino)
    assert (mm.maj, mm.min) == (os.major(st.st_dev), os.minor(st.st_dev))
    assert mm.prot == 1 and mm.data and mm.build_id is None
    assert (exit_.pid, exit_.ppid) == (child, os.getpid())
    assert not [g for g in got if isinstance(g, RawRecord)], "every record decoded"


def test_on_other_and_bad_names() -> None:
    with pytest.raises(ValueError, match="unknown side-band record"):
        EventSet(sideband=["comm", "nope"])
    others: list[Any] = []
    samples: list[Any] = []
    with EventSet(sideband="task") as s:
        s.add_tracepoint("sched:sched_process_exec")
        with s.reader(samples.append, on_other=others.append) as r:
            subprocess.run(["/bin/true"], check=True)
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()
            r.poll(100)
            r.consume()
    assert others and all(isinstance(o, SidebandRecord) for o in others)
    assert {o.kind for o in others} >= {"fork", "exit"}
    assert not samples  # the tracepoint was never enabled


def test_switches_asked_through_a_raw_attr() -> None:
    """No side-band record asked for by name: a dummy event's own
    attr.context_switch bit asks for this thread's switches, and they come
    decoded, attributed to that event, counted in ``other``."""
    import struct
    attr = bytearray(112)  # struct perf_event_attr VER5: software dummy, context_switch (flag bit 26)
    struct.pack_into("<IIQ", attr, 0, 1, 112, 9)
    struct.pack_into("<Q", attr, 40, 1 << 26)
    others: list[Any] = []
    done = threading.Event()
    tid: list[int] = []

    def sleeper() -> None:
        os.sched_setaffinity(0, {0})
        tid.append(threading.get_native_id())
        done.wait()
        for _ in range(5):
            time.sleep(0.002)  # off the CPU and back

    t = threading.Thread(target=sleeper)
    t.start()
    while not tid:
        time.sleep(0.001)
    try:
        with EventSet(cpus=[0], pids=tid) as s:
            ev = s.add_raw(bytes(attr))
            with s.reader(on_other=others.append) as r:
                s.enable()
                done.set()
                t.join()
                s.disable()
                r.consume()
                assert r.other == len(others) and r.undecodable == 0
    finally:
        done.set()
        t.join()
    assert others and all(isinstance(o, SidebandRecord) and o.kind == "switch" and o.event == ev
                          and o.tid == tid[0] for o in others), others
    outs = sum(o.switch_out for o in others)
    assert outs >= 5 and len(others) - outs >= 5, (outs, len(others))
