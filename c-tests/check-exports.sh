#!/bin/sh
# The shared library exports libbpf's perf buffer and ring buffer functions
# plus perfbuf_* extensions, and nothing else: compare its dynamic symbol table with exports.txt.
set -eu
lib=$1
here=$(dirname "$0")
got=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort)
want=$(sort "$here/exports.txt")
if [ "$got" != "$want" ]; then
	echo "exported symbols differ from c-tests/exports.txt:"
	printf '%s\n' "$got" > /tmp/perfbuf-exports.got
	printf '%s\n' "$want" | diff - /tmp/perfbuf-exports.got || true
	exit 1
fi
if printf '%s\n' "$got" | grep -v -e '^perf_buffer__' -e '^perfbuf_' -e '^ring_buffer__' -e '^ring__' >/dev/null; then
	echo "an export is none of perf_buffer__*, ring_buffer__*, ring__*, perfbuf_*"
	exit 1
fi
echo "exports: $(printf '%s\n' "$got" | wc -l) symbols, all expected"
