#!/usr/bin/env python3
"""profile: samples every CPU at 99 Hz with a BPF program attached to each
CPU's event, which counts the samples per CPU; reports the counts at exit
(the Python twin of examples/profile.c).

The BPF object is examples/bpf/profile.bpf.c (built by make as
build/profile.bpf.o: program "on_sample", array map "counts", CPU ->
samples), loaded through the system's libbpf.so.1 with ctypes. The event is
CPU cycles where the machine has a PMU, else the software CPU clock (a
virtual machine): the set says which it got, and why. No rings: the
program does all the work. While it samples, one busy process pinned to
each CPU keeps every CPU busy (an idle vCPU may take no clock samples;
Python threads would share one CPU through the GIL).

    usage: profile.py [build/profile.bpf.o] [SECONDS]     (as root; default 1 s)

Exits 1 if a CPU took no sample.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
import time

from perfbuf import EventSet

HZ = 99

SPIN = """
import os, sys, time
os.sched_setaffinity(0, {int(sys.argv[1])})
end = time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    pass
"""


def load_libbpf() -> ctypes.CDLL:
    libbpf = ctypes.CDLL(ctypes.util.find_library("bpf") or "libbpf.so.1", use_errno=True)
    p = ctypes.c_void_p
    for name, res, args in (
        ("bpf_object__open_file", p, [ctypes.c_char_p, p]),
        ("bpf_object__load", ctypes.c_int, [p]),
        ("bpf_object__find_program_by_name", p, [p, ctypes.c_char_p]),
        ("bpf_program__fd", ctypes.c_int, [p]),
        ("bpf_object__find_map_fd_by_name", ctypes.c_int, [p, ctypes.c_char_p]),
        ("bpf_map_lookup_elem", ctypes.c_int, [ctypes.c_int, p, p]),
        ("bpf_object__close", None, [p]),
    ):
        fn = getattr(libbpf, name)
        fn.restype, fn.argtypes = res, args
    return libbpf


def main() -> int:
    path = sys.argv[1] if len(sys.argv) > 1 else "profile.bpf.o"
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    libbpf = load_libbpf()
    obj = libbpf.bpf_object__open_file(path.encode(), None)
    if not obj:
        print(f"profile: cannot open {path}: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        return 1
    try:
        if libbpf.bpf_object__load(obj) != 0:
            print(f"profile: cannot load {path}: {os.strerror(ctypes.get_errno())} (root?)", file=sys.stderr)
            return 1
        prog = libbpf.bpf_object__find_program_by_name(obj, b"on_sample")
        prog_fd = libbpf.bpf_program__fd(prog) if prog else -1
        counts = libbpf.bpf_object__find_map_fd_by_name(obj, b"counts")
        if prog_fd < 0 or counts < 0:
            print(f"profile: {path} has no program on_sample or no map counts", file=sys.stderr)
            return 1
        try:
            with EventSet(rings=False) as events:
                ev = events.add_hardware("cycles", fallback="cpu-clock", freq=HZ)
                # Opened disabled: the program is attached before any sample is taken.
                events.attach_bpf(ev, prog_fd)
                events.enable(ev)
                info = events.info(ev)
                if info.fell_back:
                    print(f"no hardware cycles here: {info.fallback_reason}; sampling the software CPU clock")
                else:
                    print(f"sampling {'CPU cycles' if info.kind == 'hardware' else 'the CPU clock'}")
                cpus = events.cpus
                start = time.monotonic()
                spinners = [subprocess.Popen([sys.executable, "-c", SPIN, str(cpu), str(seconds)]) for cpu in cpus]
                for s in spinners:
                    s.wait()
                events.disable(ev)
                elapsed = time.monotonic() - start
        except OSError as e:
            print(f"profile: {e.strerror or e}", file=sys.stderr)
            return 1
        silent = 0
        for cpu in cpus:
            key, samples = ctypes.c_uint32(cpu), ctypes.c_uint64(0)
            libbpf.bpf_map_lookup_elem(counts, ctypes.byref(key), ctypes.byref(samples))
            print(f"cpu {cpu}: {samples.value} samples ({elapsed * HZ:.0f} expected at {HZ} Hz)")
            silent += samples.value == 0
        return 0 if cpus and not silent else 1
    finally:
        libbpf.bpf_object__close(obj)


if __name__ == "__main__":
    sys.exit(main())
