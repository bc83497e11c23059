"""What the Python blocks of the READMEs take from their surroundings (make
docs-test): a BPF map that receives records (the test producer), a BPF
program to attach (build/profile.bpf.o), a flag set once records came.
Imported by the preludes scripts/docs-test.py puts before those blocks."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import threading
import time


class _Producer(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_int), ("det_prog_fd", ctypes.c_int), ("stamp_prog_fd", ctypes.c_int)]


class Producer:
    """The C tests' BPF producer (c-tests/producer.c, built as
    build/libperfbuf_producer.so): a PERF_EVENT_ARRAY and a program that
    sends records into it on a chosen CPU."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(os.environ["PERFBUF_PRODUCER_LIBRARY"], use_errno=True)
        self.p = _Producer()
        err = self.lib.producer_open(ctypes.byref(self.p), 0)
        if err:
            raise OSError(-err, "cannot create the BPF producer (root with BPF?)")
        self.map_fd = self.p.map_fd

    def emit(self, n: int = 5, cpu: int = 0, size: int = 16) -> None:
        """n records of `size` bytes on `cpu`."""
        ret = ctypes.c_int(0)
        err = self.lib.producer_emit_det(ctypes.byref(self.p), cpu, size, 1, n, ctypes.byref(ret))
        if err or ret.value:
            raise OSError(-(err or ret.value), "producer_emit_det")


class RingProducer:
    """The same producer writing into a BPF_MAP_TYPE_RINGBUF
    (producer_open_ringbuf) with bpf_ringbuf_output."""

    def __init__(self, size: int = 16384) -> None:
        self.lib = ctypes.CDLL(os.environ["PERFBUF_PRODUCER_LIBRARY"], use_errno=True)
        self.p = (ctypes.c_int * 5)()
        err = self.lib.producer_open_ringbuf(self.p, size)
        if err:
            raise OSError(-err, "cannot create the BPF ring buffer producer (root with BPF?)")
        self.map_fd = self.p[0]

    def emit(self, n: int = 5, size: int = 16) -> None:
        """n records of `size` bytes."""
        ret = ctypes.c_int(0)
        err = self.lib.producer_emit_ringbuf(self.p, 0, size, 1, n, ctypes.byref(ret))
        if err or ret.value:
            raise OSError(-(err or ret.value), "producer_emit_ringbuf")


def later(seconds: float, *actions) -> threading.Thread:
    """Runs each action after `seconds`, in a thread (records to read,
    execs to see, a flag to set once they are in)."""
    def run() -> None:
        for action in actions:
            time.sleep(seconds)
            action()
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def exec_true() -> None:
    subprocess.run(["/bin/true"], check=True)


def bpf_program(path: str, name: str) -> int:
    """The fd of program `name` of the BPF object at `path`, loaded with
    libbpf (kept loaded for the process's life)."""
    lib = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
    p = ctypes.c_void_p
    lib.bpf_object__open_file.restype, lib.bpf_object__open_file.argtypes = p, [ctypes.c_char_p, p]
    lib.bpf_object__load.argtypes = [p]
    lib.bpf_object__find_program_by_name.restype = p
    lib.bpf_object__find_program_by_name.argtypes = [p, ctypes.c_char_p]
    lib.bpf_program__fd.argtypes = [p]
    obj = lib.bpf_object__open_file(path.encode(), None)
    if not obj or lib.bpf_object__load(obj):
        raise OSError(ctypes.get_errno(), f"cannot load {path}")
    return int(lib.bpf_program__fd(lib.bpf_object__find_program_by_name(obj, name.encode())))


def pin(fd: int, path: str) -> None:
    """Pins the BPF object `fd` at `path` (BPF_OBJ_PIN) on a bpffs."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    name = ctypes.create_string_buffer(path.encode())
    attr = (ctypes.c_uint64 * 2)(ctypes.addressof(name), fd)
    sys_bpf = {"x86_64": 321, "aarch64": 280}[os.uname().machine]
    if libc.syscall(sys_bpf, 6, attr, ctypes.sizeof(attr)) != 0:  # BPF_OBJ_PIN
        raise OSError(ctypes.get_errno(), f"cannot pin at {path}")
