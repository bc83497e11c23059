"""Ring views never outlive the mapping: close() refuses while one (or any
slice of one) is exported."""
from __future__ import annotations

import gc
import struct

import pytest

from conftest import run_python
from perfbuf import PerfBuffer


def test_slice_kept_across_close_cannot_crash(producer) -> None:
    # In a child process: reading unmapped memory kills the interpreter,
    # which must show as a failed test, not a dead pytest.
    code = f"""
import struct, sys
from perfbuf import PerfBuffer
pb = PerfBuffer({producer.map_fd}, page_cnt=2)
view = pb.ring(0)
head = view[1024:1032]  # a slice: it outlives view.release()
view.release()
try:
    pb.close()
    print("closed with a slice exported")
except BufferError as e:
    print("refused:", e)
print("head", struct.unpack("<Q", head)[0])
sys.stdout.flush()
del head
pb.close()
print("closed")
"""
    res = run_python(code, pass_fds=(producer.map_fd,))
    assert res.returncode == 0, f"child died ({res.returncode}): {res.stdout} {res.stderr}"
    assert "refused: cannot close the PerfBuffer: 1 ring view(s) still exported" in res.stdout
    assert "head " in res.stdout and res.stdout.rstrip().endswith("closed")


def test_close_refuses_while_a_view_is_exported_and_the_buffer_stays_usable(producer) -> None:
    pb = PerfBuffer(producer.map_fd, page_cnt=2)
    view = pb.ring(0)
    tail = view[1032:1040]
    with pytest.raises(BufferError, match="ring view"):
        pb.close()
    producer.emit(0, 16, 1)
    assert len(pb.read(100)) == 1  # still open
    view.release()
    with pytest.raises(BufferError):
        pb.close()  # the slice still holds the mapping
    assert struct.unpack("<Q", tail)[0] > 0
    del tail
    pb.close()
    assert producer.emit(0, 8, 0) == -2  # freed: the map entries are gone


def test_view_as_context_manager(producer) -> None:
    with PerfBuffer(producer.map_fd, page_cnt=1) as pb:
        with pb.ring(0) as view:
            assert len(view) == 2 * 4096
            assert view.readonly
        with pb.ring(1) as view:
            pass


def test_a_view_keeps_a_dropped_buffer_alive(producer) -> None:
    view = PerfBuffer(producer.map_fd, page_cnt=1).ring(0)
    gc.collect()
    producer.emit(0, 16, 2)
    assert struct.unpack_from("<Q", view, 1024)[0] > 0  # data_head: the mapping is still there
    view.release()
    del view
    gc.collect()
    assert producer.emit(0, 8, 0) == -2  # the last view gone, the buffer was freed
