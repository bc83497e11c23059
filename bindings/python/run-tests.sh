#!/usr/bin/env bash
# Builds a venv with pytest, runs the tests (the package from src/) on the
# real kernel against target/release/libperfbuf.so and the BPF test
# producer, then the examples: exec_events.py on the real BPF program
# (build/exec_events.bpf.o), execmon.py (an event set on a tracepoint) and
# profile.py (an event set with build/profile.bpf.o on every CPU).
# tests/test_install.py installs the package as a user does instead: a
# fresh venv, pip install ./bindings/python (which builds its own
# libperfbuf with cargo), no PERFBUF_LIBRARY.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
venv="$top/build/pyvenv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# NumPy: the batch reads' structured arrays (optional for the package; the
# tests cover both, the no-NumPy path in a child that cannot import it).
"$venv/bin/pip" install -q --disable-pip-version-check pytest numpy
export PYTHONPATH="$here/src"
export PERFBUF_LIBRARY="$top/target/release/libperfbuf.so"
export PERFBUF_PRODUCER_LIBRARY="$top/build/libperfbuf_producer.so"
export PERFBUF_PROFILE_BPF_OBJ="$top/build/profile.bpf.o"
export PERFBUF_ACCOUNTED_LIBRARY="$top/build/libperfbuf_accounted.so"
export PERFBUF_ACCOUNTED_BPF_OBJ="$top/build/accounted.bpf.o"
# The event-set tests load the profiler's BPF program (make's python-test
# target builds only exec_events.bpf.o).
[ -f "$PERFBUF_PROFILE_BPF_OBJ" ] || make -C "$top" --no-print-directory build/profile.bpf.o
cd "$here"
"$venv/bin/python" -m pytest -q -rs tests "$@"
bpf_obj="$top/build/exec_events.bpf.o"
if [ ! -f "$bpf_obj" ]; then
	echo "python-test: $bpf_obj is missing (make examples builds it)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ] && [ "${CI:-}" != true ]; then
	echo "skip: python-test's examples: they load BPF programs and open perf events: run as root"
	exit 0
fi
echo "python-test: examples/exec_events.py on $bpf_obj"
"$venv/bin/python" examples/exec_events.py "$bpf_obj"
echo "pass: examples/exec_events.py"

# execmon.py runs a command and shows its execs, in time order, with the
# fields decoded by name; it exits with the command's status.
# A copy of /bin/true under a name no other process uses: exactly the
# command's two execs of it are shown, whatever else runs on the machine.
mark="$top/build/perfbuf-mark-python-test-$$"
cp /bin/true "$mark"
echo "python-test: examples/execmon.py /bin/sh -c '$mark; $mark'"
out=$("$venv/bin/python" examples/execmon.py /bin/sh -c "$mark; $mark")
echo "$out"
rm -f "$mark"
marked=$(grep " exec $mark$" <<< "$out" || true)
[ "$(grep -c . <<< "$marked")" = 2 ] && [ "$(sed 's/.* pid \([0-9]*\) .*/\1/' <<< "$marked" | sort -u | wc -l)" = 2 ] ||
	{ echo "python-test: execmon shows $(grep -c . <<< "$marked") execs of $mark by distinct pids, want 2" >&2; exit 1; }
if "$venv/bin/python" examples/execmon.py /bin/false > /dev/null; then
	echo "python-test: execmon.py did not pass on the command's failure" >&2
	exit 1
fi
echo "pass: examples/execmon.py"

# profile.py: cycles or the CPU clock at 99 Hz on every CPU, counted by a
# BPF program; it fails if a CPU took no sample.
echo "python-test: examples/profile.py on $PERFBUF_PROFILE_BPF_OBJ"
"$venv/bin/python" examples/profile.py "$PERFBUF_PROFILE_BPF_OBJ"
echo "pass: examples/profile.py"
