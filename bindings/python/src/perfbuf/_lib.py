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

from ._sideband import Sideband as _Sideband

c_int, c_void_p, c_size_t, c_uint32, c_uint64 = (
    ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint64)

# typedef void (*perf_buffer_sample_fn)(void *ctx, int cpu, void *data, __u32 size);
SAMPLE_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_void_p, c_uint32)
# typedef void (*perf_buffer_lost_fn)(void *ctx, int cpu, __u64 cnt);
LOST_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int, c_uint64)
# typedef int (*ring_buffer_sample_fn)(void *ctx, void *data, size_t size);
RB_SAMPLE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t)
# typedef void (*perfbuf_print_fn)(int level, const char *msg, void *ctx);
PRINT_FN = ctypes.CFUNCTYPE(None, c_int, ctypes.c_char_p, c_void_p)

PERFBUF_F_OVERWRITE = 1
PERFBUF_F_ADAPTIVE = 2
PERFBUF_F_COUNT_LOST = 4
PERFBUF_F_NO_HOTPLUG = 8
PERFBUF_WARN, PERFBUF_INFO, PERFBUF_DEBUG = 0, 1, 2


class Opts(ctypes.Structure):
    """struct perfbuf_opts."""

    _fields_ = [
        ("sz", c_size_t), ("wakeup_events", c_uint32), ("wakeup_bytes", c_uint32), ("max_delay_ms", c_uint32),
        ("flags", c_uint32), ("cpus", ctypes.POINTER(c_int)), ("cpu_cnt", c_int), ("reserved", c_int),
        ("output_counts_fd", c_int), ("reserved2", c_int),
    ]


class RingStats(ctypes.Structure):
    """struct perfbuf_ring_stats (every field, in order)."""

    _fields_ = [
        ("sz", c_size_t), ("cpu", c_int), ("reserved", c_int), ("records", c_uint64), ("bytes", c_uint64),
        ("lost", c_uint64), ("wakeups", c_uint64), ("pending_bytes", c_uint64), ("data_size", c_uint64),
        ("resyncs", c_uint64), ("skipped_bytes", c_uint64), ("malformed", c_uint64),
        ("overwritten_bytes", c_uint64), ("batched", c_uint64), ("batch_switches", c_uint64),
        ("spill_size", c_uint64), ("lost_unreported", c_uint64), ("produced", c_uint64),
        ("produced_known", c_uint64), ("samples", c_uint64), ("delivered", c_uint64), ("output_failed", c_uint64),
        ("dropped", c_uint64), ("lost_total", c_uint64),
    ]


class ReadBatch(ctypes.Structure):
    """struct perfbuf_read_batch (the caller's buffers of a batch read)."""

    _fields_ = [
        ("sz", c_size_t), ("data", c_void_p), ("data_size", c_size_t), ("entries", c_void_p),
        ("entry_cnt", c_size_t), ("data_used", c_size_t), ("needed", c_size_t),
    ]


class RingHealth(ctypes.Structure):
    """struct perfbuf_ring_health (every field, in order)."""

    _fields_ = [
        ("sz", c_size_t), ("cpu", c_int), ("online", c_int), ("pending_bytes", c_uint64),
        ("peak_pending_bytes", c_uint64), ("data_size", c_uint64), ("records_per_sec", ctypes.c_double),
        ("bytes_per_sec", ctypes.c_double), ("wakeups_per_sec", ctypes.c_double),
        ("ns_since_last_record", ctypes.c_int64), ("needed_bytes", c_uint64), ("suggested_pages", c_uint64),
        ("replaced", c_uint64),
    ]


# ---- event sets -----------------------------------------------------------------------

# typedef enum bpf_perf_event_ret (*perf_buffer_event_fn)(void *ctx, int cpu, struct perf_event_header *event);
EVENT_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_int, c_void_p)
LIBBPF_PERF_EVENT_CONT = -2

PERFBUF_ORDER_SAMPLE_TIME = 1
PERFBUF_EVENTS_NO_RINGS, PERFBUF_EVENTS_INHERIT = 1, 2
(PERFBUF_EVENT_SOFTWARE, PERFBUF_EVENT_HARDWARE, PERFBUF_EVENT_TRACEPOINT, PERFBUF_EVENT_KPROBE,
 PERFBUF_EVENT_UPROBE, PERFBUF_EVENT_RAW) = range(1, 7)
PERFBUF_EVENT_F_RETPROBE, PERFBUF_EVENT_F_FALLBACK, PERFBUF_EVENT_F_FREQ = 1, 2, 4
PERFBUF_EVENT_F_GROUP_LEADER, PERFBUF_EVENT_F_MEMBER, PERFBUF_EVENT_F_ENABLED = 8, 16, 32
PERFBUF_FIELD_INT, PERFBUF_FIELD_UINT, PERFBUF_FIELD_STR, PERFBUF_FIELD_BYTES = 1, 2, 3, 4

_u16, _i64, _char_p = ctypes.c_uint16, ctypes.c_int64, ctypes.c_char_p
_u64_p = ctypes.POINTER(c_uint64)


class EventsOpts(ctypes.Structure):
    """struct perfbuf_events_opts."""

    _fields_ = [
        ("sz", c_size_t), ("cpus", ctypes.POINTER(c_int)), ("cpu_cnt", c_int), ("pid_cnt", c_int),
        ("pids", ctypes.POINTER(c_int)), ("cgroups", ctypes.POINTER(_char_p)), ("cgroup_cnt", c_int),
        ("wakeup_events", c_uint32), ("page_cnt", c_size_t), ("wakeup_bytes", c_uint32),
        ("max_delay_ms", c_uint32), ("flags", c_uint32), ("reserved", c_uint32), ("default_attr", c_void_p),
    ]


class EventDesc(ctypes.Structure):
    """struct perfbuf_event_desc."""

    _fields_ = [
        ("sz", c_size_t), ("kind", c_uint32), ("flags", c_uint32), ("config", c_uint64),
        ("fallback_config", c_uint64), ("name", _char_p), ("symbol", _char_p), ("offset", c_uint64),
        ("ref_ctr_offset", c_uint64), ("period", c_uint64), ("sample_type", c_uint64), ("filter", _char_p),
        ("attr", c_void_p), ("leader", c_int), ("reserved", c_int), ("args", _char_p),
    ]


class EventInfo(ctypes.Structure):
    """struct perfbuf_event_info."""

    _fields_ = [
        ("sz", c_size_t), ("kind", c_uint32), ("attr_type", c_uint32), ("config", c_uint64),
        ("fallback_errno", c_int), ("instances", c_uint32), ("sample_type", c_uint64), ("cpu_cnt", c_uint32),
        ("enabled", c_uint32), ("bpf_attached", c_uint32), ("reserved", c_uint32),
        ("other_bpf_progs", c_uint32), ("other_bpf_prog_id", c_uint32),
    ]


class BpfProg(ctypes.Structure):
    """struct perfbuf_bpf_prog."""

    _fields_ = [("id", c_uint32), ("ours", c_uint32), ("name", ctypes.c_char * 16)]


class Counts(ctypes.Structure):
    """struct perfbuf_counts."""

    _fields_ = [("sz", c_size_t), ("time_enabled", c_uint64), ("time_running", c_uint64)]


class Count(ctypes.Structure):
    """struct perfbuf_count."""

    _fields_ = [("event", c_int), ("reserved", c_int), ("value", c_uint64)]


class Field(ctypes.Structure):
    """struct perfbuf_field."""

    _fields_ = [
        ("sz", c_size_t), ("kind", c_uint32), ("reserved", c_uint32), ("i", _i64), ("u", c_uint64),
        ("data", c_void_p), ("len", c_size_t),
    ]


class OrderOpts(ctypes.Structure):
    """struct perfbuf_order_opts."""

    _fields_ = [
        ("sz", c_size_t), ("key_fn", c_void_p), ("key_ctx", c_void_p), ("flags", c_uint32),
        ("idle_wait_ms", c_uint32),
    ]


class DecodeAttr(ctypes.Structure):
    """struct perfbuf_decode_attr."""

    _fields_ = [
        ("sz", c_size_t), ("sample_type", c_uint64), ("read_format", c_uint64), ("sample_regs_user", c_uint64),
        ("sample_regs_intr", c_uint64), ("branch_sample_type", c_uint64), ("sample_id_all", c_uint32),
        ("reserved", c_uint32),
    ]


class Sample(ctypes.Structure):
    """struct perfbuf_sample (every field, in order)."""

    _fields_ = [
        ("sz", c_size_t), ("record_type", c_uint32), ("misc", _u16), ("size", _u16), ("present", c_uint64),
        ("flags", c_uint32), ("reserved", c_uint32), ("identifier", c_uint64), ("ip", c_uint64),
        ("pid", c_uint32), ("tid", c_uint32), ("time", c_uint64), ("addr", c_uint64), ("id", c_uint64),
        ("stream_id", c_uint64), ("cpu", c_uint32), ("cpu_res", c_uint32), ("period", c_uint64),
        ("read_time_enabled", c_uint64), ("read_time_running", c_uint64), ("read_value", c_uint64),
        ("read_id", c_uint64), ("read_lost", c_uint64), ("read_nr", c_uint64), ("read_group", _u64_p),
        ("read_stride", c_uint64), ("callchain", _u64_p), ("callchain_nr", c_uint64), ("raw", c_void_p),
        ("raw_size", c_uint64), ("branch_nr", c_uint64), ("branch_hw_idx", c_uint64),
        ("branch_entries", _u64_p), ("branch_counters", _u64_p), ("regs_user_abi", c_uint64),
        ("regs_user", _u64_p), ("regs_user_nr", c_uint64), ("stack_user", c_void_p),
        ("stack_user_size", c_uint64), ("stack_user_dyn_size", c_uint64), ("weight", c_uint64),
        ("weight_var1_dw", c_uint32), ("weight_var2_w", _u16), ("weight_var3_w", _u16), ("data_src", c_uint64),
        ("transaction", c_uint64), ("regs_intr_abi", c_uint64), ("regs_intr", _u64_p),
        ("regs_intr_nr", c_uint64), ("phys_addr", c_uint64), ("cgroup", c_uint64), ("data_page_size", c_uint64),
        ("code_page_size", c_uint64), ("aux", c_void_p), ("aux_size", c_uint64), ("lost_id", c_uint64),
        ("lost", c_uint64), ("throttle_time", c_uint64), ("throttle_id", c_uint64),
        ("throttle_stream_id", c_uint64),
    ]


class EventRecord(ctypes.Structure):
    """struct perfbuf_event_record: one record of an event set's rings,
    decoded by the library (perfbuf_events_decoded_reader)."""

    _fields_ = [
        ("sz", c_size_t), ("kind", c_uint32), ("event", ctypes.c_int32), ("cpu", c_uint32), ("error", ctypes.c_int32),
        ("record_type", c_uint32), ("misc", _u16), ("size", _u16), ("lost", c_uint64), ("record", c_void_p),
        ("sample", c_void_p), ("sideband", c_void_p),
    ]


# typedef int (*perfbuf_event_record_fn)(void *ctx, const struct perfbuf_event_record *rec);
RECORD_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p)
(PERFBUF_EVENT_RECORD_SAMPLE, PERFBUF_EVENT_RECORD_LOST, PERFBUF_EVENT_RECORD_SIDEBAND,
 PERFBUF_EVENT_RECORD_OTHER) = range(1, 5)


# The structs of include/perfbuf.h mirrored here, by their C names (tests compare the layouts).
C_STRUCTS = {
    "perfbuf_opts": Opts, "perfbuf_ring_stats": RingStats, "perfbuf_ring_health": RingHealth,
    "perfbuf_events_opts": EventsOpts, "perfbuf_event_desc": EventDesc, "perfbuf_event_info": EventInfo,
    "perfbuf_bpf_prog": BpfProg, "perfbuf_counts": Counts,
    "perfbuf_count": Count, "perfbuf_field": Field, "perfbuf_order_opts": OrderOpts,
    "perfbuf_decode_attr": DecodeAttr, "perfbuf_sample": Sample, "perfbuf_sideband": _Sideband,
    "perfbuf_event_record": EventRecord,
}


BUNDLED = "libperfbuf.so.0"  # the wheel's own copy, next to this file (setup.py puts it there)


def _candidates() -> list[tuple[str, str]]:
    """(how it was found, path or name) in the order we try them:
    ``PERFBUF_LIBRARY`` alone when set (an override that fails must not
    fall back silently), else the package's own copy, then the loader path."""
    env = os.environ.get("PERFBUF_LIBRARY")
    if env:
        return [("PERFBUF_LIBRARY", env)]
    out = []
    bundled = Path(__file__).resolve().parent / BUNDLED
    if bundled.exists():
        out.append(("the package's own copy", str(bundled)))
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
        if not (Path(__file__).resolve().parent / BUNDLED).exists():
            tried.append(f"  the package's own copy: no {BUNDLED} here (pip install ./bindings/python builds one)")
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
    "perfbuf_ring_peek": (c_int, [c_void_p, c_size_t, ctypes.POINTER(c_void_p), ctypes.POINTER(c_size_t)]),
    "perfbuf_ring_advance": (c_int, [c_void_p, c_size_t]),
    "perfbuf_ring_publish": (c_int, [c_void_p, c_size_t]),
}

# Event sets and ordered reading: declared when the library has them (an
# older libperfbuf still loads; EventSet then says what is missing).
OPTIONAL_SIGNATURES = {
    "perfbuf_set_order": (c_int, [c_void_p, ctypes.POINTER(OrderOpts)]),
    "perfbuf_ordered_flush": (c_int, [c_void_p]),
    "perfbuf_events_new": (c_void_p, [ctypes.POINTER(EventsOpts)]),
    "perfbuf_events_free": (None, [c_void_p]),
    "perfbuf_events_add": (c_int, [c_void_p, ctypes.POINTER(EventDesc)]),
    "perfbuf_events_remove": (c_int, [c_void_p, c_int]),
    "perfbuf_events_set_filter": (c_int, [c_void_p, c_int, _char_p]),
    "perfbuf_events_enable": (c_int, [c_void_p, c_int]),
    "perfbuf_events_disable": (c_int, [c_void_p, c_int]),
    "perfbuf_events_attach_bpf": (c_int, [c_void_p, c_int, c_int]),
    "perfbuf_events_info": (c_int, [c_void_p, c_int, ctypes.POINTER(EventInfo)]),
    "perfbuf_events_bpf_progs": (c_int, [c_void_p, c_int, ctypes.POINTER(BpfProg), c_size_t]),
    "perfbuf_events_fd": (c_int, [c_void_p, c_int, c_size_t]),
    "perfbuf_events_cpus": (c_int, [c_void_p, c_int, ctypes.POINTER(c_int), c_size_t]),
    "perfbuf_events_read": (c_int, [c_void_p, c_int, c_int, ctypes.POINTER(Counts), ctypes.POINTER(Count),
                                    c_size_t]),
    "perfbuf_events_reader": (c_void_p, [c_void_p, EVENT_FN, c_void_p]),
    "perfbuf_events_decoded_reader": (c_void_p, [c_void_p, RECORD_FN, c_void_p]),
    "perfbuf_events_decode_record": (c_int, [c_void_p, c_uint32, c_void_p, c_size_t, RECORD_FN, c_void_p]),
    "perfbuf_events_decode": (c_int, [c_void_p, c_void_p, c_size_t, ctypes.POINTER(Sample)]),
    "perfbuf_events_decode_attr": (c_int, [c_void_p, c_int, ctypes.POINTER(DecodeAttr)]),
    "perfbuf_events_field": (c_int, [c_void_p, c_int, c_void_p, c_size_t, _char_p, ctypes.POINTER(Field)]),
    "perfbuf_events_field_name": (c_int, [c_void_p, c_int, c_size_t, ctypes.c_char_p, c_size_t]),
    "perfbuf_perfdata_new_events": (c_void_p, [ctypes.c_char_p, c_void_p]),
    "perfbuf_perfdata_new_bpf_output": (c_void_p, [ctypes.c_char_p]),
    "perfbuf_perfdata_poll": (c_int, [c_void_p, c_void_p, c_int]),
    "perfbuf_perfdata_drain": (c_int, [c_void_p, c_void_p]),
    "perfbuf_perfdata_close": (c_int, [c_void_p]),
}


# Later additions, each declared when the library has it (an event set works
# without them); the methods that need one say so.
LATER_SIGNATURES = {
    "perfbuf_drain_final": (c_int, [c_void_p, ctypes.POINTER(c_uint64)]),
    "perfbuf_ring_health": (c_int, [c_void_p, c_size_t, ctypes.POINTER(RingHealth)]),
    "perfbuf_count_dropped": (c_int, [c_void_p, c_size_t, c_uint64]),
    "perfbuf_read_batch": (c_int, [c_void_p, ctypes.POINTER(ReadBatch)]),
    "perfbuf_poll_batch": (c_int, [c_void_p, ctypes.POINTER(ReadBatch), c_int]),
    # The ring buffer (BPF_MAP_TYPE_RINGBUF), libbpf's names: looked up in
    # libperfbuf's own handle, so libbpf's definitions are never the ones called.
    "ring_buffer__new": (c_void_p, [c_int, RB_SAMPLE_FN, c_void_p, c_void_p]),
    "ring_buffer__add": (c_int, [c_void_p, c_int, RB_SAMPLE_FN, c_void_p]),
    "ring_buffer__free": (None, [c_void_p]),
    "ring_buffer__poll": (c_int, [c_void_p, c_int]),
    "ring_buffer__consume": (c_int, [c_void_p]),
    "ring_buffer__epoll_fd": (c_int, [c_void_p]),
    "ring_buffer__ring": (c_void_p, [c_void_p, ctypes.c_uint]),
    "ring__avail_data_size": (c_size_t, [c_void_p]),
    "ring__size": (c_size_t, [c_void_p]),
}


def _declare(lib: ctypes.CDLL) -> None:
    for name, (res, args) in {**SIGNATURES, **OPTIONAL_SIGNATURES, **LATER_SIGNATURES}.items():
        if name not in SIGNATURES and not hasattr(lib, name):
            continue
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def missing_optional(lib: ctypes.CDLL) -> list[str]:
    """The optional functions (event sets, ordering) ``lib`` lacks."""
    return [name for name in OPTIONAL_SIGNATURES if not hasattr(lib, name)]


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
