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
// It is an adapter over the root package's Reader (perfbuf.dev/perfbuf):
// it waits on the rings' perf events as cilium's does, takes each ring's
// records as libperfbuf decodes them (a ring per call into C), deletes and
// restores the map's slots for Pause and Resume, and leaves them at Close.
// MaxDelay, Fast, ReadBatch and Stats are libperfbuf's additions. It needs
// cgo and libperfbuf (found with pkg-config).
package perf
