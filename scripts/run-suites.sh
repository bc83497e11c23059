#!/usr/bin/env bash
# make test: runs each suite (a make target) to its end, even after another
# failed, and computes the closing line from what ran:
#   make test: N passed, M failed[, K skipped]
# N, M and K count the tests inside the suites as they report them
# (scripts/suite-counts.awk reads cargo, pytest, go test, the C programs'
# "prog: N passed, M failed[, K skipped]", and the "pass:"/"skip:" lines of
# scripts and make recipes; a Rust test that could not run says so with a
# "cargo-skip:" line and counts as skipped, not passed). Every suite
# reports counts: one that exits 0 with none is a failure under CI=true and
# is listed as uncounted otherwise (it counted as one passed test once). A
# suite that exits non-zero with no failed test counted adds one failure (a
# build error, a diff of transcripts). A command exiting 77 (a missing
# capability) skips the suite outside CI. Skips are named
# (scripts/suite-skips.awk); under CI=true every skip counts as a failure
# and "skipped" is not shown. A success path that needs a kernel option
# the kernel lacks ("not-on-this-kernel:" lines: kprobes here) is no skip:
# its test checked the clear error and passed; it is listed by name. Exits 1 when anything failed, naming the
# failed suites. Logs are kept in build/suites/<suite>.log.
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
failed_suites=() skip_notes=() uncounted=() not_here=() summary=()
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
		# Nothing says what ran: under CI that is no pass.
		if $ci; then
			echo "$suite: exit 0 but no test count in its output: counted as failed under CI=true"
			f=1
		else
			uncounted+=("$suite (exit 0; its log: $log)")
		fi
	fi
	if [ "$s" -gt 0 ]; then
		# Each skipped test by name, with why where the log says.
		names=$(awk -f scripts/suite-skips.awk "$log")
		[ -n "$why" ] && names=$(printf '%s\n%s' "$why" "$names")
		names=$(grep -v '^$' <<< "$names")
		if $ci; then
			echo "$suite: $s skipped under CI=true: counted as failed:"
			sed 's/^/    /' <<< "$names"
			f=$((f + s))
			s=0
		else
			skip_notes+=("$suite: $s skipped:")
			while read -r name; do skip_notes+=("  $name"); done <<< "${names:-(see $log)}"
		fi
	fi
	# Success paths that need a kernel option this kernel lacks (kprobes on
	# the project's machines): their tests checked the clear error and
	# passed; they are named here, under CI=true too.
	while read -r note; do
		[ -n "$note" ] && not_here+=("$suite: $note")
	done < <(sed -n 's/.*not-on-this-kernel: //p' "$log" | sort -u)
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
[ ${#not_here[@]} -eq 0 ] || { echo "---- not run on this kernel (the clear error checked instead)"; printf '  %s\n' "${not_here[@]}"; }
[ ${#uncounted[@]} -eq 0 ] || { echo "---- uncounted (no test count in the output; a failure under CI=true)"; printf '  %s\n' "${uncounted[@]}"; }
for suite in "${failed_suites[@]}"; do
	echo "---- what failed in $suite"
	awk -f scripts/suite-failures.awk "$logs/$suite.log"
done
[ ${#failed_suites[@]} -eq 0 ] || echo "---- failed suites: ${failed_suites[*]} (logs in $logs/)"
closing="make test: $passed passed, $failed failed"
$ci || closing="$closing, $skipped skipped"
echo "$closing"
[ "$failed" -eq 0 ]
