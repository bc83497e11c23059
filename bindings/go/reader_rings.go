package perfbuf

/*
#include <errno.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"time"
	"unsafe"
)

// This file is the Reader ring by ring, for a reader with its own wait
// (perfbuf.dev/perfbuf/perf waits on the rings' events as cilium/ebpf
// does): the rings' fds, their records decoded by libperfbuf one at a
// time, overwritable snapshots, one poll, the map's slots. Read them in
// place of Read, not alongside it.

// RecordTypeError is a record that is neither a sample nor a lost report,
// as ReadRing found it (it is consumed).
type RecordTypeError struct {
	// Type is the record's perf_event_header.type.
	Type uint32
}

func (e *RecordTypeError) Error() string { return fmt.Sprintf("unknown event type: %d", e.Type) }

// RingFDs returns the perf event fd of each ring, by ring index: it polls
// readable once the ring reaches its wake-up threshold. The fds belong to
// the Reader.
func (r *Reader) RingFDs() ([]int, error) {
	var fds []int
	_, err := r.withBuffer("RingFDs", func(pb *C.struct_perf_buffer) C.int {
		for i := 0; i < int(C.perfbuf_buffer_cnt(pb)); i++ {
			fd := C.perfbuf_buffer_fd(pb, C.size_t(i))
			if fd < 0 {
				return fd
			}
			fds = append(fds, int(fd))
		}
		return 0
	})
	return fds, err
}

// ReadRing consumes ring idx's next record into rec, decoded by libperfbuf
// (perfbuf_decode): a sample's data into RawSample (reused when large
// enough), a lost report's count into LostSamples, and Remaining, the
// bytes left in that ring. It returns false with a nil error when the ring
// is empty, and a *RecordTypeError for a record of another type. In a
// steady state it allocates nothing.
func (r *Reader) ReadRing(idx int, rec *Record) (bool, error) {
	if idx < 0 {
		return false, invalid("ReadRing", "negative ring index")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pb == nil {
		return false, fmt.Errorf("perfbuf: ReadRing: %w", ErrClosed)
	}
	if r.next == nil {
		r.next = (*C.struct_perfbuf_go_next)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_perfbuf_go_next{}))))
	}
	// The buffer goes as an integer: a pointer to an incomplete C type
	// would make each call allocate.
	buffer := C.uintptr_t(uintptr(unsafe.Pointer(r.pb)))
	for {
		var dst unsafe.Pointer
		if cap(rec.RawSample) > 0 {
			dst = unsafe.Pointer(&rec.RawSample[:1][0])
		}
		ret := C.perfbuf_go_next_record(buffer, C.size_t(idx), dst, C.size_t(cap(rec.RawSample)), r.next)
		switch {
		case ret == C.PERFBUF_GO_NEXT_EMPTY:
			return false, nil
		case ret == C.PERFBUF_GO_NEXT_GROW:
			rec.RawSample = make([]byte, 0, int(r.next.size))
			continue
		case ret < 0:
			return false, &Error{Op: "ReadRing", Errno: syscall.Errno(-ret)}
		}
		rec.CPU, rec.Remaining = int(r.next.cpu), int(r.next.remaining)
		if r.next.err < 0 && r.next.err != -C.EOPNOTSUPP {
			return true, &Error{Op: "ReadRing", Errno: syscall.Errno(-r.next.err),
				Reason: fmt.Sprintf("a malformed record of type %d: %v", r.next._type, syscall.Errno(-r.next.err))}
		}
		switch r.next._type {
		case C.PERF_RECORD_SAMPLE:
			rec.RawSample = rec.RawSample[:r.next.size]
			rec.LostSamples = 0
		case C.PERF_RECORD_LOST:
			rec.RawSample = rec.RawSample[:0]
			rec.LostSamples = uint64(r.next.lost)
		default:
			return true, &RecordTypeError{uint32(r.next._type)}
		}
		return true, nil
	}
}

// Snapshot appends to recs the records overwritable ring idx received
// since its last snapshot, oldest first (perfbuf_snapshot: output is
// paused around the read), reusing the buffers recs has beyond its length.
func (r *Reader) Snapshot(idx int, recs []Record) ([]Record, error) {
	if idx < 0 {
		return recs, invalid("Snapshot", "negative ring index")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pb == nil {
		return recs, fmt.Errorf("perfbuf: Snapshot: %w", ErrClosed)
	}
	pb := r.pb
	if _, err := cCall("Snapshot", func() C.int { return C.perfbuf_snapshot(pb, C.size_t(idx)) }); err != nil {
		return recs, err
	}
	for r.queued() {
		if len(recs) < cap(recs) {
			recs = recs[:len(recs)+1]
		} else {
			recs = append(recs, Record{})
		}
		r.pop(&recs[len(recs)-1])
	}
	return recs, nil
}

// PollOnce waits at most timeout (negative: no limit) in libperfbuf's
// poll, which delivers the ready records for TakeQueued (the fast mode's
// spill rings and timer are in its epoll set). Wake, Close, Pause and
// Resume end it early, with a nil error.
func (r *Reader) PollOnce(timeout time.Duration) error {
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() || r.pb == nil {
		return fmt.Errorf("perfbuf: PollOnce: %w", ErrClosed)
	}
	return r.pollOnce(ms)
}

// Consume delivers every record the rings hold for TakeQueued, without
// waiting (perfbuf_consume).
func (r *Reader) Consume() error {
	_, err := r.withBuffer("Consume", func(pb *C.struct_perf_buffer) C.int { return stageDrain(pb, r.stage, -1, true) })
	return err
}

// TakeQueued moves the oldest record PollOnce or Consume delivered into
// rec (as Read would return it), or reports false when none is queued.
func (r *Reader) TakeQueued(rec *Record) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.queued() || r.pb == nil {
		return false
	}
	r.pop(rec)
	return true
}

// Wake ends a PollOnce or Read waiting in libperfbuf's poll (perfbuf_wake);
// it does nothing once the Reader is closed.
func (r *Reader) Wake() { r.wake() }

// Pending is the number of bytes waiting in ring idx (0 when closed or
// out of range). It allocates nothing.
func (r *Reader) Pending(idx int) int {
	r.wakeMu.RLock()
	defer r.wakeMu.RUnlock()
	if r.pb == nil || idx < 0 {
		return 0
	}
	return int(C.perfbuf_go_pending(C.uintptr_t(uintptr(unsafe.Pointer(r.pb))), C.size_t(idx)))
}

// SetMapSlot deletes (filled false) or restores ring idx's slot in the map,
// as cilium/ebpf's Pause and Resume do: while it is deleted BPF's
// bpf_perf_event_output returns -ENOENT. The error is the errno.
func (r *Reader) SetMapSlot(idx int, filled bool) error {
	var errno C.int
	_, err := r.withBuffer("SetMapSlot", func(pb *C.struct_perf_buffer) C.int {
		if idx < 0 || idx >= int(C.perfbuf_buffer_cnt(pb)) {
			return -C.EINVAL
		}
		fd := C.int(-1)
		if filled {
			fd = C.perfbuf_buffer_fd(pb, C.size_t(idx))
		}
		// Under mu: Close cannot close the map's fd meanwhile.
		errno = -C.perfbuf_go_map_slot(C.int(r.mapFD), C.uint32_t(C.perfbuf_buffer_cpu(pb, C.size_t(idx))), fd)
		return 0
	})
	if err != nil {
		return err
	}
	if errno > 0 {
		return syscall.Errno(errno)
	}
	return nil
}
