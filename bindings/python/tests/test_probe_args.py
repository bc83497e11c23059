"""Probes with fetch arguments through the Python face, on the real kernel:
a uprobe on a function of a library built here reads an int, a string and
a struct field at each call, a uretprobe reads $retval, a uprobe with
arguments inside a function fires there, a definition the kernel rejects
raises with the kernel's complaint, a kprobe with arguments reads the paths
this thread opens (where the kernel has kprobe_events; a clear error where
not), set_filter changes and
clears a filter, an event can be added enabled, and the probes go with
their set. Needs root and tracefs with uprobe_events; under CI=true nothing
is skipped."""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import OffsetTarget, kernel_lacks, need_root
from perfbuf import EventSample, EventSet

UPROBE_EVENTS = Path("/sys/kernel/tracing/uprobe_events")

TARGET_C = """
#include <string.h>
struct item { unsigned long long tag; unsigned int count; };
__attribute__((noinline)) long perfbuf_py_args(int n, const char *name, const struct item *item)
{
	__asm__ volatile("" ::: "memory");
	return (long)n * 1000 + (long)strlen(name) + item->count;
}
"""

REGS = {"x86_64": ("%di", "%si", "%dx"), "aarch64": ("%x0", "%x1", "%x2")}


class Item(ctypes.Structure):
    _fields_ = [("tag", ctypes.c_ulonglong), ("count", ctypes.c_uint)]


@pytest.fixture(autouse=True)
def _capable() -> None:
    if os.geteuid() != 0 or not UPROBE_EVENTS.exists():
        need_root("probe arguments need root and tracefs with uprobe_events")
    if platform.machine() not in REGS:
        need_root(f"the test knows no registers of {platform.machine()}")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ctypes.CDLL]:
    compiler = shutil.which("cc")
    if compiler is None:
        need_root("needs a C compiler (cc)")
    out = tmp_path_factory.mktemp("args")
    (out / "t.c").write_text(TARGET_C)
    path = out / "libperfbuf_py_args.so"
    subprocess.run([str(compiler), "-O1", "-shared", "-fPIC", "-o", str(path), str(out / "t.c")], check=True)
    lib = ctypes.CDLL(str(path))
    lib.perfbuf_py_args.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(Item)]
    lib.perfbuf_py_args.restype = ctypes.c_long
    return path, lib


def args() -> str:
    a, b, c = REGS[platform.machine()]
    return f"n={a}:s32 name=+0({b}):ustring count=+8({c}):u32"


def our_probes() -> list[str]:
    return [line for line in UPROBE_EVENTS.read_text().splitlines() if f"perfbuf_{os.getpid()}_" in line]


def test_arguments_and_return_values(target: tuple[Path, ctypes.CDLL]) -> None:
    path, lib = target
    names = [b"alpha", b"", b"with spaces", b"z"]
    calls: list[dict[str, object]] = []
    returns: list[object] = []
    want_calls: list[dict[str, object]] = []
    want_returns: list[int] = []
    with EventSet(pids=[os.getpid()]) as s:
        entry = s.add_uprobe(path, "perfbuf_py_args", args=args())
        exit_ = s.add_uprobe(path, "perfbuf_py_args", retprobe=True, args="ret=$retval:s64")
        assert len(our_probes()) == 2

        def on_sample(sample: EventSample) -> None:
            if sample.event == entry:
                calls.append(sample.fields())
            elif sample.event == exit_:
                returns.append(sample.field("ret"))
        with s.reader(on_sample) as r:
            s.enable()
            for i in range(25):
                item = Item(tag=7, count=i * 4 + 3)
                want_returns.append(lib.perfbuf_py_args(i - 12, names[i % 4], ctypes.byref(item)))
                want_calls.append({"n": i - 12, "name": names[i % 4].decode(), "count": i * 4 + 3})
            r.consume()
        assert [{k: c[k] for k in ("n", "name", "count")} for c in calls] == want_calls
        assert returns == want_returns
        s.remove(entry)
        assert len(our_probes()) == 1
    assert our_probes() == []


def test_arguments_inside_a_function(offset_target: OffsetTarget) -> None:
    t = offset_target
    got: list[EventSample] = []
    with EventSet(pids=[os.getpid()]) as s:
        ev = s.add_uprobe(t.path, t.symbol, offset=t.inside, args=t.arg)
        with s.reader(got.append) as r:
            s.enable()
            for i in range(20):
                assert t.lib.perfbuf_offset_target(i * 5) == i * 5 + 1
            r.consume()
        with pytest.raises(OSError) as e:
            s.add_uprobe(t.path, t.symbol, offset=t.inside, retprobe=True, args="r=$retval")
        assert "uretprobe" in str(e.value) and f"{t.symbol}+0x4" in str(e.value)
        inside = t.entry + t.inside
        assert [(g.event, g.ip, g.field("__probe_ip"), g.field("x")) for g in got] == \
            [(ev, inside, inside, i * 5) for i in range(20)]
    assert our_probes() == []


def test_rejected_arguments_carry_the_kernels_words(target: tuple[Path, ctypes.CDLL]) -> None:
    path, _ = target
    with EventSet() as s:
        with pytest.raises(OSError) as e:
            s.add_uprobe(path, "perfbuf_py_args", args="n=%nosuchreg:s32")
        assert e.value.errno == 22
        text = str(e.value)
        assert "Invalid register name" in text and "n=%nosuchreg:s32" in text and "perfbuf_py_args" in text
        with pytest.raises(FileNotFoundError) as e:
            s.add_uprobe(path, "no_such_function", args=args())
        assert "no_such_function" in str(e.value) and str(path) in str(e.value)
    assert our_probes() == []


def test_a_kprobe_with_arguments_reads_this_threads_opens() -> None:
    """A kprobe with arguments on the kernel's open fetches the user's path
    (its second argument: a kprobe at a function's entry knows them as
    $argN) of exactly the files this thread opens, in order. Without
    kprobe_events, a clear error, and the success path is listed as not run
    on this kernel."""
    fn, args = "do_sys_openat2", "path=+0($arg2):ustring"
    with EventSet(pids=[threading.get_native_id()]) as s:
        if not Path("/sys/kernel/tracing/kprobe_events").exists():
            with pytest.raises(FileNotFoundError) as e:
                s.add_kprobe(fn, args=args)
            assert "kprobe_events" in str(e.value) and fn in str(e.value)
            kernel_lacks("its success path, this thread's opens: the kernel has no kprobe_events")
            return
        ev = s.add_kprobe(fn, args=args)
        paths: list[object] = []
        names = [f"/tmp/perfbuf-kprobe-args-{os.getpid()}-{i}" for i in range(5)]
        with s.reader(lambda smp: paths.append(smp.field("path")) if smp.event == ev else None) as r:
            s.enable(ev)
            for name in names:
                try:  # missing: the kernel's open is entered all the same
                    os.close(os.open(name, os.O_RDONLY))
                except FileNotFoundError:
                    pass
            s.disable(ev)
            r.consume()
        assert paths == names


def test_filter_changes_and_events_added_enabled(target: tuple[Path, ctypes.CDLL]) -> None:
    path, lib = target

    def seen(filter_: str, change: object, enabled: bool) -> list[int]:
        got: list[int] = []
        with EventSet(pids=[os.getpid()]) as s:
            ev = s.add_uprobe(path, "perfbuf_py_args", args=args(), filter=filter_, enabled=enabled)
            if change != "-":
                s.set_filter(ev, change)  # type: ignore[arg-type]
            with s.reader(lambda smp: got.append(smp.field("n"))) as r:
                if not enabled:
                    s.enable(ev)
                item = Item(count=1)
                for i in range(10):
                    lib.perfbuf_py_args(i, b"x", ctypes.byref(item))
                r.consume()
        return got
    assert seen("n >= 7", "-", True) == [7, 8, 9]
    assert seen("n >= 7", "n < 2", False) == [0, 1]
    assert seen("n >= 7", None, False) == list(range(10))
    with EventSet() as s:
        ev = s.add_uprobe(path, "perfbuf_py_args", args=args())
        with pytest.raises(OSError) as e:
            s.set_filter(ev, "no_such_field == 1")
        assert e.value.errno == 22 and "no_such_field" in str(e.value)
