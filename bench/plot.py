#!/usr/bin/env python3
"""Plots records/s and latency for libbpf and libperfbuf from bench/run.py's
JSON. usage: bench/plot.py BENCH_JSON OUT_PNG"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


ORDER = ["default", "default_adaptive_off", "raw_wakeup64", "perfbuf_wakeup64_delay1ms"]


def mode_order(mode):
    return ORDER.index(mode) if mode in ORDER else len(ORDER)


def main():
    data = json.load(open(sys.argv[1]))["results"]
    libs = ["libbpf", "libperfbuf"]
    colors = {"libbpf": "#7f7f7f", "libperfbuf": "#1f77b4"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))

    stream = [r for r in data if r["row"] == "stream_full"]
    modes = sorted({r["mode"] for r in stream}, key=mode_order)
    width = 0.38
    for i, lib in enumerate(libs):
        vals = [next((r["records_per_s"] / 1e3 for r in stream if r["mode"] == m and r["lib"] == lib), 0)
                for m in modes]
        ax1.bar([x + (i - 0.5) * width for x in range(len(modes))], vals, width, label=lib, color=colors[lib])
    ax1.set_xticks(range(len(modes)))
    ax1.set_xticklabels(modes, fontsize=7)
    ax1.set_ylabel("records/s (thousands)")
    ax1.set_title("stream: producer on CPU 0, reader polling on CPU 1")
    ax1.legend()

    lat = [r for r in data if r["row"].startswith("latency")]
    modes = sorted({(r["row"], r["mode"]) for r in lat}, key=lambda rm: (rm[0], mode_order(rm[1])))
    for i, lib in enumerate(libs):
        for j, key in enumerate(["lat_p50_us", "lat_p99_us"]):
            vals = [next((r.get(key, 0) for r in lat if (r["row"], r["mode"]) == m and r["lib"] == lib), 0)
                    for m in modes]
            xs = [x + (i * 2 + j - 1.5) * 0.2 for x in range(len(modes))]
            ax2.bar(xs, vals, 0.2, color=colors[lib], alpha=1.0 if j else 0.55,
                    label=f"{lib} {'p99' if j else 'p50'}")
    ax2.set_yscale("log")
    ax2.set_xticks(range(len(modes)))
    ax2.set_xticklabels([f"{row.replace('latency_', '')}\n{mode.replace('perfbuf_', '')}" for row, mode in modes], fontsize=7, rotation=15)
    ax2.set_ylabel("stamp → callback latency (µs, log)")
    ax2.set_title("latency at 10 k records/s and at full rate")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sys.argv[2], dpi=110)


if __name__ == "__main__":
    main()
