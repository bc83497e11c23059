"""Finds and loads libperfbuf, and declares the C functions used.

ctypes, not cffi: nothing to compile at install time, and the C ABI is
small and stable. Only the ``perfbuf_*`` names are declared, never libbpf's
``perf_buffer__*``: those exist in libbpf too, and a process that loaded
both (a BPF loader through libbpf, say) could get libbpf's definitions for
them, depending on load order. The ``perfbuf_*`` names exist only in
libperfbuf.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from pathlib import Path

c_int, c_void_p, c_size_t, c_uint32, c_uint64 = (
    ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64)

# typedef void (*perf_buffer_sample_fn)(void *ctx, int cpu, void *data, __u32 size);
SAMPLE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_uint32)
# typedef void (*perf_buffer_lost_fn)(void *ctx, int cpu, __u64 cnt);
LOST_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_uint64)
# typedef void (*perfbuf_print_fn)(int level, const char *msg, void *ctx);
PRINT_FN = ctypes.CFUNCTYPE(None, c_int, ctypes.c_char_p, c_void_p)

PERFBUF_F_OVERWRITE = 1
PERFBUF_F_ADAPTIVE = 2
PERFBUF_WARN, PERFBUF_INFO, PERFBUF_DEBUG = 0, 1, 2


class Opts(ctypes.Structure):
    """struct perfbuf_opts."""

    _fields_ = [
        ("sz", c_size_t), ("wakeup_events", c_uint32), ("wakeup_bytes", c_uint32), ("max_delay_ms", c_uint32),
        ("flags", c_uint32), ("cpus", ctypes.POINTER(c_int)), ("cpu_cnt", c_int),
    ]


class RingStats(ctypes.Structure):
    """struct perfbuf_ring_stats (every field, in order)."""

    _fields_ = [
        ("sz", c_size_t), ("cpu", c_int), ("reserved", c_int), ("records", c_uint64), ("bytes", c_uint64),
        ("lost", c_uint64), ("wakeups", c_uint64), ("pending_bytes", c_uint64), ("data_size", c_uint64),
        ("resyncs", c_uint64), ("skipped_bytes", c_uint64), ("malformed", c_uint64),
        ("overwritten_bytes", c_uint64), ("batched", c_uint64), ("batch_switches", c_uint64),
        ("spill_size", c_uint64),
    ]


def _candidates() -> list[tuple[str, str]]:
    """(how it was found, path or name) in the order we try them."""
    out = []
    here = Path(__file__).resolve().parent
    for name in ("libperfbuf.so.0", "libperfbuf.so"):
        if (here / name).exists():
            out.append(("next to the package", str(here / name)))
    env = os.environ.get("PERFBUF_LIBRARY")
    if env:
        out.append(("PERFBUF_LIBRARY", env))
    found = ctypes.util.find_library("perfbuf")
    out.append(("the loader path", found or "libperfbuf.so.0"))
    return out


def load() -> ctypes.CDLL:
    """Loads libperfbuf or raises OSError naming every place tried."""
    tried = []
    for how, path in _candidates():
        try:
            lib = ctypes.CDLL(path, use_errno=True)
        except OSError as e:
            tried.append(f"  {how}: {path}: {e}")
            continue
        if not hasattr(lib, "perfbuf_version"):
            tried.append(f"  {how}: {path}: not libperfbuf (no perfbuf_version)")
            continue
        missing = [name for name in SIGNATURES if not hasattr(lib, name)]
        if missing:
            tried.append(f"  {how}: {path}: too old a libperfbuf (lacks {', '.join(missing)})")
            continue
        _declare(lib)
        return lib
    if not os.environ.get("PERFBUF_LIBRARY"):
        tried.append("  PERFBUF_LIBRARY: not set")
    raise OSError("cannot load libperfbuf; tried:\n" + "\n".join(tried))


SIGNATURES = {
    "perfbuf_new": (c_void_p, [c_int, c_size_t, SAMPLE_FN, LOST_FN, c_void_p, ctypes.POINTER(Opts)]),
    "perfbuf_free": (None, [c_void_p]),
    "perfbuf_epoll_fd": (c_int, [c_void_p]),
    "perfbuf_poll": (c_int, [c_void_p, c_int]),
    "perfbuf_consume": (c_int, [c_void_p]),
    "perfbuf_consume_buffer": (c_int, [c_void_p, c_size_t]),
    "perfbuf_buffer_cnt": (c_size_t, [c_void_p]),
    "perfbuf_buffer_fd": (c_int, [c_void_p, c_size_t]),
    "perfbuf_buffer": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t)]),
    "perfbuf_version": (ctypes.c_char_p, []),
    "perfbuf_last_error": (ctypes.c_char_p, []),
    "perfbuf_set_print": (c_void_p, [c_void_p, c_void_p]),
    "perfbuf_wake": (c_int, [c_void_p]),
    "perfbuf_pause": (c_int, [c_void_p]),
    "perfbuf_resume": (c_int, [c_void_p]),
    "perfbuf_buffer_cpu": (c_int, [c_void_p, c_size_t]),
    "perfbuf_ring_stats": (c_int, [c_void_p, c_size_t, ctypes.POINTER(RingStats)]),
}


def _declare(lib: ctypes.CDLL) -> None:
    for name, (res, args) in SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


# ---- the bpf(2) system call, for BPF_OBJ_GET --------------------------------------

_SYS_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "loongarch64": 280, "ppc64le": 361, "ppc64": 361,
            "s390x": 351, "i686": 357, "i386": 357, "armv7l": 386, "armv6l": 386}
BPF_OBJ_GET = 7

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def bpf_obj_get(path: str) -> int:
    """Opens the BPF object pinned at ``path`` (BPF_OBJ_GET); returns its fd
    (close-on-exec, as the kernel makes it) or raises OSError."""
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise OSError(38, f"bpf(2) syscall number unknown for {platform.machine()}")  # ENOSYS
    name = ctypes.create_string_buffer(os.fsencode(path))
    # union bpf_attr for BPF_OBJ_GET: __aligned_u64 pathname; __u32 bpf_fd; __u32 file_flags.
    attr = (c_uint64 * 2)(ctypes.addressof(name), 0)
    fd = _libc.syscall(nr, BPF_OBJ_GET, ctypes.byref(attr), ctypes.sizeof(attr))
    if fd < 0:
        err = ctypes.get_errno()
        hint = {
            2: "nothing is pinned there: is a bpffs mounted (mount -t bpf bpf /sys/fs/bpf) and the map pinned "
               "(bpftool map pin ...)?",
            1: "opening pinned objects needs root or CAP_BPF",
            13: "opening pinned objects needs root or CAP_BPF, and access to the path",
            22: "the path is not on a bpffs (mount -t bpf bpf /sys/fs/bpf)",
        }.get(err)
        msg = f"cannot open the BPF object pinned at {path!r}: {os.strerror(err)}"
        raise OSError(err, msg + (f"; {hint}" if hint else ""))
    return int(fd)
