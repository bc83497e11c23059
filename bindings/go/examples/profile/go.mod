// The example is a module of its own, so that perfbuf.dev/perfbuf stays
// free of dependencies. It depends on the package as
// bindings/go/README.md tells users to before it is published: a replace
// directive pointing at a checkout.
module perfbuf.dev/perfbuf/examples/profile

go 1.19

require (
	github.com/cilium/ebpf v0.9.1
	golang.org/x/sys v0.0.0-20210906170528-6f6e22806c34
	perfbuf.dev/perfbuf v0.0.0-00010101000000-000000000000
)

replace perfbuf.dev/perfbuf => ../..

// Debian's golang-github-cilium-ebpf-dev (0.9.1) and golang-golang-x-sys-dev,
// offline: build with GOFLAGS=-mod=mod GOPROXY=off (run-tests.sh does).
replace (
	github.com/cilium/ebpf => /usr/share/gocode/src/github.com/cilium/ebpf
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
)
