"""perf.data out: a file of what a reader's rings hold, for ``perf
report``, ``perf script`` and the tools built on perf.data."""
from __future__ import annotations

import ctypes
import os
import threading
from typing import Any, Optional, Union

from . import _library
from ._library import pending, take_pending
from ._ring_reader import RingReader
from ._events import EventSet

PathLike = Union[str, "os.PathLike[str]"]


class PerfDataWriter:
    """A perf.data file being written, fed by a reader's rings.

    ``PerfDataWriter(path, events)`` writes the attrs of ``events`` (an
    :class:`EventSet`; events added to it later join the file when it is
    closed), adds to the set a dummy event asking the kernel for
    COMM/FORK/EXIT/MMAP2 records, and writes COMM and MMAP2 records from
    /proc for the tasks the set watches, as ``perf record`` does. :meth:`bpf_output` makes a file for a
    :class:`~perfbuf.PerfBuffer` over a BPF output map instead.

    Then :meth:`poll` (or :meth:`drain`) with the reader writes every
    record its rings hold, one round at a time; :meth:`close` writes the
    header features. A writer that dies leaves a file perf reads up to its
    last round. Write errors raise ``OSError`` naming the file (ENOSPC for
    a full disk)::

        with EventSet() as events:
            events.add_tracepoint("sched:sched_process_exec")
            with PerfDataWriter("perf.data", events) as out, events.reader() as reader:
                events.enable()
                for _ in range(50):
                    out.poll(reader, 100)
    """

    def __init__(self, path: PathLike, events: Optional[EventSet] = None, *, _bpf_output: bool = False) -> None:
        self._path = os.fspath(path)
        self._lock = threading.Lock()
        self._h: Optional[int] = None
        raw = os.fsencode(self._path)
        if _bpf_output:
            h = _library.LIB.perfbuf_perfdata_new_bpf_output(raw)
        else:
            if not isinstance(events, EventSet):
                raise TypeError(f"events must be an EventSet, not {type(events).__name__}")
            with events._lock:
                h = _library.LIB.perfbuf_perfdata_new_events(raw, events._handle())
        if not h:
            raise self._error(ctypes.get_errno(), "create")
        self._h = h

    @classmethod
    def bpf_output(cls, path: PathLike) -> "PerfDataWriter":
        """A file for a BPF output perf buffer's samples (``perf script -F
        -ip,-sym,-dso,-symoff`` shows them with their bytes)."""
        return cls(path, _bpf_output=True)

    @property
    def path(self) -> str:
        return self._path

    def _error(self, err: int, what: str) -> OSError:
        # libperfbuf's warning names the file and what failed (it is held
        # back for the exception: see _library._Library).
        held = pending()
        text = held[-1] if held else f"cannot {what} {self._path}: {os.strerror(err)}"
        take_pending(text)
        return OSError(err, text, self._path)

    def _handle(self) -> int:
        if self._h is None:
            raise ValueError("PerfDataWriter is closed")
        return self._h

    def drain(self, reader: RingReader) -> int:
        """Writes every record ``reader``'s rings hold now, then ends the
        round; returns the records written."""
        return self._run(reader, "write", lambda h, pb: _library.LIB.perfbuf_perfdata_drain(h, pb))

    def poll(self, reader: RingReader, timeout_ms: int = -1) -> int:
        """Waits up to ``timeout_ms`` (-1: forever) for ``reader``'s rings to
        hold records, then :meth:`drain`s; returns the records written (0:
        the timeout passed, or a signal came). ``OSError(ECANCELED)`` after
        ``reader.wake()`` or when ``reader.close()`` in another thread ends
        the poll; ``ValueError`` once the reader is closed."""
        ms = int(timeout_ms)
        return self._run(reader, "write", lambda h, pb: _library.LIB.perfbuf_perfdata_poll(h, pb, ms))

    def _run(self, reader: RingReader, what: str, call: Any) -> int:
        """``call(writer, buffer)`` with both to itself: the reader's lock
        keeps its close (which wakes this call) from freeing it meanwhile."""
        pb = reader._acquire()
        try:
            with self._lock:
                ret = call(self._handle(), pb)
        finally:
            reader._lock.release()
        if ret < 0:
            raise self._error(-ret, what)
        return int(ret)

    def close(self) -> None:
        """Finishes the file (header features, header) and frees the writer
        (idempotent); raises ``OSError`` if that last write failed."""
        with self._lock:
            h, self._h = self._h, None
        if h is None:
            return
        ret = _library.LIB.perfbuf_perfdata_close(h)
        if ret < 0:
            raise self._error(-ret, "finish")

    def __enter__(self) -> "PerfDataWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
