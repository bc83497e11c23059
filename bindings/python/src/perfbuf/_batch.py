"""Batch reads: everything a drain delivered as one :class:`Batch` (the
samples' bytes packed in one reusable buffer, an entry per sample or loss
report), over libperfbuf's ``perfbuf_poll_batch``. No Python call per
record: the records reach Python as a ``memoryview``, or as a NumPy
structured array when NumPy is installed (it is optional)."""
from __future__ import annotations

import ctypes
import errno
import struct
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


def _in_use(buf: bytearray) -> bool:
    """Whether views of ``buf`` (memoryviews, NumPy arrays) are alive: a
    bytearray with exports cannot grow."""
    try:
        buf.append(0)
    except BufferError:
        return True
    del buf[-1]
    return False


class Batch:
    """What one batch read delivered: ``len(batch)`` entries, each a sample
    (its CPU, its bytes) or a loss report (a CPU and how many records the
    kernel lost there), in order per CPU (a ring buffer's: in the order
    written; its CPU is -1).

    The bytes live in a buffer the reader reuses: a :class:`Batch` is valid
    until the reader's next :meth:`~BatchReading.read_batch` (then its
    methods raise ``RuntimeError``). Views taken from it — :attr:`data`,
    :meth:`record`, :meth:`as_numpy`, :meth:`entries_numpy` — stay valid
    as long as they live: while any is alive, the next read uses a fresh
    buffer instead.
    """

    __slots__ = ("_reader", "_gen", "_data", "_entries", "_count", "_used")

    def __init__(self, reader: "BatchReading", gen: int, data: bytearray, entries: bytearray, count: int,
                 used: int) -> None:
        self._reader, self._gen = reader, gen
        self._data, self._entries, self._count, self._used = data, entries, count, used

    def _check(self) -> None:
        if self._reader._batch_gen != self._gen:
            raise RuntimeError("this Batch was overwritten by a later read_batch: copy what you keep "
                               "(bytes(batch.record(i)), batch.as_numpy(dt).copy()) or keep a view of it")

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
        self._check()
        return memoryview(self._data)[:self._used].toreadonly()

    @property
    def entries(self) -> memoryview:
        """The entries' raw bytes (read-only), 24 per entry: ``struct
        perfbuf_batch_entry`` (u32 cpu, u32 size, u64 offset, u64 lost)."""
        self._check()
        return memoryview(self._entries)[:self._count * ENTRY_SIZE].toreadonly()

    def entry(self, i: int) -> tuple[int, int, int, int]:
        """Entry ``i`` as ``(cpu, size, offset, lost)`` (``cpu`` -1 for a
        ring buffer; ``lost`` > 0 for a loss report, whose size is 0)."""
        self._check()
        if not -self._count <= i < self._count:
            raise IndexError(f"entry {i} out of range: this batch has {self._count}")
        cpu, size, offset, lost = _ENTRY.unpack_from(self._entries, (i % self._count) * ENTRY_SIZE)
        return (-1 if cpu == _NO_CPU else cpu), size, offset, lost

    def record(self, i: int) -> memoryview:
        """Entry ``i``'s bytes (read-only, zero-copy; empty for a loss
        report)."""
        _, size, offset, _ = self.entry(i)
        return memoryview(self._data)[offset:offset + size].toreadonly()

    def __iter__(self) -> Iterator[Record]:
        """Each entry as a :class:`Record` (a copy of its bytes), as
        :meth:`~perfbuf.PerfBuffer.read` gives them."""
        self._check()
        data = self._data
        for cpu, size, offset, lost in _ENTRY.iter_unpack(memoryview(self._entries)[:self._count * ENTRY_SIZE]):
            yield Record(-1 if cpu == _NO_CPU else cpu, bytes(data[offset:offset + size]), lost)

    @property
    def lost(self) -> int:
        """Records the kernel reported lost in this batch (all CPUs)."""
        return sum(n for _, n in self.losses)

    @property
    def losses(self) -> list[tuple[int, int]]:
        """The loss reports, as ``(cpu, count)``."""
        self._check()
        view = memoryview(self._entries)[:self._count * ENTRY_SIZE]
        return [(-1 if cpu == _NO_CPU else cpu, lost) for cpu, _, _, lost in _ENTRY.iter_unpack(view) if lost]

    def entries_numpy(self) -> Any:
        """The entries as a NumPy structured array (zero-copy) of
        :func:`entry_dtype`: fields ``cpu``, ``size``, ``offset``, ``lost``.
        Needs NumPy."""
        self._check()
        import numpy as np
        return np.frombuffer(self._entries, dtype=entry_dtype(), count=self._count)

    def as_numpy(self, dtype: Any) -> Any:
        """The samples as a NumPy structured array of ``dtype`` (your
        record's layout, e.g. ``np.dtype([("pid", "u4"), ("ts", "u8")])``),
        one row per sample in entry order (loss reports left out; their
        CPUs: ``entries_numpy()["cpu"][entries_numpy()["lost"] == 0]``).
        Each row is the first ``dtype.itemsize`` bytes of its sample.

        Zero-copy (a strided view of the batch's buffer) when the samples
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
        first = int(offsets[0])
        if n == 1:
            return np.ndarray((1,), dtype=dt, buffer=self._data, offset=first)
        steps = np.diff(offsets)
        stride = int(steps[0])
        if stride > 0 and bool((steps == stride).all()):
            return np.ndarray((n,), dtype=dt, buffer=self._data, offset=first, strides=(stride,))
        raw = np.frombuffer(self._data, dtype=np.uint8)
        rows = raw[offsets.astype(np.intp)[:, None] + np.arange(dt.itemsize)]
        return rows.view(dt).reshape(n)


class BatchReading:
    """Batch reads for a reader over a C ``struct perf_buffer``
    (:class:`~perfbuf.PerfBuffer`, whether its map is a perf event array or
    a BPF ring buffer)."""

    _batch_gen = 0
    _batch_bufs: Optional[tuple[bytearray, bytearray]] = None

    def _buffers(self, records: int, nbytes: int) -> tuple[bytearray, bytearray]:
        """The reusable buffers, fresh when views of the last ones live or
        the sizes changed."""
        bufs = self._batch_bufs
        if bufs is None or len(bufs[0]) != nbytes or len(bufs[1]) != records * ENTRY_SIZE \
                or _in_use(bufs[0]) or _in_use(bufs[1]):
            bufs = self._batch_bufs = (bytearray(nbytes), bytearray(records * ENTRY_SIZE))
        return bufs

    def read_batch(self, timeout_ms: int = -1, *, max_records: int = DEFAULT_RECORDS,
                   max_bytes: int = DEFAULT_BYTES) -> Batch:
        """Everything the rings hold, up to ``max_records`` entries and
        ``max_bytes`` of samples, as one :class:`Batch`; when they hold
        nothing, waits up to ``timeout_ms`` (-1: forever, 0: not at all)
        for records (an empty batch on timeout). What does not fit stays in
        the rings for the next read (nothing is lost or consumed unseen),
        and :meth:`stats` counts what was read as a poll would. The
        callbacks do not run: read with this *or* poll, not both.

        A sample larger than ``max_bytes`` makes this read take a buffer
        large enough for it. ``OSError(ECANCELED)`` after :meth:`wake`.
        ``perfbuf_poll_batch``."""
        timeout_ms = as_int("timeout_ms", timeout_ms)
        records, nbytes = as_int("max_records", max_records), as_int("max_bytes", max_bytes)
        if records < 2:
            raise ValueError(f"max_records must be at least 2, got {records}")
        if nbytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {nbytes}")
        fn = getattr(_library.LIB.lib, "perfbuf_poll_batch", None)
        if fn is None:
            raise NotImplementedError(f"this libperfbuf ({_library.library_version()}) has no perfbuf_poll_batch: "
                                      "update it")
        data, entries = self._buffers(records, nbytes)
        reader: RingReader = self  # type: ignore[assignment]
        req = _lib.ReadBatch(sz=ctypes.sizeof(_lib.ReadBatch), entry_cnt=records)
        pb = reader._acquire()
        try:
            while True:
                ret = self._read_into(pb, req, data, entries, timeout_ms)
                if ret != -errno.EMSGSIZE or req.needed <= len(data):
                    break
                # The next sample alone is larger than the buffer: it waits
                # in its ring for a read with room for it, now.
                data = bytearray(req.needed)
                self._batch_bufs = (data, entries)
                timeout_ms = 0
        finally:
            reader._lock.release()
        if ret < 0:
            raise os_error(-ret, "perfbuf_poll_batch")
        self._batch_gen += 1
        return Batch(self, self._batch_gen, data, entries, ret, req.data_used)

    @staticmethod
    def _read_into(pb: int, req: Any, data: bytearray, entries: bytearray, timeout_ms: int) -> int:
        # Exported to C for the call only: the buffers' addresses.
        data_c = (ctypes.c_char * len(data)).from_buffer(data) if data else None
        entries_c = (ctypes.c_char * len(entries)).from_buffer(entries)
        try:
            req.data = ctypes.addressof(data_c) if data_c is not None else None
            req.data_size = len(data)
            req.entries = ctypes.addressof(entries_c)
            return int(_library.LIB.perfbuf_poll_batch(pb, ctypes.byref(req), timeout_ms))
        finally:
            del data_c, entries_c
