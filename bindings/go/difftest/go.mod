// The differential suite is a module of its own, so that perfbuf.dev/perfbuf
// stays free of dependencies: it runs the same scenarios through
// cilium/ebpf's perf.Reader and perfbuf.dev/perfbuf/perf.
module perfbuf.dev/perfbuf/difftest

go 1.19

require (
	github.com/cilium/ebpf v0.9.1
	perfbuf.dev/perfbuf v0.0.0-00010101000000-000000000000
)

require golang.org/x/sys v0.0.0-20210906170528-6f6e22806c34 // indirect

replace perfbuf.dev/perfbuf => ../

// Debian's golang-github-cilium-ebpf-dev (0.9.1) and golang-golang-x-sys-dev,
// offline: build with GOFLAGS=-mod=mod GOPROXY=off (run-tests.sh does).
replace (
	github.com/cilium/ebpf => /usr/share/gocode/src/github.com/cilium/ebpf
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
)
