"""perfbuf: read BPF perf event arrays (bpf_perf_event_output) from Python.

A thin, typed layer over libperfbuf (a drop-in replacement for libbpf's
perf buffer). Example::

    from perfbuf import PerfBuffer

    with PerfBuffer(map_fd, page_cnt=8, on_sample=lambda cpu, data: print(cpu, data.hex())) as pb:
        while True:
            pb.poll(100)
"""
from __future__ import annotations

import ctypes
import os
import struct
import threading
from typing import Callable, Iterator, NamedTuple, Optional

from . import _lib

__all__ = ["PerfBuffer", "Record", "library_version"]

_LIB = _lib.load()

PERF_RECORD_LOST = 2
PERF_RECORD_SAMPLE = 9
_CONT, _ERROR = -2, -1

# struct perf_event_attr for a BPF output event sampling raw data (128 bytes).
_ATTR = struct.Struct("<IIQQQQQI")


def library_version() -> str:
    """The loaded libperfbuf's version."""
    return _LIB.perfbuf_version().decode()


class Record(NamedTuple):
    """One record: a sample's bytes, or a count of records the kernel lost."""

    cpu: int
    data: bytes
    lost: int = 0


def _check(ret: int) -> int:
    if ret < 0:
        raise OSError(-ret, os.strerror(-ret))
    return ret


SampleFn = Callable[[int, bytes], None]
LostFn = Callable[[int, int], None]


class PerfBuffer:
    """A perf buffer over a BPF_MAP_TYPE_PERF_EVENT_ARRAY (one ring per CPU).

    ``on_sample(cpu, data)`` gets each sample's bytes (as the kernel sized
    them: padded to 4 bytes short of a multiple of 8), ``on_lost(cpu, count)``
    each count of records the kernel dropped. Without callbacks, use
    :meth:`read` or :meth:`records` to pull records instead.

    An exception raised by a callback stops the poll or consume that called
    it and is re-raised from there; the record that raised is consumed, the
    ones after it stay in the ring for the next call.
    """

    def __init__(self, map_fd: int, page_cnt: int = 8, on_sample: Optional[SampleFn] = None,
                 on_lost: Optional[LostFn] = None, wakeup_events: int = 1) -> None:
        self._on_sample = on_sample
        self._on_lost = on_lost
        self._collect: Optional[list[Record]] = None
        self._error: Optional[BaseException] = None
        self._views: list[memoryview] = []
        self._lock = threading.Lock()
        attr = bytearray(128)
        # type=PERF_TYPE_SOFTWARE, size, config=PERF_COUNT_SW_BPF_OUTPUT,
        # sample_period=1, sample_type=PERF_SAMPLE_RAW, read_format, flags, wakeup_events
        _ATTR.pack_into(attr, 0, 1, 128, 10, 1, 1 << 10, 0, 0, max(1, wakeup_events))
        self._attr = (ctypes.c_ubyte * 128).from_buffer(attr)
        self._cb = _lib.EVENT_FN(self._on_event)  # kept alive as long as the buffer
        pb = _LIB.perf_buffer__new_raw(map_fd, page_cnt, ctypes.addressof(self._attr), self._cb, None, None)
        if not pb:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        self._pb: Optional[int] = pb

    # -- the C callback -------------------------------------------------------------

    def _on_event(self, _ctx: int, cpu: int, header: int) -> int:
        if self._error is not None:
            return _ERROR
        try:
            rtype, _misc, size = struct.unpack("<IHH", ctypes.string_at(header, 8))
            if rtype == PERF_RECORD_SAMPLE:
                (raw,) = struct.unpack("<I", ctypes.string_at(header + 8, 4))
                raw = min(raw, max(0, size - 12))
                rec = Record(cpu, ctypes.string_at(header + 12, raw))
                if self._collect is not None:
                    self._collect.append(rec)
                elif self._on_sample is not None:
                    self._on_sample(cpu, rec.data)
            elif rtype == PERF_RECORD_LOST:
                (lost,) = struct.unpack("<Q", ctypes.string_at(header + 16, 8))
                if self._collect is not None:
                    self._collect.append(Record(cpu, b"", lost))
                elif self._on_lost is not None:
                    self._on_lost(cpu, lost)
            return _CONT
        except BaseException as e:  # never let an exception reach C
            self._error = e
            return _ERROR

    def _call(self, fn: Callable[..., int], *args: int) -> int:
        pb = self._handle()
        self._error = None
        ret = fn(pb, *args)
        if self._error is not None:
            err, self._error = self._error, None
            raise err
        return _check(ret)

    def _handle(self) -> int:
        if self._pb is None:
            raise ValueError("PerfBuffer is closed")
        return self._pb

    # -- reading ------------------------------------------------------------------

    def poll(self, timeout_ms: int = -1) -> int:
        """Waits up to ``timeout_ms`` (-1: forever) and drains the rings the
        kernel signalled; returns how many. OSError(EINTR) on a signal,
        OSError(ECANCELED) after :meth:`wake`."""
        return self._call(_LIB.perf_buffer__poll, timeout_ms)

    def consume(self) -> None:
        """Drains every ring without waiting."""
        self._call(_LIB.perf_buffer__consume)

    def consume_buffer(self, index: int) -> None:
        """Drains ring ``index`` without waiting."""
        self._call(_LIB.perf_buffer__consume_buffer, index)

    def read(self, timeout_ms: int = -1) -> list[Record]:
        """Polls once and returns the records, instead of calling callbacks."""
        self._collect = []
        try:
            self.poll(timeout_ms)
            return self._collect
        finally:
            self._collect = None

    def records(self, timeout_ms: int = -1) -> Iterator[Record]:
        """Yields records as they arrive; stops when the buffer is closed or
        woken, or when ``timeout_ms`` (if ≥ 0) passes with nothing."""
        while self._pb is not None:
            try:
                batch = self.read(timeout_ms)
            except OSError as e:
                if e.errno == 125:  # ECANCELED: woken
                    return
                raise
            if not batch and timeout_ms >= 0:
                return
            yield from batch

    # -- controls -------------------------------------------------------------------

    def wake(self) -> None:
        """Makes a poll blocked in another thread raise OSError(ECANCELED).
        The one method that is safe to call from another thread."""
        _check(_LIB.perfbuf_wake(self._handle()))

    def pause(self) -> None:
        """Stops the kernel's output; records produced meanwhile count as lost."""
        _check(_LIB.perfbuf_pause(self._handle()))

    def resume(self) -> None:
        """Resumes output after :meth:`pause`."""
        _check(_LIB.perfbuf_resume(self._handle()))

    # -- accessors ------------------------------------------------------------------

    @property
    def buffer_count(self) -> int:
        """Number of rings (online CPUs, bounded by the map's size)."""
        return _LIB.perf_buffer__buffer_cnt(self._handle())

    @property
    def epoll_fd(self) -> int:
        """The epoll fd over all rings (owned by the buffer)."""
        return _check(_LIB.perf_buffer__epoll_fd(self._handle()))

    def fileno(self) -> int:
        """The epoll fd, so the buffer works with ``selectors``."""
        return self.epoll_fd

    def buffer_fd(self, index: int) -> int:
        """The perf event fd of ring ``index``."""
        return _check(_LIB.perf_buffer__buffer_fd(self._handle(), index))

    def buffer_cpu(self, index: int) -> int:
        """The CPU ring ``index`` reads."""
        return _check(_LIB.perfbuf_buffer_cpu(self._handle(), index))

    def stats(self, index: int) -> dict[str, int]:
        """Ring ``index``'s figures: records, bytes, lost, wakeups, pending_bytes, ..."""
        st = _lib.RingStats(sz=ctypes.sizeof(_lib.RingStats))
        _check(_LIB.perfbuf_ring_stats(self._handle(), index, ctypes.byref(st)))
        return {name: getattr(st, name) for name, _ in _lib.RingStats._fields_ if name not in ("sz", "reserved")}

    def ring(self, index: int) -> memoryview:
        """Zero-copy view of ring ``index``'s mapping: the kernel's
        ``struct perf_event_mmap_page`` (``data_head`` at offset 1024,
        ``data_tail`` at 1032), then the data area one page later. Read-only;
        released when the buffer closes."""
        base, size = ctypes.c_void_p(), ctypes.c_size_t()
        _check(_LIB.perf_buffer__buffer(self._handle(), index, ctypes.byref(base), ctypes.byref(size)))
        length = os.sysconf("SC_PAGE_SIZE") + size.value
        view = memoryview((ctypes.c_ubyte * length).from_address(base.value)).cast("B").toreadonly()
        self._views.append(view)
        return view

    # -- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Frees the buffer (idempotent). Views from :meth:`ring` are released."""
        with self._lock:
            pb, self._pb = self._pb, None
        if pb is None:
            return
        for view in self._views:
            try:
                view.release()
            except BufferError:  # the caller still holds a slice of it
                pass
        self._views.clear()
        _LIB.perf_buffer__free(pb)

    def __enter__(self) -> "PerfBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
