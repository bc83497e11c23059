"""Finds and loads libperfbuf, and declares the C functions used.

ctypes, not cffi: nothing to compile at install time, and the C ABI is
small and stable (libbpf's ten functions plus a few perfbuf_* ones).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

c_int, c_void_p, c_size_t, c_uint32, c_uint64 = (
    ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64)

# typedef enum bpf_perf_event_ret (*perf_buffer_event_fn)(void *ctx, int cpu, struct perf_event_header *event);
EVENT_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int, c_void_p)


class RingStats(ctypes.Structure):
    """struct perfbuf_ring_stats."""

    _fields_ = [
        ("sz", c_size_t), ("cpu", c_int), ("reserved", c_int), ("records", c_uint64), ("bytes", c_uint64),
        ("lost", c_uint64), ("wakeups", c_uint64), ("pending_bytes", c_uint64), ("data_size", c_uint64),
        ("resyncs", c_uint64), ("skipped_bytes", c_uint64), ("malformed", c_uint64),
        ("overwritten_bytes", c_uint64), ("batched", c_uint64), ("batch_switches", c_uint64),
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
        _declare(lib)
        return lib
    if not os.environ.get("PERFBUF_LIBRARY"):
        tried.append("  PERFBUF_LIBRARY: not set")
    raise OSError("cannot load libperfbuf; tried:\n" + "\n".join(tried))


def _declare(lib: ctypes.CDLL) -> None:
    sig = {
        "perf_buffer__new_raw": (c_void_p, [c_int, c_size_t, c_void_p, EVENT_FN, c_void_p, c_void_p]),
        "perf_buffer__free": (None, [c_void_p]),
        "perf_buffer__epoll_fd": (c_int, [c_void_p]),
        "perf_buffer__poll": (c_int, [c_void_p, c_int]),
        "perf_buffer__consume": (c_int, [c_void_p]),
        "perf_buffer__consume_buffer": (c_int, [c_void_p, c_size_t]),
        "perf_buffer__buffer_cnt": (c_size_t, [c_void_p]),
        "perf_buffer__buffer_fd": (c_int, [c_void_p, c_size_t]),
        "perf_buffer__buffer": (c_int, [c_void_p, c_int, ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t)]),
        "perfbuf_version": (ctypes.c_char_p, []),
        "perfbuf_wake": (c_int, [c_void_p]),
        "perfbuf_pause": (c_int, [c_void_p]),
        "perfbuf_resume": (c_int, [c_void_p]),
        "perfbuf_buffer_cpu": (c_int, [c_void_p, c_size_t]),
        "perfbuf_ring_stats": (c_int, [c_void_p, c_size_t, ctypes.POINTER(RingStats)]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args
