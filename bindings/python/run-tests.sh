#!/usr/bin/env bash
# Builds a venv with the package and pytest, and runs the tests on the real
# kernel against target/release/libperfbuf.so and the BPF test producer.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
venv="$top/build/pyvenv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -e "$here" pytest
export PERFBUF_LIBRARY="$top/target/release/libperfbuf.so"
export PERFBUF_PRODUCER_LIBRARY="$top/build/libperfbuf_producer.so"
cd "$here"
exec "$venv/bin/python" -m pytest -q tests "$@"
