#!/usr/bin/env python3
"""execmon: a tracing monitor of process execs, without BPF.

The sched:sched_process_exec tracepoint is opened on every CPU with
perfbuf.EventSet, its samples are read in time order across CPUs, and each
one's fields are decoded by name from the tracepoint's format file (the
Python twin of examples/execmon.c).

    usage: execmon.py [-f FILTER] [-t SECONDS] [COMMAND [ARGS...]]     (as root)

With a COMMAND, runs it and stops once it has exited (its own execs and its
children's are shown among everyone else's), exiting with its status;
otherwise runs for SECONDS (default: until Ctrl-C). FILTER is an ftrace
filter on the tracepoint's fields, e.g. 'filename ~ "*bin/sh"'.
"""
from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from typing import Optional

from perfbuf import EventSample, EventSet


def main() -> int:
    parser = argparse.ArgumentParser(description="Shows every exec, in time order (a tracepoint, no BPF).")
    parser.add_argument("-f", "--filter", help="an ftrace filter, e.g. 'filename ~ \"*bin/sh\"'")
    parser.add_argument("-t", "--seconds", type=float, help="stop after this long (without a COMMAND)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="run this and stop once it exits")
    args = parser.parse_args()

    stats = {"execs": 0, "lost": 0, "out_of_order": 0, "last": 0}

    def on_sample(s: EventSample) -> None:
        if s.event != exec_event:
            return
        stats["out_of_order"] += s.time < stats["last"]
        stats["last"] = s.time
        stats["execs"] += 1
        print(f"{s.time // 1_000_000_000}.{s.time % 1_000_000_000 // 1000:06d} cpu {s.cpu} pid {s.pid} "
              f"(was {s.field('old_pid')}) exec {s.field('filename')}", flush=True)

    def on_lost(cpu: int, count: int) -> None:
        stats["lost"] += count

    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    try:
        with EventSet() as events:
            exec_event = events.add_tracepoint("sched:sched_process_exec", filter=args.filter)
            with events.reader(on_sample, on_lost, order_by_time=True) as reader:
                events.enable()
                signal.signal(signal.SIGINT, on_signal)
                signal.signal(signal.SIGTERM, on_signal)
                child: Optional[subprocess.Popen[bytes]] = None
                if args.command:
                    try:
                        child = subprocess.Popen(args.command)
                    except OSError as e:
                        print(f"execmon: {args.command[0]}: {e.strerror}", file=sys.stderr)
                        return 127
                end = None if args.seconds is None else time.monotonic() + args.seconds
                while not stop and (child is None or child.poll() is None):
                    if end is not None and time.monotonic() >= end:
                        break
                    try:
                        reader.poll(100)
                    except InterruptedError:
                        pass
                # Whatever the command's last execs left in the rings, in order.
                events.disable()
                reader.consume()
                reader.flush()
    except OSError as e:
        print(f"execmon: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"execmon: {stats['execs']} execs, {stats['lost']} lost, {stats['out_of_order']} out of order",
          file=sys.stderr)
    if child is not None:
        status = child.wait()
        return status if status >= 0 else 128 - status
    return 0


if __name__ == "__main__":
    sys.exit(main())
