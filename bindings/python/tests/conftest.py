"""The real kernel: a PERF_EVENT_ARRAY map and a BPF program producing events
(c-tests/producer.c, built as build/libperfbuf_producer.so by make), and
helpers: the bpf(2) system call, child Python processes."""
from __future__ import annotations

import ctypes
import os
import platform
import struct
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple, Optional

import pytest

TESTS = Path(__file__).resolve().parent
TOP = TESTS.parents[2]


class _Producer(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_int), ("det_prog_fd", ctypes.c_int), ("stamp_prog_fd", ctypes.c_int)]


class Producer:
    """Emits deterministic samples from a BPF program on a chosen CPU."""

    def __init__(self, lib: ctypes.CDLL, max_entries: int = 0) -> None:
        self.lib = lib
        self.p = _Producer()
        err = lib.producer_open(ctypes.byref(self.p), max_entries)
        if err:
            msg = f"cannot create the BPF producer: {os.strerror(-err)} (need root with BPF)"
            if os.environ.get("CI") == "true":
                pytest.fail(msg)  # under CI a missing capability fails, never skips
            pytest.skip(msg)

    @property
    def map_fd(self) -> int:
        return self.p.map_fd

    def emit(self, cpu: int, n: int, seed: int, repeat: int = 1) -> int:
        """Emits `repeat` samples of n bytes; returns the helper's last result."""
        ret = ctypes.c_int(0)
        err = self.lib.producer_emit_det(ctypes.byref(self.p), cpu, n, seed & 0xFF, repeat, ctypes.byref(ret))
        assert err == 0, os.strerror(-err)
        return ret.value

    def expected(self, n: int, seed: int) -> bytes:
        buf = (ctypes.c_ubyte * n)()
        self.lib.producer_expected(n, seed & 0xFF, buf)
        return bytes(buf)

    def close(self) -> None:
        self.lib.producer_close(ctypes.byref(self.p))


@pytest.fixture(scope="session")
def producer_lib() -> ctypes.CDLL:
    path = os.environ.get("PERFBUF_PRODUCER_LIBRARY")
    if not path:
        pytest.fail("PERFBUF_PRODUCER_LIBRARY is not set (make producer-lib builds it)")
    return ctypes.CDLL(path, use_errno=True)


@pytest.fixture
def producer(producer_lib: ctypes.CDLL):
    p = Producer(producer_lib)
    yield p
    p.close()


def kernel_lacks(msg: str) -> None:
    """The success path needs a kernel option this kernel lacks (no
    CONFIG_KPROBES here): the caller checked the clear error instead, so
    the test passes, and make test lists the path as not run on this
    kernel (written past pytest's capture)."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    sys.__stderr__.write(f"\nnot-on-this-kernel: {test}: {msg}\n")
    sys.__stderr__.flush()


def need_root(msg: str) -> None:
    """Skips (fails under CI=true) a test the machine cannot run."""
    if os.environ.get("CI") == "true":
        pytest.fail(msg)
    pytest.skip(msg)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_SYS_BPF = {"x86_64": 321, "aarch64": 280}[platform.machine()]
BPF_MAP_CREATE, BPF_OBJ_PIN = 0, 6
BPF_MAP_TYPE_HASH = 1


def bpf(cmd: int, attr: bytes) -> int:
    """bpf(cmd, attr): the result, or OSError."""
    buf = ctypes.create_string_buffer(attr, max(len(attr), 128))
    ret = _libc.syscall(_SYS_BPF, cmd, buf, len(buf))
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(ret)


def create_map(map_type: int, key_size: int = 4, value_size: int = 4, max_entries: int = 4) -> int:
    return bpf(BPF_MAP_CREATE, struct.pack("<IIII", map_type, key_size, value_size, max_entries))


def pin(fd: int, path: str) -> None:
    name = ctypes.create_string_buffer(os.fsencode(path))
    bpf(BPF_OBJ_PIN, struct.pack("<QI", ctypes.addressof(name), fd))


def run_python(code: str, pass_fds: tuple[int, ...] = (), env: Optional[dict[str, str]] = None,
               timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a child interpreter (this venv, the tests' directory
    on sys.path): a crash there is a failed test, not a dead pytest."""
    full_env = dict(os.environ, PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-c", code], pass_fds=pass_fds, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


class OffsetTarget(NamedTuple):
    """perfbuf_offset_target (c-tests/offset_target.h) in a library built
    here: a function whose instruction `inside` bytes in is known."""
    path: Path
    lib: ctypes.CDLL
    symbol: str
    entry: int  # its address in this process
    file_offset: int  # of its entry, in the library's file
    inside: int
    size: int
    arg: str  # its argument, as a probe fetches it


OFFSET_TARGET_C = """
#include <stddef.h>
#include "offset_target.h"
size_t perfbuf_offset_target_size(void) { return OFFSET_TARGET_SIZE; }
const char *perfbuf_offset_target_arg(void) { return OFFSET_TARGET_ARG; }
int perfbuf_offset_target_inside(void) { return OFFSET_INSIDE; }
"""


def file_offset_of(address: int, path: Path) -> int:
    """The offset in `path`'s file of `address`, from the mapping of it that holds it."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and Path(fields[5]) == path.resolve():
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return address - start + int(fields[2], 16)
    raise AssertionError(f"{address:#x} is in no mapping of {path}")


@pytest.fixture(scope="session")
def offset_target(tmp_path_factory: pytest.TempPathFactory) -> OffsetTarget:
    compiler = os.environ.get("CC", "cc")
    out = tmp_path_factory.mktemp("offset")
    (out / "t.c").write_text(OFFSET_TARGET_C)
    path = out / "libperfbuf_py_offset.so"
    subprocess.run([compiler, "-O1", "-shared", "-fPIC", "-I", str(TOP / "c-tests"), "-o", str(path),
                    str(out / "t.c")], check=True)
    lib = ctypes.CDLL(str(path))
    lib.perfbuf_offset_target.argtypes = [ctypes.c_uint64]
    lib.perfbuf_offset_target.restype = ctypes.c_uint64
    lib.perfbuf_offset_target_size.restype = ctypes.c_size_t
    lib.perfbuf_offset_target_arg.restype = ctypes.c_char_p
    entry = ctypes.cast(lib.perfbuf_offset_target, ctypes.c_void_p).value or 0
    return OffsetTarget(path, lib, "perfbuf_offset_target", entry, file_offset_of(entry, path),
                        lib.perfbuf_offset_target_inside(), lib.perfbuf_offset_target_size(),
                        lib.perfbuf_offset_target_arg().decode())
