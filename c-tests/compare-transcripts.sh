#!/usr/bin/env bash
# Compares the unusual-caller transcripts of callers_test, file by file:
# libperfbuf's default must match libbpf's in every scenario; the fast
# mode's (PERFBUF_ADAPTIVE=1) in every scenario it ran.
# usage: compare-transcripts.sh LIBBPF_DIR DEFAULT_DIR [FAST_DIR]
set -u
ref=$1; shift
bad=0 total=0
for dir in "$@"; do
	[ -d "$dir" ] || continue
	n=0
	for f in "$dir"/*.txt; do
		[ -e "$f" ] || continue
		name=$(basename "$f")
		n=$((n + 1))
		total=$((total + 1))
		if ! diff -u "$ref/$name" "$f"; then
			echo "callers: $dir/$name differs from libbpf's"
			bad=$((bad + 1))
		fi
	done
	# The default run must have run every scenario libbpf ran.
	if [ "$(basename "$dir")" = libperfbuf ]; then
		for f in "$ref"/*.txt; do
			[ -e "$dir/$(basename "$f")" ] || { echo "callers: $(basename "$f") missing from $dir"; bad=$((bad + 1)); }
		done
	fi
	echo "callers: $dir: $n transcripts compared with libbpf's"
done
[ "$bad" -eq 0 ] && echo "callers: every transcript identical to libbpf's" || echo "callers: $bad differ"
# The count make test adds up (scripts/suite-counts.awk).
echo "compare-transcripts: $((total - bad > 0 ? total - bad : 0)) passed, $bad failed"
exit $((bad > 0))
