"""The loss identity and ring health from Python, on the real kernel: a BPF
program built with include/perfbuf.bpf.h (c-tests/bpf/accounted.bpf.c,
loaded by build/libperfbuf_accounted.so) sends numbered records through
the header's counted wrappers; every one is delivered or in one loss
bucket of ``stats()``, and ``health()`` sizes the ring from what it held."""
from __future__ import annotations

import ctypes
import os

import pytest

import perfbuf
from conftest import need_root


class _Accounted(ctypes.Structure):
    _fields_ = [("obj", ctypes.c_void_p)] + [(name, ctypes.c_int) for name in (
        "events_fd", "events_counts_fd", "rb_fd", "rb_counts_fd", "perf_prog_fd", "rb_prog_fd",
        "rb_reserve_prog_fd")]


@pytest.fixture
def accounted():
    lib_path = os.environ.get("PERFBUF_ACCOUNTED_LIBRARY")
    obj = os.environ.get("PERFBUF_ACCOUNTED_BPF_OBJ")
    if not lib_path or not obj:
        pytest.fail("PERFBUF_ACCOUNTED_LIBRARY / _BPF_OBJ are not set (make accounted-lib builds them)")
    lib = ctypes.CDLL(lib_path)
    a = _Accounted()
    err = lib.accounted_open(ctypes.byref(a), obj.encode(), 0)
    if err:
        need_root(f"cannot load {obj}: {os.strerror(-err)} (need root with BPF)")

    def run(cpu: int, size: int, repeat: int) -> int:
        ret = ctypes.c_int(0)
        assert lib.accounted_run(a.perf_prog_fd, cpu, size, repeat, ctypes.byref(ret)) == 0
        return ret.value

    yield a, run
    lib.accounted_close(ctypes.byref(a))


def test_every_record_is_delivered_or_in_one_bucket(accounted):
    a, run = accounted
    seqs = []
    pb = perfbuf.PerfBuffer(a.events_fd, 1, on_sample=lambda cpu, data: seqs.append(int.from_bytes(data[:8], "little")),
                            cpus=[0], count_lost=True, output_counts=a.events_counts_fd)
    try:
        assert run(0, 64, 300) == -28  # -ENOSPC: one page cannot hold the burst
        pb.poll(0)
        pb.count_dropped(0, 3)
        st = pb.stats(0)
        assert st["produced"] == 300
        assert st["samples"] == len(seqs) and st["dropped"] == 3 and st["delivered"] == len(seqs) - 3
        assert st["lost_unreported"] > 0
        assert st["produced"] == st["delivered"] + st["lost_total"]
        assert st["lost_total"] == st["lost"] + st["output_failed"] + st["dropped"]
        assert sorted(seqs) == list(range(len(seqs))), "the first records are read, the rest lost"
        h = pb.health(0)
        assert h["cpu"] == 0 and h["online"] is True and h["data_size"] == 4096
        assert h["peak_pending_bytes"] > 3000 and h["seconds_since_last_record"] is not None
        assert h["needed_bytes"] >= 300 * 80 and h["suggested_pages"] >= 8
        with pytest.raises(ValueError):
            pb.count_dropped(0, -1)
        with pytest.raises(IndexError):
            pb.count_dropped(5, 1)
    finally:
        pb.close()


def test_without_counts_produced_is_none(accounted):
    a, run = accounted
    pb = perfbuf.PerfBuffer(a.events_fd, 8, on_sample=lambda cpu, data: None, cpus=[0], hotplug=False)
    try:
        run(0, 32, 5)
        pb.poll(0)
        st = pb.stats(0)
        assert st["produced"] is None and st["samples"] == 5 and st["output_failed"] == 0
    finally:
        pb.close()


def test_a_map_of_another_kind_is_no_counts_map(accounted):
    a, _ = accounted
    with pytest.raises(OSError) as e:
        perfbuf.PerfBuffer(a.events_fd, 8, output_counts=a.events_fd)
    assert "PERCPU_ARRAY" in str(e.value)
