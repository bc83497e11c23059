#!/usr/bin/env bash
# go vet and go test on the real kernel, against the build tree's
# libperfbuf (target/release) found through pkg-config, as an installed
# one would be; then the examples: dump on the real BPF program, execmon
# (an event set on a tracepoint) and profile (an event set with
# build/profile.bpf.o on every CPU).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
build="$top/build"

# perfbuf.pc for the build tree: the repository's include/ and target/release.
version=$(sed -n 's/^version = "\(.*\)"/\1/p' "$top/Cargo.toml" | head -1)
mkdir -p "$build/pkgconfig"
sed -e "s|@PREFIX@|$top|" -e "s|@LIBDIR@|$top/target/release|" -e "s|@INCDIR@|$top/include|" \
	-e "s|@VERSION@|$version|" "$top/perfbuf.pc.in" > "$build/pkgconfig/perfbuf.pc"
export PKG_CONFIG_PATH="$build/pkgconfig"
# The library is not on the loader path: the binaries find it by rpath.
export CGO_LDFLAGS="-Wl,-rpath,$top/target/release"
unset CGO_CFLAGS
export GOFLAGS="-mod=mod" GOPROXY=off GOWORK=off
export PERFBUF_ACCOUNTED_BPF_OBJ="$build/accounted.bpf.o"
cd "$here"

# The package finds libperfbuf through pkg-config (no -I/-L given here).
[ "$(go list -f '{{join .CgoPkgConfig " "}}' .)" = perfbuf ] || { echo "go-test: #cgo pkg-config: perfbuf missing" >&2; exit 1; }
go vet ./...
# Without cgo neither package builds, and the go command says why (README's
# promise): every file of both, doc.go and poller.go included, needs cgo.
for pkg in . ./perf ./ringbuf; do
	if out=$(CGO_ENABLED=0 go build "$pkg" 2>&1) || ! grep -q "build constraints exclude all Go files" <<< "$out"; then
		echo "go-test: CGO_ENABLED=0 go build $pkg: want 'build constraints exclude all Go files', got: $out" >&2
		exit 1
	fi
done
echo "pass: with CGO_ENABLED=0 the packages say: build constraints exclude all Go files"
# The C shims compile warning-free (cgo's own export wrappers leave a
# parameter unused, hence the one exception).
CGO_CFLAGS="-O2 -Wall -Wextra -Werror -Wno-unused-parameter" go build ./ ./perf/ ./ringbuf/
unformatted=$(gofmt -l . )
[ -z "$unformatted" ] || { echo "go-test: not gofmt'ed: $unformatted" >&2; exit 1; }
echo "pass: go vet, gofmt and the C shims without warnings"
go test -count=1 -v ./... 2>&1 | grep -v "^=== RUN"
# The lifetime of the C buffer under concurrent Close, with the race detector.
go test -count=1 -race -run 'TestCloseDuringControls|TestCloseUnblocksRead|TestPauseResume|TestEventLifetimes|TestEventTracepointExecOrdered|TestStats|TestRawRingAccess' ./ 2>&1 | grep -v "^=== RUN"
go test -count=1 -race ./perf/ ./ringbuf/ 2>&1 | grep -v "^=== RUN"

# The differential suite (its own module: it depends on Debian's
# cilium/ebpf 0.9.1): the same scenarios through cilium's perf.Reader and
# perfbuf.dev/perfbuf/perf, and through cilium's ringbuf.Reader and
# perfbuf.dev/perfbuf/ringbuf.
(
	cd difftest
	go vet ./...
	go test -count=1 -v ./... 2>&1 | grep -v "^=== RUN"
)

# Linked with -lbpf before -lperfbuf: libbpf's perf_buffer__* names win the
# symbol lookup, and the package must still read through libperfbuf (it
# calls only perfbuf_* names).
CGO_LDFLAGS="-Wl,--no-as-needed -lbpf $CGO_LDFLAGS" go test -c -o "$build/perfbuf_go_libbpf_first.test" .
needed=$(readelf -d "$build/perfbuf_go_libbpf_first.test" | sed -n 's/.*NEEDED.*\[\(lib[a-z]*\).*/\1/p' | tr '\n' ' ')
case "$needed" in
*libbpf*libperfbuf*) ;;
*) echo "go-test: libbpf is not linked before libperfbuf ($needed)" >&2; exit 1 ;;
esac
echo "go-test: linked as: $needed"
"$build/perfbuf_go_libbpf_first.test" -test.count=1 \
	-test.run 'TestRecordsBytesSizesAndCPUs|TestLostSamplesAddUp|TestPauseResume|TestFastOption|TestDefaults|TestEventTracepointExecOrdered|TestEventUprobes'
echo "pass: perfbuf.dev/perfbuf linked with -lbpf first"
# The same for the cilium-compatible package.
CGO_LDFLAGS="-Wl,--no-as-needed -lbpf $CGO_LDFLAGS" go test -c -o "$build/perfbuf_go_perf_libbpf_first.test" ./perf/
case "$(readelf -d "$build/perfbuf_go_perf_libbpf_first.test" | sed -n 's/.*NEEDED.*\[\(lib[a-z]*\).*/\1/p' | tr '\n' ' ')" in
*libbpf*libperfbuf*) ;;
*) echo "go-test: perf: libbpf is not linked before libperfbuf" >&2; exit 1 ;;
esac
"$build/perfbuf_go_perf_libbpf_first.test" -test.count=1 -test.run 'TestRecordsInOrder|TestPastDeadlineDrains|TestPauseDeletes|TestFastMode'
echo "pass: perfbuf.dev/perfbuf/perf linked with -lbpf first"
# The ring buffer reader calls libbpf's own names (ring_buffer__*, ring__*):
# the shim takes them from libperfbuf, so -lbpf first must not matter.
CGO_LDFLAGS="-Wl,--no-as-needed -lbpf $CGO_LDFLAGS" go test -c -o "$build/perfbuf_go_ringbuf_libbpf_first.test" ./ringbuf/
case "$(readelf -d "$build/perfbuf_go_ringbuf_libbpf_first.test" | sed -n 's/.*NEEDED.*\[\(lib[a-z]*\).*/\1/p' | tr '\n' ' ')" in
*libbpf*libperfbuf*) ;;
*) echo "go-test: ringbuf: libbpf is not linked before libperfbuf" >&2; exit 1 ;;
esac
"$build/perfbuf_go_ringbuf_libbpf_first.test" -test.count=1
echo "pass: perfbuf.dev/perfbuf/ringbuf linked with -lbpf first"

# README's steps for depending on the unpublished module: make install into
# a prefix, a scratch module with a replace directive and go mod tidy,
# pkg-config and an rpath for the prefix.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
make -C "$top" --no-print-directory install PREFIX="$scratch/inst" > "$scratch/install.log" 2>&1 ||
	{ cat "$scratch/install.log" >&2; exit 1; }
mkdir "$scratch/consumer"
cat > "$scratch/consumer/main.go" <<'GO'
package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"perfbuf.dev/perfbuf"
)

func main() {
	_, err := perfbuf.NewReader(-1, os.Getpagesize(), perfbuf.ReaderOptions{})
	fmt.Println(err)
	if !errors.Is(err, syscall.EBADFD) {
		os.Exit(1)
	}
}
GO
(
	cd "$scratch/consumer"
	export PKG_CONFIG_PATH="$scratch/inst/lib/pkgconfig" CGO_LDFLAGS="-Wl,-rpath,$scratch/inst/lib"
	go mod init example.com/consumer 2> /dev/null
	go mod edit -replace "perfbuf.dev/perfbuf=$here"
	go mod tidy
	grep -q 'perfbuf.dev/perfbuf v0.0.0-00010101000000-000000000000' go.mod
	go build -o consumer .
	./consumer 2> /dev/null | grep -q "map FD -1"
	readelf -d consumer | grep -q "RUNPATH.*$scratch/inst/lib"
)
echo "pass: a module outside the repository builds by README's steps (make install, replace, go mod tidy)"

# The example, its own module (cilium/ebpf from Debian's
# golang-github-cilium-ebpf-dev, offline): the BPF program loaded with
# cilium/ebpf, its map read through NewReaderFromMap.
bpf_obj="$build/exec_events.bpf.o"
if [ ! -f "$bpf_obj" ]; then
	echo "go-test: $bpf_obj is missing (make examples builds it)" >&2
	exit 1
fi
profile_obj="$build/profile.bpf.o"
[ -f "$profile_obj" ] || make -C "$top" --no-print-directory build/profile.bpf.o
for example in dump profile; do
	cd "$here/examples/$example"
	before=$(cat go.mod)
	go vet ./...
	go build -o "$build/perfbuf-go-$example" .
	[ "$(cat go.mod)" = "$before" ] && [ ! -e go.sum ] || { echo "go-test: the build changed examples/$example/go.mod" >&2; exit 1; }
done
# The one-line switch: main.go (perfbuf.dev/perfbuf/perf) and main_cilium.go
# (github.com/cilium/ebpf/perf, -tags cilium) are one program; they may differ
# in their build tag and their import line only.
cd "$here/examples/switch"
delta=$(diff main.go main_cilium.go || true)
[ "$delta" = "$(printf '1c1\n< //go:build !cilium\n---\n> //go:build cilium\n28c28\n< \t"perfbuf.dev/perfbuf/perf"\n---\n> \t"github.com/cilium/ebpf/perf"')" ] ||
	{ echo "go-test: examples/switch: main.go and main_cilium.go differ beyond the build tag and import:" >&2; echo "$delta" >&2; exit 1; }
go vet ./... && go vet -tags cilium ./...
go build -o "$build/perfbuf-go-switch" .
go build -tags cilium -o "$build/perfbuf-go-switch-cilium" .
readelf -d "$build/perfbuf-go-switch" | grep -q 'NEEDED.*libperfbuf' || { echo "go-test: examples/switch does not link libperfbuf" >&2; exit 1; }
# README's static build: libperfbuf.a linked in, no shared library needed.
CGO_LDFLAGS= go build -ldflags '-linkmode external -extldflags "-static"' -o "$build/perfbuf-go-switch-static" . 2> "$build/switch-static.log" ||
	{ cat "$build/switch-static.log" >&2; exit 1; }
! readelf -d "$build/perfbuf-go-switch-static" | grep -q NEEDED || { echo "go-test: the static build needs shared libraries" >&2; exit 1; }
# The same switch for ring buffers: examples/ringbuf, cilium's ringbuf
# package or perfbuf.dev/perfbuf/ringbuf by the import line alone.
cd "$here/examples/ringbuf"
delta=$(diff main.go main_cilium.go || true)
[ "$delta" = "$(printf '1c1\n< //go:build !cilium\n---\n> //go:build cilium\n31c31\n< \t"perfbuf.dev/perfbuf/ringbuf"\n---\n> \t"github.com/cilium/ebpf/ringbuf"')" ] ||
	{ echo "go-test: examples/ringbuf: main.go and main_cilium.go differ beyond the build tag and import:" >&2; echo "$delta" >&2; exit 1; }
go vet ./... && go vet -tags cilium ./...
go build -o "$build/perfbuf-go-ringbuf" .
go build -tags cilium -o "$build/perfbuf-go-ringbuf-cilium" .
readelf -d "$build/perfbuf-go-ringbuf" | grep -q 'NEEDED.*libperfbuf' || { echo "go-test: examples/ringbuf does not link libperfbuf" >&2; exit 1; }
# execmon has no dependency: it is part of the package's module (vetted above).
cd "$here"
go build -o "$build/perfbuf-go-execmon" ./examples/execmon
echo "pass: the examples build (dump, profile, switch both ways and static, ringbuf both ways, execmon)"
if [ "$(id -u)" != 0 ] && [ "${CI:-}" != true ]; then
	echo "skip: go-test's examples: they open perf events and load BPF programs: run as root"
	exit 0
fi
echo "go-test: examples/dump -obj $bpf_obj -check 3"
"$build/perfbuf-go-dump" -obj "$bpf_obj" -check 3
echo "pass: examples/dump"

for variant in switch switch-cilium switch-static; do
	echo "go-test: examples/switch ($variant) -obj $bpf_obj -runs 3"
	"$build/perfbuf-go-$variant" -obj "$bpf_obj" -runs 3
	echo "pass: examples/switch ($variant)"
done

for variant in ringbuf ringbuf-cilium; do
	echo "go-test: examples/ringbuf ($variant) -runs 3"
	"$build/perfbuf-go-$variant" -runs 3
	echo "pass: examples/ringbuf ($variant)"
done

# execmon runs a command and shows its execs, in time order, with the
# fields decoded by name; it exits with the command's status.
# A copy of /bin/true under a name no other process uses: exactly the
# command's two execs of it are shown, whatever else runs on the machine.
mark="$top/build/perfbuf-mark-go-test-$$"
cp /bin/true "$mark"
echo "go-test: examples/execmon /bin/sh -c '$mark; $mark'"
out=$("$build/perfbuf-go-execmon" /bin/sh -c "$mark; $mark")
echo "$out"
rm -f "$mark"
marked=$(grep " exec $mark$" <<< "$out" || true)
[ "$(grep -c . <<< "$marked")" = 2 ] && [ "$(sed 's/.* pid \([0-9]*\) .*/\1/' <<< "$marked" | sort -u | wc -l)" = 2 ] ||
	{ echo "go-test: execmon shows $(grep -c . <<< "$marked") execs of $mark by distinct pids, want 2" >&2; exit 1; }
if "$build/perfbuf-go-execmon" /bin/false > /dev/null; then
	echo "go-test: execmon did not pass on the command's failure" >&2
	exit 1
fi
echo "pass: examples/execmon"

# profile: cycles or the CPU clock at 99 Hz on every CPU, counted by
# build/profile.bpf.o loaded with cilium/ebpf; it fails if a CPU took no sample.
echo "go-test: examples/profile -obj $profile_obj"
"$build/perfbuf-go-profile" -obj "$profile_obj"
echo "pass: examples/profile"
