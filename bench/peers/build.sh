#!/usr/bin/env bash
# Builds the peer readers of the benchmark into BUILD_DIR: peer-cilium
# (cilium/ebpf 0.9.1 from Debian's golang-github-cilium-ebpf-dev, offline)
# and peer-aya (the aya crate from crates.io, bench/peers/aya/Cargo.lock).
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
