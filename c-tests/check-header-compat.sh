#!/usr/bin/env bash
# make check-header-compat: perfbuf.h with libbpf's headers (included before
# or after it) and without them (PERFBUF_NO_LIBBPF_H, and a system include
# tree with no bpf/ directory at all), as C with gcc and clang and as C++,
# warnings as errors: the prototypes match libbpf's, and libbpf-style
# callbacks (__u64 lost counts) fit with GCC 14's incompatible-pointer rule.
#   c-tests/check-header-compat.sh BUILD_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
out=$build/header-compat
mkdir -p "$out"
warn=(-Wall -Wextra -Werror -Werror=incompatible-pointer-types)
passed=0 failed=0

# A copy of the system include tree without bpf/: what a machine without
# libbpf-dev has (__has_include(<bpf/libbpf.h>) is false there).
bare=$out/include-without-libbpf
rm -rf "$bare" && mkdir -p "$bare"
for entry in /usr/include/*; do
	[ "$(basename "$entry")" = bpf ] || ln -s "$entry" "$bare/"
done
multiarch=$(gcc -print-multiarch)
rm "$bare/$multiarch" && mkdir "$bare/$multiarch"
for entry in "/usr/include/$multiarch"/*; do
	[ "$(basename "$entry")" = bpf ] || ln -s "$entry" "$bare/$multiarch/"
done

check() { # name, compiler and flags...
	local name=$1
	shift
	if "$@" -Iinclude -c -o "$out/$name.o" 2> "$out/$name.log"; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "header-compat: FAILED $name: $*"
		cat "$out/$name.log"
	fi
}

without_libbpf() { # compiler: its flags for the include tree without bpf/
	local builtin
	builtin=$("$1" -print-file-name=include)
	echo "-nostdinc -isystem $builtin -isystem $bare/$multiarch -isystem $bare"
}

for cc in gcc clang; do
	check "$cc-libbpf-first" "$cc" -std=c11 "${warn[@]}" -DLIBBPF_FIRST c-tests/header_compat.c
	check "$cc-perfbuf-first" "$cc" -std=c11 "${warn[@]}" c-tests/header_compat.c
	check "$cc-callbacks-libbpf-first" "$cc" -std=c11 "${warn[@]}" -DLIBBPF_FIRST c-tests/header_compat_callbacks.c
	check "$cc-callbacks-libbpf-after" "$cc" -std=c11 "${warn[@]}" -DLIBBPF_AFTER c-tests/header_compat_callbacks.c
	check "$cc-callbacks-no-libbpf-h" "$cc" -std=c99 "${warn[@]}" -DPERFBUF_NO_LIBBPF_H c-tests/header_compat_callbacks.c
	# shellcheck disable=SC2046 # the flags are words
	check "$cc-callbacks-without-libbpf" "$cc" -std=c99 "${warn[@]}" $(without_libbpf "$cc") c-tests/header_compat_callbacks.c
	check "$cc-standalone" "$cc" -std=c99 "${warn[@]}" -DPERFBUF_NO_LIBBPF_H c-tests/header_compat_standalone.c
	# shellcheck disable=SC2046
	check "$cc-standalone-without-libbpf" "$cc" -std=c99 "${warn[@]}" $(without_libbpf "$cc") c-tests/header_compat_standalone.c
done
for cxx in g++ clang++; do
	check "$cxx-libbpf-first" "$cxx" -x c++ -Wall -Wextra -Werror -DLIBBPF_FIRST c-tests/header_compat.c
	check "$cxx-perfbuf-first" "$cxx" -x c++ -Wall -Wextra -Werror c-tests/header_compat.c
	check "$cxx-callbacks-libbpf-after" "$cxx" -x c++ -Wall -Wextra -Werror -DLIBBPF_AFTER c-tests/header_compat_callbacks.c
	check "$cxx-callbacks-no-libbpf-h" "$cxx" -x c++ -Wall -Wextra -Werror -DPERFBUF_NO_LIBBPF_H c-tests/header_compat_callbacks.c
done
# The tree without bpf/ really lacks libbpf's header.
if echo '#include <bpf/libbpf.h>' | gcc $(without_libbpf gcc) -x c -fsyntax-only - 2> /dev/null; then
	failed=$((failed + 1))
	echo "header-compat: FAILED: $bare still has bpf/libbpf.h"
else
	passed=$((passed + 1))
fi
echo "check-header-compat: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
