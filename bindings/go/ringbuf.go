package perfbuf

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"perfbuf.dev/perfbuf/internal/poller"
)

// ErrFlushed is returned by RingBuffer's Read once per Flush, after the
// records the ring held when Flush was called.
var ErrFlushed = poller.ErrFlushed

// RingRecord is one record of a BPF ring buffer.
type RingRecord struct {
	// RawSample is the record's bytes, as the BPF program submitted them.
	RawSample []byte
	// Remaining is how many bytes were still in the ring after this
	// record was read (a lower bound: BPF may have written more since).
	Remaining int
}

// RingBuffer reads a BPF_MAP_TYPE_RINGBUF (bpf_ringbuf_output,
// bpf_ringbuf_reserve/submit) record by record through libperfbuf's
// ring_buffer__* functions, with cilium/ebpf's ringbuf.Reader semantics
// (perfbuf.dev/perfbuf/ringbuf is that package's API over it): Read blocks
// until a record is committed, Flush and SetDeadline end the wait after
// the records held, Close interrupts it.
//
// It waits on the map's fd itself (with an eventfd each for Flush and
// Close), so libperfbuf's fast mode (PERFBUF_ADAPTIVE) does not apply.
type RingBuffer struct {
	// mu is held by ReadInto, across its waits, and by Close.
	mu         sync.Mutex
	h          *C.struct_perfbuf_go_rb
	poll       *poller.Poller
	mapFD      int // a duplicate of the caller's fd
	size       int
	haveData   bool  // the ring was found readable and not yet read empty
	pendingErr error // returned once the ring is read empty

	deadlineMu sync.Mutex
	deadline   time.Time
}

// NewRingBuffer reads the BPF_MAP_TYPE_RINGBUF mapFD. It works on a
// duplicate of the fd, closed by Close, so the caller may close its own.
func NewRingBuffer(mapFD int) (*RingBuffer, error) {
	const op = "NewRingBuffer"
	if mapFD < 0 {
		return nil, &Error{Op: op, Errno: syscall.EBADF, Reason: fmt.Sprintf("map fd %d: is the map closed?", mapFD)}
	}
	dup, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(mapFD), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return nil, &Error{Op: op, Errno: e, Reason: "cannot duplicate the map's fd: " + e.Error()}
	}
	r := &RingBuffer{mapFD: int(dup)}
	_, err := cCall(op, func() C.int {
		var cerr C.int
		r.h = C.perfbuf_go_rb_new(C.int(r.mapFD), &cerr)
		if r.h == nil {
			return -cerr
		}
		return 0
	})
	if err != nil {
		pe := err.(*Error)
		if kind := MapType(r.mapFD); kind != "" && kind != "BPF_MAP_TYPE_RINGBUF" && pe.Errno == syscall.EINVAL {
			pe.Reason += fmt.Sprintf("; map fd %d is a %s, not a BPF_MAP_TYPE_RINGBUF", mapFD, kind)
		}
		r.release()
		return nil, err
	}
	r.size = int(C.perfbuf_go_rb_size(r.h))
	// The map's fd is readable while the ring holds data.
	if r.poll, err = poller.New([]int{r.mapFD}); err != nil {
		r.release()
		errno, _ := errors.Unwrap(err).(syscall.Errno)
		return nil, &Error{Op: op, Errno: errno, Reason: err.Error()}
	}
	runtime.SetFinalizer(r, (*RingBuffer).Close)
	return r, nil
}

// NewRingBufferFromMap is NewRingBuffer for a map object that has an fd,
// such as cilium/ebpf's *ebpf.Map.
func NewRingBufferFromMap(m interface{ FD() int }) (*RingBuffer, error) {
	if m == nil {
		return nil, invalid("NewRingBufferFromMap", "nil map")
	}
	return NewRingBuffer(m.FD())
}

// MapType names the type of the BPF map behind fd ("BPF_MAP_TYPE_RINGBUF",
// "BPF_MAP_TYPE_PERF_EVENT_ARRAY", ...; "BPF_MAP_TYPE(n)" for others), or
// returns "" when fd is not a BPF map.
func MapType(fd int) string {
	n, ok := mapInfo(fd, "map_type")
	if !ok {
		return ""
	}
	switch n {
	case 4:
		return "BPF_MAP_TYPE_PERF_EVENT_ARRAY"
	case 27:
		return "BPF_MAP_TYPE_RINGBUF"
	case 1:
		return "BPF_MAP_TYPE_HASH"
	case 2:
		return "BPF_MAP_TYPE_ARRAY"
	}
	return fmt.Sprintf("BPF_MAP_TYPE(%d)", n)
}

// mapInfo reads a number the kernel shows for a BPF map's fd in
// /proc/self/fdinfo (map_type, max_entries, ...).
func mapInfo(fd int, key string) (uint64, bool) {
	data, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, key+":") {
			n, err := strconv.ParseUint(strings.TrimSpace(line[len(key)+1:]), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// release frees what NewRingBuffer made; no Read runs.
func (r *RingBuffer) release() {
	if r.poll != nil {
		r.poll.Release()
	}
	C.perfbuf_go_rb_free(r.h)
	r.h = nil
	if r.mapFD >= 0 {
		syscall.Close(r.mapFD)
		r.mapFD = -1
	}
}

// Close frees the reader. It interrupts a Read, which returns an error
// wrapping ErrClosed, as does every later Read. Closing twice returns nil.
func (r *RingBuffer) Close() error {
	if r.poll == nil || !r.poll.Close() {
		return nil
	}
	runtime.SetFinalizer(r, nil)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.release()
	return nil
}

// BufferSize is the size in bytes of the ring (the map's max_entries).
func (r *RingBuffer) BufferSize() int { return r.size }

// SetDeadline makes Read return the records the ring holds once t has
// passed, then os.ErrDeadlineExceeded. The zero time removes the deadline;
// a Read already waiting keeps the deadline it started with.
func (r *RingBuffer) SetDeadline(t time.Time) {
	r.deadlineMu.Lock()
	r.deadline = t
	r.deadlineMu.Unlock()
}

// Flush unblocks Read: the following Reads return the records the ring
// holds, then ErrFlushed once. After Close it returns an error wrapping
// ErrClosed.
func (r *RingBuffer) Flush() error {
	if err := r.poll.Flush(); err != nil {
		return fmt.Errorf("perfbuf: ring buffer: %w", err)
	}
	return nil
}

// Read returns the next record, blocking until there is one. See ReadInto.
func (r *RingBuffer) Read() (RingRecord, error) {
	var rec RingRecord
	return rec, r.ReadInto(&rec)
}

// ReadInto is Read into a caller's record, reusing its RawSample when it
// is large enough: in a steady state it allocates nothing.
//
// It blocks until the ring holds a committed record. Close interrupts it
// with an error wrapping ErrClosed; Flush makes it return the records
// held, then ErrFlushed; past the deadline it returns the records held,
// then an error wrapping os.ErrDeadlineExceeded.
func (r *RingBuffer) ReadInto(rec *RingRecord) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.h == nil {
		return fmt.Errorf("perfbuf: ring buffer: %w", ErrClosed)
	}
	for {
		if !r.haveData {
			if pe := r.pendingErr; pe != nil {
				r.pendingErr = nil
				return pe
			}
			r.deadlineMu.Lock()
			deadline := r.deadline
			r.deadlineMu.Unlock()
			err := r.poll.Wait(deadline, 0)
			switch {
			case err == os.ErrDeadlineExceeded || err == os.ErrClosed:
				err = fmt.Errorf("perfbuf: ring buffer: %w", err)
			case err != nil && err != ErrFlushed:
				errno, _ := err.(syscall.Errno)
				return &Error{Op: "Read", Errno: errno, Reason: "epoll_wait: " + err.Error()}
			}
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrFlushed) {
				// Hand over what the ring holds first: records written
				// with BPF_RB_NO_WAKEUP woke nobody.
				r.pendingErr = err
			} else if err != nil {
				return err
			}
			r.haveData = true
		}
		ok, err := r.next(rec)
		if ok || err != nil {
			return err
		}
		// Empty, or the next record is not committed yet: the commit
		// wakes the wait (the ring stays readable until then).
		r.haveData = false
	}
}

// next consumes the ring's next committed record into rec.
func (r *RingBuffer) next(rec *RingRecord) (bool, error) {
	var dst unsafe.Pointer
	if cap(rec.RawSample) > 0 {
		dst = unsafe.Pointer(&rec.RawSample[:1][0])
	}
	ret := C.perfbuf_go_rb_read(C.uintptr_t(uintptr(unsafe.Pointer(r.h))), dst, C.size_t(cap(rec.RawSample)))
	switch ret {
	case C.PERFBUF_GO_RB_EMPTY:
		return false, nil
	case C.PERFBUF_GO_RB_RECORD:
		rec.RawSample = rec.RawSample[:r.h.size]
	case C.PERFBUF_GO_RB_SPILLED:
		rec.RawSample = make([]byte, int(r.h.size))
		copy(rec.RawSample, unsafe.Slice((*byte)(r.h.spill), int(r.h.size)))
	default:
		return false, &Error{Op: "Read", Errno: syscall.Errno(-ret)}
	}
	rec.Remaining = int(r.h.remaining)
	return true, nil
}
