"""Batch reads (PerfBuffer.read_batch) on the real kernel: nothing lost,
records whole and in order per CPU with their CPUs, partial reads leaving
the rest in the rings, the NumPy view equal to the records' bytes, losses
reported, a ring buffer read the same way, batches that outlive their
buffer safely, and the package without NumPy."""
from __future__ import annotations

import os
import textwrap

import pytest

from conftest import Producer, run_python
from perfbuf import Batch, PerfBuffer
from test_ring_buffer import RingProducer


def _cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))[:2]


def test_every_record_comes_whole_and_in_order_per_cpu(producer: Producer) -> None:
    cpus = _cpus()
    sizes = [8, 13, 64, 100, 1000, 64]
    rounds = 30
    got: dict[int, list[bytes]] = {cpu: [] for cpu in cpus}
    reads = 0
    with PerfBuffer(producer.map_fd, page_cnt=64, cpus=cpus) as pb:
        for r in range(rounds):
            for cpu in cpus:
                assert producer.emit(cpu, sizes[r % len(sizes)], r + 50 * cpu) == 0
        # 7 entries at a time: reads stop inside a ring, the rest waits.
        first = pb.read_batch(0, max_records=7)
        assert len(first) == 7
        assert pb.stats(0)["records"] == 7 and pb.stats(0)["pending_bytes"] > 0
        batch: Batch = first
        while len(batch):
            reads += 1
            for i in range(len(batch)):
                cpu, size, offset, lost = batch.entry(i)
                assert lost == 0 and offset % 8 == 0 and len(batch.record(i)) == size
                got[cpu].append(bytes(batch.record(i)))
            batch = pb.read_batch(0, max_records=7, max_bytes=2048)
        for i, cpu in enumerate(cpus):
            s = pb.stats(i)
            assert (s["records"], s["lost"], s["pending_bytes"]) == (rounds, 0, 0)
    assert reads >= rounds * len(cpus) // 7
    for cpu in cpus:
        assert len(got[cpu]) == rounds
        for r, data in enumerate(got[cpu]):
            n = sizes[r % len(sizes)]
            # Padded by the kernel with its 4-byte size to 8 bytes.
            assert len(data) == (n + 4 + 7) // 8 * 8 - 4
            assert data[:n] == producer.expected(n, r + 50 * cpu), f"cpu {cpu} record {r}"


def test_records_iterate_as_the_callbacks_get_them(producer: Producer) -> None:
    seen: list[tuple[int, bytes]] = []
    with PerfBuffer(producer.map_fd, on_sample=lambda cpu, data: seen.append((cpu, data))) as pb:
        assert producer.emit(0, 40, 7, 3) == 0
        pb.poll(0)
        assert producer.emit(0, 40, 7, 3) == 0
        batch = pb.read_batch(1000)
        assert [(r.cpu, r.data, r.lost) for r in batch] == [(cpu, d, 0) for cpu, d in seen]
        assert batch.lost == 0 and batch.losses == []


def test_the_numpy_view_equals_the_records(producer: Producer) -> None:
    import numpy as np
    dt = np.dtype([("first", "<u8"), ("rest", "V56")])
    with PerfBuffer(producer.map_fd, page_cnt=64, cpus=[0]) as pb:
        for seed in range(100):
            assert producer.emit(0, 64, seed) == 0
        batch = pb.read_batch(0)
        assert len(batch) == 100
        arr = batch.as_numpy(dt)
        assert arr.shape == (100,) and arr.dtype == dt
        # Zero-copy: a strided view of the batch's buffer (72-byte stride).
        assert arr.strides == (72,) and not arr.flags.owndata
        for i in range(100):
            assert arr[i].tobytes() == bytes(batch.record(i))[:64]
            assert bytes(batch.record(i))[:64] == producer.expected(64, i)
        ent = batch.entries_numpy()
        assert (ent["cpu"] == 0).all() and (ent["size"] == 68).all() and (ent["lost"] == 0).all()
        assert list(ent["offset"][:3]) == [0, 72, 144]
        # Samples of several sizes: a copy, still equal.
        for seed, n in enumerate([64, 100, 64, 200]):
            assert producer.emit(0, n, seed) == 0
        mixed = pb.read_batch(0)
        arr = mixed.as_numpy(dt)
        assert arr.flags.owndata or arr.base is not None
        assert [arr[i].tobytes() for i in range(4)] == [bytes(mixed.record(i))[:64] for i in range(4)]
        with pytest.raises(ValueError, match="shorter"):
            mixed.as_numpy(np.dtype("V128"))


def test_losses_come_as_entries(producer: Producer) -> None:
    with PerfBuffer(producer.map_fd, page_cnt=1, cpus=[0]) as pb:
        assert producer.emit(0, 64, 1, 300) < 0  # the burst overflows one page
        samples = 0
        losses: list[tuple[int, int]] = []
        for _ in range(2):
            while True:
                batch = pb.read_batch(0, max_records=16)
                if not batch:
                    break
                samples += sum(1 for r in batch if not r.lost)
                losses += batch.losses
            assert producer.emit(0, 64, 2) == 0  # carries the kernel's lost record
        assert len(losses) == 1 and losses[0][0] == 0
        assert samples + losses[0][1] == 301
        s = pb.stats(0)
        assert (s["samples"], s["lost"]) == (samples, losses[0][1])


def test_a_ring_buffer_is_read_in_batches_too(producer_lib) -> None:
    import numpy as np
    ring = RingProducer(producer_lib, 4 * os.sysconf("SC_PAGE_SIZE"))
    try:
        with PerfBuffer(ring.map_fd) as pb:
            sizes = [8, 13, 64, 1000]
            for i in range(12):
                assert ring.emit(sizes[i % 4], i) == 0
            got = []
            while True:
                batch = pb.read_batch(0, max_records=3, max_bytes=1100)
                if not batch:
                    break
                got += [(r.cpu, r.data) for r in batch]
            assert got == [(-1, ring.expected(sizes[i % 4], i)) for i in range(12)]
            for i in range(5):
                assert ring.emit(64, i) == 0
            arr = pb.read_batch(0).as_numpy(np.dtype("V64"))
            assert [a.tobytes() for a in arr] == [ring.expected(64, i) for i in range(5)]
            assert pb.stats(0)["lost"] == 0
    finally:
        ring.close()


def test_views_outlive_the_batch_and_a_stale_batch_refuses(producer: Producer) -> None:
    with PerfBuffer(producer.map_fd, cpus=[0]) as pb:
        assert producer.emit(0, 64, 1) == 0
        old = pb.read_batch(0)
        kept = old.record(0)
        assert producer.emit(0, 64, 2) == 0
        new = pb.read_batch(0)
        # The kept view still shows the first record: the new read took a
        # fresh buffer while the view lived.
        assert bytes(kept)[:64] == producer.expected(64, 1)
        assert bytes(new.record(0))[:64] == producer.expected(64, 2)
        with pytest.raises(RuntimeError, match="overwritten"):
            old.record(0)
        # A large record gets a buffer large enough for it.
        assert producer.emit(0, 1000, 3) == 0
        big = pb.read_batch(0, max_bytes=128)
        assert bytes(big.record(0))[:1000] == producer.expected(1000, 3)
        with pytest.raises(ValueError):
            pb.read_batch(0, max_records=1)


def test_batches_work_without_numpy() -> None:
    code = textwrap.dedent("""
        import ctypes, os, sys
        sys.modules["numpy"] = None  # import numpy now fails
        from conftest import Producer
        from perfbuf import PerfBuffer
        p = Producer(ctypes.CDLL(os.environ["PERFBUF_PRODUCER_LIBRARY"], use_errno=True))
        with PerfBuffer(p.map_fd, cpus=[0]) as pb:
            assert p.emit(0, 64, 5, 10) == 0
            batch = pb.read_batch(0)
            assert len(batch) == 10 and all(bytes(batch.record(i))[:64] == p.expected(64, 5) for i in range(10))
            try:
                batch.as_numpy("V64")
            except ImportError:
                print("no numpy: ok")
        p.close()
    """)
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert "no numpy: ok" in out.stdout


def test_a_waiting_read_batch_is_woken_and_times_out(producer: Producer) -> None:
    import errno
    import threading
    import time
    with PerfBuffer(producer.map_fd, cpus=[0], fast=True) as pb:
        t0 = time.monotonic()
        assert len(pb.read_batch(50)) == 0
        assert time.monotonic() - t0 >= 0.045
        threading.Timer(0.05, pb.wake).start()
        with pytest.raises(OSError) as e:
            pb.read_batch(5000)
        assert e.value.errno == errno.ECANCELED
        threading.Timer(0.05, producer.emit, (0, 64, 9, 3)).start()
        got = len(pb.read_batch(5000))
        while got < 3:  # the first wake-up may come before all three were written
            n = len(pb.read_batch(1000))
            assert n > 0, f"{got} of 3 records"
            got += n
        assert got == 3


def test_close_from_another_thread_ends_a_waiting_read_batch(producer: Producer) -> None:
    import errno
    import threading
    pb = PerfBuffer(producer.map_fd, cpus=[0])
    threading.Timer(0.05, pb.close).start()
    with pytest.raises((OSError, ValueError)) as e:
        pb.read_batch(-1)
    assert isinstance(e.value, ValueError) or e.value.errno == errno.ECANCELED
    with pytest.raises(ValueError, match="closed"):
        pb.read_batch(0)
