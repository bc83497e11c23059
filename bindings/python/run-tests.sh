#!/usr/bin/env bash
# Builds a venv with the package and pytest, runs the tests on the real
# kernel against target/release/libperfbuf.so and the BPF test producer,
# then the example on the real BPF program (build/exec_events.bpf.o).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
venv="$top/build/pyvenv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -e "$here" pytest
export PERFBUF_LIBRARY="$top/target/release/libperfbuf.so"
export PERFBUF_PRODUCER_LIBRARY="$top/build/libperfbuf_producer.so"
cd "$here"
"$venv/bin/python" -m pytest -q tests "$@"
bpf_obj="$top/build/exec_events.bpf.o"
if [ ! -f "$bpf_obj" ]; then
	echo "python-test: $bpf_obj is missing (make examples builds it)" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ] && [ "${CI:-}" != true ]; then
	echo "python-test: skipping examples/exec_events.py (it loads a BPF program: run as root)"
	exit 0
fi
echo "python-test: examples/exec_events.py on $bpf_obj"
"$venv/bin/python" examples/exec_events.py "$bpf_obj"
