# Reads a suite's log and prints one line per skipped test: its name and,
# where the log says it, why. The forms (scripts/suite-counts.awk counts
# the same):
#   Rust         cargo-skip: CRATE::TEST: WHY        (tests/skip/mod.rs)
#                test NAME ... ignored               (#[ignore])
#   scripts      skip: WHAT: WHY
#   pytest -rs   SKIPPED [1] FILE:LINE: WHY
#   go test -v   its file:line message, then --- SKIP: TestX (0.00s) (go -v
#                streams a test's output before its result line)
#   C programs   "  SKIP: WHY" during a test, then "skip NAME"
{ line = $0 }
line ~ /cargo-skip: / { sub(/.*cargo-skip: /, "", line); print line; next }
line ~ /^test .* \.\.\. ignored/ { sub(/^test /, "", line); sub(/ \.\.\. ignored.*/, " (#[ignore])", line); print line; next }
line ~ /^skip: / { sub(/^skip: /, "", line); print line; next }
line ~ /^SKIPPED \[[0-9]+\] / { sub(/^SKIPPED \[[0-9]+\] /, "", line); print line; next }
line ~ /^[ \t]+[A-Za-z0-9_]+\.go:[0-9]+: / { gomsg = line; sub(/^[ \t]+/, "", gomsg); next }
line ~ /^[ \t]*--- SKIP: / { sub(/^[ \t]*--- SKIP: /, "", line); sub(/ \([0-9.]+s\)$/, "", line); print line (gomsg == "" ? "" : ": " gomsg); gomsg = ""; next }
line ~ /^[ \t]*--- (PASS|FAIL): / { gomsg = ""; next }
line ~ /^  SKIP: / { sub(/^  SKIP: /, "", line); why = line; next }
line ~ /^skip [A-Za-z_]/ { sub(/^skip /, "", line); print line (why == "" ? "" : ": " why); why = ""; next }
