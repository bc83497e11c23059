module perfbench/peers/perfbuf-go

go 1.19

require (
	perfbench/peers/gopeer v0.0.0
	perfbuf.dev/perfbuf v0.0.0
)

// The repository's Go package over the build tree's libperfbuf (found by
// pkg-config: bench/peers/build.sh points PKG_CONFIG_PATH at it), offline.
replace (
	perfbench/peers/gopeer => ../gopeer
	perfbuf.dev/perfbuf => ../../../bindings/go
)
