//go:build cgo

// Package ringbuf is cilium/ebpf's ringbuf package (its API as of v0.16)
// over libperfbuf: a program built on github.com/cilium/ebpf/ringbuf
// compiles and behaves the same after changing that import line to
// perfbuf.dev/perfbuf/ringbuf.
//
//	rd, err := ringbuf.NewReader(coll.Maps["events"])
//	...
//	for {
//		rec, err := rd.Read()
//		if errors.Is(err, ringbuf.ErrClosed) {
//			return
//		}
//		...
//	}
//
// The map is anything with FD() int (cilium's *ebpf.Map of any version).
// Records are read through libperfbuf's ring_buffer__* functions (the
// root package's RingBuffer); the reader waits on the map's fd as
// cilium's does. It needs cgo and libperfbuf (found with pkg-config).
package ringbuf

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"time"

	"perfbuf.dev/perfbuf"
)

var (
	// ErrClosed is returned by Read after Close, and by a Read that Close
	// interrupted.
	ErrClosed = os.ErrClosed
	// ErrFlushed is returned by Read once per Flush, after the records
	// the ring held.
	ErrFlushed = perfbuf.ErrFlushed
)

// Map is what the reader needs of the BPF_MAP_TYPE_RINGBUF: cilium/ebpf's
// *ebpf.Map (any version) has it.
type Map interface {
	FD() int
}

// Record is one record of the ring buffer.
type Record struct {
	// RawSample is the record as the BPF program submitted it.
	RawSample []byte
	// Remaining is the minimum number of bytes remaining in the ring
	// buffer after this Record has been read.
	Remaining int
}

// Reader reads bpf_ringbuf_output's (and reserve/submit's) records.
type Reader struct {
	rb *perfbuf.RingBuffer
}

// NewReader creates a reader of a BPF_MAP_TYPE_RINGBUF. It works on a
// duplicate of the map's fd, so the map may be closed first.
func NewReader(ringbufMap Map) (*Reader, error) {
	if ringbufMap == nil {
		return nil, errors.New("nil map")
	}
	if v := reflect.ValueOf(ringbufMap); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("nil %T", ringbufMap)
	}
	fd := ringbufMap.FD()
	if kind := perfbuf.MapType(fd); kind != "BPF_MAP_TYPE_RINGBUF" {
		if kind == "" {
			kind = fmt.Sprintf("fd %d is not a BPF map", fd)
		}
		return nil, fmt.Errorf("invalid Map type: %s", kind)
	}
	rb, err := perfbuf.NewRingBuffer(fd)
	if err != nil {
		return nil, fmt.Errorf("failed to create ringbuf ring: %w", err)
	}
	return &Reader{rb: rb}, nil
}

// Close frees the reader. It interrupts a Read, which returns an error
// wrapping ErrClosed. Closing twice returns nil.
func (r *Reader) Close() error { return r.rb.Close() }

// SetDeadline controls how long Read and ReadInto block waiting for
// records: once t has passed they return the records the ring holds, then
// os.ErrDeadlineExceeded. The zero time removes the deadline.
func (r *Reader) SetDeadline(t time.Time) { r.rb.SetDeadline(t) }

// Read returns the next record. Close interrupts it with ErrClosed; Flush
// makes it return the records in the ring, then ErrFlushed; with a
// deadline set it returns os.ErrDeadlineExceeded once the ring is read
// empty past it. See ReadInto for a version that reuses a Record.
func (r *Reader) Read() (Record, error) {
	var rec Record
	return rec, r.ReadInto(&rec)
}

// ReadInto is Read reusing rec and its RawSample: in a steady state it
// allocates nothing.
func (r *Reader) ReadInto(rec *Record) error {
	return r.rb.ReadInto((*perfbuf.RingRecord)(rec))
}

// BufferSize is the size in bytes of the ring buffer.
func (r *Reader) BufferSize() int { return r.rb.BufferSize() }

// Flush unblocks Read and ReadInto: the following calls return the records
// in the ring now, then ErrFlushed.
func (r *Reader) Flush() error { return r.rb.Flush() }
