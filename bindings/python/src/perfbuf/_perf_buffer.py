"""The perf buffer over a BPF_MAP_TYPE_PERF_EVENT_ARRAY: :class:`PerfBuffer`."""
from __future__ import annotations

import ctypes
import errno
import os
import weakref
from typing import Any, Iterable, Optional, Union

from . import _lib, _library
from ._args import as_int, as_u32, callable_or_none
from ._batch import BatchReading
from ._library import os_error
from ._ring_reader import LostFn, RingReader, SampleFn


def _fd_kind(fd: int) -> Optional[str]:
    """What fd is when it is not a BPF map (e.g. ``pipe:[1234]``), else None."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return None if target == "anon_inode:bpf-map" else target


class PerfBuffer(BatchReading, RingReader):
    """A perf buffer over a BPF_MAP_TYPE_PERF_EVENT_ARRAY (one ring per CPU).

    ``on_sample(cpu, data)`` gets each sample's bytes (as the kernel sized
    them: padded to 4 bytes short of a multiple of 8), ``on_lost(cpu, count)``
    each count of records the kernel dropped. Without callbacks, use
    :meth:`read` or :meth:`records` to pull records instead, or
    :meth:`read_batch` to take everything a drain delivered as one
    :class:`Batch` (a buffer of records, a NumPy array when NumPy is
    installed) with no Python call per record. ``map_fd`` may also be a
    BPF ring buffer's (``BPF_MAP_TYPE_RINGBUF``: one ring, CPU -1).

    With no option given, the buffer is exactly C's
    ``perf_buffer__new(map_fd, page_cnt, ...)``: libbpf's per-record
    wake-ups, and libperfbuf's environment variables (``PERFBUF_ADAPTIVE``,
    ``PERFBUF_WAKEUP_EVENTS``, ``PERFBUF_MAX_DELAY_MS``) apply. Options:

    - ``fast=True``: the fast mode (adaptive wake-ups, ``PERFBUF_F_ADAPTIVE``):
      while a CPU's rate is high the kernel wakes the reader every 64
      records, and a timer delivers the rest within 1 ms. Needs per-record
      wake-ups and forward rings (no ``wakeup_*``, no ``overwrite``).
    - ``wakeup_events=N`` / ``wakeup_bytes=B``: batch wake-ups; a poll still
      delivers a partial batch within ``max_delay_ms`` (default 10 ms).
    - ``overwrite=True``: overwritable rings (the newest records are kept).
    - ``cpus=[...]``: read only these CPUs.
    - ``output_counts=FD``: the ``PERFBUF_OUTPUT_COUNTS`` map (an fd, or
      anything with ``fileno()``) the BPF program sends through with
      ``perfbuf.bpf.h``'s wrappers: :meth:`stats` then knows ``produced``
      and ``output_failed``, the outputs refused without the kernel
      counting them.
    - ``hotplug=False``: read the CPUs online now, for good (libbpf's way).
      By default a buffer opened with options serves CPUs that come and
      go: a CPU that comes online gets a ring within a second
      (:attr:`buffer_count` grows), one going offline has its ring read and
      kept, one coming back a fresh event. Without options the buffer is
      ``perf_buffer__new``'s (``PERFBUF_HOTPLUG=1`` opts in).
    - ``count_lost=True``: exact lost figures (``PERFBUF_F_COUNT_LOST``,
      Linux 6.0+): each CPU's event counts the records it could not write,
      so ``stats(i)["lost"]`` includes the ``lost_unreported`` ones the
      kernel has not yet written as a lost record, and :meth:`drain_final`
      reports them. Off by default because a ``read()`` of
      :meth:`buffer_fd` then returns 16 bytes instead of libbpf's 8.
      With ``fast=True`` the fast mode's own events' losses count too.

    An exception raised by a callback stops the poll or consume that called
    it and is re-raised from there. The record that raised is consumed; the
    records the same call drained after it are kept by the buffer and
    delivered first by the next poll, consume or read.

    Threading: one thread at a time polls and calls the other methods;
    :meth:`wake` and :meth:`close` may be called from any thread (a poll
    blocked elsewhere then raises ``OSError(ECANCELED)``, or ``ValueError``
    once closed). :meth:`close` from a callback closes once the call returns.
    """

    def __init__(self, map_fd: int, page_cnt: int = 8, on_sample: Optional[SampleFn] = None,
                 on_lost: Optional[LostFn] = None, wakeup_events: Optional[int] = None, *,
                 wakeup_bytes: Optional[int] = None, max_delay_ms: Optional[int] = None, fast: bool = False,
                 overwrite: bool = False, cpus: Optional[Iterable[int]] = None, count_lost: bool = False,
                 output_counts: Any = None, hotplug: bool = True) -> None:
        try:
            map_fd = as_int("map_fd", map_fd)
        except TypeError as e:
            raise TypeError(f"{e} (the fd of a BPF_MAP_TYPE_PERF_EVENT_ARRAY; for a pinned map use "
                            "PerfBuffer.from_pinned(path))") from None
        page_cnt = as_int("page_cnt", page_cnt)
        if page_cnt < 1 or page_cnt & (page_cnt - 1):
            raise ValueError(f"page_cnt must be a power of two (1, 2, 4, 8, ...), got {page_cnt}")
        callable_or_none("on_sample", on_sample)
        callable_or_none("on_lost", on_lost)
        for name, flag in (("fast", fast), ("overwrite", overwrite), ("count_lost", count_lost),
                           ("hotplug", hotplug)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
        opts: Optional[_lib.Opts] = None
        options = (wakeup_events, wakeup_bytes, max_delay_ms, cpus, output_counts)
        if any(o is not None for o in options) or fast or overwrite or count_lost or not hotplug:
            opts = _lib.Opts(sz=ctypes.sizeof(_lib.Opts))
            if wakeup_events is not None:
                opts.wakeup_events = as_u32("wakeup_events", wakeup_events)
            if wakeup_bytes is not None:
                opts.wakeup_bytes = as_u32("wakeup_bytes", wakeup_bytes)
            if max_delay_ms is not None:
                opts.max_delay_ms = as_u32("max_delay_ms", max_delay_ms, 0, 60_000)
            opts.flags = ((_lib.PERFBUF_F_ADAPTIVE if fast else 0) | (_lib.PERFBUF_F_OVERWRITE if overwrite else 0)
                          | (_lib.PERFBUF_F_COUNT_LOST if count_lost else 0)
                          | (0 if hotplug else _lib.PERFBUF_F_NO_HOTPLUG))
            if output_counts is not None:
                fd = output_counts.fileno() if hasattr(output_counts, "fileno") else output_counts
                opts.output_counts_fd = as_int("output_counts", fd)
            if cpus is not None:
                ids = [as_int("cpus[]", c) for c in cpus]
                if not ids:
                    raise ValueError("cpus is empty: give the CPUs to read, or None for all")
                self._cpu_list = (ctypes.c_int * max(1, len(ids)))(*ids)
                opts.cpus = ctypes.cast(self._cpu_list, ctypes.POINTER(ctypes.c_int))
                opts.cpu_cnt = len(ids)
        self._init_state(on_sample, on_lost)
        # The C callbacks hold only a weak reference, so that dropping the
        # last reference to the buffer frees it at once.
        ref = weakref.ref(self)

        def sample(_ctx: Optional[int], cpu: int, data: Optional[int], size: int) -> None:
            pb = ref()
            if pb is not None:
                pb._on_record(cpu, data, size, 0)

        def lost(_ctx: Optional[int], cpu: int, count: int) -> None:
            pb = ref()
            if pb is not None:
                pb._on_record(cpu, None, 0, count)

        self._callbacks = (_lib.SAMPLE_FN(sample), _lib.LOST_FN(lost))  # alive as long as the handle
        pb = _library.LIB.perfbuf_new(map_fd, page_cnt, self._callbacks[0], self._callbacks[1], None,
                              ctypes.byref(opts) if opts is not None else None)
        if not pb:
            err = ctypes.get_errno()
            e = os_error(err, "perfbuf_new")
            kind = _fd_kind(map_fd) if err in (errno.EINVAL, errno.EBADF) else None
            if kind is not None:
                e = OSError(err, f"{e.strerror}; map_fd {map_fd} is not a BPF_MAP_TYPE_PERF_EVENT_ARRAY: "
                                 f"it is {kind}, not a BPF map")
            raise e
        self._adopt(pb)

    @classmethod
    def from_pinned(cls, path: Union[str, "os.PathLike[str]"], page_cnt: int = 8,
                    on_sample: Optional[SampleFn] = None, on_lost: Optional[LostFn] = None,
                    **options: Any) -> "PerfBuffer":
        """Opens the PERF_EVENT_ARRAY pinned at ``path`` (on a bpffs, e.g.
        ``/sys/fs/bpf/events``, as ``bpftool map pin`` leaves it) with
        BPF_OBJ_GET, like bcc's ``open_perf_buffer`` on a map it did not
        create. The buffer owns that fd and closes it on :meth:`close`.
        Options as for the constructor. ``FileNotFoundError`` when nothing
        is pinned there."""
        fd = _lib.bpf_obj_get(os.fspath(path))
        try:
            pb = cls(fd, page_cnt, on_sample, on_lost, **options)
        except BaseException:
            os.close(fd)
            raise
        pb._owned_fd = fd
        return pb

