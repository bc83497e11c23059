"""For users coming from bcc: a pinned map by path, a poll loop with ways
out (stop callback, Ctrl-C, wake, close), close from a callback or
another thread."""
from __future__ import annotations

import ctypes
import os
import threading
import time
from pathlib import Path

import pytest

from conftest import need_root, pin, run_python
from perfbuf import PerfBuffer

_libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture
def bpffs(tmp_path: Path):
    """A bpffs of our own, mounted for the test."""
    target = tmp_path / "bpffs"
    target.mkdir()
    if _libc.mount(b"bpf", os.fsencode(target), b"bpf", 0, None) != 0:
        need_root(f"cannot mount a bpffs: {os.strerror(ctypes.get_errno())}")
    yield target
    _libc.umount2(os.fsencode(target), 2)  # MNT_DETACH


def open_fds() -> set[int]:
    return {int(n) for n in os.listdir("/proc/self/fd")}


def test_from_pinned(producer, bpffs: Path) -> None:
    path = bpffs / "events"
    pin(producer.map_fd, str(path))
    before = open_fds()
    got = []
    with PerfBuffer.from_pinned(path, page_cnt=2, on_sample=lambda cpu, data: got.append((cpu, data))) as pb:
        producer.emit(1, 32, 4)
        pb.poll(500)
    assert got == [(1, got[0][1])] and got[0][1][:32] == producer.expected(32, 4)
    assert open_fds() <= before  # the fd it opened is closed again


def test_from_pinned_takes_the_options(producer, bpffs: Path) -> None:
    pin(producer.map_fd, str(bpffs / "m"))
    with PerfBuffer.from_pinned(str(bpffs / "m"), wakeup_events=64, max_delay_ms=5) as pb:
        producer.emit(0, 8, 1, repeat=2)
        assert len(pb.read(500)) == 2


def test_from_pinned_missing_path() -> None:
    with pytest.raises(FileNotFoundError) as e:
        PerfBuffer.from_pinned("/sys/fs/bpf/no-such-perfbuf-map")
    assert "/sys/fs/bpf/no-such-perfbuf-map" in str(e.value) and "bpffs" in str(e.value)


def test_from_pinned_closes_its_fd_when_construction_fails(bpffs: Path, producer) -> None:
    pin(producer.map_fd, str(bpffs / "m"))
    before = open_fds()
    with pytest.raises(ValueError):
        PerfBuffer.from_pinned(bpffs / "m", page_cnt=3)
    assert open_fds() <= before


def test_run_until_stop(producer) -> None:
    got = []
    with PerfBuffer(producer.map_fd, on_sample=lambda cpu, data: got.append(cpu)) as pb:
        producer.emit(0, 8, 1, repeat=2)
        producer.emit(1, 8, 1)
        pb.run(stop=lambda: len(got) >= 3, timeout_ms=50)
    assert sorted(got) == [0, 0, 1]


def test_run_ends_on_keyboard_interrupt(producer) -> None:
    # Ctrl-C (SIGINT) while run() waits: it returns quietly. In a child, so
    # that a stray KeyboardInterrupt cannot reach pytest.
    code = f"""
import os, signal, threading
from perfbuf import PerfBuffer
with PerfBuffer({producer.map_fd}) as pb:
    threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT)).start()
    pb.run(timeout_ms=5000)
    print("run returned")
"""
    start = time.monotonic()
    res = run_python(code, pass_fds=(producer.map_fd,))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "run returned" in res.stdout
    assert time.monotonic() - start < 4  # not after the 5 s poll


def test_run_ends_on_wake(producer) -> None:
    with PerfBuffer(producer.map_fd) as pb:
        threading.Timer(0.05, pb.wake).start()
        start = time.monotonic()
        pb.run(timeout_ms=5000)
        assert time.monotonic() - start < 2


def test_callback_exception_propagates_from_run(producer) -> None:
    def boom(cpu: int, data: bytes) -> None:
        raise RuntimeError("stop here")

    with PerfBuffer(producer.map_fd, on_sample=boom) as pb:
        producer.emit(0, 8, 1)
        with pytest.raises(RuntimeError, match="stop here"):
            pb.run()


# Freeing the buffer under a poll would crash: these run in a child process.

def test_close_from_a_callback_closes_when_the_call_returns(producer) -> None:
    code = """
import ctypes, os
from conftest import Producer
from perfbuf import PerfBuffer
producer = Producer(ctypes.CDLL(os.environ["PERFBUF_PRODUCER_LIBRARY"]))
seen = []
def first_closes(cpu, data):
    seen.append(data)
    pb.close()
pb = PerfBuffer(producer.map_fd, on_sample=first_closes)
producer.emit(0, 8, 1, repeat=3)
pb.consume()
assert len(seen) == 3, seen  # the drain finished...
try:
    pb.poll(0)
except ValueError as e:
    print("then closed:", e)  # ...then the buffer closed
assert producer.emit(0, 8, 0) == -2  # freed: its map entries are gone
"""
    res = run_python(code)
    assert res.returncode == 0, f"child died ({res.returncode}): {res.stdout} {res.stderr}"
    assert "then closed: PerfBuffer is closed" in res.stdout


def test_close_from_another_thread_ends_run_and_records(producer) -> None:
    code = """
import ctypes, os, threading
from conftest import Producer
from perfbuf import PerfBuffer
producer = Producer(ctypes.CDLL(os.environ["PERFBUF_PRODUCER_LIBRARY"]))
pb = PerfBuffer(producer.map_fd)
closer = threading.Timer(0.05, pb.close)
closer.start()
pb.run(timeout_ms=-1)
closer.join()
assert producer.emit(0, 8, 0) == -2  # freed
pb = PerfBuffer(producer.map_fd)
closer = threading.Timer(0.05, pb.close)
closer.start()
assert list(pb.records()) == []
closer.join()
print("ended twice")
"""
    res = run_python(code)
    assert res.returncode == 0, f"child died ({res.returncode}): {res.stdout} {res.stderr}"
    assert "ended twice" in res.stdout


def test_held_records_after_a_callback_raised(producer) -> None:
    # The records drained after the one that raised are kept and come first
    # next time, in order, also through read().
    seen = []

    def second_raises(cpu: int, data: bytes) -> None:
        seen.append(data[:8])
        if len(seen) == 2:
            raise KeyError("second")

    with PerfBuffer(producer.map_fd, on_sample=second_raises) as pb:
        for i in range(4):
            producer.emit(0, 8, i)
        with pytest.raises(KeyError):
            pb.poll(100)
        assert [r.data[:8] for r in pb.read(0)] == [producer.expected(8, 2), producer.expected(8, 3)]
    assert seen == [producer.expected(8, 0), producer.expected(8, 1)]


def test_a_callback_cannot_poll_its_own_buffer(producer) -> None:
    def again(cpu: int, data: bytes) -> None:
        pb.poll(0)

    pb = PerfBuffer(producer.map_fd, on_sample=again)
    producer.emit(0, 8, 1)
    with pytest.raises(RuntimeError, match="callback cannot call poll"):
        pb.consume()
    pb.close()
