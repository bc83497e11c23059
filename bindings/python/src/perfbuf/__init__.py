"""perfbuf: read BPF perf event arrays (bpf_perf_event_output) from Python.

A thin, typed layer over libperfbuf (a drop-in replacement for libbpf's
perf buffer). Example::

    from perfbuf import PerfBuffer

    with PerfBuffer(map_fd, page_cnt=8, on_sample=lambda cpu, data: print(cpu, data.hex())) as pb:
        pb.run()  # polls until Ctrl-C

Only libperfbuf's own ``perfbuf_*`` functions are called, never the
``perf_buffer__*`` names libbpf also exports, so a process that loaded
libbpf too (e.g. to load its BPF programs) is safe whatever the load order.

libperfbuf's messages go to the ``logging`` logger ``"perfbuf"`` (see
:func:`use_logging`).
"""
from __future__ import annotations

from typing import Any

from . import _lib, _library
from ._batch import Batch
from ._events import (BpfProgram, Branch, Counts, EventInfo, EventReader, EventSample, EventSet, RawRecord,
                      ReadValue, ReadValues, SidebandRecord)
from ._library import last_error, library_version, use_logging
from ._perf_buffer import PerfBuffer
from ._perfdata import PerfDataWriter
from ._ring_buffer import RingBuffer
from ._ring_reader import LostFn, Record, SampleFn

__all__ = ["PerfBuffer", "RingBuffer", "Record", "Batch", "library_version", "last_error", "use_logging", "EventSet", "EventReader",
           "PerfDataWriter",
           "EventSample", "EventInfo", "BpfProgram", "Counts", "SidebandRecord", "RawRecord", "ReadValues", "ReadValue", "Branch"]

# The loaded library, as the package had it before its modules split (tests
# and tools reach it here); the modules call it through _library.LIB.
_LIB: Any = _library.LIB
_Library = _library._Library
