// Package perfbuf reads BPF perf event arrays (bpf_perf_event_output)
// through libperfbuf. Its Reader follows cilium/ebpf's perf.Reader, so
// switching is a matter of imports:
//
//	rd, err := perfbuf.NewReader(mapFD, os.Getpagesize()*8, perfbuf.ReaderOptions{})
//	defer rd.Close()
//	for {
//		rec, err := rd.Read()
//		if errors.Is(err, perfbuf.ErrClosed) { return }
//		...
//	}
//
// It links libperfbuf (not libbpf).
package perfbuf

/*
#cgo LDFLAGS: -lperfbuf
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// ErrClosed is returned by Read after Close, as in cilium/ebpf.
var ErrClosed = os.ErrClosed

// ReaderOptions control the Reader; the zero value wakes the reader for
// every sample, like libbpf's default.
type ReaderOptions struct {
	// Watermark wakes the reader after this many bytes (overrides WakeupEvents).
	Watermark int
	// WakeupEvents wakes the reader after this many samples.
	WakeupEvents int
	// Overwritable makes the rings keep the newest records (read with Pause/Read/Resume).
	Overwritable bool
	// MaxDelay bounds how long a record may wait below Watermark/WakeupEvents
	// before Read delivers it (libperfbuf extension; default 10ms when batching).
	MaxDelay time.Duration
}

// Record is one record read from a CPU's ring.
type Record struct {
	CPU         int
	RawSample   []byte
	LostSamples uint64
	// Remaining is how many bytes were still waiting in this CPU's ring
	// when the record was returned.
	Remaining int
}

// Reader reads records from a BPF_MAP_TYPE_PERF_EVENT_ARRAY.
type Reader struct {
	mu       sync.Mutex // held by the goroutine inside poll
	// pb is freed and cleared under both mu and wakeMu; wake holds wakeMu
	// shared, so perfbuf_wake never runs on a freed buffer.
	wakeMu   sync.RWMutex
	pb       *C.struct_perf_buffer
	handle   cgo.Handle
	queue    []Record
	cpuIndex map[int]int
	size     int
	closed   atomic.Bool
	waiters  atomic.Int32 // control calls waiting for the buffer
	stateMu  sync.Mutex   // deadline
	deadline time.Time
}

func errnoErr(op string, e syscall.Errno) error {
	return fmt.Errorf("perfbuf: %s: %w", op, e)
}

// NewReader opens one ring of perCPUBuffer bytes (rounded up to a power of
// two number of pages) per online CPU and stores them in the map.
func NewReader(mapFD int, perCPUBuffer int, opts ReaderOptions) (*Reader, error) {
	if perCPUBuffer < 1 {
		return nil, errnoErr("NewReader", syscall.EINVAL)
	}
	page := os.Getpagesize()
	pages := 1
	for pages*page < perCPUBuffer {
		pages <<= 1
	}
	r := &Reader{size: pages * page, cpuIndex: map[int]int{}}
	r.handle = cgo.NewHandle(r)
	var flags C.uint32_t
	if opts.Overwritable {
		flags = C.PERFBUF_F_OVERWRITE
	}
	var cerr C.int
	pb := C.perfbuf_go_new(C.int(mapFD), C.size_t(pages), C.uintptr_t(r.handle), C.uint32_t(opts.WakeupEvents),
		C.uint32_t(opts.Watermark), C.uint32_t(opts.MaxDelay/time.Millisecond), flags, &cerr)
	if pb == nil {
		r.handle.Delete()
		return nil, errnoErr("NewReader", syscall.Errno(cerr))
	}
	r.pb = pb
	for i := 0; i < int(C.perf_buffer__buffer_cnt(pb)); i++ {
		r.cpuIndex[int(C.perfbuf_buffer_cpu(pb, C.size_t(i)))] = i
	}
	return r, nil
}

// BufferSize is the size in bytes of each CPU's ring.
func (r *Reader) BufferSize() int { return r.size }

// Read returns the next record, blocking until one arrives, the deadline
// passes (os.ErrDeadlineExceeded) or the Reader is closed (ErrClosed).
func (r *Reader) Read() (Record, error) {
	var rec Record
	err := r.ReadInto(&rec)
	return rec, err
}

// ReadInto is Read into a caller's Record (its RawSample is reused when large enough).
func (r *Reader) ReadInto(rec *Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.closed.Load() || r.pb == nil {
			return fmt.Errorf("perfbuf: Read: %w", ErrClosed)
		}
		if len(r.queue) > 0 {
			next := r.queue[0]
			r.queue = r.queue[1:]
			rec.CPU, rec.LostSamples = next.CPU, next.LostSamples
			rec.RawSample = append(rec.RawSample[:0], next.RawSample...)
			if idx, ok := r.cpuIndex[next.CPU]; ok {
				rec.Remaining = int(C.perfbuf_go_pending(r.pb, C.size_t(idx)))
			}
			return nil
		}
		timeout := -1
		r.stateMu.Lock()
		deadline := r.deadline
		r.stateMu.Unlock()
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			timeout = int(left/time.Millisecond) + 1
		}
		ret := C.perf_buffer__poll(r.pb, C.int(timeout))
		if ret < 0 {
			e := syscall.Errno(-ret)
			if e == syscall.ECANCELED || e == syscall.EINTR {
				// Close, Pause/Resume, SetDeadline or a signal. Let a waiting
				// control call have the buffer, then look again.
				if r.waiters.Load() > 0 {
					r.mu.Unlock()
					for r.waiters.Load() > 0 {
						time.Sleep(50 * time.Microsecond)
					}
					r.mu.Lock()
				}
				continue
			}
			return errnoErr("Read", e)
		}
	}
}

// Close unblocks a concurrent Read (which returns ErrClosed) and frees the rings.
func (r *Reader) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.wake()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wakeMu.Lock()
	pb := r.pb
	r.pb = nil
	r.wakeMu.Unlock()
	C.perf_buffer__free(pb)
	r.handle.Delete()
	return nil
}

// wake ends a blocked poll: perfbuf_wake is the one call libperfbuf allows
// during a poll, but not during or after perf_buffer__free.
func (r *Reader) wake() {
	r.wakeMu.RLock()
	defer r.wakeMu.RUnlock()
	if r.pb != nil {
		C.perfbuf_wake(r.pb)
	}
}

// Pause stops the kernel's output into every ring: records produced while
// paused are dropped and reported as LostSamples after Resume.
func (r *Reader) Pause() error {
	return r.control("Pause", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_pause(pb) })
}

// Resume restarts output after Pause.
func (r *Reader) Resume() error {
	return r.control("Resume", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_resume(pb) })
}

// control runs fn with the buffer to itself, waking a blocked Read first.
func (r *Reader) control(op string, fn func(*C.struct_perf_buffer) C.int) error {
	if r.closed.Load() {
		return ErrClosed
	}
	r.waiters.Add(1)
	defer r.waiters.Add(-1)
	r.wake()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pb == nil {
		return ErrClosed
	}
	if ret := fn(r.pb); ret < 0 {
		return errnoErr(op, syscall.Errno(-ret))
	}
	return nil
}

// SetDeadline makes Read return os.ErrDeadlineExceeded once t has passed;
// the zero time means no deadline.
func (r *Reader) SetDeadline(t time.Time) {
	r.stateMu.Lock()
	r.deadline = t
	r.stateMu.Unlock()
	r.wake()
}

//export perfbufGoSample
func perfbufGoSample(h C.uintptr_t, cpu C.int, data unsafe.Pointer, size C.uint32_t) {
	r := cgo.Handle(h).Value().(*Reader)
	r.queue = append(r.queue, Record{CPU: int(cpu), RawSample: C.GoBytes(data, C.int(size))})
}

//export perfbufGoLost
func perfbufGoLost(h C.uintptr_t, cpu C.int, cnt C.uint64_t) {
	r := cgo.Handle(h).Value().(*Reader)
	r.queue = append(r.queue, Record{CPU: int(cpu), LostSamples: uint64(cnt)})
}
