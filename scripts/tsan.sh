#!/usr/bin/env bash
# ThreadSanitizer over the threaded tests, with libperfbuf itself and Rust's
# std (-Zbuild-std) instrumented, and proof that TSan really was active:
#   1. libperfbuf.so is built with nightly's -Zsanitizer=thread into
#      build/tsan; it must call the __tsan_ hooks, and so must the std
#      functions inside it (a prebuilt std would not);
#   2. the C tests are compiled with gcc -fsanitize=thread and linked
#      against the TSan runtime rustc ships (gcc 12's libtsan lacks the
#      __tsan_memcpy/memmove/memset hooks rustc's LLVM emits, so one runtime,
#      LLVM's, serves both), and must load the instrumented library;
#   3. two deliberate races, one in C and one inside libperfbuf (the contract
#      broken on purpose), must each be reported (exit 66);
#   4. threads_test and controls_test must then run without any report
#      (halt_on_error: the first report fails the run).
# Needs the nightly toolchain with rust-src (installed here if absent; when
# that fails: exit 1 under CI=true, 77 otherwise) and root with BPF, like
# the other kernel tests. TSAN_BUILD=dir builds elsewhere than build/tsan.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${TSAN_BUILD:-build/tsan}
mkdir -p "$out"
out=$(cd "$out" && pwd)

missing() {
	echo "tsan: $*" >&2
	if [ "${CI:-}" = true ]; then exit 1; fi
	echo "tsan: skipped" >&2
	exit 77
}
command -v rustup >/dev/null || missing "rustup not found"
# The image ships a nightly; rust-src is added here if setup.sh did not.
rustup run nightly rustc -V >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal ||
	missing "no nightly toolchain"
sysroot=$(rustup run nightly rustc --print sysroot)
[ -f "$sysroot/lib/rustlib/src/rust/library/Cargo.lock" ] || rustup component add rust-src --toolchain nightly ||
	missing "nightly lacks rust-src (rustup component add rust-src --toolchain nightly)"
triple=$(rustup run nightly rustc -vV | sed -n 's/^host: //p')
rt=$sysroot/lib/rustlib/$triple/lib/librustc-nightly_rt.tsan.a
[ -f "$rt" ] || missing "nightly has no TSan runtime for $triple ($rt)"

# ---- 1. the instrumented library ---------------------------------------
# The release profile, as shipped; only the cdylib (the staticlib would
# bundle a second copy of std). Building std dominates the time.
start=$(date +%s)
# The C library is the capi/ crate; its cdylib is named as make lib names it.
CARGO_TARGET_DIR=$out RUSTFLAGS="-Zsanitizer=thread" cargo +nightly rustc --quiet --release -p perfbuf-capi --lib \
	--crate-type cdylib -Zbuild-std=std,panic_abort --target "$triple"
libdir=$out/$triple/release
lib=$libdir/libperfbuf.so
cp -f "$libdir/libperfbuf_capi.so" "$lib"
ln -sf libperfbuf.so "$libdir/libperfbuf.so.0"
build_s=$(($(date +%s) - start))

hooks=$(nm -D --undefined-only "$lib" | grep -c ' U __tsan_' || true)
[ "$hooks" -gt 0 ] || { echo "tsan: FAIL: $lib calls no __tsan_ hook: not instrumented"; exit 1; }
# Functions of std and of perfbuf in the .so that call a TSan hook.
objdump -d --no-show-raw-insn -C "$lib" | awk '
	/^[0-9a-f]+ <.*>:$/ {
		kind = ""; hooked = 0
		if ($0 ~ /^[0-9a-f]+ <<?(std|core|alloc)::/) kind = "std"
		else if ($0 ~ /perfbuf::/) kind = "perfbuf"
		if (kind != "") total[kind]++
		next
	}
	kind != "" && !hooked && /call.*<__tsan_/ { hooked = 1; calls[kind]++ }
	END { printf "%d %d %d %d\n", calls["std"], total["std"], calls["perfbuf"], total["perfbuf"] }' \
	>"$out/hooked.txt"
read -r std_hooked std_total pb_hooked pb_total <"$out/hooked.txt"
if [ "$std_hooked" -eq 0 ] || [ "$pb_hooked" -eq 0 ]; then
	echo "tsan: FAIL: no std ($std_hooked/$std_total) or perfbuf ($pb_hooked/$pb_total) function calls TSan"
	exit 1
fi

# ---- 2. the C tests ----------------------------------------------------
cflags="-O1 -g -fno-omit-frame-pointer -fsanitize=thread -Wall -Wextra -Werror -std=gnu11 -Iinclude -Ic-tests"
for f in threads_test controls_test producer testutil; do
	gcc $cflags -c -o "$out/$f.o" "c-tests/$f.c"
done
# gcc must not link its own libtsan: no -fsanitize at link time. The
# runtime goes in whole and exported (-rdynamic) so that libperfbuf.so's
# __tsan_ calls and everyone's libc calls reach it.
link() {
	local exe=$1
	shift
	gcc -o "$out/$exe" "$@" "$out/producer.o" "$out/testutil.o" -Wl,--whole-archive "$rt" \
		-Wl,--no-whole-archive -rdynamic -L"$libdir" -lperfbuf -Wl,-rpath,"$libdir" -lpthread -ldl -lm -lrt
}
link threads_test "$out/threads_test.o"
link controls_test "$out/controls_test.o"
for exe in threads_test controls_test; do
	if nm -D --undefined-only "$out/$exe" | grep -c __tsan_ >/dev/null; then
		echo "tsan: FAIL: $exe leaves __tsan_ symbols to another runtime"
		exit 1
	fi
	loaded=$(ldd "$out/$exe" | awk '/libperfbuf/ {print $3}')
	[ "$(readlink -f "$loaded")" = "$(readlink -f "$lib")" ] ||
		{ echo "tsan: FAIL: $exe loads $loaded, not $lib"; exit 1; }
done
[ "$(nm --undefined-only "$out/threads_test.o" | grep -c __tsan_func_entry)" -gt 0 ] ||
	{ echo "tsan: FAIL: the C is not instrumented"; exit 1; }

# ---- 3. positive controls: deliberate races must be reported -------------
# Symbolised by llvm-symbolizer when installed, else by binutils' addr2line.
export TSAN_OPTIONS="halt_on_error=1 exitcode=66 history_size=7 second_deadlock_stack=1 allow_addr2line=1"
selfcheck() {
	local mode=$1 where=$2 log=$out/selfcheck$1.log rc=0
	"$out/threads_test" "$mode" >"$log" 2>&1 || rc=$?
	if [ $rc -eq 77 ] || grep -q "cannot create the BPF producer" "$log"; then
		cat "$log" # no BPF: 77 outside CI, 1 under CI=true
		exit $((rc == 77 ? 77 : 1))
	fi
	if [ $rc -ne 66 ] || ! grep -q "WARNING: ThreadSanitizer: data race" "$log"; then
		echo "tsan: FAIL: threads_test $mode: the deliberate race was not reported (exit $rc): TSan not active"
		cat "$log"
		exit 1
	fi
	# Both accesses (the top frame of each of the report's two stacks) must
	# be in the expected code.
	if [ "$(grep -c "^ *#0 .*$where" "$log")" -lt 2 ]; then
		echo "tsan: FAIL: threads_test $mode: the report does not show both accesses in $where"
		cat "$log"
		exit 1
	fi
	# The report in short: what raced, and the first frame of each access.
	awk '/^WARNING: ThreadSanitizer/ { print; next }
		/^  (Read|Write|Atomic|Previous)/ { want = 1; sub(/ at 0x[0-9a-f]+/, ""); printf "%s", $0; next }
		want && /^ *#0 / { sub(/^ *#0 /, " "); sub(/ \(BuildId.*/, ""); print; want = 0 }' "$log" |
		sed "s/^/tsan: control $mode: /"
}
selfcheck --race-c 'race_c_thread'
selfcheck --race-rust 'libperfbuf\.so'

# ---- 4. the tests, which must not cause any report ----------------------
start=$(date +%s)
rc=0
"$out/threads_test" 2>&1 | tee "$out/threads_test.log" || rc=$?
[ $rc -eq 0 ] || { echo "tsan: FAIL: threads_test exit $rc"; exit $((rc == 77 ? 77 : 1)); }
"$out/controls_test" 2>&1 | tee "$out/controls_test.log" || rc=$?
[ $rc -eq 0 ] || { echo "tsan: FAIL: controls_test exit $rc"; exit 1; }
if grep -q ThreadSanitizer "$out/threads_test.log" "$out/controls_test.log"; then
	echo "tsan: FAIL: ThreadSanitizer printed something"
	exit 1
fi
run_s=$(($(date +%s) - start))
t=$(sed -n 's/^threads_test: \(.*\)$/\1/p' "$out/threads_test.log" | tail -1)
c=$(sed -n 's/^controls_test: \(.*\)$/\1/p' "$out/controls_test.log" | tail -1)
echo "tsan: no report: threads_test $t, controls_test $c (${run_s} s); libperfbuf.so calls $hooks __tsan_ hooks" \
	"from $pb_hooked/$pb_total perfbuf and $std_hooked/$std_total std functions (built in ${build_s} s);" \
	"deliberate races in C and in libperfbuf reported"
