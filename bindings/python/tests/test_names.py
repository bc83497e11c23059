"""Only libperfbuf's own perfbuf_* names are called, so that a process that
also loaded libbpf (which exports perf_buffer__* too) is safe whatever the
load order."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

import perfbuf
from conftest import need_root, run_python
from perfbuf import PerfBuffer, _lib


class _Recorder:
    """Stands in for the loaded library and records the names used."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib
        self.names: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        self.names.add(name)
        return getattr(self.lib, name)


def test_only_perfbuf_names_are_declared_or_called(producer, monkeypatch: pytest.MonkeyPatch) -> None:
    assert all(name.startswith("perfbuf_") for name in _lib.SIGNATURES)
    rec = _Recorder(perfbuf._LIB)
    monkeypatch.setattr(perfbuf._library, "LIB", rec)  # every module calls the library through it
    pb = PerfBuffer(producer.map_fd, on_sample=lambda cpu, data: None)
    producer.emit(0, 8, 1)
    pb.poll(100)
    pb.consume()
    pb.consume_buffer(0)
    pb.read(0)
    pb.buffer_fd(0)
    pb.stats(0)
    pb.pause()
    pb.resume()
    pb.wake()
    with pb.ring(0):
        pass
    pb.close()
    assert rec.names and all(name.startswith("perfbuf_") for name in rec.names), sorted(rec.names)


@pytest.fixture(scope="module")
def umbrellas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Libraries that pull in libbpf and libperfbuf, in both orders: a
    dlsym through them finds the first library's perf_buffer__* names."""
    cc = shutil.which("cc")
    libbpf = ctypes.util.find_library("bpf")
    if cc is None or libbpf is None:
        need_root("needs cc and libbpf (libbpf-dev) to link a library with both")
    libdir = str(Path(os.environ["PERFBUF_LIBRARY"]).resolve().parent)
    out = tmp_path_factory.mktemp("umbrella")
    libs = {}
    for order, link in (("libbpf_first", ["-lbpf", "-L" + libdir, "-lperfbuf"]),
                        ("perfbuf_first", ["-L" + libdir, "-lperfbuf", "-lbpf"])):
        path = out / f"{order}.so"
        subprocess.run([cc, "-shared", "-o", str(path), "-x", "c", "/dev/null", "-Wl,--no-as-needed", *link,
                        "-Wl,-rpath," + libdir], check=True)
        libs[order] = path
    return libs


READER = """
import ctypes, errno, sys, threading
{preload}
from conftest import Producer
from perfbuf import PerfBuffer
import os
producer = Producer(ctypes.CDLL(os.environ["PERFBUF_PRODUCER_LIBRARY"]))
got = []
with PerfBuffer(producer.map_fd, on_sample=lambda cpu, data: got.append(cpu)) as pb:
    producer.emit(0, 16, 1)
    producer.emit(1, 16, 2)
    while len(got) < 2 and pb.poll(1000) > 0:
        pass
    st = pb.stats(0)
    pb.pause(); pb.resume()
    threading.Timer(0.05, pb.wake).start()
    try:
        pb.poll(5000)
    except OSError as e:
        assert e.errno == errno.ECANCELED, e
print("read", sorted(got), "records", st["records"])
"""


@pytest.mark.parametrize("order", ["libbpf_first", "perfbuf_first"])
def test_a_library_scope_with_libbpf(producer, umbrellas: dict[str, Path], order: str) -> None:
    res = run_python(READER.format(preload=""), env={"PERFBUF_LIBRARY": str(umbrellas[order])})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "read [0, 1] records 1" in res.stdout


@pytest.mark.parametrize("mode", ["RTLD_GLOBAL", "RTLD_LOCAL"])
def test_libbpf_loaded_before_the_package(producer, mode: str) -> None:
    libbpf = ctypes.util.find_library("bpf")
    if libbpf is None:
        need_root("libbpf is not installed (the Debian package libbpf1)")
    preload = f"ctypes.CDLL({libbpf!r}, mode=ctypes.{mode})"
    res = run_python(READER.format(preload=preload))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "read [0, 1] records 1" in res.stdout
