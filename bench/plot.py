#!/usr/bin/env python3
"""Plots records/s and latency for libbpf and libperfbuf from bench/run.py's
JSON. usage: bench/plot.py BENCH_JSON OUT_PNG"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


ORDER = ["default", "fast", "raw_wakeup64", "perfbuf_wakeup64_delay1ms", "ringbuf"]

# Every reader of the stream at full rate, as bench/run.py's second table.
READERS = [
    ("libbpf", "default", "libbpf"),
    ("libperfbuf", "default", "libperfbuf\ndefault"),
    ("libperfbuf", "fast", "libperfbuf\nfast"),
    ("libbpf", "ringbuf", "libbpf\nringbuf"),
    ("cilium-ebpf", "default", "cilium/ebpf"),
    ("aya", "default", "aya"),
    ("libbpf", "raw_wakeup64", "libbpf raw\nwakeup 64"),
    ("libperfbuf", "perfbuf_wakeup64_delay1ms", "perfbuf_new\nwakeup 64"),
]


def mode_order(mode):
    return ORDER.index(mode) if mode in ORDER else len(ORDER)


def main():
    data = json.load(open(sys.argv[1]))["results"]
    libs = ["libbpf", "libperfbuf"]
    colors = {"libbpf": "#7f7f7f", "libperfbuf": "#1f77b4"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))

    stream = {(r["lib"], r["mode"]): r for r in data if r["row"] == "stream_full"}
    shown = [(lib, mode, label) for lib, mode, label in READERS if (lib, mode) in stream]
    reader_colors = {"libbpf": "#7f7f7f", "libperfbuf": "#1f77b4", "cilium-ebpf": "#2ca02c", "aya": "#d62728"}
    ax1.bar(range(len(shown)), [stream[(lib, mode)]["records_per_s"] / 1e3 for lib, mode, _ in shown],
            color=[reader_colors.get(lib, "#9467bd") for lib, _, _ in shown])
    for x, (lib, mode, _) in enumerate(shown):
        r = stream[(lib, mode)]
        ax1.annotate(f"{r['reader_cpu_ns_per_record']:.0f} ns", (x, r["records_per_s"] / 1e3), ha="center",
                     va="bottom", fontsize=7)
    ax1.set_xticks(range(len(shown)))
    ax1.set_xticklabels([label for _, _, label in shown], fontsize=7)
    ax1.set_ylabel("records/s (thousands); label: reader CPU per record")
    ax1.set_title("stream at full rate: producer on CPU 0, reader on CPU 1")

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
