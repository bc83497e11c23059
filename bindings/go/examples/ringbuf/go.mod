// The one-line switch for ring buffers: the same program built against
// cilium/ebpf's ringbuf package (-tags cilium) and against
// perfbuf.dev/perfbuf/ringbuf (default);
// main.go and main_cilium.go differ only in their build tag and import.
module perfbuf.dev/perfbuf/examples/ringbuf

go 1.19

require (
	github.com/cilium/ebpf v0.9.1
	perfbuf.dev/perfbuf v0.0.0-00010101000000-000000000000
)

require golang.org/x/sys v0.0.0-20210906170528-6f6e22806c34 // indirect

replace perfbuf.dev/perfbuf => ../..

// Debian's golang-github-cilium-ebpf-dev (0.9.1) and golang-golang-x-sys-dev,
// offline: build with GOFLAGS=-mod=mod GOPROXY=off (run-tests.sh does).
replace (
	github.com/cilium/ebpf => /usr/share/gocode/src/github.com/cilium/ebpf
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
)
