//go:build cgo

// Package perf is cilium/ebpf's perf package (its API as of v0.16) over
// libperfbuf: a program built on github.com/cilium/ebpf/perf compiles and
// behaves the same after changing that import line to
// perfbuf.dev/perfbuf/perf.
//
//	rd, err := perf.NewReader(coll.Maps["events"], os.Getpagesize()*8)
//	...
//	for {
//		rec, err := rd.Read()
//		if errors.Is(err, perf.ErrClosed) {
//			return
//		}
//		...
//	}
//
// The map is anything with FD() int (cilium's *ebpf.Map of any version).
// The reader waits on the rings' perf events as cilium's does, reads them
// record by record through libperfbuf's raw ring access, and deletes and
// restores the map's slots for Pause and Resume. MaxDelay and Fast are
// libperfbuf's additions, off by default. It needs cgo and libperfbuf
// (found with pkg-config).
package perf
