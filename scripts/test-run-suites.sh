#!/usr/bin/env bash
# make suites-test: scripts/run-suites.sh (make test's summary) on suites
# whose output is canned by a stand-in for make: counts from each harness's
# output, "pass:"/"skip:" lines, a Rust test that could not run counted as
# skipped and not passed, every skip named, a suite that prints no count
# never counted as a pass (a failure under CI=true), skips failing
# under CI=true, and success paths a kernel option absent here keeps from
# running named, not failed.
set -uo pipefail
cd "$(dirname "$0")/.."
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
cat > "$scratch/make" <<'MAKE'
#!/usr/bin/env bash
# A stand-in for `make --no-print-directory SUITE`: canned output.
case $2 in
cargo) printf '%s\n' 'running 3 tests' 'test a ... ok' 'test b ... ok' '' \
	'cargo-skip: live::needs_root: event sets need root' 'test needs_root ... ok' \
	'test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out' ;;
go) printf '%s\n' '    a_test.go:3: a log line' '--- PASS: TestA (0.01s)' '    b_test.go:12: needs root' \
	'--- SKIP: TestB (0.00s)' '    c_test.go:5: the next test logs' '--- PASS: TestC (0.01s)' 'ok  x 0.1s' ;;
pytest) printf '%s\n' 'SKIPPED [1] tests/test_x.py:40: no tracefs' '2 passed, 1 skipped in 0.50s' ;;
c) printf '%s\n' '  SKIP: no kprobe PMU' 'skip kprobe' 'ok   uprobe' 'prog: 1 passed, 0 failed, 1 skipped' ;;
recipe) printf '%s\n' 'pass: cargo fmt' 'pass: clippy' 'skip: examples: not root' ;;
lacks) printf '%s\n' 'not-on-this-kernel: events_test: the kprobe: the kernel has no kprobe PMU' 'ok   kprobe' 'prog: 1 passed, 0 failed' ;;
silent) echo "did something, counted nothing" ;;
broken) echo "error: no such file"; echo "make: *** [Makefile:1: broken] Error 2"; exit 2 ;;
esac
MAKE
chmod +x "$scratch/make"
passed=0 failed=0
expect() { # what, then a pattern the summary must (or, after !, must not) match
	local what=$1 not=false
	shift
	[ "$1" = ! ] && { not=true; shift; }
	if $not; then ! grep -qE -- "$1" "$scratch/out"; else grep -qE -- "$1" "$scratch/out"; fi
	if [ $? -eq 0 ]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "suites-test: FAILED: $what ($([ "$not" = true ] && echo 'unwanted' || echo 'missing'): $1)"
	fi
}
run() { # CI value, suites...
	local ci=$1
	shift
	CI=$ci MAKE="$scratch/make" SUITE_LOGS="$scratch/logs" scripts/run-suites.sh "$@" > "$scratch/out" 2>&1
	echo "rc=$?" >> "$scratch/out"
}

run false cargo go pytest c recipe
expect "cargo: a cargo-skip test is skipped, not passed" '^  cargo: 2 passed, 0 failed, 1 skipped'
expect "go counts" '^  go: 2 passed, 0 failed, 1 skipped'
expect "pytest counts" '^  pytest: 2 passed, 0 failed, 1 skipped'
expect "C counts" '^  c: 1 passed, 0 failed, 1 skipped'
expect "pass: and skip: lines" '^  recipe: 2 passed, 0 failed, 1 skipped'
expect "the Rust skip named" 'live::needs_root: event sets need root'
expect "the go skip named" 'TestB: b_test.go:12: needs root'
expect "by its own message" ! 'TestB: c_test.go'
expect "the pytest skip named" 'tests/test_x.py:40: no tracefs'
expect "the C skip named" 'kprobe: no kprobe PMU'
expect "the recipe skip named" 'examples: not root'
expect "the closing line" '^make test: 9 passed, 0 failed, 5 skipped$'
expect "exit 0 outside CI" '^rc=0$'

run false silent
expect "no count is not a pass" ! 'silent: 1 passed'
expect "no count is listed" '^  silent \(exit 0'
run true silent
expect "no count fails under CI" '^make test: 0 passed, 1 failed$'
expect "and names the suite" 'failed suites: silent'

run true cargo
expect "a skip fails under CI" '^make test: 2 passed, 1 failed$'
expect "named under CI" '^    live::needs_root: event sets need root'

run true lacks
expect "a kernel option absent is no failure under CI" '^make test: 1 passed, 0 failed$'
expect "and is named" '^  lacks: events_test: the kprobe: the kernel has no kprobe PMU$'

run false broken
expect "a build error is a failure" '^make test: 0 passed, 1 failed, 0 skipped$'

echo "suites-test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
