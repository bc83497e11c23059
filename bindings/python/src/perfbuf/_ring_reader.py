"""What every reader over a C ``struct perf_buffer`` shares
(:class:`RingReader`), and the records it hands over."""
from __future__ import annotations

import collections
import ctypes
import errno
import gc
import os
import threading
import weakref
from typing import Any, Callable, Deque, Iterator, NamedTuple, Optional, TypeVar

from . import _lib, _library
from ._args import as_int, callable_or_none
from ._library import os_error


class Record(NamedTuple):
    """One record: a sample's bytes, or a count of records the kernel lost."""

    cpu: int
    data: bytes
    lost: int = 0



SampleFn = Callable[[int, bytes], None]
LostFn = Callable[[int, int], None]
_R = TypeVar("_R", bound="RingReader")


class RingReader:
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
        self._count = int(_library.LIB.perfbuf_buffer_cnt(pb))
        self._epoll_fd = int(_library.LIB.perfbuf_epoll_fd(pb))
        self._cpus = [int(_library.LIB.perfbuf_buffer_cpu(pb, i)) for i in range(self._count)]

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
                    raise os_error(-ret, fn.__name__)
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
        i = as_int("index", index)
        self._handle()
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
        timeout_ms = as_int("timeout_ms", timeout_ms)
        self._handle()
        held = self._deliver_held()
        ret = self._drain(_library.LIB.perfbuf_poll, 0 if held else timeout_ms)
        return max(ret, 1) if held else ret

    def consume(self) -> None:
        """Drains every ring without waiting."""
        self._handle()
        self._deliver_held()
        self._drain(_library.LIB.perfbuf_consume)

    def consume_buffer(self, index: int) -> None:
        """Drains ring ``index`` without waiting."""
        i = self._index(index)
        self._deliver_held(self._cpus[i])
        self._drain(_library.LIB.perfbuf_consume_buffer, i)

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
        fn = getattr(_library.LIB, "perfbuf_drain_final", None)
        if fn is None:
            raise OSError(errno.ENOSYS, f"this libperfbuf ({_library.library_version()}) has no perfbuf_drain_final; "
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
        callable_or_none("stop", stop)
        timeout_ms = as_int("timeout_ms", timeout_ms)
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
            ret = _library.LIB.perfbuf_wake(self._handle())
        if ret < 0:
            raise os_error(-ret, "perfbuf_wake")

    def pause(self) -> None:
        """Stops the kernel's output; records produced meanwhile count as lost."""
        self._control(_library.LIB.perfbuf_pause)

    def resume(self) -> None:
        """Resumes output after :meth:`pause`."""
        self._control(_library.LIB.perfbuf_resume)

    def _control(self, fn: Callable[..., int], *args: int) -> int:
        pb = self._acquire()
        try:
            ret = fn(pb, *args)
        finally:
            self._lock.release()
        if ret < 0:
            raise os_error(-ret, fn.__name__)
        return ret

    # -- accessors ------------------------------------------------------------------

    @property
    def buffer_count(self) -> int:
        """Number of rings (online CPUs, bounded by the map's size)."""
        self._handle()
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
        return self._control(_library.LIB.perfbuf_buffer_fd, self._index(index))

    def buffer_cpu(self, index: int) -> int:
        """The CPU ring ``index`` reads; IndexError if there is none."""
        return self._cpus[self._index(index)]

    def stats(self, index: int) -> dict[str, int]:
        """Ring ``index``'s figures, every field of ``struct
        perfbuf_ring_stats``: cpu, records, bytes, lost, wakeups,
        pending_bytes, data_size, resyncs, skipped_bytes, malformed,
        overwritten_bytes, batched, batch_switches, spill_size,
        lost_unreported. ``lost`` is exact at any moment where the ring's
        events count their losses (an event set's rings on Linux 6.0+): it
        includes the ``lost_unreported`` records the kernel has not yet
        written as a lost report."""
        st = _lib.RingStats(sz=ctypes.sizeof(_lib.RingStats))
        self._control(_library.LIB.perfbuf_ring_stats, self._index(index), ctypes.byref(st))  # type: ignore[arg-type]
        return {name: getattr(st, name) for name, _ in _lib.RingStats._fields_ if name not in ("sz", "reserved")}

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
            ret = _library.LIB.perfbuf_buffer(pb, i, ctypes.byref(base), ctypes.byref(size))
            if ret < 0:
                raise os_error(-ret, "perfbuf_buffer")
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
            ret = _library.LIB.perfbuf_ring_peek(pb, i, ctypes.byref(rec), ctypes.byref(size))
            data = ctypes.string_at(rec.value, size.value) if ret == 1 and rec.value else None
        finally:
            self._lock.release()
        if ret < 0:
            raise os_error(-ret, "perfbuf_ring_peek")
        return data

    def advance(self, index: int) -> None:
        """Moves ring ``index``'s read position past the record :meth:`peek`
        shows (``OSError`` ENODATA when there is none)."""
        self._control(_library.LIB.perfbuf_ring_advance, self._index(index))

    def publish(self, index: int) -> None:
        """Frees the space of every record of ring ``index`` advanced past
        (publishes the read position as the ring's ``data_tail``)."""
        self._control(_library.LIB.perfbuf_ring_publish, self._index(index))

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
                _library.LIB.perfbuf_free(pb)
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
                _library.LIB.perfbuf_wake(self._pb)

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



_ring_types: dict[int, type] = {}


def _ring_type(length: int) -> type:
    """A ctypes byte array type of ``length`` whose instances take
    attributes and weak references."""
    t = _ring_types.get(length)
    if t is None:
        t = _ring_types[length] = type("_RingMemory", (ctypes.c_ubyte * length,), {})
    return t
