"""The BPF ring buffer (BPF_MAP_TYPE_RINGBUF): :class:`RingBuffer`."""
from __future__ import annotations

import ctypes
import errno
import os
import threading
import weakref
from typing import Callable, Iterator, Optional

from . import _lib, _library
from ._args import as_int, callable_or_none
from ._library import os_error

RingSampleFn = Callable[[bytes], None]

# What a callback's C trampoline returns when the Python callback raised:
# a negative value stops libperfbuf's drain at once (libbpf's rule).
_STOP = -errno.ECANCELED


def _map_kind(fd: int) -> Optional[str]:
    """The map type the kernel shows for fd (``"27"`` is a ring buffer), or
    what fd is when it is not a BPF map (e.g. ``pipe:[1234]``)."""
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("map_type:"):
                    return line.split(":", 1)[1].strip()
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


_MAP_TYPES = {"4": "BPF_MAP_TYPE_PERF_EVENT_ARRAY", "1": "BPF_MAP_TYPE_HASH", "2": "BPF_MAP_TYPE_ARRAY"}


class RingBuffer:
    """A reader of BPF ring buffers (``BPF_MAP_TYPE_RINGBUF``: BPF's
    ``bpf_ringbuf_output``, ``bpf_ringbuf_reserve``/``submit``), over
    libperfbuf's ``ring_buffer__*`` functions (libbpf's API, looked up in
    libperfbuf itself, so a process that also loaded libbpf still reads
    through libperfbuf).

    ``on_sample(data)`` gets each record's bytes, in the order BPF reserved
    them; discarded records are never delivered. Without a callback, use
    :meth:`read` or :meth:`records` to pull records instead. More maps can
    be read by the same buffer with :meth:`add` (each with its callback).

    A ring buffer has no per-CPU rings and no lost count: a full ring makes
    the BPF program's output fail (``-EAGAIN``), which the kernel does not
    count.

    An exception raised by a callback stops the poll or consume that called
    it and is re-raised from there; the record that raised is consumed, the
    ones after it stay in the ring for the next call.

    Threading: one thread at a time polls and calls the other methods;
    :meth:`close` from another thread waits for a running poll to return
    (so poll with a timeout if you close from elsewhere).
    """

    def __init__(self, map_fd: int, on_sample: Optional[RingSampleFn] = None) -> None:
        map_fd = self._check_fd(map_fd)
        callable_or_none("on_sample", on_sample)
        self._lock = threading.Lock()
        self._rb: Optional[int] = None
        self._error: Optional[BaseException] = None
        self._queue: list[bytes] = []
        self._callbacks: list[object] = []
        cb = self._trampoline(on_sample)
        rb = _library.LIB.ring_buffer__new(map_fd, cb, None, None)
        if not rb:
            raise self._open_error(ctypes.get_errno(), "ring_buffer__new", map_fd)
        self._rb = rb
        self._maps = [map_fd]

    @staticmethod
    def _check_fd(map_fd: int) -> int:
        try:
            return as_int("map_fd", map_fd)
        except TypeError as e:
            raise TypeError(f"{e} (the fd of a BPF_MAP_TYPE_RINGBUF)") from None

    @staticmethod
    def _open_error(err: int, what: str, map_fd: int) -> OSError:
        e = os_error(err, what)
        if err in (errno.EINVAL, errno.EBADF, errno.EBADFD):
            kind = _map_kind(map_fd)
            if kind is not None and kind != "27":
                kind = _MAP_TYPES.get(kind, f"map of type {kind}" if kind.isdigit() else f"{kind}, not a BPF map")
                e = OSError(err, f"{e.strerror}; map_fd {map_fd} is a {kind}, not a BPF_MAP_TYPE_RINGBUF")
        return e

    def _trampoline(self, on_sample: Optional[RingSampleFn]) -> object:
        # The C callback holds only a weak reference, so that dropping the
        # last reference to the buffer frees it at once.
        ref = weakref.ref(self)

        def sample(_ctx: Optional[int], data: Optional[int], size: int) -> int:
            rb = ref()
            if rb is None:
                return 0
            rec = ctypes.string_at(data, size) if size else b""
            if on_sample is None:
                rb._queue.append(rec)
                return 0
            try:
                on_sample(rec)
            except BaseException as e:  # re-raised by the call that drained
                rb._error = e
                return _STOP
            return 0

        cb = _lib.RB_SAMPLE_FN(sample)
        self._callbacks.append(cb)  # alive as long as the handle
        return cb

    def add(self, map_fd: int, on_sample: Optional[RingSampleFn] = None) -> None:
        """Reads the ring buffer map ``map_fd`` too, its records going to
        ``on_sample`` (or to :meth:`read` without one)."""
        map_fd = self._check_fd(map_fd)
        callable_or_none("on_sample", on_sample)
        with self._lock:
            ret = _library.LIB.ring_buffer__add(self._handle(), map_fd, self._trampoline(on_sample), None)
            if ret < 0:
                raise self._open_error(-ret, "ring_buffer__add", map_fd)
            self._maps.append(map_fd)

    def _handle(self) -> int:
        if self._rb is None:
            raise ValueError("the ring buffer is closed")
        return self._rb

    def _drain(self, what: str, fn: Callable[..., int], *args: int) -> int:
        with self._lock:
            ret = fn(self._handle(), *args)
        if self._error is not None:
            e, self._error = self._error, None
            raise e
        if ret < 0:
            raise os_error(-ret, what)
        return ret

    def poll(self, timeout_ms: int = -1) -> int:
        """Waits up to ``timeout_ms`` (-1: forever, 0: not at all) for
        records and delivers them; returns how many (0 on timeout). A
        signal raises ``InterruptedError`` (EINTR, not retried, as libbpf)."""
        return self._drain("ring_buffer__poll", _library.LIB.ring_buffer__poll, as_int("timeout_ms", timeout_ms))

    def consume(self) -> int:
        """Delivers every record the rings hold, without waiting; returns how many."""
        return self._drain("ring_buffer__consume", _library.LIB.ring_buffer__consume)

    def read(self, timeout_ms: int = -1) -> list[bytes]:
        """Without ``on_sample``: polls (as :meth:`poll`) and returns the
        records' bytes, possibly none."""
        if self._queue:
            self.consume()
        else:
            self.poll(timeout_ms)
        out, self._queue = self._queue, []
        return out

    def records(self, timeout_ms: int = -1) -> Iterator[bytes]:
        """Without ``on_sample``: yields records as they come, until a poll
        times out (forever with -1) or the buffer is closed."""
        while self._rb is not None:
            batch = self.read(timeout_ms)
            if not batch and timeout_ms >= 0:
                return
            yield from batch

    def run(self, stop: Optional[Callable[[], bool]] = None, timeout_ms: int = 100) -> None:
        """Polls until ``stop()`` returns true (checked every ``timeout_ms``)
        or Ctrl-C."""
        try:
            while stop is None or not stop():
                try:
                    self.poll(timeout_ms)
                except InterruptedError:
                    continue
        except KeyboardInterrupt:
            pass

    def available(self, index: int = 0) -> int:
        """The bytes waiting in map ``index`` (in the order added)."""
        with self._lock:
            ring = _library.LIB.ring_buffer__ring(self._handle(), as_int("index", index))
            if not ring:
                raise IndexError(f"ring index {index} out of range: {len(self._maps)} maps")
            return int(_library.LIB.ring__avail_data_size(ring))

    def size(self, index: int = 0) -> int:
        """The size in bytes of map ``index``'s ring (its max_entries)."""
        with self._lock:
            ring = _library.LIB.ring_buffer__ring(self._handle(), as_int("index", index))
            if not ring:
                raise IndexError(f"ring index {index} out of range: {len(self._maps)} maps")
            return int(_library.LIB.ring__size(ring))

    def epoll_fd(self) -> int:
        """The epoll fd over every map (owned by the buffer): readable when
        a map holds records, for an event loop (``selectors``, asyncio)."""
        return int(_library.LIB.ring_buffer__epoll_fd(self._handle()))

    def fileno(self) -> int:
        """:meth:`epoll_fd`, so the buffer can be passed to ``select``."""
        return self.epoll_fd()

    def close(self) -> None:
        """Frees the buffer (the map fds stay the caller's). Closing twice
        is a no-op; any other call then raises ``ValueError``."""
        with self._lock:
            rb, self._rb = self._rb, None
            if rb is not None:
                _library.LIB.ring_buffer__free(rb)

    def __enter__(self) -> "RingBuffer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_rb", None) is not None:
            _library.LIB.ring_buffer__free(self._rb)
            self._rb = None
