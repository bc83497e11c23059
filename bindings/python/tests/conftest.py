"""The real kernel: a PERF_EVENT_ARRAY map and a BPF program producing events
(c-tests/producer.c, built as build/libperfbuf_producer.so by make)."""
from __future__ import annotations

import ctypes
import os

import pytest


class _Producer(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_int), ("det_prog_fd", ctypes.c_int), ("stamp_prog_fd", ctypes.c_int)]


class Producer:
    """Emits deterministic samples from a BPF program on a chosen CPU."""

    def __init__(self, lib: ctypes.CDLL, max_entries: int = 0) -> None:
        self.lib = lib
        self.p = _Producer()
        err = lib.producer_open(ctypes.byref(self.p), max_entries)
        if err:
            msg = f"cannot create the BPF producer: {os.strerror(-err)} (need root with BPF)"
            if os.environ.get("CI") == "true":
                pytest.fail(msg)  # under CI a missing capability fails, never skips
            pytest.skip(msg)

    @property
    def map_fd(self) -> int:
        return self.p.map_fd

    def emit(self, cpu: int, n: int, seed: int, repeat: int = 1) -> int:
        """Emits `repeat` samples of n bytes; returns the helper's last result."""
        ret = ctypes.c_int(0)
        err = self.lib.producer_emit_det(ctypes.byref(self.p), cpu, n, seed & 0xFF, repeat, ctypes.byref(ret))
        assert err == 0, os.strerror(-err)
        return ret.value

    def expected(self, n: int, seed: int) -> bytes:
        buf = (ctypes.c_ubyte * n)()
        self.lib.producer_expected(n, seed & 0xFF, buf)
        return bytes(buf)

    def close(self) -> None:
        self.lib.producer_close(ctypes.byref(self.p))


@pytest.fixture(scope="session")
def producer_lib() -> ctypes.CDLL:
    path = os.environ.get("PERFBUF_PRODUCER_LIBRARY")
    if not path:
        pytest.fail("PERFBUF_PRODUCER_LIBRARY is not set (make producer-lib builds it)")
    return ctypes.CDLL(path, use_errno=True)


@pytest.fixture
def producer(producer_lib: ctypes.CDLL):
    p = Producer(producer_lib)
    yield p
    p.close()
