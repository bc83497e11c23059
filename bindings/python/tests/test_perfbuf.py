"""perfbuf on the real kernel: every record's bytes, lost counts, errors,
callback exceptions, the pull API, the raw ring view and wake-ups."""
from __future__ import annotations

import errno
import itertools
import os
import struct
import threading
import time

import pytest

import perfbuf
from conftest import need_root
from perfbuf import PerfBuffer, Record


def padded(n: int) -> int:
    """The size the kernel gives a sample of n bytes."""
    return (n + 4 + 7) // 8 * 8 - 4


def test_version() -> None:
    assert perfbuf.library_version() == "0.1.0"


def test_every_record_bytes_size_and_cpu(producer) -> None:
    got: list[tuple[int, bytes]] = []
    sizes = [8, 9, 15, 64, 100, 255, 1000]
    with PerfBuffer(producer.map_fd, page_cnt=8, on_sample=lambda cpu, data: got.append((cpu, data))) as pb:
        assert pb.buffer_count >= 2
        for cpu in (0, 1):
            for i, n in enumerate(sizes):
                assert producer.emit(cpu, n, cpu * 50 + i) == 0
        pb.consume()
    for cpu in (0, 1):
        mine = [d for c, d in got if c == cpu]
        assert len(mine) == len(sizes)
        for i, (n, data) in enumerate(zip(sizes, mine)):
            assert len(data) == padded(n)
            assert data[:n] == producer.expected(n, cpu * 50 + i)


def test_poll_returns_rings_signalled(producer) -> None:
    got = []
    with PerfBuffer(producer.map_fd, on_sample=lambda cpu, data: got.append(cpu)) as pb:
        assert pb.poll(0) == 0
        producer.emit(0, 16, 1)
        producer.emit(1, 16, 2)
        # Each poll returns the rings it found signalled: the two wake-ups
        # may come one poll apart, never counted twice.
        signalled, deadline = 0, time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            signalled += pb.poll(1000)
        assert signalled == 2
        assert sorted(got) == [0, 1]


def test_lost_records_are_counted_exactly(producer) -> None:
    delivered, lost = [], []
    with PerfBuffer(producer.map_fd, page_cnt=1, on_sample=lambda c, d: delivered.append(d),
                    on_lost=lambda c, n: lost.append(n)) as pb:
        assert producer.emit(0, 72, 3, repeat=300) == -28  # -ENOSPC: the ring filled up
        pb.consume()
        assert producer.emit(0, 72, 4) == 0
        pb.consume()
    assert sum(lost) > 0
    assert len(delivered) + sum(lost) == 301


def need_lost_counting() -> None:
    if tuple(int(p) for p in os.uname().release.split(".")[:2]) < (6, 0):
        need_root("counting lost records (PERF_FORMAT_LOST) needs Linux 6.0")


def ring_of_cpu(pb: PerfBuffer, cpu: int) -> int:
    return next(i for i in range(pb.buffer_count) if pb.buffer_cpu(i) == cpu)


def test_count_lost_knows_a_burst_no_record_reports(producer) -> None:
    """A 1-page ring overflowed by a burst, then nothing: the kernel writes
    no LOST record, yet with count_lost the figures know, and drain_final
    reports exactly the missing records once."""
    need_lost_counting()
    delivered, lost = [], []
    with PerfBuffer(producer.map_fd, page_cnt=1, on_sample=lambda c, d: delivered.append(d),
                    on_lost=lambda c, n: lost.append((c, n)), count_lost=True) as pb:
        ring = ring_of_cpu(pb, 0)
        assert producer.emit(0, 72, 3, repeat=300) == -28  # -ENOSPC: the ring filled up
        pb.consume()
        missing = 300 - len(delivered)
        assert missing > 0 and lost == []  # no lost report yet
        st = pb.stats(ring)
        assert st["lost"] == st["lost_unreported"] == missing
        assert pb.drain_final() == missing
        assert lost == [(0, missing)]
        st = pb.stats(ring)
        assert st["lost"] == missing and st["lost_unreported"] == 0
        assert pb.drain_final() == 0  # reported once
        # The LOST record the kernel writes with its next record is not counted again.
        assert producer.emit(0, 72, 4) == 0
        pb.consume()
        assert pb.stats(ring)["lost"] == missing
    assert lost == [(0, missing)]
    assert len(delivered) == 301 - missing


def test_without_count_lost_the_figures_are_libbpfs(producer) -> None:
    """No opt-in: the burst's losses show only once the kernel writes its
    LOST record, as with libbpf; drain_final is a consume."""
    delivered, lost = [], []
    with PerfBuffer(producer.map_fd, page_cnt=1, on_sample=lambda c, d: delivered.append(d),
                    on_lost=lambda c, n: lost.append(n)) as pb:
        ring = ring_of_cpu(pb, 0)
        assert producer.emit(0, 72, 3, repeat=300) == -28
        pb.consume()
        st = pb.stats(ring)
        assert st["lost"] == st["lost_unreported"] == 0
        assert pb.drain_final() == 0
        assert lost == []
        assert producer.emit(0, 72, 4) == 0
        pb.consume()
    assert len(delivered) + sum(lost) == 301 and sum(lost) > 0


def test_count_lost_must_be_a_bool(producer) -> None:
    with pytest.raises(TypeError, match="count_lost must be a bool"):
        PerfBuffer(producer.map_fd, count_lost=1)  # type: ignore[arg-type]


def test_pull_api(producer) -> None:
    with PerfBuffer(producer.map_fd) as pb:
        producer.emit(0, 24, 7)
        producer.emit(1, 24, 8)
        recs = list(itertools.islice(pb.records(timeout_ms=10_000), 2))
    assert sorted(r.cpu for r in recs) == [0, 1]
    assert all(isinstance(r, Record) and r.lost == 0 for r in recs)
    assert {r.data[:24] for r in recs} == {producer.expected(24, 7), producer.expected(24, 8)}


@pytest.mark.parametrize("page_cnt", [3, 0, 6, -8])
def test_bad_page_count_raises_valueerror(producer, page_cnt: int) -> None:
    # Checked before the C call: a ValueError that says what is expected
    # (it was OSError(EINVAL) from the library).
    with pytest.raises(ValueError, match="power of two"):
        PerfBuffer(producer.map_fd, page_cnt=page_cnt)


def test_bad_map_fd_raises_ebadfd() -> None:
    with pytest.raises(OSError) as e:
        PerfBuffer(-1)
    assert e.value.errno == errno.EBADFD


def test_callback_exception_is_reraised_and_the_rest_stays(producer) -> None:
    seen = []

    def boom(cpu: int, data: bytes) -> None:
        seen.append(data)
        if len(seen) == 2:
            raise RuntimeError("from the callback")

    with PerfBuffer(producer.map_fd, on_sample=boom) as pb:
        for i in range(5):
            producer.emit(0, 16, i)
        with pytest.raises(RuntimeError, match="from the callback"):
            pb.consume()
        assert len(seen) == 2
        pb.consume()  # the process survived; the rest is still there
        assert len(seen) == 5
        assert [d[:16] for d in seen] == [producer.expected(16, i) for i in range(5)]


def test_context_manager_closes(producer) -> None:
    with PerfBuffer(producer.map_fd) as pb:
        assert pb.fileno() >= 0
    with pytest.raises(ValueError):
        pb.poll(0)
    pb.close()  # idempotent
    assert producer.emit(0, 8, 0) == -2  # -ENOENT: free removed the map entries


def test_ring_view_shows_head_advancing(producer) -> None:
    # The view is released before close (close refuses while one is exported).
    with PerfBuffer(producer.map_fd, page_cnt=2) as pb:
        with pb.ring(0) as view:
            assert len(view) == 4096 + 2 * 4096
            head0 = struct.unpack_from("<Q", view, 1024)[0]
            producer.emit(0, 64, 1)
            head1, tail = struct.unpack_from("<QQ", view, 1024)
            assert head1 - head0 == 8 + 4 + padded(64)
            rtype, _, size = struct.unpack_from("<IHH", view, 4096 + (tail % (2 * 4096)))
            assert (rtype, size) == (9, head1 - head0)
            pb.consume()
            assert struct.unpack_from("<Q", view, 1032)[0] == head1
    with pytest.raises(ValueError):
        view[0]


def test_peek_advance_publish(producer) -> None:
    # A reader of its own: each record peeked is the producer's, in order;
    # nothing reaches the callbacks; publish frees the space.
    seen = []
    with PerfBuffer(producer.map_fd, page_cnt=2, on_sample=lambda c, d: seen.append(d)) as pb:
        for i in range(3):
            assert producer.emit(0, 40, 20 + i) == 0
        for i in range(3):
            rec = pb.peek(0)
            assert rec is not None
            rtype, _, size = struct.unpack_from("<IHH", rec, 0)
            assert (rtype, size) == (9, len(rec))  # PERF_RECORD_SAMPLE, whole
            assert rec[12:12 + 40] == producer.expected(40, 20 + i)  # after header and raw size
            assert pb.peek(0) == rec  # peek does not consume
            pb.advance(0)
        assert pb.peek(0) is None
        with pytest.raises(OSError):
            pb.advance(0)
        assert pb.stats(0)["pending_bytes"] > 0  # advanced, not yet published
        pb.publish(0)
        assert pb.stats(0)["pending_bytes"] == 0
        pb.consume()
    assert seen == []


def test_wake_from_another_thread(producer) -> None:
    with PerfBuffer(producer.map_fd) as pb:
        t = threading.Timer(0.05, pb.wake)
        t.start()
        start = time.monotonic()
        with pytest.raises(OSError) as e:
            pb.poll(10_000)
        assert e.value.errno == errno.ECANCELED
        assert time.monotonic() - start < 2
        t.join()


def test_stats(producer) -> None:
    with PerfBuffer(producer.map_fd) as pb:
        producer.emit(1, 100, 0, repeat=3)
        pb.consume()
        idx = [pb.buffer_cpu(i) for i in range(pb.buffer_count)].index(1)
        st = pb.stats(idx)
    assert st["cpu"] == 1 and st["records"] == 3 and st["pending_bytes"] == 0
