#!/usr/bin/env bash
# make perfdata-test: examples/record.c recorded build/spinner into FILE
# (its stderr in LOG); perf reads the file as perf record's:
#   tests/perfdata/check-record.sh FILE LOG
# - perf report puts the spinner's function first for the spinner;
# - perf script shows exactly one exec of the spinner and one exit of its
#   process, by the same pid (the tracepoints watch every task);
# - each cpu-clock sample carries its period (about 1 ms of CPU clock);
# - every record the example says it wrote is in the file: perf report -D
#   reads exactly as many with a time (sample_id's), which the records
#   synthesized from /proc and the FINISHED_ROUNDs lack.
set -uo pipefail
file=$1 log=$2
passed=0 failed=0
check() { # what, then the command
	local what=$1
	shift
	if "$@"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "perfdata-test: FAILED: $what"
	fi
}
first=$(perf report --stdio -i "$file" --comms spinner --sort comm,dso,sym -g none --no-children 2>/dev/null | grep -m1 '%')
check "perf report's first line is the spinner's function: $first" grep -q 'spinner .* \[\.\] perfbuf_spin_here' <<< "$first"

tp=$(perf script -i "$file" -F pid,event,trace 2>/dev/null | grep -E 'sched:sched_process_(exec|exit):')
execs=$(grep 'sched_process_exec: filename=build/spinner ' <<< "$tp")
exits=$(grep 'sched_process_exit: comm=spinner .*group_dead=true' <<< "$tp")
check "one exec of the spinner: [$execs]" test "$(grep -c . <<< "$execs")" = 1
check "one exit of the spinner: [$exits]" test "$(grep -c . <<< "$exits")" = 1
check "the exec and the exit are the same pid's" test "$(awk '{print $1}' <<< "$execs")" = "$(awk '{print $1}' <<< "$exits")"

# Each 999 Hz sample stands for about 1 ms of CPU clock (perf record's
# 1001001 ns), not for 999: the file carries the sample periods.
read -r n low < <(perf script -i "$file" -F event,period 2>/dev/null |
	awk '$2 == "cpu-clock:" { n++; low += $1 < 100000 } END { print n + 0, low + 0 }')
check "cpu-clock samples with their periods: $n samples, $low with a period under 100000 ns" test "$n" -gt 0 -a "$low" = 0

written=$(sed -n 's/^\[ record: \([0-9]*\) records written to .*/\1/p' "$log")
in_file=$(perf report -D -i "$file" 2>/dev/null |
	awk '$3 ~ /^0x/ && $5 ~ /^PERF_RECORD_/ && $2 != "0" && $5 !~ /^PERF_RECORD_FINISHED_ROUND/' | wc -l)
check "records written ($written) = records perf reads from the rings ($in_file)" test "${written:-x}" = "$in_file"
echo "perfdata-test: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
