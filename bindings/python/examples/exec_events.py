#!/usr/bin/env python3
"""A real BPF program loaded with libbpf, its records read with perfbuf.

Loads examples/bpf/exec_events.bpf.o (built by `make examples` as
build/exec_events.bpf.o: on every exec, the new process's pid and name go
to the `events` perf event array) through the system's libbpf.so.1 with
ctypes, reads the events with perfbuf.PerfBuffer, runs /bin/true three
times and exits 0 only if it saw those three execs.

    usage: exec_events.py [build/exec_events.bpf.o]     (as root)

libbpf and libperfbuf share the process: perfbuf calls only libperfbuf's
perfbuf_* functions, so libbpf's perf_buffer__* never get in the way.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import subprocess
import sys
import time

from perfbuf import PerfBuffer

# struct exec_event { __u32 pid; __u32 ppid_unused; char comm[16]; }, as the BPF program writes it.
EXEC_EVENT = struct.Struct("<II16s")


def load_libbpf() -> ctypes.CDLL:
    libbpf = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
    p = ctypes.c_void_p
    for name, res, args in (
        ("bpf_object__open_file", p, [ctypes.c_char_p, p]),
        ("bpf_object__load", ctypes.c_int, [p]),
        ("bpf_object__find_program_by_name", p, [p, ctypes.c_char_p]),
        ("bpf_program__attach", p, [p]),
        ("bpf_object__find_map_fd_by_name", ctypes.c_int, [p, ctypes.c_char_p]),
        ("bpf_link__destroy", ctypes.c_int, [p]),
        ("bpf_object__close", None, [p]),
    ):
        fn = getattr(libbpf, name)
        fn.restype, fn.argtypes = res, args
    return libbpf


def fail(what: str) -> None:
    err = ctypes.get_errno()
    hint = "; run as root (BPF programs need CAP_BPF and CAP_PERFMON)" if err in (1, 13) else ""
    sys.exit(f"exec_events: {what}: {os.strerror(err) if err else 'failed'}{hint}")


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "exec_events.bpf.o"
    libbpf = load_libbpf()
    # libbpf 1.x returns NULL (and sets errno) on failure.
    obj = libbpf.bpf_object__open_file(path.encode(), None)
    if not obj:
        fail(f"cannot open {path}")
    link = None
    try:
        if libbpf.bpf_object__load(obj) != 0:
            fail("cannot load the BPF object")
        prog = libbpf.bpf_object__find_program_by_name(obj, b"on_exec")
        link = libbpf.bpf_program__attach(prog) if prog else None
        if not link:
            fail("cannot attach on_exec")
        map_fd = libbpf.bpf_object__find_map_fd_by_name(obj, b"events")
        if map_fd < 0:
            fail("no map named events")

        seen: dict[int, str] = {}

        def on_sample(cpu: int, data: bytes) -> None:
            pid, _, comm = EXEC_EVENT.unpack_from(data)
            name = comm.split(b"\0", 1)[0].decode(errors="replace")
            print(f"cpu {cpu}: pid {pid} ran {name}")
            seen[pid] = name

        def on_lost(cpu: int, count: int) -> None:
            print(f"cpu {cpu}: lost {count}")

        with PerfBuffer(map_fd, page_cnt=8, on_sample=on_sample, on_lost=on_lost) as pb:
            ours = []
            for _ in range(3):
                child = subprocess.Popen(["/bin/true"])
                ours.append(child.pid)
                child.wait()
            deadline = time.monotonic() + 5
            pb.run(stop=lambda: all(seen.get(pid) == "true" for pid in ours) or time.monotonic() > deadline)
        mine = sum(seen.get(pid) == "true" for pid in ours)
        print(f"{mine} of our 3 execs of true seen")
        return 0 if mine == 3 else 1
    finally:
        if link:
            libbpf.bpf_link__destroy(link)
        libbpf.bpf_object__close(obj)


if __name__ == "__main__":
    sys.exit(main())
