#!/usr/bin/env python3
"""The Python rows of `make bench`: the peers' producer (bench/peers/
peer_producer.c: a tc program's bpf_perf_event_output of 64-byte samples,
2000 per BPF_PROG_TEST_RUN call, on CPU 0, for 1 s at full rate) read on
CPU 1 from Python by

  python / callback    perfbuf's PerfBuffer.poll, an on_sample callback per
                       record (the callback counts; it gets the bytes)
  python / batch       PerfBuffer.read_batch: one Batch per drain, its
                       samples as a NumPy structured-array view (64 bytes per
                       row; Python touches no record on its own)
  python / *_fast      the same with fast=True (the fast mode)
  python / *_wakeup64  the same with wakeup_events=64, max_delay_ms=1
                       (batched wake-ups, opted in)
  bcc / default        bcc's own reader, python3-bpfcc's
                       PerfEventArray.open_perf_buffer + BPF.perf_buffer_poll,
                       a callback per record (counting); the table object is
                       made over the producer's map without compiling a
                       program (no kernel headers needed)

Each row runs in a child interpreter (`python_rows.py --child MODE
PRODUCER_SO`), which prints one JSON line in the peers' format: records/s
(delivered over the time from the producer's start to the last read that
delivered), reader CPU per record (the reading thread's CPU time), lost.

bench/run.py calls rows(); bench/report.py calls readme_lines() and
table_lines(). Run alone (a short check, not `make bench`):
  bench/python_rows.py LIBPERFBUF_SO PRODUCER_SO [--reps N]
"""
import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
PAGES = 64  # per CPU, as perfbench's stream rows and the peers
SECONDS = 1.0
MODES = [("python", "callback"), ("python", "batch"), ("python", "callback_fast"), ("python", "batch_fast"),
         ("python", "callback_wakeup64"), ("python", "batch_wakeup64"), ("bcc", "default")]
LABELS = {
    ("python", "callback"): "Python `PerfBuffer`, `on_sample` callback per record",
    ("python", "batch"): "**Python `PerfBuffer.read_batch`**, a NumPy view per batch",
    ("python", "callback_fast"): "Python callback, fast mode (`fast=True`)",
    ("python", "batch_fast"): "**Python `read_batch`, fast mode** (`fast=True`)",
    ("python", "callback_wakeup64"): "Python callback, `wakeup_events=64, max_delay_ms=1`",
    ("python", "batch_wakeup64"): "**Python `read_batch`**, `wakeup_events=64, max_delay_ms=1`",
    ("bcc", "default"): "bcc 0.26 `open_perf_buffer` + `perf_buffer_poll` (python3-bpfcc)",
}
# The reader's options by mode suffix: libperfbuf's default (per-record
# wake-ups, as libbpf and bcc), the fast mode, and batched wake-ups.
OPTIONS = {"": {}, "fast": {"fast": True}, "wakeup64": {"wakeup_events": 64, "max_delay_ms": 1}}


# ---- the child: one row ---------------------------------------------------------------

def _producer(path):
    lib = ctypes.CDLL(path)
    lib.peer_producer_open.restype = ctypes.c_int
    lib.peer_produce.restype = ctypes.c_uint64
    lib.peer_produce.argtypes = [ctypes.c_double, ctypes.c_uint, ctypes.c_uint, ctypes.POINTER(ctypes.c_int)]
    return lib


class Count:
    samples = 0
    lost = 0


def _perfbuf_reader(fd, mode, count):
    """A step function reading with perfbuf: returns whether it delivered."""
    from perfbuf import PerfBuffer
    how, _, suffix = mode.partition("_")
    options = OPTIONS[suffix]
    if how == "callback":
        def on_sample(cpu, data):
            count.samples += 1

        def on_lost(cpu, n):
            count.lost += n

        pb = PerfBuffer(fd, PAGES, on_sample=on_sample, on_lost=on_lost, **options)

        def step(timeout_ms):
            before = count.samples + count.lost
            pb.poll(timeout_ms)
            return count.samples + count.lost != before
        return pb, step
    pb = PerfBuffer(fd, PAGES, **options)
    try:
        import numpy as np
        row = np.dtype("V64")
    except ImportError:
        np = None

    def step(timeout_ms):
        batch = pb.read_batch(timeout_ms)
        if not batch:
            return False
        if np is not None:
            lost = batch.entries_numpy()["lost"]
            n_lost = int(np.count_nonzero(lost))
            count.lost += int(lost.sum()) if n_lost else 0
            count.samples += len(batch.as_numpy(row))
        else:
            losses = batch.losses
            count.lost += sum(n for _, n in losses)
            count.samples += len(batch) - len(losses)
        return True
    return pb, step


def _bcc_reader(fd, count):
    """bcc's PerfEventArray over the producer's map, read by its own
    open_perf_buffer and perf_buffer_poll."""
    import bcc
    from bcc import table

    class Loaded:  # what bcc's table and poll use of a BPF object
        perf_buffers = {}
    loaded = Loaded()
    events = table.PerfEventArray.__new__(table.PerfEventArray)
    events.bpf, events.map_id, events.map_fd, events._name = loaded, 0, fd, b"events"
    events.Key, events.Leaf = ctypes.c_int, ctypes.c_int
    events.max_entries = os.sysconf("SC_NPROCESSORS_CONF")
    events._cbs, events._open_key_fds, events._event_class = {}, {}, None

    def on_sample(cpu, data, size):
        count.samples += 1

    def on_lost(n):
        count.lost += n

    events.open_perf_buffer(on_sample, page_cnt=PAGES, lost_cb=on_lost)

    def step(timeout_ms):
        before = count.samples + count.lost
        bcc.BPF.perf_buffer_poll(loaded, timeout_ms)
        return count.samples + count.lost != before
    return events, step


def child(lib_mode, producer_so):
    lib, mode = lib_mode.split("/")
    prod = _producer(producer_so)
    fd = prod.peer_producer_open()
    if fd < 0:
        raise SystemExit(f"cannot create the BPF producer: {os.strerror(-fd)}")
    os.sched_setaffinity(0, {1})  # this thread: the reader, on CPU 1
    count = Count()
    reader, step = _bcc_reader(fd, count) if lib == "bcc" else _perfbuf_reader(fd, mode, count)
    done = ctypes.c_int(0)
    produced = []
    producer = threading.Thread(target=lambda: produced.append(prod.peer_produce(SECONDS, 0, 64,
                                                                                  ctypes.byref(done))))
    cpu0, t0 = time.thread_time_ns(), time.monotonic_ns()
    producer.start()  # peer_produce pins its thread to CPU 0; ctypes lets go of the GIL meanwhile
    last = t0
    while True:
        finished = done.value != 0
        if step(10 if finished else 100):
            last = time.monotonic_ns()
        elif finished:
            break  # the producer stopped, and 10 ms passed with nothing
    cpu = time.thread_time_ns() - cpu0
    producer.join()
    figures = {}
    if lib == "python":  # the rings' wake-ups, and whether the fast mode engaged
        st = [reader.stats(i) for i in range(reader.buffer_count)]
        figures = {"ring_wakeups": sum(s["wakeups"] for s in st), "batch_switches": sum(s["batch_switches"] for s in st)}
    delivered = count.samples
    version = {"bcc": lambda: __import__("bcc").__version__,
               "python": lambda: __import__("perfbuf").library_version()}[lib]()
    print(json.dumps({
        "row": "stream_full", "lib": lib, "mode": mode, "version": version, "produced": produced[0],
        "delivered": delivered, "lost": count.lost, "records_per_s": delivered / ((last - t0) / 1e9),
        "reader_cpu_ns_per_record": cpu / delivered if delivered else None, "reader_cpu_ms": cpu / 1e6,
        "wall_ms": (time.monotonic_ns() - t0) / 1e6, **figures}))
    del reader


# ---- the parent: bench/run.py's hook ----------------------------------------------------

def _bcc_python():
    """An interpreter that imports bcc (python3-bpfcc installs it for
    Debian's /usr/bin/python3), or None."""
    for exe in (sys.executable, shutil.which("python3"), "/usr/bin/python3"):
        if exe and subprocess.run([exe, "-c", "import bcc"], capture_output=True).returncode == 0:
            return exe
    return None


def rows(lib_so, producer_so, announce=True, only=None):
    """One run of every Python row: result dicts (the failed or skipped
    ones said on stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFBUF_")}
    env["PERFBUF_LIBRARY"] = lib_so
    env["PYTHONPATH"] = os.path.join(TOP, "bindings", "python", "src") + os.pathsep + env.get("PYTHONPATH", "")
    bcc_python = _bcc_python()
    out = []
    for lib, mode in MODES:
        if only and f"{lib}/{mode}" not in only:
            continue
        exe = sys.executable
        if lib == "bcc":
            if bcc_python is None:
                if announce:
                    print("python rows: skipping bcc: no python3 here imports bcc (apt-get install python3-bpfcc)",
                          file=sys.stderr)
                continue
            exe = bcc_python
        p = subprocess.run([exe, os.path.abspath(__file__), "--child", f"{lib}/{mode}", producer_so], env=env,
                           capture_output=True, text=True, timeout=120)
        if p.returncode != 0:
            print(f"python rows: {lib}/{mode} failed:\n{p.stderr}", file=sys.stderr)
            continue
        out += [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    return out


# ---- the tables ----------------------------------------------------------------------------

def _fmt_rate(v):
    return f"{v / 1e6:.2f} M" if v >= 1e6 else f"{v / 1e3:.0f} k"


def _lost(r):
    if not r.get("lost"):
        return "0"
    return f"{100 * r['lost'] / r['produced']:.1f} %" if r.get("produced") else f"{r['lost']:.0f}"


def table_lines(by):
    """The Python rows of `by` ((row, mode, lib) -> result with medians),
    against the per-record callback; [] without them."""
    base = by.get(("stream_full", "callback", "python"))
    present = [(lib, mode) for lib, mode in MODES if ("stream_full", mode, lib) in by]
    if not present:
        return []
    lines = ["| Python reader | records/s | reader CPU per record | lost | records/s vs callback | "
             "CPU/record vs callback |", "|---|---|---|---|---|---|"]
    for lib, mode in present:
        r = by[("stream_full", mode, lib)]
        cpu = r.get("reader_cpu_ns_per_record")
        vs_rate = f"{r['records_per_s'] / base['records_per_s']:.2f}" if base else "—"
        vs_cpu = f"{cpu / base['reader_cpu_ns_per_record']:.2f}" if base and cpu else "—"
        lines.append(f"| {LABELS[(lib, mode)]} | {_fmt_rate(r['records_per_s'])} | "
                     f"{cpu:,.0f} ns | {_lost(r)} | {vs_rate} | {vs_cpu} |" if cpu else "")
    return [line for line in lines if line]


def readme_lines(by):
    """README's Python part: the table under a sentence, or nothing."""
    table = table_lines(by)
    if not table:
        return []
    return ["", "Into Python, the same producer read on the other CPU (goals for the batch path: ≥ 1 M records/s, "
            "nothing lost, ≥ 5× the callback's rate at ≤ 0.2× its CPU per record):", "", *table]


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description="the Python rows alone (medians of --reps runs)")
    ap.add_argument("lib")
    ap.add_argument("producer")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--only", default=None, help="comma-separated lib/mode, e.g. python/batch_fast")
    a = ap.parse_args()
    only = a.only.split(",") if a.only else None
    samples = {}
    for rep in range(a.reps):
        for r in rows(os.path.abspath(a.lib), os.path.abspath(a.producer), announce=rep == 0, only=only):
            samples.setdefault((r["row"], r["mode"], r["lib"]), []).append(r)
    by = {}
    for key, rs in samples.items():
        med = dict(rs[0])
        for k in ("records_per_s", "reader_cpu_ns_per_record", "lost", "produced", "delivered", "batch_switches",
                  "ring_wakeups"):
            vals = [r[k] for r in rs if r.get(k) is not None]
            if vals:
                med[k] = statistics.median(vals)
                med[k + "_spread"] = [min(vals), max(vals)]
        by[key] = med
        print(json.dumps(med), file=sys.stderr)
    print("\n".join(table_lines(by)))


if __name__ == "__main__":
    main()
