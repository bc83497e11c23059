"""RingBuffer on the real kernel: a BPF_MAP_TYPE_RINGBUF written by the
repository's BPF producer (c-tests/producer.c, producer_open_ringbuf)."""
from __future__ import annotations

import ctypes
import errno
import os
import struct
import time

import pytest

from perfbuf import RingBuffer


class _RingProducer(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in ("map_fd", "scratch_fd", "stats_fd", "prog_fd", "ctl_prog_fd")]


OUTPUT, RESERVE_SUBMIT, RESERVE_DISCARD = 0, 1, 2
BPF_RB_NO_WAKEUP = 1


class RingProducer:
    def __init__(self, lib: ctypes.CDLL, size: int) -> None:
        self.lib = lib
        self.p = _RingProducer()
        err = lib.producer_open_ringbuf(ctypes.byref(self.p), size)
        if err:
            msg = f"cannot create the BPF ring buffer producer: {os.strerror(-err)} (need root with BPF)"
            if os.environ.get("CI") == "true":
                pytest.fail(msg)
            pytest.skip(msg)

    @property
    def map_fd(self) -> int:
        return self.p.map_fd

    def emit(self, n: int, seed: int, repeat: int = 1) -> int:
        ret = ctypes.c_int(0)
        err = self.lib.producer_emit_ringbuf(ctypes.byref(self.p), 0, n, seed & 0xFF, repeat, ctypes.byref(ret))
        assert err == 0, os.strerror(-err)
        return ret.value

    def ctl(self, op: int, flags: int, meta: int) -> int:
        ret = ctypes.c_int(0)
        err = self.lib.producer_ringbuf_ctl(ctypes.byref(self.p), 0, op, flags, ctypes.c_uint64(meta),
                                            ctypes.byref(ret))
        assert err == 0, os.strerror(-err)
        return ret.value

    def expected(self, n: int, seed: int) -> bytes:
        buf = (ctypes.c_ubyte * n)()
        self.lib.producer_expected(n, seed & 0xFF, buf)
        return bytes(buf)

    def close(self) -> None:
        self.lib.producer_close_ringbuf(ctypes.byref(self.p))


@pytest.fixture
def ring(producer_lib: ctypes.CDLL):
    p = RingProducer(producer_lib, 4 * os.sysconf("SC_PAGE_SIZE"))
    yield p
    p.close()


def test_records_in_order_to_the_callback(ring: RingProducer) -> None:
    got: list[bytes] = []
    sizes = [8, 13, 64, 255]
    with RingBuffer(ring.map_fd, on_sample=got.append) as rb:
        assert rb.size() == 4 * os.sysconf("SC_PAGE_SIZE")
        for i, n in enumerate(sizes):
            assert ring.emit(n, i) == 0
        assert rb.available() == sum(8 + (n + 7) // 8 * 8 for n in sizes)
        assert rb.poll(1000) == len(sizes)
        assert rb.available() == 0
        assert rb.poll(0) == 0
    assert got == [ring.expected(n, i) for i, n in enumerate(sizes)]


def test_read_without_callback_skips_discarded(ring: RingProducer) -> None:
    with RingBuffer(ring.map_fd) as rb:
        for i, op in enumerate([RESERVE_SUBMIT, RESERVE_DISCARD, OUTPUT]):
            assert ring.ctl(op, BPF_RB_NO_WAKEUP, 100 + i) == 0
        # No wake-up was sent: poll finds nothing, consume reads them.
        assert rb.poll(50) == 0
        assert rb.consume() == 2
        assert [struct.unpack("<QQ", r) for r in rb.read(0)] == [(100, 100), (102, 102)]
        ring.emit(16, 1, repeat=3)
        assert list(rb.records(timeout_ms=100)) == [ring.expected(16, 1)] * 3


def test_callback_exception_stops_and_is_raised(ring: RingProducer) -> None:
    seen: list[bytes] = []

    def on_sample(data: bytes) -> None:
        seen.append(data)
        if len(seen) == 2:
            raise RuntimeError("stop here")

    with RingBuffer(ring.map_fd, on_sample) as rb:
        ring.emit(16, 7, repeat=4)
        with pytest.raises(RuntimeError, match="stop here"):
            rb.poll(1000)
        assert len(seen) == 2
        # The record that raised was consumed; the rest wait for the next call.
        assert rb.consume() == 2
        assert len(seen) == 4


def test_two_maps(producer_lib: ctypes.CDLL, ring: RingProducer) -> None:
    other = RingProducer(producer_lib, os.sysconf("SC_PAGE_SIZE"))
    try:
        a: list[bytes] = []
        b: list[bytes] = []
        with RingBuffer(ring.map_fd, a.append) as rb:
            rb.add(other.map_fd, b.append)
            ring.emit(8, 1)
            other.emit(8, 2, repeat=2)
            deadline = time.monotonic() + 2
            while len(a) + len(b) < 3 and time.monotonic() < deadline:
                rb.poll(100)
            assert (a, b) == ([ring.expected(8, 1)], [ring.expected(8, 2)] * 2)
            with pytest.raises(FileExistsError):
                rb.add(other.map_fd, b.append)
    finally:
        other.close()


def test_errors(producer) -> None:
    with pytest.raises(OSError) as e:
        RingBuffer(producer.map_fd)
    assert e.value.errno == errno.EINVAL
    assert "BPF_MAP_TYPE_PERF_EVENT_ARRAY, not a BPF_MAP_TYPE_RINGBUF" in str(e.value)
    r, w = os.pipe()
    try:
        with pytest.raises(OSError, match="not a BPF map"):
            RingBuffer(r)
    finally:
        os.close(r)
        os.close(w)
    with pytest.raises(TypeError, match="BPF_MAP_TYPE_RINGBUF"):
        RingBuffer("3")  # type: ignore[arg-type]


def test_close(ring: RingProducer) -> None:
    rb = RingBuffer(ring.map_fd)
    rb.close()
    rb.close()
    for call in (lambda: rb.poll(0), rb.consume, rb.epoll_fd, lambda: rb.add(ring.map_fd)):
        with pytest.raises(ValueError, match="closed"):
            call()
    # BPF still writes after the reader is gone; the map is the caller's.
    assert ring.emit(8, 0) == 0


def test_perf_buffer_reads_a_ring_buffer_too(ring: RingProducer) -> None:
    """The same PerfBuffer code reads either map kind (perfbuf_new
    recognises the map's type): a ring buffer's records come whole, with
    CPU -1 (a ring buffer does not say which CPU wrote a record)."""
    from perfbuf import PerfBuffer
    got: list[tuple[int, bytes]] = []
    sizes = [8, 13, 64]
    with PerfBuffer(ring.map_fd, on_sample=lambda cpu, data: got.append((cpu, bytes(data)))) as pb:
        for i, n in enumerate(sizes):
            assert ring.emit(n, i) == 0
        deadline = time.monotonic() + 5
        while len(got) < len(sizes) and time.monotonic() < deadline:
            pb.poll(100)
        assert pb.stats(0)["lost"] == 0
    assert got == [(-1, ring.expected(n, i)) for i, n in enumerate(sizes)]
