#!/bin/bash
# Bounded coverage-guided fuzzing of the ring reader and the record decoder:
# libFuzzer (libfuzzer-sys) with AddressSanitizer on the nightly toolchain,
# instrumented the way `cargo fuzz` does it, each target for FUZZ_SECONDS
# (default 30) starting from a scratch copy of the checked-in seed corpus.
# Fails on any crash, on a target that ran no inputs, and when the coverage
# instrumentation is missing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${FUZZ_SECONDS:-30}
triple=x86_64-unknown-linux-gnu
cd "$root/fuzz"

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
export CARGO_TARGET_DIR=$root/fuzz/target
# cargo fuzz's flags: sancov counters, comparison tracing, ASan, cfg(fuzzing).
# --target keeps them off build scripts.
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Zsanitizer=address --cfg fuzzing \
-Cdebug-assertions -Coverflow-checks"
cargo +nightly build --quiet --release --target $triple --bin ring --bin decode

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
for t in ring decode; do
	mkdir -p "$scratch/$t"
	cp corpus/$t/* "$scratch/$t/"
	log=$scratch/$t.log
	if ! "$CARGO_TARGET_DIR/$triple/release/$t" -max_total_time="$secs" -print_final_stats=1 \
		-artifact_prefix="$scratch/" "$scratch/$t" >"$log" 2>&1; then
		tail -40 "$log"
		echo "fuzz $t: FAILED (reproducer in $(ls "$scratch"/crash-* "$scratch"/timeout-* 2>/dev/null | head -1))"
		mkdir -p artifacts && cp "$scratch"/crash-* "$scratch"/timeout-* artifacts/ 2>/dev/null || true
		status=1
		continue
	fi
	counters=$(sed -n 's/.*Loaded 1 modules *(\([0-9]*\) inline 8-bit counters).*/\1/p' "$log" | head -1)
	asan=$(grep -c 'AddressSanitizer\|asan' <(nm "$CARGO_TARGET_DIR/$triple/release/$t") || true)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
	ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1)
	seeds=$(ls corpus/$t | wc -l)
	if [ -z "$counters" ] || [ "$counters" -eq 0 ] || [ "$asan" -eq 0 ] || [ -z "$execs" ] || [ "$execs" -eq 0 ]; then
		echo "fuzz $t: instrumentation missing (counters '${counters}', asan symbols $asan, execs '${execs}')"
		status=1
		continue
	fi
	echo "fuzz $t: ${secs}s, $execs inputs, $counters coverage counters, $cov, $ft, $seeds seeds, ASan linked, no crash"
done
exit $status
