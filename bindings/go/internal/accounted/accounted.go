// Package accounted loads the loss identity's BPF program
// (c-tests/bpf/accounted.bpf.c, built with include/perfbuf.bpf.h as
// build/accounted.bpf.o) with libbpf: records sent through the header's
// counted wrappers into a perf event array, run on a chosen CPU.
package accounted

/*
#cgo LDFLAGS: -lbpf
#define ACCOUNTED_NO_RUN
#include <stdlib.h>
#include "../../../../c-tests/accounted.c"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"perfbuf.dev/perfbuf/internal/producer"
)

// Program is the loaded object.
type Program struct{ a C.struct_accounted }

// Open loads the object at path.
func Open(path string) (*Program, error) {
	p := &Program{}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if err := C.accounted_open(&p.a, cpath, 0); err != 0 {
		return nil, fmt.Errorf("accounted: %s: %w", path, syscall.Errno(-err))
	}
	return p, nil
}

// fd is an fd of the object, as a map the reader takes.
type fd int

// FD is the fd.
func (f fd) FD() int { return int(f) }

// Events is the perf event array.
func (p *Program) Events() interface{ FD() int } { return fd(p.a.events_fd) }

// EventsCounts is its PERFBUF_OUTPUT_COUNTS map.
func (p *Program) EventsCounts() interface{ FD() int } { return fd(p.a.events_counts_fd) }

// Run sends repeat records of size bytes (16..256) on cpu into the perf
// event array; it returns the last helper result.
func (p *Program) Run(cpu, size, repeat int) (int, error) {
	pkt := make([]byte, 64)
	pkt[0], pkt[1] = byte(size), byte(size>>8)
	return producer.TestRun(int(p.a.perf_prog_fd), cpu, pkt, repeat)
}

// Close unloads the object.
func (p *Program) Close() { C.accounted_close(&p.a) }
