#!/bin/bash
# ThreadSanitizer over the threaded tests, with libperfbuf itself (and the
# Rust standard library, via -Zbuild-std) instrumented. Needs the nightly
# toolchain with rust-src. Fails on any report, and unless a deliberate race
# is reported and libperfbuf.so really calls the TSan hooks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=build/tsan
triple=x86_64-unknown-linux-gnu
cflags="-O1 -g -fsanitize=thread -Wall -Wextra -Werror -std=gnu11 -Iinclude -Ic-tests"

rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
rustup component list --toolchain nightly --installed | grep -q '^rust-src' ||
	rustup component add rust-src --toolchain nightly
CARGO_TARGET_DIR=$out RUSTFLAGS="-Zsanitizer=thread" cargo +nightly build --quiet --release --lib \
	-Zbuild-std=std,panic_abort --target $triple
lib=$out/$triple/release
ln -sf libperfbuf.so $lib/libperfbuf.so.0
hooks=$(nm -D $lib/libperfbuf.so | grep -c ' U __tsan_' || true)
[ "$hooks" -gt 0 ] || { echo "tsan: libperfbuf.so calls no __tsan_ hooks: not instrumented"; exit 1; }

# gcc instruments the C; the runtime is rustc's, since gcc 12's libtsan
# lacks the __tsan_mem* hooks that rustc's LLVM emits.
rt=$(rustc +nightly --print sysroot)/lib/rustlib/$triple/lib/librustc-nightly_rt.tsan.a
link() {
	local name=$1
	shift
	gcc -o $out/$name "$@" -Wl,--whole-archive "$rt" -Wl,--no-whole-archive -rdynamic \
		-L$lib -lperfbuf -Wl,-rpath,"$root/$lib" -lpthread -ldl -lm -lstdc++
}
for f in threads_test controls_test producer testutil tsan_selfcheck; do
	gcc $cflags -c -o $out/$f.o c-tests/$f.c
done
link threads_test $out/threads_test.o $out/producer.o $out/testutil.o
link controls_test $out/controls_test.o $out/producer.o $out/testutil.o
link tsan_selfcheck $out/tsan_selfcheck.o

export TSAN_OPTIONS="halt_on_error=1 exitcode=66"
set +e
$out/tsan_selfcheck >$out/selfcheck.log 2>&1
rc=$?
set -e
if [ $rc -ne 66 ] || ! grep -q "WARNING: ThreadSanitizer: data race" $out/selfcheck.log; then
	echo "tsan: the deliberate race was not reported (exit $rc): ThreadSanitizer is not active"
	exit 1
fi
$out/threads_test
$out/controls_test
echo "tsan: threads_test and controls_test clean; libperfbuf.so calls $hooks TSan hooks; deliberate race reported"
