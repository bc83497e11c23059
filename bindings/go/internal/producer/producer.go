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

// RingProducer owns a BPF_MAP_TYPE_RINGBUF and the programs writing to it
// (bpf_ringbuf_output, or reserve then submit/discard).
type RingProducer struct{ r C.struct_ringbuf_producer }

// The operations of RingProducer.Ctl.
const (
	RingOutput         = C.RINGBUF_OUTPUT
	RingReserveSubmit  = C.RINGBUF_RESERVE_SUBMIT
	RingReserveDiscard = C.RINGBUF_RESERVE_DISCARD
	// RingNoWakeup and RingForceWakeup are BPF_RB_NO_WAKEUP and
	// BPF_RB_FORCE_WAKEUP.
	RingNoWakeup    = 1
	RingForceWakeup = 2
)

// OpenRing creates a ring buffer of size bytes (a power of two number of
// pages) and loads the programs.
func OpenRing(size int) (*RingProducer, error) {
	rp := &RingProducer{}
	if err := C.producer_open_ringbuf(&rp.r, C.uint(size)); err != 0 {
		return nil, fmt.Errorf("producer: %w", syscall.Errno(-err))
	}
	return rp, nil
}

// MapFD is the BPF_MAP_TYPE_RINGBUF.
func (rp *RingProducer) MapFD() int { return int(rp.r.map_fd) }

// Emit writes `repeat` records of n bytes (Expected(n, seed)) on cpu with
// bpf_ringbuf_output; it returns the helper's last result (-11 when full).
func (rp *RingProducer) Emit(cpu, n int, seed byte, repeat int) (int, error) {
	var ret C.int
	if err := C.producer_emit_ringbuf(&rp.r, C.int(cpu), C.uint(n), C.uint8_t(seed), C.uint(repeat), &ret); err != 0 {
		return 0, fmt.Errorf("producer: %w", syscall.Errno(-err))
	}
	return int(ret), nil
}

// Ctl writes one 16-byte record holding meta twice (or reserves and
// discards it) with BPF_RB_* flags; it returns the helper's result.
func (rp *RingProducer) Ctl(cpu int, op int, flags uint, meta uint64) (int, error) {
	var ret C.int
	if err := C.producer_ringbuf_ctl(&rp.r, C.int(cpu), C.enum_ringbuf_op(op), C.uint(flags), C.uint64_t(meta), &ret); err != 0 {
		return 0, fmt.Errorf("producer: %w", syscall.Errno(-err))
	}
	return int(ret), nil
}

// Close releases the map and the programs.
func (rp *RingProducer) Close() { C.producer_close_ringbuf(&rp.r) }
