# Reads a suite's output and prints "passed failed skipped": the sum of the
# counts its tests reported, in the forms the suites print them:
#   cargo test   test result: ok. 12 passed; 0 failed; 1 ignored; ...
#   pytest       3 passed, 1 failed, 2 skipped in 1.20s   (-q summary)
#   go test -v   --- PASS: TestX (0.01s)   (top-level tests only)
#   C programs   prog: 11 passed, 0 failed[, 2 skipped]
#   scripts and make recipes: one "pass: WHAT" line per check that passed,
#                "skip: WHAT: WHY" per check that could not run
#   Rust kernel tests that could not run: "cargo-skip: CRATE::TEST: WHY"
#                (tests/skip/mod.rs), which cargo counted as passed
# (an ignored Rust test is a skipped one).
function num(s) { return s + 0 }

/^test result: (ok|FAILED)\. [0-9]+ passed; [0-9]+ failed; [0-9]+ ignored/ {
	split($0, w, /[ .;]+/)
	# w: test result: ok N passed N failed N ignored
	for (i = 1; i in w; i++) {
		if (w[i] == "passed") p += num(w[i - 1])
		else if (w[i] == "failed") f += num(w[i - 1])
		else if (w[i] == "ignored") s += num(w[i - 1])
	}
	next
}

# pytest -q's last line, with or without the ===== frame.
/^(=+ )?[0-9]+ (passed|failed|skipped|error|errors|xfailed|xpassed|deselected|warning|warnings)(, [0-9]+ [a-z]+)* in [0-9.]+s/ {
	line = $0
	sub(/ in [0-9.]+s.*/, "", line)
	sub(/^=+ /, "", line)
	n = split(line, parts, /, /)
	for (i = 1; i <= n; i++) {
		split(parts[i], kv, " ")
		if (kv[2] == "passed" || kv[2] == "xfailed") p += num(kv[1])
		else if (kv[2] == "failed" || kv[2] == "error" || kv[2] == "errors" || kv[2] == "xpassed") f += num(kv[1])
		else if (kv[2] == "skipped") s += num(kv[1])
	}
	next
}

/cargo-skip: / { s++; p--; next }
/^pass: / { p++; next }
/^skip: / { s++; next }

/^--- PASS: / { p++; next }
/^--- FAIL: / { f++; next }
/^--- SKIP: / { s++; next }

/^[A-Za-z_][^:]*: [0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$/ {
	line = $0
	sub(/^[^:]*: /, "", line)
	split(line, w, /[ ,]+/)
	p += num(w[1])
	f += num(w[3])
	if (w[6] == "skipped") s += num(w[5])
	next
}

END { printf "%d %d %d\n", p, f, s }
