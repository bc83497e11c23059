"""Run by test_install.py with the interpreter of a venv where perfbuf was
just pip-installed: checks that the package loaded its own libperfbuf (and
no other), then reads real records from the BPF test producer
(build/libperfbuf_producer.so, given by PERFBUF_PRODUCER_LIBRARY) with it.

Only the standard library and the installed package: the venv has nothing
else (no pytest, so not conftest's Producer either). Prints one JSON line;
exits 3 when the producer cannot be made (no root or no BPF).
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import sysconfig
import time
from pathlib import Path

RECORDS_PER_CPU = 50
SIZES = (8, 100, 3000)


class _Producer(ctypes.Structure):
    _fields_ = [("map_fd", ctypes.c_int), ("det_prog_fd", ctypes.c_int), ("stamp_prog_fd", ctypes.c_int)]


def main() -> int:
    import perfbuf

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    loaded = Path(perfbuf._LIB._name).resolve()
    # Every libperfbuf mapped into this process: only the package's own.
    with open("/proc/self/maps") as maps:
        mapped = sorted({line.split()[-1] for line in maps if "libperfbuf" in line.split()[-1]})

    prod_lib = ctypes.CDLL(os.environ["PERFBUF_PRODUCER_LIBRARY"], use_errno=True)
    prod = _Producer()
    err = prod_lib.producer_open(ctypes.byref(prod), 0)
    if err:
        print(f"cannot create the BPF producer: {os.strerror(-err)} (need root with BPF)", file=sys.stderr)
        return 3

    got: list[tuple[int, bytes]] = []
    cpus = range(os.cpu_count() or 1)
    try:
        with perfbuf.PerfBuffer(prod.map_fd, page_cnt=64, on_sample=lambda cpu, data: got.append((cpu, data))) as pb:
            want = []
            for cpu in cpus:
                for i in range(RECORDS_PER_CPU):
                    n, seed = SIZES[i % len(SIZES)], (cpu * 31 + i) & 0xFF
                    ret = ctypes.c_int(0)
                    err = prod_lib.producer_emit_det(ctypes.byref(prod), cpu, n, seed, 1, ctypes.byref(ret))
                    if err or ret.value:
                        raise OSError(f"producer_emit_det on CPU {cpu}: {err} (helper {ret.value})")
                    expected = (ctypes.c_ubyte * n)()
                    prod_lib.producer_expected(n, seed, expected)
                    want.append((cpu, bytes(expected)))
            deadline = time.monotonic() + 30  # only against a hang
            while len(got) < len(want) and time.monotonic() < deadline:
                pb.poll(timeout_ms=100)
    finally:
        prod_lib.producer_close(ctypes.byref(prod))

    # Samples come padded (the kernel's 8-byte alignment): each must start
    # with the bytes sent, in the order sent on its CPU.
    by_cpu = {cpu: [data for c, data in got if c == cpu] for cpu in cpus}
    want_by_cpu = {cpu: [data for c, data in want if c == cpu] for cpu in cpus}
    match = all(len(by_cpu[cpu]) == len(want_by_cpu[cpu])
                and all(g[:len(w)] == w and len(g) < len(w) + 8 for g, w in zip(by_cpu[cpu], want_by_cpu[cpu]))
                for cpu in cpus)
    print(json.dumps({
        "package": str(Path(perfbuf.__file__).resolve()),
        "library": str(loaded),
        "library_in_site_packages": loaded.is_relative_to(site),
        "mapped": mapped,
        "version": perfbuf.library_version(),
        "want": len(want),
        "got": len(got),
        "records_match": match,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
