#!/usr/bin/env bash
# make test: runs each suite (a make target) to its end, even after another
# failed, and computes the closing line from what ran:
#   make test: N passed, M failed[, K skipped]
# N, M and K count the tests inside the suites where they report them
# (scripts/suite-counts.awk reads cargo, pytest, go test and the C
# programs' "prog: N passed, M failed[, K skipped]"); a suite that reports
# nothing counts as one test. A suite that exits non-zero with no failed
# test counted adds one failure (a build error, a diff of transcripts). A
# command exiting 77 (a missing capability) skips the suite outside CI;
# under CI=true every skip counts as a failure and "skipped" is not shown.
# Exits 1 when anything failed, naming the failed suites. Logs are kept in
# build/suites/<suite>.log.
#
#   scripts/run-suites.sh lint cargo-test ...
set -uo pipefail
cd "$(dirname "$0")/.."
make=${MAKE:-make}
logs=${SUITE_LOGS:-build/suites}
mkdir -p "$logs"
ci=false
[ "${CI:-}" = true ] && ci=true

passed=0 failed=0 skipped=0
failed_suites=() skip_notes=() summary=()
for suite in "$@"; do
	log=$logs/$suite.log
	echo "==== make $suite"
	start=$(date +%s)
	$make --no-print-directory "$suite" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	secs=$(($(date +%s) - start))
	read -r p f s < <(awk -f scripts/suite-counts.awk "$log")
	# make reports the exit status of the command that stopped it.
	last_error=$(sed -n 's/.*\*\*\* .*\] Error \([0-9]*\)$/\1/p' "$log" | tail -1)
	why=""
	if [ "$rc" -ne 0 ] && [ "$last_error" = 77 ]; then
		# A capability is missing: the suite stopped short.
		reason=$(grep -v -e '\*\*\*' -e '^make' "$log" | grep -v '^\s*$' | tail -1)
		s=$((s + 1))
		why="exit 77: $reason"
	elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # failed outside a counted test
	elif [ "$rc" -eq 0 ] && [ $((p + f + s)) -eq 0 ]; then
		p=1 # a suite that counts nothing is one test
	fi
	if [ "$s" -gt 0 ]; then
		[ -n "$why" ] || why=$(grep -i -m3 -e '^\s*skip' -e '^SKIPPED' -e '^--- SKIP' "$log" | tr '\n' ';' | sed 's/;$//')
		if $ci; then
			echo "$suite: $s skipped under CI=true: counted as failed ($why)"
			f=$((f + s))
			s=0
		else
			skip_notes+=("$suite: $s skipped: ${why:-see $log}")
		fi
	fi
	[ "$rc" -ne 0 ] || [ "$f" -eq 0 ] || echo "$suite: exit 0 but $f failed"
	if [ "$f" -gt 0 ]; then
		failed_suites+=("$suite")
	fi
	line="$suite: $p passed, $f failed"
	$ci || line="$line, $s skipped"
	summary+=("$line (exit $rc, ${secs} s)")
	echo "==== $line (exit $rc, ${secs} s)"
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
done

echo
echo "---- suites"
printf '  %s\n' "${summary[@]}"
[ ${#skip_notes[@]} -eq 0 ] || { echo "---- skipped"; printf '  %s\n' "${skip_notes[@]}"; }
for suite in "${failed_suites[@]}"; do
	echo "---- what failed in $suite"
	awk -f scripts/suite-failures.awk "$logs/$suite.log"
done
[ ${#failed_suites[@]} -eq 0 ] || echo "---- failed suites: ${failed_suites[*]} (logs in $logs/)"
closing="make test: $passed passed, $failed failed"
$ci || closing="$closing, $skipped skipped"
echo "$closing"
[ "$failed" -eq 0 ]
