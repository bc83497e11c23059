"""Batch reads: everything a drain delivered as one :class:`Batch` (the
samples' bytes packed in one reusable buffer, an entry per sample or loss
report), over libperfbuf's ``perfbuf_poll_batch``. No Python call per
record: the records reach Python as a ``memoryview``, or as a NumPy
structured array when NumPy is installed (it is optional)."""
from __future__ import annotations

import ctypes
import errno
import select
import struct
import sys
import time
from typing import TYPE_CHECKING, Any, Iterator, Optional

from . import _lib, _library
from ._args import as_int
from ._library import os_error
from ._ring_reader import Record

if TYPE_CHECKING:  # pragma: no cover
    from ._ring_reader import RingReader

# struct perfbuf_batch_entry: u32 cpu, u32 size, u64 offset, u64 lost.
_ENTRY = struct.Struct("=IIQQ")
ENTRY_SIZE = _ENTRY.size  # 24
_NO_CPU = 0xFFFF_FFFF

DEFAULT_RECORDS = 16384
DEFAULT_BYTES = 1 << 20


def entry_dtype() -> Any:
    """The NumPy dtype of an entry: ``cpu`` (int32, -1 for a ring buffer),
    ``size`` (uint32), ``offset`` (uint64), ``lost`` (uint64)."""
    import numpy as np
    return np.dtype([("cpu", "=i4"), ("size", "=u4"), ("offset", "=u8"), ("lost", "=u8")])


class _Buffers:
    """A batch read's memory (ctypes arrays: fixed addresses, which C gets
    once), and the request that points at it."""

    __slots__ = ("data", "entries", "req")

    def __init__(self, records: int, nbytes: int) -> None:
        self.data = (ctypes.c_ubyte * max(nbytes, 1))()
        self.entries = (ctypes.c_ubyte * (records * ENTRY_SIZE))()
        self.req = _lib.ReadBatch(sz=ctypes.sizeof(_lib.ReadBatch), data=ctypes.addressof(self.data),
                                  data_size=nbytes, entries=ctypes.addressof(self.entries), entry_cnt=records)

    def in_use(self) -> bool:
        """Whether views of the memory (memoryviews, NumPy arrays) are
        alive: each holds a reference to the array it views (the two here
        are this object's and the call's)."""
        return sys.getrefcount(self.data) > 2 or sys.getrefcount(self.entries) > 2

    def fits(self, records: int, nbytes: int) -> bool:
        return self.req.entry_cnt == records and self.req.data_size == nbytes


class Batch:
    """What one batch read delivered: ``len(batch)`` entries, each a sample
    (its CPU, its bytes) or a loss report (a CPU and how many records the
    kernel lost there), in order per CPU (a ring buffer's: in the order
    written; its CPU is -1).

    The bytes live in memory the reader reuses: a :class:`Batch` is valid
    until the reader's next :meth:`~BatchReading.read_batch` (then its
    methods raise ``RuntimeError``). Views taken from it — :attr:`data`,
    :meth:`record`, :meth:`as_numpy`, :meth:`entries_numpy` — stay valid
    as long as they live: while any is alive, the next read uses fresh
    memory instead.
    """

    __slots__ = ("_reader", "_gen", "_bufs", "_count", "_used")

    def __init__(self, reader: "BatchReading", gen: int, bufs: _Buffers, count: int, used: int) -> None:
        self._reader, self._gen, self._bufs, self._count, self._used = reader, gen, bufs, count, used

    def _check(self) -> _Buffers:
        if self._reader._batch_gen != self._gen:
            raise RuntimeError("this Batch was overwritten by a later read_batch: copy what you keep "
                               "(bytes(batch.record(i)), batch.as_numpy(dt).copy()) or keep a view of it")
        return self._bufs

    def _entry_view(self) -> memoryview:
        return memoryview(self._check().entries).cast("B")[:self._count * ENTRY_SIZE]

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __repr__(self) -> str:
        return f"<perfbuf.Batch of {self._count} entries, {self._used} bytes>"

    @property
    def data(self) -> memoryview:
        """The samples' bytes (read-only): entry ``i``'s are
        ``data[offset:offset + size]``, each ``offset`` a multiple of 8."""
        return memoryview(self._check().data).cast("B")[:self._used].toreadonly()

    @property
    def entries(self) -> memoryview:
        """The entries' raw bytes (read-only), 24 per entry: ``struct
        perfbuf_batch_entry`` (u32 cpu, u32 size, u64 offset, u64 lost)."""
        return self._entry_view().toreadonly()

    def entry(self, i: int) -> tuple[int, int, int, int]:
        """Entry ``i`` as ``(cpu, size, offset, lost)`` (``cpu`` -1 for a
        ring buffer; ``lost`` > 0 for a loss report, whose size is 0)."""
        bufs = self._check()
        if not -self._count <= i < self._count:
            raise IndexError(f"entry {i} out of range: this batch has {self._count}")
        cpu, size, offset, lost = _ENTRY.unpack_from(bufs.entries, (i % self._count) * ENTRY_SIZE)
        return (-1 if cpu == _NO_CPU else cpu), size, offset, lost

    def record(self, i: int) -> memoryview:
        """Entry ``i``'s bytes (read-only, zero-copy; empty for a loss
        report)."""
        _, size, offset, _ = self.entry(i)
        return memoryview(self._bufs.data).cast("B")[offset:offset + size].toreadonly()

    def __iter__(self) -> Iterator[Record]:
        """Each entry as a :class:`Record` (a copy of its bytes), as
        :meth:`~perfbuf.PerfBuffer.read` gives them."""
        view = self._entry_view()
        data = memoryview(self._bufs.data).cast("B")
        for cpu, size, offset, lost in _ENTRY.iter_unpack(view):
            yield Record(-1 if cpu == _NO_CPU else cpu, bytes(data[offset:offset + size]), lost)

    @property
    def lost(self) -> int:
        """Records the kernel reported lost in this batch (all CPUs)."""
        return sum(n for _, n in self.losses)

    @property
    def losses(self) -> list[tuple[int, int]]:
        """The loss reports, as ``(cpu, count)``."""
        return [(-1 if cpu == _NO_CPU else cpu, lost)
                for cpu, _, _, lost in _ENTRY.iter_unpack(self._entry_view()) if lost]

    def entries_numpy(self) -> Any:
        """The entries as a NumPy structured array (zero-copy) of
        :func:`entry_dtype`: fields ``cpu``, ``size``, ``offset``, ``lost``.
        Needs NumPy."""
        bufs = self._check()
        import numpy as np
        return np.frombuffer(bufs.entries, dtype=entry_dtype(), count=self._count)

    def as_numpy(self, dtype: Any) -> Any:
        """The samples as a NumPy structured array of ``dtype`` (your
        record's layout, e.g. ``np.dtype([("pid", "u4"), ("ts", "u8")])``),
        one row per sample in entry order (loss reports left out; their
        CPUs: ``entries_numpy()["cpu"][entries_numpy()["lost"] == 0]``).
        Each row is the first ``dtype.itemsize`` bytes of its sample.

        Zero-copy (a strided view of the batch's memory) when the samples
        sit at one stride, as samples of one size do; a copy otherwise.
        ``ValueError`` when a sample is shorter than ``dtype``. Needs NumPy."""
        import numpy as np
        dt = np.dtype(dtype)
        ent = self.entries_numpy()
        samples = ent[ent["lost"] == 0] if bool(ent["lost"].any()) else ent
        n = len(samples)
        if n == 0:
            return np.empty(0, dtype=dt)
        sizes, offsets = samples["size"], samples["offset"]
        if int(sizes.min()) < dt.itemsize:
            raise ValueError(f"a sample of {int(sizes.min())} bytes is shorter than the dtype's {dt.itemsize}")
        data, first = self._bufs.data, int(offsets[0])
        if n == 1:
            return np.ndarray((1,), dtype=dt, buffer=data, offset=first)
        steps = np.diff(offsets)
        stride = int(steps[0])
        if stride > 0 and bool((steps == stride).all()):
            return np.ndarray((n,), dtype=dt, buffer=data, offset=first, strides=(stride,))
        raw = np.frombuffer(data, dtype=np.uint8)
        rows = raw[offsets.astype(np.intp)[:, None] + np.arange(dt.itemsize)]
        return rows.view(dt).reshape(n)


# A batch that came back with less room than this left may have left
# records in the rings (the largest perf record is 64 KiB).
_SLACK = 1 << 16


class BatchReading:
    """Batch reads for a reader over a C ``struct perf_buffer``
    (:class:`~perfbuf.PerfBuffer`, whether its map is a perf event array or
    a BPF ring buffer)."""

    _batch_gen = 0
    _batch_bufs: Optional[_Buffers] = None
    _batch_full = False  # the last batch may have left records behind
    _batch_poller: Any = None

    def read_batch(self, timeout_ms: int = -1, *, max_records: int = DEFAULT_RECORDS,
                   max_bytes: int = DEFAULT_BYTES) -> Batch:
        """Waits up to ``timeout_ms`` (-1: forever, 0: not at all) for the
        rings to signal, as :meth:`poll` does, and returns what they hold,
        up to ``max_records`` entries and ``max_bytes`` of samples, as one
        :class:`Batch` (empty on timeout). What does not fit stays in the
        rings, and the next call takes it at once, without waiting: nothing
        is lost or consumed unseen, and :meth:`stats` counts what was read
        as a poll would. The callbacks do not run: read with this *or*
        poll, not both.

        Waiting first is what lets the fast mode (``fast=True``) batch its
        wake-ups: a reader that read again at once would take a few records
        at a time and never wait.

        A sample larger than ``max_bytes`` makes this read take memory
        large enough for it. ``OSError(ECANCELED)`` after :meth:`wake`.
        ``perfbuf_poll_batch``."""
        if type(timeout_ms) is not int:
            timeout_ms = as_int("timeout_ms", timeout_ms)
        if max_records != DEFAULT_RECORDS or max_bytes != DEFAULT_BYTES:
            max_records, max_bytes = as_int("max_records", max_records), as_int("max_bytes", max_bytes)
            if max_records < 2:
                raise ValueError(f"max_records must be at least 2, got {max_records}")
            if max_bytes < 0:
                raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        fn = getattr(_library.LIB.lib, "perfbuf_poll_batch", None)
        if fn is None:
            raise NotImplementedError(f"this libperfbuf ({_library.library_version()}) has no perfbuf_poll_batch: "
                                      "update it")
        bufs = self._batch_bufs
        if bufs is None or not bufs.fits(max_records, max_bytes) or bufs.in_use():
            bufs = self._batch_bufs = _Buffers(max_records, max_bytes)
        reader: RingReader = self  # type: ignore[assignment]
        pb = reader._acquire()
        try:
            ret = self._read_waiting_first(pb, bufs, timeout_ms)
            if ret == -errno.EMSGSIZE and bufs.req.needed > bufs.req.data_size:
                # The next sample alone is larger than the memory: it waits
                # in its ring for a read with room for it, now.
                bufs = _Buffers(max_records, bufs.req.needed)
                ret = _library.LIB.perfbuf_poll_batch(pb, ctypes.byref(bufs.req), 0)
        finally:
            reader._lock.release()
        if ret < 0:
            raise os_error(-ret, "perfbuf_poll_batch")
        req = bufs.req
        self._batch_full = ret == req.entry_cnt or req.data_size - req.data_used < _SLACK
        self._batch_gen += 1
        return Batch(self, self._batch_gen, bufs, ret, req.data_used)

    def _read_waiting_first(self, pb: int, bufs: _Buffers, timeout_ms: int) -> int:
        """Records left by a full batch at once; otherwise a wait on the
        buffer's epoll fd, then ``perfbuf_poll_batch(.., 0)`` (which reads,
        and takes a tick of the fast mode's timer or a wake-up)."""
        req = ctypes.byref(bufs.req)
        if self._batch_full:
            ret = int(_library.LIB.perfbuf_poll_batch(pb, req, 0))
            if ret != 0 or timeout_ms == 0:
                return ret
        poller = self._batch_poller
        if poller is None:
            poller = self._batch_poller = select.poll()
            poller.register(self._epoll_fd, select.POLLIN)  # type: ignore[attr-defined]
        deadline = None if timeout_ms < 0 else time.monotonic() + timeout_ms / 1000
        while True:
            left = -1 if deadline is None else max(0, round((deadline - time.monotonic()) * 1000))
            if not poller.poll(left):
                return 0
            ret = int(_library.LIB.perfbuf_poll_batch(pb, req, 0))
            if ret != 0:
                return ret
            # Signalled, yet nothing to read: a wake-up (or a tick, or
            # records read already), which the library's own wait takes.
            ret = int(_library.LIB.perfbuf_poll_batch(pb, req, 1))
            if ret != 0 or left == 0:
                return ret
