module perfbench/peers/cilium

go 1.19

require (
	github.com/cilium/ebpf v0.9.1
	golang.org/x/sys v0.3.0
	perfbench/peers/gopeer v0.0.0
)

// Debian's golang-github-cilium-ebpf-dev (0.9.1) and golang-golang-x-sys-dev,
// offline: build with GOFLAGS=-mod=mod GOPROXY=off (see the Makefile's bench-peers).
replace (
	github.com/cilium/ebpf => /usr/share/gocode/src/github.com/cilium/ebpf
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
	perfbench/peers/gopeer => ../gopeer
)
