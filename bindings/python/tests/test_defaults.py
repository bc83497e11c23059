"""The constructor's defaults are C's perf_buffer__new (perfbuf_new with NULL
opts, environment variables included); the fast mode and bounded batching
are one option away; stats() has every field."""
from __future__ import annotations

import errno
import time

import pytest

from perfbuf import PerfBuffer


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PERFBUF_ADAPTIVE", "PERFBUF_WAKEUP_EVENTS", "PERFBUF_MAX_DELAY_MS"):
        monkeypatch.delenv(name, raising=False)


def test_no_options_means_perf_buffer__new_with_its_environment(producer, monkeypatch) -> None:
    # perf_buffer__new refuses an invalid PERFBUF_ADAPTIVE: so must the
    # default constructor (NULL opts), while explicit options ignore it.
    monkeypatch.setenv("PERFBUF_ADAPTIVE", "maybe")
    with pytest.raises(OSError) as e:
        PerfBuffer(producer.map_fd)
    assert e.value.errno == errno.EINVAL
    assert "PERFBUF_ADAPTIVE" in str(e.value)
    PerfBuffer(producer.map_fd, wakeup_events=1).close()


def half_a_ring(producer, pb) -> int:
    """80 records into a 128-record ring, read: the size of the spill ring
    the fast mode gives a CPU whose ring a drain finds half full (0 for
    none)."""
    assert producer.emit(0, 16, 5, repeat=80) == 0
    pb.consume()
    return pb.stats(0)["spill_size"]


def test_environment_fast_mode_applies_by_default(producer, monkeypatch) -> None:
    # PERFBUF_ADAPTIVE=1 is perf_buffer__new's opt-in to the fast mode: a
    # spill ring 16 times the caller's ring once a drain finds it half full.
    monkeypatch.setenv("PERFBUF_ADAPTIVE", "1")
    with PerfBuffer(producer.map_fd, page_cnt=1) as pb:
        assert pb.stats(0)["spill_size"] == 0  # nothing before it is needed
        assert half_a_ring(producer, pb) == 16 * 4096


def test_fast_is_one_option_away(producer) -> None:
    with PerfBuffer(producer.map_fd, page_cnt=1) as pb:
        assert half_a_ring(producer, pb) == 0  # default: libbpf's events exactly
    got = []
    with PerfBuffer(producer.map_fd, page_cnt=1, fast=True, on_sample=lambda cpu, data: got.append(data)) as pb:
        assert half_a_ring(producer, pb) == 16 * 4096
        # 1000 records while nobody reads a 128-record ring: the spill ring
        # keeps them all.
        assert producer.emit(0, 16, 5, repeat=1000) == 0
        pb.consume()
        assert len(got) == 1080 and pb.stats(0)["lost"] == 0


def test_fast_mode_batches_a_fast_stream(producer) -> None:
    got = [0]

    def count(cpu: int, data: bytes) -> None:
        got[0] += 1

    with PerfBuffer(producer.map_fd, page_cnt=64, fast=True, on_sample=count) as pb:
        produced = 0
        start = time.monotonic()
        # 20 records per call, then a poll: records wait little for the
        # reader, which the fast mode needs to batch it.
        while time.monotonic() - start < 0.3:
            producer.emit(0, 16, 1, repeat=20)
            produced += 20
            pb.poll(0)
        deadline = time.monotonic() + 3
        while got[0] < produced and time.monotonic() < deadline:
            pb.poll(100)
        st = pb.stats(0)
    assert got[0] == produced and st["lost"] == 0
    assert st["batch_switches"] >= 1, st


@pytest.mark.parametrize("options", [{}, {"max_delay_ms": 20}])
def test_partial_batch_is_delivered_within_max_delay(producer, options: dict[str, int]) -> None:
    # 3 records below a 64-record batch: the kernel never wakes the reader,
    # the delay bound's timer makes poll deliver them (poll returned 0 when
    # the batch was only the kernel's wakeup_events).
    got = []
    with PerfBuffer(producer.map_fd, page_cnt=4, wakeup_events=64, on_sample=lambda c, d: got.append((c, d)),
                    **options) as pb:
        producer.emit(1, 24, 9, repeat=3)
        # Without the timer poll would sleep its whole timeout and return 0.
        ret = pb.poll(10_000)
    assert ret >= 1
    assert [c for c, _ in got] == [1, 1, 1]
    assert all(d[:24] == producer.expected(24, 9) for _, d in got)


def test_wakeup_bytes_with_max_delay(producer) -> None:
    with PerfBuffer(producer.map_fd, page_cnt=4, wakeup_bytes=8192, max_delay_ms=5) as pb:
        producer.emit(0, 24, 3, repeat=2)
        recs = pb.read(500)
    assert len(recs) == 2


def test_overwrite_and_cpus_options(producer) -> None:
    with PerfBuffer(producer.map_fd, page_cnt=1, cpus=[1]) as pb:
        assert pb.buffer_count == 1 and pb.buffer_cpu(0) == 1
        assert producer.emit(0, 8, 0) == -2  # -ENOENT: no ring for CPU 0
        producer.emit(1, 8, 0)
        assert [r.cpu for r in pb.read(100)] == [1]
    with PerfBuffer(producer.map_fd, page_cnt=1, overwrite=True) as pb:
        assert producer.emit(0, 8, 0, repeat=1000) == 0  # overwritable: never full


def test_stats_has_every_field_of_perfbuf_ring_stats(producer) -> None:
    with PerfBuffer(producer.map_fd) as pb:
        producer.emit(1, 100, 0, repeat=3)
        pb.consume()
        idx = [pb.buffer_cpu(i) for i in range(pb.buffer_count)].index(1)
        st = pb.stats(idx)
    assert list(st) == ["cpu", "records", "bytes", "lost", "wakeups", "pending_bytes", "data_size", "resyncs",
                        "skipped_bytes", "malformed", "overwritten_bytes", "batched", "batch_switches",
                        "spill_size", "lost_unreported"]
    assert st["cpu"] == 1 and st["records"] == 3 and st["data_size"] == 8 * 4096 and st["spill_size"] == 0


@pytest.mark.parametrize("options,exc", [
    ({"wakeup_events": -1}, ValueError),
    ({"wakeup_events": 2**32}, ValueError),
    ({"wakeup_bytes": "64"}, TypeError),
    ({"max_delay_ms": 60_001}, ValueError),
    ({"max_delay_ms": 1.5}, TypeError),
    ({"fast": "yes"}, TypeError),
    ({"cpus": [0, "1"]}, TypeError),
    ({"cpus": []}, ValueError),
])
def test_bad_options(producer, options: dict[str, object], exc: type) -> None:
    with pytest.raises(exc):
        PerfBuffer(producer.map_fd, **options)  # type: ignore[arg-type]


def test_fast_mode_refuses_batching_with_the_librarys_reason(producer) -> None:
    with pytest.raises(OSError) as e:
        PerfBuffer(producer.map_fd, fast=True, wakeup_events=8)
    assert e.value.errno == errno.EINVAL
    assert "Invalid argument" in str(e.value) and len(str(e.value)) > len("[Errno 22] Invalid argument")
