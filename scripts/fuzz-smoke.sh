#!/usr/bin/env bash
# Bounded coverage-guided fuzzing for CI: builds the fuzz targets in fuzz/
# with cargo fuzz (nightly, libFuzzer, AddressSanitizer, debug assertions)
# and runs each for FUZZ_SECONDS (default 30) from a scratch copy of the
# checked-in seed corpus. Fails on any crash, leak or hang, and when the
# coverage instrumentation or ASan is missing. Prints one summary line per
# target.
#
#   FUZZ_SECONDS=300 scripts/fuzz-smoke.sh          # longer
#   FUZZ_TARGETS=decode scripts/fuzz-smoke.sh       # one target
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${FUZZ_SECONDS:-30}
targets=${FUZZ_TARGETS:-ring ringbuf decode tracepoint}
triple=x86_64-unknown-linux-gnu
export PATH="$HOME/.cargo/bin:$PATH"
cd "$root/fuzz"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
	rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
	# Pinned: the version this script was written against (about 70 s).
	echo "fuzz: installing cargo-fuzz"
	cargo install --locked cargo-fuzz@0.13.2
fi

# cargo fuzz's defaults, spelled out: release with debug assertions and
# overflow checks, -s address, into fuzz/target.
start=$(date +%s)
cargo +nightly fuzz build --sanitizer address --debug-assertions
echo "fuzz: build $(($(date +%s) - start)) s"

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
status=0
for t in $targets; do
	bin=target/$triple/release/$t
	# ASan's runtime announces itself at verbosity 1: proof it is linked and live.
	ASAN_OPTIONS=verbosity=1 "$bin" -runs=0 >"$scratch/$t.asan" 2>&1 || true
	if ! grep -q 'AddressSanitizer Init done' "$scratch/$t.asan"; then
		echo "fuzz $t: FAILED: AddressSanitizer is not active in $bin"
		status=1
		continue
	fi
	# A scratch copy: new inputs must not land in the checked-in corpus.
	# Past bugs' reproducers (fuzz/regressions/) run first, read-only.
	mkdir -p "$scratch/$t" "$scratch/$t-artifacts"
	cp corpus/"$t"/* "$scratch/$t/"
	dirs=("$scratch/$t")
	[ -d "regressions/$t" ] && dirs+=("regressions/$t")
	log=$scratch/$t.log
	max_len=$(case $t in ring) echo 16408 ;; ringbuf) echo 8216 ;; *) echo 8192 ;; esac)
	rc=0
	"$bin" -max_total_time="$secs" -timeout=10 -max_len="$max_len" -print_final_stats=1 \
		-artifact_prefix="$scratch/$t-artifacts/" "${dirs[@]}" >"$log" 2>&1 || rc=$?
	counters=$(sed -n 's/^INFO: Loaded [0-9]* modules *(\([0-9]*\) inline 8-bit counters).*/\1/p' "$log" | head -1)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
	last=$(grep -E '^#[0-9]+' "$log" | tail -1)
	cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
	corp=$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"$last")
	if [ "$rc" -ne 0 ]; then
		mkdir -p "artifacts/$t"
		cp "$scratch/$t-artifacts"/* "artifacts/$t/" 2>/dev/null || true
		grep -E -A3 'panicked at|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|SUMMARY' "$log" | head -30 || true
		echo "fuzz $t: FAILED (exit $rc) after ${execs:-?} execs; reproducer in fuzz/artifacts/$t/: $(ls "artifacts/$t" | tr '\n' ' ')"
		echo "  rerun: fuzz/$bin fuzz/artifacts/$t/<file>"
		status=1
		continue
	fi
	if [ -z "$counters" ] || [ "$counters" -eq 0 ] || [ -z "$execs" ] || [ "$execs" -eq 0 ]; then
		tail -20 "$log"
		echo "fuzz $t: FAILED: no coverage instrumentation (8-bit counters '${counters}') or no inputs run ('${execs}')"
		status=1
		continue
	fi
	seeds=$(find corpus/"$t" -type f | wc -l)
	echo "pass: fuzz $t: ${secs} s, $execs execs ($rate/s), cov $cov, ft $ft, corpus $corp (from $seeds seeds)," \
		"$counters 8-bit counters, ASan on, no crash"
done
exit $status
