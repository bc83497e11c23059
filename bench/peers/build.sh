#!/usr/bin/env bash
# Builds the peer readers of the benchmark into BUILD_DIR: peer-cilium
# (cilium/ebpf 0.9.1 from Debian's golang-github-cilium-ebpf-dev, offline),
# peer-perfbuf-go (the repository's perfbuf.dev/perfbuf/perf over the build
# tree's libperfbuf, make lib) and peer-aya (the aya crate from crates.io,
# bench/peers/aya/Cargo.lock).
# A peer that cannot be built is skipped, not an error: its reason goes to
# BUILD_DIR/peer-NAME.skip, which bench/run.py prints.
# usage: bench/peers/build.sh BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$(mkdir -p "$1" && cd "$1" && pwd)
export PATH="$PATH:$HOME/.cargo/bin"

skip() { # name reason
	rm -f "$out/$1"
	echo "$2" > "$out/$1.skip"
	echo "bench-peers: skipping $1: $2" >&2
}

CILIUM_SRC=/usr/share/gocode/src/github.com/cilium/ebpf
if ! command -v go > /dev/null; then
	skip peer-cilium "no go toolchain (apt-get install golang-go)"
elif [ ! -f "$CILIUM_SRC/perf/reader.go" ]; then
	skip peer-cilium "cilium/ebpf sources not in $CILIUM_SRC (apt-get install golang-github-cilium-ebpf-dev)"
elif ! (cd "$here/cilium" && GOFLAGS=-mod=mod GOPROXY=off GOWORK=off go build -o "$out/peer-cilium" .); then
	skip peer-cilium "go build of bench/peers/cilium failed (output above)"
else
	rm -f "$out/peer-cilium.skip"
	echo "bench-peers: built $out/peer-cilium"
fi

# perfbuf.dev/perfbuf/perf finds libperfbuf with pkg-config: a perfbuf.pc
# for the build tree (as bindings/go/run-tests.sh makes), an rpath to it.
top=$(cd "$here/../.." && pwd)
if ! command -v go > /dev/null; then
	skip peer-perfbuf-go "no go toolchain (apt-get install golang-go)"
elif [ ! -f "$top/target/release/libperfbuf.so" ]; then
	skip peer-perfbuf-go "no $top/target/release/libperfbuf.so (make lib)"
else
	version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
	mkdir -p "$out/pkgconfig"
	sed -e "s|@PREFIX@|$top|" -e "s|@LIBDIR@|$top/target/release|" -e "s|@INCDIR@|$top/include|" \
		-e "s|@VERSION@|$version|" "$top/perfbuf.pc.in" > "$out/pkgconfig/perfbuf.pc"
	if ! (cd "$here/perfbuf-go" && PKG_CONFIG_PATH="$out/pkgconfig" CGO_LDFLAGS="-Wl,-rpath,$top/target/release" \
		GOFLAGS=-mod=mod GOPROXY=off GOWORK=off go build -o "$out/peer-perfbuf-go" .); then
		skip peer-perfbuf-go "go build of bench/peers/perfbuf-go failed (output above)"
	else
		rm -f "$out/peer-perfbuf-go.skip"
		echo "bench-peers: built $out/peer-perfbuf-go"
	fi
fi

if ! command -v cargo > /dev/null; then
	skip peer-aya "no cargo"
elif ! cargo build --release --locked --quiet --manifest-path "$here/aya/Cargo.toml" \
	--target-dir "$out/peers-aya-target"; then
	skip peer-aya "cargo build of bench/peers/aya failed (output above; it needs crates.io or a filled cargo cache)"
else
	cp "$out/peers-aya-target/release/perfbench-aya" "$out/peer-aya"
	rm -f "$out/peer-aya.skip"
	echo "bench-peers: built $out/peer-aya"
fi
exit 0
