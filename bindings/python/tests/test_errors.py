"""Errors that explain themselves: bad arguments at construction, IndexError
for a bad ring, PermissionError, the library's reason in every OSError,
and its messages through logging."""
from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator

import pytest

import perfbuf
from conftest import BPF_MAP_TYPE_HASH, create_map, need_root, run_python
from perfbuf import PerfBuffer


@pytest.mark.parametrize("fd", [None, "3", 3.0, True, object()])
def test_map_fd_must_be_an_int(fd: object) -> None:
    with pytest.raises(TypeError, match="map_fd must be an int"):
        PerfBuffer(fd)  # type: ignore[arg-type]


def test_page_cnt_must_be_an_int(producer) -> None:
    with pytest.raises(TypeError, match="page_cnt"):
        PerfBuffer(producer.map_fd, page_cnt="8")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["on_sample", "on_lost"])
def test_callbacks_are_checked_at_construction(producer, name: str) -> None:
    with pytest.raises(TypeError, match=f"{name} must be a callable"):
        PerfBuffer(producer.map_fd, **{name: 5})  # type: ignore[arg-type]


def test_bad_ring_index_raises_indexerror(producer) -> None:
    with PerfBuffer(producer.map_fd) as pb:
        n = pb.buffer_count
        for call in (pb.stats, pb.buffer_fd, pb.buffer_cpu, pb.consume_buffer, pb.ring):
            for bad in (n, -1, 1 << 40):
                with pytest.raises(IndexError, match="out of range"):
                    call(bad)
        with pytest.raises(TypeError):
            pb.stats("0")  # type: ignore[arg-type]


def test_bad_fd_says_why(producer) -> None:
    with pytest.raises(OSError) as e:
        PerfBuffer(-1)
    assert e.value.errno == errno.EBADFD
    assert "failed to get map info for map FD -1" in str(e.value) and "EBADFD" in str(e.value)


def test_hash_map_is_not_a_perf_event_array() -> None:
    try:
        fd = create_map(BPF_MAP_TYPE_HASH)
    except PermissionError as e:
        need_root(f"need root with BPF: {e}")
    try:
        with pytest.raises(OSError) as e:
            PerfBuffer(fd)
    finally:
        os.close(fd)
    assert e.value.errno == errno.EINVAL
    # perfbuf_new reads ring buffers too: the message names both kinds.
    assert ("should be BPF_MAP_TYPE_PERF_EVENT_ARRAY (type 4) or BPF_MAP_TYPE_RINGBUF (type 27), but is of type 1"
            in str(e.value))


def test_pipe_is_not_a_perf_event_array() -> None:
    r, w = os.pipe()
    try:
        with pytest.raises(OSError) as e:
            PerfBuffer(r)
    finally:
        os.close(r)
        os.close(w)
    assert e.value.errno == errno.EINVAL
    assert f"map_fd {r} is not a BPF_MAP_TYPE_PERF_EVENT_ARRAY: it is pipe:" in str(e.value)


@contextlib.contextmanager
def paranoid_at_least(level: int) -> Iterator[None]:
    """perf_event_paranoid at `level` or above for the block (raised as root
    and restored after), so that uid nobody may not open per-CPU events."""
    path = "/proc/sys/kernel/perf_event_paranoid"
    with open(path) as f:
        before = int(f.read())
    if before >= level:
        yield
        return
    if os.geteuid() != 0:
        need_root(f"perf_event_paranoid is {before}: unprivileged processes may open per-CPU events")
    with open(path, "w") as f:
        f.write(str(level))
    try:
        yield
    finally:
        with open(path, "w") as f:
            f.write(str(before))


def test_permission_error_carries_the_reason(producer) -> None:
    # A process without privileges (uid nobody, no capabilities) given the
    # map's fd: PermissionError with the library's explanation and fix.
    code = f"""
import os, sys
from perfbuf import PerfBuffer
os.setgroups([]); os.setgid(65534); os.setuid(65534)
try:
    PerfBuffer({producer.map_fd})
except PermissionError as e:
    print(type(e).__name__, e.errno, e)
    sys.exit(0)
except BaseException as e:
    print("wrong exception:", type(e).__name__, e)
    sys.exit(1)
print("no error")
sys.exit(1)
"""
    with paranoid_at_least(1):
        res = run_python(code, pass_fds=(producer.map_fd,))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "PermissionError" in res.stdout
    assert "failed to open perf buffer event on cpu #" in res.stdout
    assert "run as root, or grant CAP_BPF and CAP_PERFMON" in res.stdout


def test_last_error_is_this_threads_last_failure() -> None:
    with pytest.raises(OSError):
        PerfBuffer(-1)
    assert "map FD -1" in perfbuf.last_error()


def test_failures_are_raised_not_printed(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> None:
    """A failure is an exception with libperfbuf's text: the warning the
    library prints with it is not logged as well (it said it twice)."""
    with caplog.at_level(logging.DEBUG, logger="perfbuf"):
        with pytest.raises(OSError, match="failed to get map info for map FD -1"):
            PerfBuffer(-1)
    assert not [r for r in caplog.records if "map FD -1" in r.getMessage()], caplog.records
    assert capfd.readouterr().err == ""
    # Where nothing configured logging (Python's last resort prints
    # warnings to stderr): the exceptions alone, from each kind of object.
    res = run_python(
        "import perfbuf\n"
        "from perfbuf import EventSet, PerfBuffer, PerfDataWriter\n"
        "for make in (lambda: PerfBuffer(-1), lambda: PerfDataWriter.bpf_output('/no/such/dir/x.data')):\n"
        "    try:\n"
        "        make()\n"
        "    except OSError as e:\n"
        "        print(e)\n")
    assert res.returncode == 0 and res.stderr == "", res.stderr
    lines = res.stdout.splitlines()
    assert "failed to get map info for map FD -1" in lines[0], lines
    assert "/no/such/dir/x.data" in lines[1] and "No such file or directory" in lines[1], lines


def test_library_messages_go_to_logging(producer, caplog: pytest.LogCaptureFixture,
                                        capfd: pytest.CaptureFixture[str]) -> None:
    with caplog.at_level(logging.DEBUG, logger="perfbuf"):
        with PerfBuffer(producer.map_fd, fast=True):
            pass
    assert [r for r in caplog.records if r.name == "perfbuf"], "no message of libperfbuf's"
    assert "libperfbuf:" not in capfd.readouterr().err  # not the library's own printer


def test_use_logging_false_gives_the_library_its_printer_back(capfd: pytest.CaptureFixture[str]) -> None:
    perfbuf.use_logging(False)
    try:
        with pytest.raises(OSError):
            PerfBuffer(-1)
    finally:
        perfbuf.use_logging(True)
    assert "libperfbuf: failed to get map info for map FD -1" in capfd.readouterr().err
