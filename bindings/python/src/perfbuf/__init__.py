"""perfbuf: read BPF perf event arrays (bpf_perf_event_output) from Python.

A thin, typed layer over libperfbuf (a drop-in replacement for libbpf's
perf buffer). Example::

    from perfbuf import PerfBuffer

    with PerfBuffer(map_fd, page_cnt=8, on_sample=lambda cpu, data: print(cpu, data.hex())) as pb:
        pb.run()  # polls until Ctrl-C

Only libperfbuf's own ``perfbuf_*`` functions are called, never the
``perf_buffer__*`` names libbpf also exports, so a process that loaded
libbpf too (e.g. to load its BPF programs) is safe whatever the load order.

libperfbuf's messages go to the ``logging`` logger ``"perfbuf"`` (see
:func:`use_logging`).
"""
from __future__ import annotations

import atexit
import collections
import ctypes
import errno
import gc
import logging
import operator
import os
import threading
import weakref
from typing import Any, Callable, Deque, Iterable, Iterator, NamedTuple, Optional, TypeVar, Union

from . import _lib

__all__ = ["PerfBuffer", "Record", "library_version", "last_error", "use_logging", "EventSet", "EventReader",
           "PerfDataWriter",
           "EventSample", "EventInfo", "BpfProgram", "Counts", "SidebandRecord", "RawRecord", "ReadValues", "ReadValue", "Branch"]

_log = logging.getLogger("perfbuf")


class _Library:
    """libperfbuf's functions, with the warnings a failing call prints held
    back: the package raises that failure, with libperfbuf's text, and
    printing it too would say it twice. A call that returns an error (a
    negative int, a NULL pointer) leaves its warnings pending on the thread
    for the exception to take (see :func:`_os_error`); what no exception
    took is logged at the thread's next call. The warnings of a call that
    succeeded are logged when it returns, as they come."""

    # Not held: the error's own functions, and those called for every
    # record (decoding prints nothing; the per-record cost stays as it was).
    _PLAIN = frozenset({"perfbuf_last_error", "perfbuf_set_print", "perfbuf_version", "perfbuf_events_decode",
                        "perfbuf_events_decode_sideband", "perfbuf_events_field", "perfbuf_ring_peek"})

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self.lib, name)
        if name in self._PLAIN or not name.startswith("perfbuf_"):
            return fn
        restype = fn.restype

        def call(*args: Any) -> Any:
            _log_pending()
            outer = getattr(_calls, "held", None)
            _calls.held = held = []
            try:
                ret = fn(*args)
            finally:
                _calls.held = outer
            if held:
                failed = ret is None if restype is ctypes.c_void_p else restype is ctypes.c_int and ret < 0
                if failed:
                    _pending().extend(held)
                else:
                    for text in held:
                        _log.warning("%s", text)
            return ret

        call.__name__ = name
        self.__dict__[name] = call
        return call


_calls = threading.local()


def _pending() -> list[str]:
    """This thread's warnings of failed calls that no exception took yet."""
    if not hasattr(_calls, "pending"):
        _calls.pending = []
    return _calls.pending  # type: ignore[no-any-return]


def _log_pending() -> None:
    pending = _pending()
    for text in pending:
        _log.warning("%s", text)
    pending.clear()


def _take_pending(text: str) -> None:
    """The failure raised now says ``text``: the warnings that say the same
    are in the exception; the others are logged."""
    pending = _pending()
    for held in pending:
        if held != text:
            _log.warning("%s", held)
    pending.clear()


_LIB: Any = _Library(_lib.load())


def library_version() -> str:
    """The loaded libperfbuf's version."""
    return _LIB.perfbuf_version().decode()


def last_error() -> str:
    """The text of the last error a libperfbuf call of this thread returned
    (what failed, the errno's name and text, a hint at the fix); ``""``
    before any. The exceptions this package raises carry it already."""
    return (_LIB.perfbuf_last_error() or b"").decode(errors="replace")


# ---- library messages -> logging -----------------------------------------------------

_LEVELS = {_lib.PERFBUF_WARN: logging.WARNING, _lib.PERFBUF_INFO: logging.INFO, _lib.PERFBUF_DEBUG: logging.DEBUG}


def _print(level: int, msg: Optional[bytes], _ctx: Optional[int]) -> None:
    try:
        text = (msg or b"").decode(errors="replace")
        held = getattr(_calls, "held", None)
        if level == _lib.PERFBUF_WARN and held is not None:
            held.append(text)  # a call of this thread's: see _Library
            return
        pylevel = _LEVELS.get(level, logging.DEBUG)
        if _log.isEnabledFor(pylevel):
            _log.log(pylevel, "%s", text)
    except BaseException:  # never let an exception reach C
        pass


_PRINT = _lib.PRINT_FN(_print)  # alive as long as the module: the library may call it from any thread
_print_lock = threading.Lock()
_previous_print: Optional[int] = None
_routed = False


def use_logging(enabled: bool = True) -> None:
    """Routes libperfbuf's messages (warnings, info, debug: every level) to
    the ``logging`` logger ``"perfbuf"`` — the default since import — or,
    with ``False``, back to the printer that was there before (the
    library's own, which writes warnings to stderr)."""
    global _previous_print, _routed
    with _print_lock:
        if enabled and not _routed:
            _previous_print = _LIB.perfbuf_set_print(ctypes.cast(_PRINT, ctypes.c_void_p), None)
            _routed = True
        elif not enabled and _routed:
            _LIB.perfbuf_set_print(_previous_print, None)
            _routed = False


use_logging(True)
# Give the library its own printer back before the interpreter tears down
# the module (buffers freed at exit may still print).
atexit.register(use_logging, False)


# ---- records and errors ---------------------------------------------------------------

class Record(NamedTuple):
    """One record: a sample's bytes, or a count of records the kernel lost."""

    cpu: int
    data: bytes
    lost: int = 0


def _os_error(err: int, what: str) -> OSError:
    """OSError(err, text): Python picks the subclass (PermissionError for
    EACCES/EPERM, FileNotFoundError, InterruptedError, ...); the text is
    libperfbuf's explanation of the failure."""
    text = last_error() or f"{what}: {os.strerror(err)}"
    _take_pending(text)
    return OSError(err, text)


def _fd_kind(fd: int) -> Optional[str]:
    """What fd is when it is not a BPF map (e.g. ``pipe:[1234]``), else None."""
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return None if target == "anon_inode:bpf-map" else target


def _as_int(name: str, value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None


def _as_u32(name: str, value: Any, low: int = 0, high: int = 2**32 - 1) -> int:
    v = _as_int(name, value)
    if not low <= v <= high:
        raise ValueError(f"{name} must be between {low} and {high}, got {v}")
    return v


def _callable_or_none(name: str, fn: Any) -> None:
    if fn is not None and not callable(fn):
        raise TypeError(f"{name} must be a callable or None, not {type(fn).__name__}")


SampleFn = Callable[[int, bytes], None]
LostFn = Callable[[int, int], None]
_R = TypeVar("_R", bound="_RingReader")


class _RingReader:
    """What every reader over a C ``struct perf_buffer`` shares: polling and
    draining with callbacks (exceptions re-raised, the rest of the drain
    held back), pulling records, the controls, the figures, ring views and
    a close that is safe from any thread. :class:`PerfBuffer` and the event
    set's :class:`EventReader` are built on it."""

    # Class defaults, so that __del__ and close work whatever a constructor failed on.
    _pb: Optional[int] = None
    _owned_fd: Optional[int] = None

    def _init_state(self, on_sample: Optional[Callable[..., None]], on_lost: Optional[LostFn]) -> None:
        self._on_sample = on_sample
        self._on_lost = on_lost
        self._collect: Optional[list[Any]] = None
        self._error: Optional[BaseException] = None
        self._held: Deque[Any] = collections.deque()
        self._ring_mems: list[weakref.ref[Any]] = []
        self._lock = threading.Lock()  # held by every call on the handle but wake
        self._free_lock = threading.Lock()  # wake vs free
        self._closing = False
        self._close_pending = False
        self._draining: Optional[int] = None  # the thread inside a poll/consume

    def _adopt(self, pb: int) -> None:
        """Takes ownership of the C handle ``pb``."""
        self._pb = pb
        self._epoll_fd = int(_LIB.perfbuf_epoll_fd(pb))
        self._refresh_rings()

    def _refresh_rings(self) -> None:
        """The rings and their CPUs, again: a CPU that came online gets a
        ring of its own, at the next index."""
        pb = self._pb
        self._count = int(_LIB.perfbuf_buffer_cnt(pb))
        self._cpus = [int(_LIB.perfbuf_buffer_cpu(pb, i)) for i in range(self._count)]

    # -- the C callbacks ------------------------------------------------------------

    def _on_record(self, cpu: int, data: Optional[int], size: int, lost: int) -> None:
        try:
            rec = Record(cpu, ctypes.string_at(data, size) if size else b"") if data is not None \
                else Record(cpu, b"", lost)
        except BaseException as e:  # never let an exception reach C
            if self._error is None:
                self._error = e
            return
        self._accept(rec)

    def _accept(self, rec: Any) -> None:
        """Delivers a record built by a C callback (anything with ``cpu`` and
        ``lost``), or holds it back if a callback raised earlier in this
        call. Never raises: the first exception is kept for the caller of
        the poll or consume."""
        try:
            if self._error is not None:  # a callback raised earlier in this call: keep the rest
                self._held.append(rec)
                return
            self._deliver(rec)
        except BaseException as e:  # never let an exception reach C
            if self._error is None:
                self._error = e

    def _deliver(self, rec: Any) -> None:
        if self._collect is not None:
            self._collect.append(rec)
        elif rec.lost:
            if self._on_lost is not None:
                self._on_lost(rec.cpu, rec.lost)
        elif self._on_sample is not None:
            self._on_sample(rec.cpu, rec.data)

    def _deliver_held(self, cpu: Optional[int] = None) -> int:
        """Delivers the records kept after a callback raised (those of
        ``cpu`` only, if given); returns how many."""
        n = 0
        keep: Deque[Record] = collections.deque()
        try:
            while self._held:
                rec = self._held.popleft()
                if cpu is not None and rec.cpu != cpu:
                    keep.append(rec)
                    continue
                n += 1
                self._deliver(rec)  # if it raises, the rest stay held
        finally:
            keep.extend(self._held)
            self._held = keep
        return n

    def _acquire(self) -> int:
        """Takes the buffer for one call; returns the handle."""
        if self._draining == threading.get_ident():
            raise RuntimeError(f"a {type(self).__name__} callback cannot call poll, consume, read, pause, resume, "
                               "stats, ring or buffer_fd on its own buffer (close and wake are fine)")
        self._lock.acquire()
        try:
            return self._handle()
        except BaseException:
            self._lock.release()
            raise

    def _drain(self, fn: Callable[..., int], *args: int) -> int:
        try:
            pb = self._acquire()
            try:
                self._draining = threading.get_ident()
                self._error = None
                try:
                    ret = fn(pb, *args)
                finally:
                    self._draining = None
                if self._error is not None:
                    err, self._error = self._error, None
                    raise err
                if ret < 0:
                    raise _os_error(-ret, fn.__name__)
                return ret
            finally:
                self._lock.release()
        finally:
            if self._close_pending:
                self._close_pending = False
                self.close()

    def _handle(self) -> int:
        if self._pb is None or self._closing:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._pb

    def _index(self, index: int) -> int:
        i = _as_int("index", index)
        self._handle()
        if i >= self._count:
            self._refresh_rings()
        if not 0 <= i < self._count:
            raise IndexError(f"ring index {i} out of range: this buffer has {self._count} rings "
                             f"(0 to {self._count - 1})")
        return i

    # -- reading ------------------------------------------------------------------

    def poll(self, timeout_ms: int = -1) -> int:
        """Waits up to ``timeout_ms`` (-1: forever) and drains the rings the
        kernel signalled; returns how many (0 on timeout; records held back
        after a callback raised count as one ring, and are delivered
        without waiting). ``InterruptedError`` on a signal,
        ``OSError(ECANCELED)`` after :meth:`wake`."""
        timeout_ms = _as_int("timeout_ms", timeout_ms)
        self._handle()
        held = self._deliver_held()
        ret = self._drain(_LIB.perfbuf_poll, 0 if held else timeout_ms)
        return max(ret, 1) if held else ret

    def consume(self) -> None:
        """Drains every ring without waiting."""
        self._handle()
        self._deliver_held()
        self._drain(_LIB.perfbuf_consume)

    def consume_buffer(self, index: int) -> None:
        """Drains ring ``index`` without waiting."""
        i = self._index(index)
        self._deliver_held(self._cpus[i])
        self._drain(_LIB.perfbuf_consume_buffer, i)

    def drain_final(self) -> int:
        """The final drain, once the producers have stopped: drains every
        ring (an ordered reader flushes what it holds), then hands
        ``on_lost`` one report per ring of what the kernel counted lost
        and has not yet written as a lost record, so a burst that filled a
        ring at the end is not missed for want of a later record. Returns
        the number that last step reported lost. Only rings whose events
        count their losses have such a count (``count_lost=True``, an
        event set's rings; Linux 6.0+); elsewhere this is :meth:`consume`
        and returns 0. ``perfbuf_drain_final``."""
        self._handle()
        fn = getattr(_LIB, "perfbuf_drain_final", None)
        if fn is None:
            raise OSError(errno.ENOSYS, f"this libperfbuf ({library_version()}) has no perfbuf_drain_final; "
                                        "install a newer one")
        self._deliver_held()
        lost = ctypes.c_uint64(0)

        def perfbuf_drain_final(pb: int) -> int:  # named for _drain's errors
            return int(fn(pb, ctypes.byref(lost)))

        self._drain(perfbuf_drain_final)
        return lost.value

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
        while self._pb is not None and not self._closing:
            try:
                batch = self.read(timeout_ms)
            except OSError as e:
                if e.errno == errno.ECANCELED:  # woken
                    return
                raise
            except ValueError:  # closed from another thread
                if self._pb is None or self._closing:
                    return
                raise
            if not batch and timeout_ms >= 0:
                return
            yield from batch

    def run(self, stop: Optional[Callable[[], bool]] = None, timeout_ms: int = 100) -> None:
        """Polls and delivers records through the callbacks until Ctrl-C
        (``KeyboardInterrupt`` ends it quietly), ``stop()`` returns true
        (checked after every poll, at least every ``timeout_ms``),
        :meth:`wake` or :meth:`close` from another thread. bcc's
        ``while True: b.perf_buffer_poll()`` loop, with its ways out. An
        exception from a callback propagates."""
        _callable_or_none("stop", stop)
        timeout_ms = _as_int("timeout_ms", timeout_ms)
        try:
            while self._pb is not None and not self._closing:
                try:
                    self.poll(timeout_ms)
                except InterruptedError:
                    pass  # a signal: its handler runs now (Ctrl-C raises KeyboardInterrupt)
                except OSError as e:
                    if e.errno == errno.ECANCELED:
                        return
                    raise
                except ValueError:
                    if self._pb is None or self._closing:
                        return
                    raise
                if stop is not None and stop():
                    return
        except KeyboardInterrupt:
            return

    # -- controls -------------------------------------------------------------------

    def wake(self) -> None:
        """Makes a poll blocked in another thread raise OSError(ECANCELED).
        Safe to call from any thread."""
        with self._free_lock:
            ret = _LIB.perfbuf_wake(self._handle())
        if ret < 0:
            raise _os_error(-ret, "perfbuf_wake")

    def pause(self) -> None:
        """Stops the kernel's output; records produced meanwhile count as lost."""
        self._control(_LIB.perfbuf_pause)

    def resume(self) -> None:
        """Resumes output after :meth:`pause`."""
        self._control(_LIB.perfbuf_resume)

    def _control(self, fn: Callable[..., int], *args: int) -> int:
        pb = self._acquire()
        try:
            ret = fn(pb, *args)
        finally:
            self._lock.release()
        if ret < 0:
            raise _os_error(-ret, fn.__name__)
        return ret

    # -- accessors ------------------------------------------------------------------

    @property
    def buffer_count(self) -> int:
        """Number of rings (online CPUs, bounded by the map's size; it grows
        when a CPU comes online, see ``hotplug``)."""
        self._handle()
        self._refresh_rings()
        return self._count

    @property
    def epoll_fd(self) -> int:
        """The epoll fd over all rings (owned by the buffer)."""
        self._handle()
        return self._epoll_fd

    def fileno(self) -> int:
        """The epoll fd, so the buffer works with ``selectors``."""
        return self.epoll_fd

    def buffer_fd(self, index: int) -> int:
        """The perf event fd of ring ``index``; IndexError if there is none."""
        return self._control(_LIB.perfbuf_buffer_fd, self._index(index))

    def buffer_cpu(self, index: int) -> int:
        """The CPU ring ``index`` reads; IndexError if there is none."""
        return self._cpus[self._index(index)]

    def stats(self, index: int) -> dict[str, Optional[int]]:
        """Ring ``index``'s figures, every field of ``struct
        perfbuf_ring_stats``: cpu, records, bytes, lost, wakeups,
        pending_bytes, data_size, resyncs, skipped_bytes, malformed,
        overwritten_bytes, batched, batch_switches, spill_size,
        lost_unreported, and the loss identity's: produced (``None``
        without ``output_counts``), samples, delivered, output_failed,
        dropped, lost_total. Once the ring is read to its head,
        ``produced == delivered + lost_total`` (see the top README's "Lost
        counts"). ``lost`` is exact at any moment where the ring's
        events count their losses (``count_lost=True``, an event set's
        rings on Linux 6.0+): it includes the ``lost_unreported`` records
        the kernel has not yet written as a lost report."""
        st = _lib.RingStats(sz=ctypes.sizeof(_lib.RingStats))
        self._control(_LIB.perfbuf_ring_stats, self._index(index), ctypes.byref(st))  # type: ignore[arg-type]
        out: dict[str, Optional[int]] = {
            name: getattr(st, name) for name, _ in _lib.RingStats._fields_
            if name not in ("sz", "reserved", "produced_known")}
        if not st.produced_known:
            out["produced"] = None
        return out

    def health(self, index: int) -> dict[str, Any]:
        """How ring ``index`` is doing (``struct perfbuf_ring_health``): cpu,
        online, pending_bytes (the backlog now), peak_pending_bytes (its
        high-water mark), data_size, records_per_sec, bytes_per_sec,
        wakeups_per_sec (over the last second), seconds_since_last_record
        (``None``: never), needed_bytes (the peak backlog, plus the bytes of
        records lost meanwhile), suggested_pages (the smallest ring holding
        it: the ``page_cnt`` for this load) and replaced (times the CPU came
        back online and got a fresh event)."""
        if not hasattr(_LIB, "perfbuf_ring_health"):
            raise NotImplementedError("this libperfbuf has no perfbuf_ring_health: update it")
        h = _lib.RingHealth(sz=ctypes.sizeof(_lib.RingHealth))
        self._control(_LIB.perfbuf_ring_health, self._index(index), ctypes.byref(h))  # type: ignore[arg-type]
        out: dict[str, Any] = {name: getattr(h, name) for name, _ in _lib.RingHealth._fields_
                               if name not in ("sz", "ns_since_last_record")}
        out["online"] = bool(h.online)
        ns = h.ns_since_last_record
        out["seconds_since_last_record"] = None if ns < 0 else ns / 1e9
        return out

    def count_dropped(self, index: int, n: int) -> None:
        """Counts ``n`` records of ring ``index`` your code read and then
        dropped by its own policy: they move from ``delivered`` to
        ``dropped`` in :meth:`stats`, so the loss identity still adds up.
        Not from a callback."""
        if not hasattr(_LIB, "perfbuf_count_dropped"):
            raise NotImplementedError("this libperfbuf has no perfbuf_count_dropped: update it")
        n = _as_int("n", n)
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self._control(_LIB.perfbuf_count_dropped, self._index(index), n)  # type: ignore[arg-type]

    def ring(self, index: int) -> memoryview:
        """Zero-copy, read-only view of ring ``index``'s mapping: the kernel's
        ``struct perf_event_mmap_page`` (``data_head`` at offset 1024,
        ``data_tail`` at 1032), then the data area one page later.

        The view (and every slice or array made from it) keeps the mapping
        in use: :meth:`close` raises ``BufferError`` while any is alive.
        Release it first — ``with pb.ring(i) as view: ...``, or
        ``view.release()`` and ``del`` of the slices."""
        i = self._index(index)
        base, size = ctypes.c_void_p(), ctypes.c_size_t()
        pb = self._acquire()
        try:  # registered before close() can look
            ret = _LIB.perfbuf_buffer(pb, i, ctypes.byref(base), ctypes.byref(size))
            if ret < 0:
                raise _os_error(-ret, "perfbuf_buffer")
            length = os.sysconf("SC_PAGE_SIZE") + size.value
            mem = _ring_type(length).from_address(base.value)  # type: ignore[arg-type]
            mem._owner = self  # the buffer outlives its views
            self._exported_views()  # drop the references of views gone
            self._ring_mems.append(weakref.ref(mem))
        finally:
            self._lock.release()
        # Every view made from this one (slices, casts, exports) holds `mem`
        # through the memoryview's managed buffer: `mem` is alive exactly as
        # long as some view of the mapping is.
        return memoryview(mem).cast("B").toreadonly()

    def peek(self, index: int) -> Optional[bytes]:
        """The next record of ring ``index``, whole (its ``perf_event_header``
        included), as bytes; ``None`` when the ring is empty. A reader of
        your own, as C's ``perfbuf_ring_peek``: the record stays in the ring
        (and the buffer's callbacks do not see it) until :meth:`advance`
        moves past it; :meth:`publish` then frees its space for the kernel."""
        i = self._index(index)
        rec, size = ctypes.c_void_p(), ctypes.c_size_t()
        pb = self._acquire()
        try:  # copied while the record cannot move
            ret = _LIB.perfbuf_ring_peek(pb, i, ctypes.byref(rec), ctypes.byref(size))
            data = ctypes.string_at(rec.value, size.value) if ret == 1 and rec.value else None
        finally:
            self._lock.release()
        if ret < 0:
            raise _os_error(-ret, "perfbuf_ring_peek")
        return data

    def advance(self, index: int) -> None:
        """Moves ring ``index``'s read position past the record :meth:`peek`
        shows (``OSError`` ENODATA when there is none)."""
        self._control(_LIB.perfbuf_ring_advance, self._index(index))

    def publish(self, index: int) -> None:
        """Frees the space of every record of ring ``index`` advanced past
        (publishes the read position as the ring's ``data_tail``)."""
        self._control(_LIB.perfbuf_ring_publish, self._index(index))

    def _exported_views(self) -> int:
        self._ring_mems = [r for r in self._ring_mems if r() is not None]
        return len(self._ring_mems)

    # -- lifetime -------------------------------------------------------------------

    def close(self) -> None:
        """Frees the buffer (idempotent); closes the fd :meth:`from_pinned`
        opened. Raises ``BufferError`` (and leaves the buffer open) while
        views from :meth:`ring` are still exported."""
        if self._draining == threading.get_ident():  # from a callback
            self._close_pending = True
            return
        if self._pb is None:
            return
        if self._exported_views():
            gc.collect()  # views only kept alive by garbage cycles
            self._refuse_if_views()
        self._closing = True
        while not self._lock.acquire(timeout=0.05):  # a poll in another thread: wake it
            self._wake_quietly()
        try:
            try:
                self._refuse_if_views()  # one made meanwhile
            except BufferError:
                self._closing = False
                raise
            with self._free_lock:
                pb, self._pb = self._pb, None
            if pb is not None:
                _LIB.perfbuf_free(pb)
            if self._owned_fd is not None:
                os.close(self._owned_fd)
                self._owned_fd = None
            self._held.clear()
        finally:
            self._lock.release()

    def _refuse_if_views(self) -> None:
        n = self._exported_views()
        if n:
            raise BufferError(
                f"cannot close the {type(self).__name__}: {n} ring view(s) still exported; release them first "
                "(view.release(), or `with pb.ring(i) as view:`) and drop slices or arrays made from them")

    def _wake_quietly(self) -> None:
        with self._free_lock:
            if self._pb is not None:
                _LIB.perfbuf_wake(self._pb)

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if getattr(self, "_pb", None) is None or self._exported_views():
                return  # views in a garbage cycle: never free under them
            self.close()
        except Exception:
            pass


class PerfBuffer(_RingReader):
    """A perf buffer over a BPF_MAP_TYPE_PERF_EVENT_ARRAY (one ring per CPU).

    ``on_sample(cpu, data)`` gets each sample's bytes (as the kernel sized
    them: padded to 4 bytes short of a multiple of 8), ``on_lost(cpu, count)``
    each count of records the kernel dropped. Without callbacks, use
    :meth:`read` or :meth:`records` to pull records instead.

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
            map_fd = _as_int("map_fd", map_fd)
        except TypeError as e:
            raise TypeError(f"{e} (the fd of a BPF_MAP_TYPE_PERF_EVENT_ARRAY; for a pinned map use "
                            "PerfBuffer.from_pinned(path))") from None
        page_cnt = _as_int("page_cnt", page_cnt)
        if page_cnt < 1 or page_cnt & (page_cnt - 1):
            raise ValueError(f"page_cnt must be a power of two (1, 2, 4, 8, ...), got {page_cnt}")
        _callable_or_none("on_sample", on_sample)
        _callable_or_none("on_lost", on_lost)
        for name, flag in (("fast", fast), ("overwrite", overwrite), ("count_lost", count_lost),
                           ("hotplug", hotplug)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, not {type(flag).__name__}")
        opts: Optional[_lib.Opts] = None
        options = (wakeup_events, wakeup_bytes, max_delay_ms, cpus, output_counts)
        if any(o is not None for o in options) or fast or overwrite or count_lost or not hotplug:
            opts = _lib.Opts(sz=ctypes.sizeof(_lib.Opts))
            if wakeup_events is not None:
                opts.wakeup_events = _as_u32("wakeup_events", wakeup_events)
            if wakeup_bytes is not None:
                opts.wakeup_bytes = _as_u32("wakeup_bytes", wakeup_bytes)
            if max_delay_ms is not None:
                opts.max_delay_ms = _as_u32("max_delay_ms", max_delay_ms, 0, 60_000)
            opts.flags = ((_lib.PERFBUF_F_ADAPTIVE if fast else 0) | (_lib.PERFBUF_F_OVERWRITE if overwrite else 0)
                          | (_lib.PERFBUF_F_COUNT_LOST if count_lost else 0)
                          | (0 if hotplug else _lib.PERFBUF_F_NO_HOTPLUG))
            if output_counts is not None:
                fd = output_counts.fileno() if hasattr(output_counts, "fileno") else output_counts
                opts.output_counts_fd = _as_int("output_counts", fd)
            if cpus is not None:
                ids = [_as_int("cpus[]", c) for c in cpus]
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
        pb = _LIB.perfbuf_new(map_fd, page_cnt, self._callbacks[0], self._callbacks[1], None,
                              ctypes.byref(opts) if opts is not None else None)
        if not pb:
            err = ctypes.get_errno()
            e = _os_error(err, "perfbuf_new")
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


_ring_types: dict[int, type] = {}


def _ring_type(length: int) -> type:
    """A ctypes byte array type of ``length`` whose instances take
    attributes and weak references."""
    t = _ring_types.get(length)
    if t is None:
        t = _ring_types[length] = type("_RingMemory", (ctypes.c_ubyte * length,), {})
    return t


# Event sets build on the reader above (imported last: they use this module's names).
from ._events import (BpfProgram, Branch, Counts, EventInfo, EventReader, EventSample, EventSet, RawRecord,  # noqa: E402
                      ReadValue, ReadValues, SidebandRecord)
from ._perfdata import PerfDataWriter  # noqa: E402
