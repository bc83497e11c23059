#!/usr/bin/env python3
"""Runs bench/perfbench on libbpf and on libperfbuf (LD_PRELOAD), alternating,
several times; prints medians side by side with the ratio libperfbuf/libbpf
and writes them as JSON. Also counts instructions per drained record under
callgrind, a figure that does not depend on machine load.

Row groups (--rows, in this order by default):
  drain    both libraries in one process (dlopen), alternating
  stream   three processes per repetition: libbpf, libperfbuf's default (no
           PERFBUF_ADAPTIVE in the environment) and libperfbuf's fast mode
           (PERFBUF_ADAPTIVE=1 in the libperfbuf process only; perfbench
           labels its default-attr rows "fast" and runs only those)
           The libbpf process also runs the ceiling rows: a raw reader woken
           only at half a ring and drained every 1 ms (not a usable reader:
           what the kernel's perf output path allows). stream_full_c64 and
           stream_full_c1 are stream_full with 64 and 1 records per
           BPF_PROG_TEST_RUN call instead of 2000.
  ringbuf  the same producer shape into a BPF ring buffer, read through
           ring_buffer__poll: libbpf's, then libperfbuf's (LD_PRELOAD), by
           default and in its fast mode (PERFBUF_ADAPTIVE=1)
  peers    the same C producer read by cilium/ebpf (Go, PEERS_DIR/peer-cilium:
           perf.Reader, and ringbuf.Reader on the ringbuf rows' ring buffer),
           perfbuf.dev/perfbuf/perf (Go, PEERS_DIR/peer-perfbuf-go: ReadInto,
           Fast + ReadInto, Fast + ReadBatch) and aya (Rust,
           PEERS_DIR/peer-aya); each skipped, saying why, when
           its binary was not built (PEERS_DIR/peer-*.skip holds the reason)
  python   the peers' producer read from Python: perfbuf's callback per
           record and batch reads, and bcc's own reader (bench/python_rows.py;
           needs --python-producer)
  quiet    both libraries in one process, alternating; run twice per
           repetition, the second time with PERFBUF_ADAPTIVE=1 (rows "fast":
           there the libbpf column is the libbpf segments that alternated with
           libperfbuf's fast ones; the variable does nothing to libbpf)
  latency  as stream
  rings    1,024 rings on CPUs 0 and 1 (an explicit CPU list, one page each):
           an empty perf_buffer__consume, the consume_buffer delivering a
           fresh ring's first record, mapped bytes and fds per ring. perfbench
           measures libbpf and libperfbuf (LD_PRELOAD) through
           perf_buffer__new_raw (raw mode: no fast mode); examples/ring_scale
           (--ring-scale) the Rust API's default and fast modes, compared with
           the same libbpf row
  record   examples/record_bench --json: a syscall tracepoint's stream read
           only, written to perf.data on /dev/null and on tmpfs, and by perf
           record (rows "record"; lib "perfbuf" or "perf")
Every run starts from the caller's environment less any PERFBUF_* variable.

usage: bench/run.py BENCH_BINARY LIBPERFBUF_SO OUT_JSON [--reps N]
                    [--rows drain,stream,ringbuf,peers,quiet,latency,rings,record]
                    [--peers-dir DIR] [--ring-scale BIN] [--record-bench BIN]
                    [--ring-scale PATH]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import python_rows  # noqa: E402  (bench/python_rows.py: the Python rows and their table)


GROUPS = ["drain", "stream", "ringbuf", "peers", "python", "quiet", "latency", "rings", "record"]
FAST = {"PERFBUF_ADAPTIVE": "1"}


def clean_env():
    """The caller's environment without libperfbuf's switches: a run is
    libperfbuf's default unless this script sets one."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PERFBUF_")}


def run_cmd(argv, lib=None, env_extra=None):
    env = clean_env()
    if lib:
        env["LD_PRELOAD"] = lib
    env.update(env_extra or {})
    p = subprocess.run(argv, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"{' '.join(argv)} failed with exit code {p.returncode}")
    if p.stderr.strip():
        sys.stderr.write(p.stderr)
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def run(binary, lib, row, env_extra=None):
    return run_cmd([binary, row], lib, env_extra)


PEERS = [("cilium-ebpf", "peer-cilium"), ("perfbuf-go", "peer-perfbuf-go"), ("aya", "peer-aya")]


def peer_binaries(peers_dir):
    """The peer readers that were built; says why for the others."""
    found = []
    for name, exe in PEERS:
        path = os.path.join(peers_dir, exe)
        if os.access(path, os.X_OK):
            found.append(path)
            continue
        why = f"{path} not built"
        skip = path + ".skip"
        if os.path.exists(skip):
            why = open(skip).read().strip()
        print(f"peers: skipping {name}: {why} (make bench-peers builds it)", file=sys.stderr)
    return found


def icount(binary, lib, how, records):
    """Instructions per record of one drain, by difference of two runs."""
    if not shutil.which("valgrind"):
        return None
    totals = []
    for n in (0, records):
        env = clean_env()
        if lib:
            env["LD_PRELOAD"] = lib
        p = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
                            binary, "icount", how, str(n)], env=env, capture_output=True, text=True)
        m = re.search(r"Collected : (\d+)", p.stderr)
        if not m:
            return None
        totals.append(int(m.group(1)))
    return (totals[1] - totals[0]) / records


KEYS = {
    "drain": ["ns_per_record"],
    "stream": ["records_per_s", "reader_cpu_ns_per_record", "lost", "reader_cpu_ms", "produced",
               "batch_switches", "ring_wakeups", "ringbuf_output_failed", "other_threads_cpu_ms",
               "producer_irq_work"],
    "idle": ["reader_cpu_ms"],
    "latency": ["lat_p50_us", "lat_p99_us", "lat_max_us", "records_per_s"],
    "rings": ["empty_consume_ns", "first_record_ns", "mapped_bytes_per_ring", "fds_per_ring"],
    "record": ["records_per_s", "reader_cpu_ns_per_record"],
}


# What the libbpf/libperfbuf table shows (bench.json has every key above).
TABLE_KEYS = {
    "drain": ["ns_per_record"],
    "stream": ["records_per_s", "reader_cpu_ns_per_record", "lost", "reader_cpu_ms"],
    "idle": ["reader_cpu_ms"],
    "latency": ["lat_p50_us", "lat_p99_us", "lat_max_us", "records_per_s"],
    "rings": ["empty_consume_ns", "first_record_ns", "mapped_bytes_per_ring", "fds_per_ring"],
}

# Every reader of the same producer shape (producer on CPU 0, reader on
# CPU 1, 64-byte samples), for the second table.
READERS = [
    ("libbpf", "default", "libbpf perf buffer, perf_buffer__poll"),
    ("libperfbuf", "default", "libperfbuf default (LD_PRELOAD)"),
    ("libperfbuf", "fast", "libperfbuf fast (LD_PRELOAD, PERFBUF_ADAPTIVE=1)"),
    ("libbpf", "ringbuf", "libbpf BPF ring buffer, ring_buffer__poll"),
    ("libperfbuf", "ringbuf", "libperfbuf BPF ring buffer, ring_buffer__poll (LD_PRELOAD)"),
    ("cilium-ebpf", "default", "cilium/ebpf 0.9.1 perf.Reader, ReadInto"),
    ("cilium-ebpf", "ringbuf", "cilium/ebpf 0.9.1 ringbuf.Reader, ReadInto"),
    ("perfbuf-go", "default", "perfbuf.dev/perfbuf/perf, ReadInto"),
    ("perfbuf-go", "fast", "perfbuf.dev/perfbuf/perf, Fast, ReadInto"),
    ("perfbuf-go", "batch", "perfbuf.dev/perfbuf/perf, Fast, ReadBatch"),
    ("aya", "default", "aya 0.14 PerfEventArray, epoll + for_each"),
    ("ceiling", "raw_half_ring_1ms", "ceiling: raw reader woken at half a ring, drained every 1 ms "
     "(not a usable reader)"),
    ("libbpf", "raw_wakeup64", "libbpf perf_buffer__new_raw, wakeup_events 64"),
    ("libperfbuf", "perfbuf_wakeup64_delay1ms", "libperfbuf perfbuf_new, wakeup 64 + 1 ms"),
]


def human(v):
    """2035074 -> '2.04 M', 64769 -> '64.8 k', 1996.3 -> '1996', 26.7 -> '26.7'."""
    for at, div, unit in ((1e6, 1e6, " M"), (1e4, 1e3, " k")):
        if abs(v) >= at:
            return f"{v / div:.3g}{unit}"
    return f"{v:.0f}" if abs(v) >= 100 else f"{v:.3g}"


def readers_table(by):
    def fmt(r, k):
        lo, hi = r[k + "_spread"]
        return f"{human(r[k])} ({human(lo)}–{human(hi)})"

    lines = ["| row | reader | runs | records/s | reader CPU ns/record | lost (of produced) | "
             "records/s vs libbpf | CPU/record vs libbpf |", "|---|---|---|---|---|---|---|---|"]
    for row in ("stream_full", "stream_full_c64", "stream_full_c1", "stream_100k"):
        base = by.get((row, "default", "libbpf"), {})
        for lib, mode, label in READERS:
            r = by.get((row, mode, lib))
            if not r or "records_per_s" not in r:
                continue
            lost = f"{human(r['lost'])} ({human(r['lost_spread'][0])}–{human(r['lost_spread'][1])}) of {human(r.get('produced', 0))}"
            if r["lost"] and "ringbuf_output_failed" in r:
                lost += " (failed bpf_ringbuf_output calls)"
            rate = r["records_per_s"] / base["records_per_s"] if base.get("records_per_s") else None
            cpu = (r["reader_cpu_ns_per_record"] / base["reader_cpu_ns_per_record"]
                   if base.get("reader_cpu_ns_per_record") else None)
            lines.append(f"| {row} | {label} | {r['runs']} | {fmt(r, 'records_per_s')} | "
                         f"{fmt(r, 'reader_cpu_ns_per_record')} | {lost} | "
                         f"{f'{rate:.2f}' if rate else '—'} | {f'{cpu:.2f}' if cpu else '—'} |")
    return lines


def goals_table(by):
    """The fast mode against the ceiling and the BPF ring buffer, per
    producer shape: the ratios issue goals are stated in."""
    lines = ["| producer | fast/ceiling records/s | fast/ceiling CPU per record | "
             "fast/ring buffer records/s | fast/ring buffer CPU per record | fast lost |",
             "|---|---|---|---|---|---|"]
    for row, label in (("stream_full_c64", "64 records per call"), ("stream_full_c1", "1 record per call"),
                       ("stream_full", "2000 records per call")):
        fast = by.get((row, "fast", "libperfbuf"))
        ceil = by.get((row, "raw_half_ring_1ms", "ceiling"))
        rb = by.get((row, "ringbuf", "libbpf"))
        if not fast:
            continue

        def ratio(other, k):
            return f"{fast[k] / other[k]:.2f}" if other and other.get(k) else "—"
        lines.append(f"| {label} | {ratio(ceil, 'records_per_s')} | {ratio(ceil, 'reader_cpu_ns_per_record')} | "
                     f"{ratio(rb, 'records_per_s')} | {ratio(rb, 'reader_cpu_ns_per_record')} | "
                     f"{human(fast['lost'])} of {human(fast.get('produced', 0))} |")
    return lines


HEALTH_OFF = "libperfbuf-health-off"


def health_table(by):
    """What the health bookkeeping costs: the fast mode's rows with it on
    (the shipped library) and compiled out (--health-off-lib), each a
    median with its run-to-run range; "inside" when each median lies in
    the other build's range."""
    lines = ["| producer | figure | health on | health off | on/off | inside the range |",
             "|---|---|---|---|---|---|"]
    for row, label in (("stream_full_c64", "64 per call"), ("stream_full_c1", "1 per call"),
                       ("stream_full", "2000 per call"), ("stream_100k", "100 k/s paced")):
        on, off = by.get((row, "fast", "libperfbuf")), by.get((row, "fast", HEALTH_OFF))
        if not on or not off:
            continue
        for k in ("records_per_s", "reader_cpu_ns_per_record"):
            (a0, a1), (b0, b1) = on[k + "_spread"], off[k + "_spread"]
            inside = "yes" if a0 <= off[k] <= a1 and b0 <= on[k] <= b1 else "no"
            lines.append(f"| {label} | {k} | {human(on[k])} ({human(a0)}–{human(a1)}) | "
                         f"{human(off[k])} ({human(b0)}–{human(b1)}) | {on[k] / off[k]:.2f} | {inside} |")
    return lines


def ringbuf_table(by):
    """libperfbuf's ring_buffer__poll against libbpf's, per producer shape."""
    lines = ["| producer | reader | records/s | reader CPU ns/record | failed outputs (of produced) | "
             "wake-ups (producer CPU's IRQ work) | records/s vs libbpf | CPU/record vs libbpf |",
             "|---|---|---|---|---|---|---|---|"]
    cpu = "reader_cpu_ns_per_record"
    for row, label in RINGBUF_SHAPES:
        b = by.get((row, "ringbuf", "libbpf"))
        if not b or not by.get((row, "ringbuf", "libperfbuf")):
            continue
        for (lib, mode), name in RINGBUF_READERS.items():
            r = by.get((row, mode, lib))
            if not r:
                continue
            iwi = human(r["producer_irq_work"]) if r.get("producer_irq_work", -1) >= 0 else "—"
            lines.append(f"| {label} | {name} | {human(r['records_per_s'])} | {human(r[cpu])} | "
                         f"{human(r['lost'])} of {human(r.get('produced', 0))} | {iwi} | "
                         f"{r['records_per_s'] / b['records_per_s']:.2f} | "
                         f"{(r[cpu] / b[cpu]) if b.get(cpu) else 0:.2f} |")
    return lines


RINGBUF_READERS = {("libbpf", "ringbuf"): "libbpf `ring_buffer__poll`",
                   ("libperfbuf", "ringbuf"): "libperfbuf `ring_buffer__poll` (`LD_PRELOAD`)",
                   ("libperfbuf", "ringbuf_fast"): "libperfbuf fast mode (`PERFBUF_ADAPTIVE=1`)",
                   ("cilium-ebpf", "ringbuf"): "cilium/ebpf 0.9.1 `ringbuf.Reader`, `ReadInto`"}


RINGBUF_SHAPES = (("stream_full", "2000 records per call"), ("stream_full_c64", "64 records per call"),
                  ("stream_full_c1", "1 record per call"), ("stream_100k", "100 k records/s"))


def conditions(reps, rows):
    """What a reader of the figures needs to judge them (kept in the JSON)."""
    def out(argv):
        try:
            return subprocess.run(argv, capture_output=True, text=True, cwd=os.path.dirname(
                os.path.abspath(__file__))).stdout.strip()
        except OSError:
            return "?"
    libbpf = out(["pkg-config", "--modversion", "libbpf"]) or "?"
    cpus = os.cpu_count()
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                  if line.startswith("model name")), "")
    return {"commit": out(["git", "rev-parse", "--short", "HEAD"]) or "?",
            "date": out(["date", "-u", "+%Y-%m-%d %H:%M UTC"]), "kernel": os.uname().release,
            "libbpf": libbpf, "machine": f"{cpus} CPUs" + (f" ({model})" if model else ""), "reps": reps, "rows": rows,
            "loadavg_start": f"{os.getloadavg()[0]:.2f}"}


def kind(row):
    for k in ("drain", "stream", "idle", "latency", "rings", "record"):
        if row.startswith(k):
            return k
    return "drain"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("lib")
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rows", default=",".join(GROUPS))
    ap.add_argument("--record-bench", default=None, help="examples/record_bench (the record rows)")
    ap.add_argument("--ring-scale", default=None, help="examples/ring_scale (the rings rows' Rust API "
                    "default and fast modes; skipped, saying so, when absent)")
    ap.add_argument("--health-off-lib", default=None, help="libperfbuf built with the health bookkeeping "
                    "compiled out (feature bench-health-off): the stream rows' fast mode again, to show its cost")
    ap.add_argument("--python-producer", default=None, help="build/libperfbuf_peer_producer.so (the python "
                    "rows; skipped, saying so, when absent)")
    ap.add_argument("--peers-dir", default=None, help="where peer-cilium and peer-aya are (default: "
                    "the benchmark binary's directory)")
    a = ap.parse_args()
    groups = a.rows.split(",")
    for g in groups:
        if g not in GROUPS:
            raise SystemExit(f"unknown row group {g!r}; known: {','.join(GROUPS)}")
    peers = peer_binaries(a.peers_dir or os.path.dirname(os.path.abspath(a.binary))) if "peers" in groups else []

    meta = conditions(a.reps, a.rows)
    samples = {}  # (row, mode, lib) -> list of result dicts
    for rep in range(a.reps):
        for row in groups:
            # The drain and quiet rows load both libraries in one process and
            # alternate between them inside it; the others alternate
            # processes, so drift hits all alike.
            both = {"PERFBENCH_LIBPERFBUF": a.lib}
            if row == "drain":
                runs = [run(a.binary, None, row, both)]
            elif row == "quiet":
                runs = [run(a.binary, None, row, both), run(a.binary, None, row, {**both, **FAST})]
            elif row == "ringbuf":
                runs = [run(a.binary, None, row), run(a.binary, a.lib, row), run(a.binary, a.lib, row, FAST)]
            elif row == "peers":
                runs = [run_cmd([p]) for p in peers]
            elif row == "python":
                have = a.python_producer and os.path.exists(a.python_producer)
                runs = [python_rows.rows(a.lib, os.path.abspath(a.python_producer), rep == 0)] if have else []
                if not have and rep == 0:
                    print(f"python: no producer library at {a.python_producer}: rows skipped", file=sys.stderr)
            elif row == "record":
                if a.record_bench and os.access(a.record_bench, os.X_OK):
                    runs = [run_cmd([a.record_bench, "2", "--json"])]
                else:
                    runs = []
                    if rep == 0:
                        print(f"record: no record_bench at {a.record_bench}: rows skipped", file=sys.stderr)
            elif row == "rings":
                runs = [run(a.binary, None, row), run(a.binary, a.lib, row)]
                if a.ring_scale and os.access(a.ring_scale, os.X_OK):
                    runs.append(run_cmd([a.ring_scale]))
                elif rep == 0:
                    print(f"rings: no ring_scale at {a.ring_scale}: Rust default and fast rows skipped",
                          file=sys.stderr)
            else:
                runs = [run(a.binary, None, row), run(a.binary, a.lib, row), run(a.binary, a.lib, row, FAST)]
                if row == "stream" and a.health_off_lib:
                    runs.append([{**r, "lib": HEALTH_OFF} for r in run(a.binary, a.health_off_lib, row, FAST)])
            for out in runs:
                for r in out:
                    key = (r["row"], r.get("mode", ""), r["lib"])
                    samples.setdefault(key, []).append(r)
        print(f"repetition {rep + 1}/{a.reps} done", file=sys.stderr)

    results = []
    for (row, mode, lib), rs in sorted(samples.items()):
        entry = {"row": row, "mode": mode, "lib": lib, "runs": len(rs)}
        for k in KEYS[kind(row)]:
            vals = [r[k] for r in rs if k in r]
            if vals:
                entry[k] = statistics.median(vals)
                entry[k + "_spread"] = [min(vals), max(vals)]
        results.append(entry)

    icounts = {}
    modes = (("consume", None, "libbpf"), ("consume", a.lib, "libperfbuf"),
             ("batch", a.lib, "libperfbuf"), ("hand", None, "hand-written"))
    for how, lib, name in modes if "drain" in groups else ():  # a drain figure
        v = icount(a.binary, lib, how, 100000)
        if v is not None:
            icounts[f"{name}:{how}"] = v

    by = {(r["row"], r["mode"], r["lib"]): r for r in results}
    lines = ["| row | mode | figure | libbpf | libperfbuf | ratio |", "|---|---|---|---|---|---|"]
    for r in results:
        if r["lib"] != "libperfbuf":
            continue
        for k in TABLE_KEYS[kind(r["row"])]:
            if k not in r:
                continue
            base = by.get((r["row"], r["mode"], "libbpf"), {}).get(k)
            base_key = (r["row"], r["mode"], "libbpf")
            if base is None and r["row"].startswith("drain_batch"):
                base_key = (r["row"].replace("batch", "consume"), r["mode"], "libbpf")
            elif base is None and kind(r["row"]) == "rings":
                # Every rings row compares with libbpf's raw-mode one.
                base_key = (r["row"], "raw", "libbpf")
            elif base is None:
                # libperfbuf-only modes compare with libbpf's default attr.
                base_key = (r["row"], "default", "libbpf")
            base = by.get(base_key, {}).get(k)
            spread = r[k + "_spread"]
            mine = f"{human(r[k])} ({human(spread[0])}–{human(spread[1])})"
            if base is None:
                lines.append(f"| {r['row']} | {r['mode']} | {k} | — | {mine} | — |")
                continue
            bspread = by.get(base_key, {}).get(k + "_spread", [base, base])
            ratio = f"{r[k] / base:.2f}" if base else "—"
            if base_key[1] != r["mode"]:
                ratio += f" (vs {base_key[1]})"
            lines.append(f"| {r['row']} | {r['mode']} | {k} | {human(base)} ({human(bspread[0])}–{human(bspread[1])}) | "
                         f"{mine} | {ratio} |")
    # The target "within 5% of the hand-written reader": consume against the
    # hand reader over the same library's rings, in the same process.
    for lib in ("libbpf", "libperfbuf"):
        for n in (8, 64, 512):
            c = by.get((f"drain_consume_{n}", "", lib), {}).get("ns_per_record")
            h = by.get((f"drain_hand_{n}", "", lib), {}).get("ns_per_record")
            if c and h:
                lines.append(f"| drain_consume_{n} vs hand-written, {lib} | | ns_per_record | hand {h:.4g} | "
                             f"consume {c:.4g} | {c / h:.2f} |")
    # Each against libbpf's consume; the hand-written reader is no library,
    # its figure sits in the second column with the mode saying so.
    for name, v in icounts.items():
        who, how = name.split(":")
        mode = how if who == "libperfbuf" else f"{how} ({who}, no library)"
        lines.append(f"| icount_drain_8 | {mode} | instructions/record | "
                     f"{icounts.get('libbpf:consume', 0):.1f} | {v:.1f} | {v / icounts['libbpf:consume']:.2f} |"
                     if who != "libbpf" else "")
    table = "\n".join(l for l in lines if l)
    print(table)
    readers = "\n".join(readers_table(by))
    print()
    print(readers)
    goals = "\n".join(goals_table(by))
    print()
    print(goals)
    ringbufs = "\n".join(ringbuf_table(by))
    print()
    print(ringbufs)
    health = "\n".join(health_table(by))
    print()
    print(health)
    print()
    print("\n".join(python_rows.table_lines(by)))
    meta["loadavg_end"] = f"{os.getloadavg()[0]:.2f}"
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "results": results, "icount_per_record": icounts, "table": table, "readers_table": readers,
                   "goals_table": goals, "ringbuf_table": ringbufs,
                   "health_table": health},
                  f, indent=1)


if __name__ == "__main__":
    main()
