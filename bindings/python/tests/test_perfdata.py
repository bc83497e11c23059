"""perf.data out through the Python face: an event set's tracepoint
samples written by PerfDataWriter are listed by ``perf script`` (with their
fields) and its events by ``perf evlist``; a write error names the file.
Needs root, tracefs and perf; under CI=true nothing is skipped."""
from __future__ import annotations

import errno
import os
import resource
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import List

import pytest

from conftest import need_root
from perfbuf import EventSet, PerfDataWriter


@pytest.fixture(autouse=True)
def _root_tracefs_perf() -> None:
    if os.geteuid() != 0:
        need_root("perf.data recording needs root")
    if not Path("/sys/kernel/tracing/events/sched").is_dir():
        need_root("no tracefs at /sys/kernel/tracing (make tracefs)")
    if shutil.which("perf") is None:
        need_root("perf is not installed (apt-get install linux-perf)")


def test_perf_script_lists_the_recorded_execs(tmp_path: Path) -> None:
    path = tmp_path / "py.data"
    with EventSet() as events:
        events.add_tracepoint("sched:sched_process_exec")
        events.add_software("cpu-clock", freq=99)
        with PerfDataWriter(path, events) as out, events.reader() as reader:
            events.enable()
            children = [subprocess.Popen(["/bin/true"]) for _ in range(3)]
            pids = [c.pid for c in children]
            for c in children:
                c.wait()
            start = time.thread_time()
            while time.thread_time() - start < 0.1:  # CPU time for the clock to sample
                sum(range(1000))
            events.disable()
            written = out.drain(reader)
            assert written >= 3
    script = subprocess.run(["perf", "script", "-F", "pid,event,trace", "-i", str(path)],
                            capture_output=True, text=True, check=True).stdout
    for pid in pids:
        assert any(line.split()[0] == str(pid) and "filename=/bin/true" in line
                   for line in script.splitlines()), script
    evlist = subprocess.run(["perf", "evlist", "-i", str(path)], capture_output=True, text=True, check=True).stdout
    names = [line for line in evlist.splitlines() if line and not line.startswith("#")]
    assert names == ["sched:sched_process_exec", "cpu-clock", "dummy"], evlist
    # Each 99 Hz sample stands for 1e9 / 99 ns of CPU clock, as perf record's do.
    periods = subprocess.run(["perf", "script", "-F", "event,period", "-i", str(path)], capture_output=True,
                             text=True, check=True).stdout
    clock = [int(line.split()[0]) for line in periods.splitlines() if line.split()[1:] == ["cpu-clock:"]]
    assert clock and all(p == 10_101_010 for p in clock), periods


def test_a_write_error_names_the_file(tmp_path: Path) -> None:
    with EventSet() as events:
        events.add_tracepoint("sched:sched_process_exec")
        with pytest.raises(OSError) as info:
            PerfDataWriter(tmp_path / "no" / "such" / "dir.data", events)
    assert info.value.errno == errno.ENOENT
    assert str(tmp_path / "no" / "such" / "dir.data") in str(info.value)


@pytest.mark.parametrize("batched", [False, True], ids=["woken", "delay-bound"])
def test_polls_sleep_until_records_come(tmp_path: Path, batched: bool) -> None:
    """After ``reader.wake()`` (the next poll raises ECANCELED, once), or
    with a delay bound (the reader's timer ticks), quiet polls sleep: a busy
    loop would use about all the time they take. Then the watched child's
    exec is written (with the delay bound, by the timer: one record never
    reaches the 64 of the batch)."""
    # Watched once it says so: its own exec and loading are over.
    child = subprocess.Popen(["/bin/sh", "-c", "echo ready; read line; exec /bin/true"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        batch = {"wakeup_events": 64, "max_delay_ms": 20} if batched else {}
        with EventSet(pids=[child.pid], **batch) as events:  # type: ignore[arg-type]
            events.add_tracepoint("sched:sched_process_exec")
            with PerfDataWriter(tmp_path / "quiet.data", events) as out, events.reader() as reader:
                events.enable()
                if not batched:
                    reader.wake()
                    with pytest.raises(OSError) as info:
                        out.poll(reader, 1000)
                    assert info.value.errno == errno.ECANCELED
                start, cpu = time.monotonic(), _thread_cpu()
                while time.monotonic() - start < 0.3:
                    assert out.poll(reader, 50) == 0
                wall, used = time.monotonic() - start, _thread_cpu() - cpu
                assert used < wall / 2, f"polls used {used:.3f}s of CPU in {wall:.3f}s: a busy loop"
                assert child.stdin is not None
                child.stdin.write(b"go\n")
                child.stdin.close()
                child.wait()
                written, deadline = 0, time.monotonic() + 30
                while written == 0 and time.monotonic() < deadline:
                    written += out.poll(reader, 1000)
                assert written >= 1, "the child's exec was not written"
    finally:
        child.kill()
        child.wait()


def _thread_cpu() -> float:
    u = resource.getrusage(resource.RUSAGE_THREAD)
    return u.ru_utime + u.ru_stime


def test_an_event_added_after_the_writer_joins_the_file(tmp_path: Path) -> None:
    path = tmp_path / "added.data"
    with EventSet() as events:
        events.add_tracepoint("sched:sched_process_exec")
        with PerfDataWriter(path, events) as out, events.reader() as reader:
            events.add_tracepoint("sched:sched_process_exit")
            events.enable()
            child = subprocess.Popen(["/bin/true"])
            child.wait()
            events.disable()
            out.drain(reader)
    evlist = subprocess.run(["perf", "evlist", "-i", str(path)], capture_output=True, text=True, check=True).stdout
    names = [line for line in evlist.splitlines() if line and not line.startswith("#")]
    assert names == ["sched:sched_process_exec", "dummy", "sched:sched_process_exit"], evlist
    script = subprocess.run(["perf", "script", "-F", "pid,event,trace", "-i", str(path)],
                            capture_output=True, text=True, check=True).stdout
    assert any(line.split()[0] == str(child.pid) and "sched:sched_process_exit:" in line
               and f"pid={child.pid} " in line for line in script.splitlines()), script


def test_closing_the_reader_in_another_thread_ends_a_writer_poll(tmp_path: Path) -> None:
    """A writer's poll holds the reader for its whole wait; ``reader.close()``
    from another thread wakes it (ECANCELED) instead of waiting for it
    forever or freeing the rings under it, and a later poll is refused."""
    with EventSet(pids=[os.getpid()]) as events:
        events.add_tracepoint("sched:sched_process_exec")
        with PerfDataWriter(tmp_path / "closed.data", events) as out:
            reader = events.reader()
            events.enable()
            outcome: List[object] = []

            def poll_long() -> None:
                try:
                    outcome.append(out.poll(reader, 10_000))  # 0 after 10 s: close() did not wake it
                except BaseException as e:  # noqa: BLE001 (handed to the test's thread)
                    outcome.append(e)

            poller = threading.Thread(target=poll_long)
            poller.start()
            time.sleep(0.2)  # let it block (closing earlier is fine too: the poll is then refused)
            reader.close()
            poller.join(30)
            assert not poller.is_alive(), "the poll was not woken by close()"
            assert len(outcome) == 1, outcome
            err = outcome[0]
            assert (isinstance(err, OSError) and err.errno == errno.ECANCELED) or isinstance(err, ValueError), err
            with pytest.raises(ValueError):
                out.poll(reader, 0)
