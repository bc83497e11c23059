// Package producer runs the repository's BPF test producer
// (c-tests/producer.c): a PERF_EVENT_ARRAY and a BPF program calling
// bpf_perf_event_output, run with BPF_PROG_TEST_RUN on a chosen CPU.
package producer

/*
#include "../../../../c-tests/producer.c"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// Producer owns the map and the programs.
type Producer struct{ p C.struct_producer }

// Open creates the map (one entry per possible CPU) and loads the programs.
func Open() (*Producer, error) {
	pr := &Producer{}
	if err := C.producer_open(&pr.p, 0); err != 0 {
		return nil, fmt.Errorf("producer: %w", syscall.Errno(-err))
	}
	return pr, nil
}

// MapFD is the PERF_EVENT_ARRAY.
func (pr *Producer) MapFD() int { return int(pr.p.map_fd) }

// Emit writes `repeat` samples of n bytes on cpu; it returns the helper's
// last result (0, -28 when the ring is full or paused, -2 with no reader).
func (pr *Producer) Emit(cpu, n int, seed byte, repeat int) (int, error) {
	var ret C.int
	if err := C.producer_emit_det(&pr.p, C.int(cpu), C.uint(n), C.uint8_t(seed), C.uint(repeat), &ret); err != 0 {
		return 0, fmt.Errorf("producer: %w", syscall.Errno(-err))
	}
	return int(ret), nil
}

// Expected is the n bytes a sample from Emit(cpu, n, seed, _) starts with.
func Expected(n int, seed byte) []byte {
	buf := make([]byte, n)
	C.producer_expected(C.uint(n), C.uint8_t(seed), (*C.uint8_t)(unsafe.Pointer(&buf[0])))
	return buf
}

// Close releases the map and the programs.
func (pr *Producer) Close() { C.producer_close(&pr.p) }

// TestRun runs the tc program progFD repeat times on cpu with packet pkt
// (at least 14 bytes, BPF_PROG_TEST_RUN); it returns the last run's
// result.
func TestRun(progFD, cpu int, pkt []byte, repeat int) (int, error) {
	var ret C.int
	err := C.producer_test_run(C.int(progFD), C.int(cpu), unsafe.Pointer(&pkt[0]), C.uint(len(pkt)), C.uint(repeat), &ret)
	if err != 0 {
		return 0, fmt.Errorf("producer: %w", syscall.Errno(-err))
	}
	return int(ret), nil
}
