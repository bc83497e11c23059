# Reads a failed suite's log and prints the lines that say what failed, so
# that the end of `make test`'s output names the test and its message even
# when only the tail of the output is kept:
#   cargo test   test X ... FAILED, and the panic line of its stdout section
#   pytest       FAILED file::test - message / ERROR ...
#   go test -v   --- FAIL: TestX, and the file:line messages under it
#   C programs   lines with FAIL or "failed" (not the count line of 0)
#   make         *** [target] Error N
# At most 40 lines.
function out(s) { if (n < 40) print "    " substr(s, 1, 300); n++ }

/^test .* \.\.\. FAILED$/ { out($0); next }
/panicked at / { out($0); getline; out($0); next }
/^(FAILED|ERROR) / { out($0); next }
/^[ \t]*--- FAIL: / { out($0); go = 1; next }
go && /^[ \t]+[A-Za-z0-9_]+\.go:[0-9]+: / { out($0); next }
/^[A-Za-z_][^:]*: [0-9]+ passed, [1-9][0-9]* failed/ { out($0); next }
/(^|[^A-Za-z])FAIL([^A-Za-z]|$)/ && !/^(ok|---|=== )/ { out($0); next }
/\*\*\* .*\] Error [0-9]+$/ { out($0); next }
{ go = 0 }
END { if (n > 40) print "    ... (" n - 40 " more lines in the log)" }
