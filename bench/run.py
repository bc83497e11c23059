#!/usr/bin/env python3
"""Runs bench/perfbench on libbpf and on libperfbuf (LD_PRELOAD), alternating,
several times; prints medians side by side with the ratio libperfbuf/libbpf
and writes them as JSON. Also counts instructions per drained record under
callgrind, a figure that does not depend on machine load.

usage: bench/run.py BENCH_BINARY LIBPERFBUF_SO OUT_JSON [--reps N] [--rows drain,stream,quiet,latency]
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys


def run(binary, lib, row, env_extra=None):
    env = dict(os.environ)
    if lib:
        env["LD_PRELOAD"] = lib
    env.update(env_extra or {})
    out = subprocess.run([binary, row], env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def icount(binary, lib, how, records):
    """Instructions per record of one drain, by difference of two runs."""
    if not shutil.which("valgrind"):
        return None
    totals = []
    for n in (0, records):
        env = dict(os.environ)
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
    "stream": ["records_per_s", "reader_cpu_ns_per_record", "lost", "reader_cpu_ms"],
    "idle": ["reader_cpu_ms"],
    "latency": ["lat_p50_us", "lat_p99_us", "lat_max_us", "records_per_s"],
}


def kind(row):
    for k in ("drain", "stream", "idle", "latency"):
        if row.startswith(k):
            return k
    return "drain"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("lib")
    ap.add_argument("out")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rows", default="drain,stream,quiet,latency")
    a = ap.parse_args()

    samples = {}  # (row, mode, lib) -> list of result dicts
    for rep in range(a.reps):
        for row in a.rows.split(","):
            # The drain and quiet rows load both libraries in one process and
            # alternate between them inside it; the others alternate two
            # processes, so drift hits both alike.
            runs = ([run(a.binary, None, row, {"PERFBENCH_LIBPERFBUF": a.lib})] if row in ("drain", "quiet")
                    else [run(a.binary, lib, row) for lib in (None, a.lib)])
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
    for how, lib, name in (("consume", None, "libbpf"), ("consume", a.lib, "libperfbuf"),
                           ("batch", a.lib, "libperfbuf"), ("hand", None, "hand-written")):
        v = icount(a.binary, lib, how, 100000)
        if v is not None:
            icounts[f"{name}:{how}"] = v

    by = {(r["row"], r["mode"], r["lib"]): r for r in results}
    lines = ["| row | mode | figure | libbpf | libperfbuf | ratio |", "|---|---|---|---|---|---|"]
    for r in results:
        if r["lib"] != "libperfbuf":
            continue
        for k in KEYS[kind(r["row"])]:
            if k not in r:
                continue
            base = by.get((r["row"], r["mode"], "libbpf"), {}).get(k)
            base_key = (r["row"], r["mode"], "libbpf")
            if base is None and r["row"].startswith("drain_batch"):
                base_key = (r["row"].replace("batch", "consume"), r["mode"], "libbpf")
            elif base is None:
                # libperfbuf-only modes compare with libbpf's default attr.
                base_key = (r["row"], "default", "libbpf")
            base = by.get(base_key, {}).get(k)
            spread = r[k + "_spread"]
            mine = f"{r[k]:.4g} ({spread[0]:.4g}–{spread[1]:.4g})"
            if base is None:
                lines.append(f"| {r['row']} | {r['mode']} | {k} | — | {mine} | — |")
                continue
            bspread = by.get(base_key, {}).get(k + "_spread", [base, base])
            ratio = f"{r[k] / base:.2f}" if base else "—"
            if base_key[1] != r["mode"]:
                ratio += " (vs default)"
            lines.append(f"| {r['row']} | {r['mode']} | {k} | {base:.4g} ({bspread[0]:.4g}–{bspread[1]:.4g}) | {mine} | {ratio} |")
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
    with open(a.out, "w") as f:
        json.dump({"results": results, "icount_per_record": icounts, "table": table}, f, indent=1)


if __name__ == "__main__":
    main()
