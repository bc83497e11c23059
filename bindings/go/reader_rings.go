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
// does): the rings' fds, their records decoded by libperfbuf and staged a
// ring at a time, overwritable snapshots, one poll, the map's slots. Use
// them in place of Read, not alongside it.

// RecordTypeError is a record that is neither a sample nor a lost report,
// as DrainRing found it (it is consumed).
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

// DrainRing stages ring idx's records up to the head it finds now (a fast
// producer cannot keep the reader in one ring), each decoded by libperfbuf
// (perfbuf_decode), for TakeQueued: one call into C for the whole ring.
// Remaining is then, for each record, the bytes after it up to that head,
// as cilium/ebpf reports it. It returns how many records it staged.
func (r *Reader) DrainRing(idx int) (int, error) {
	if idx < 0 {
		return 0, invalid("DrainRing", "negative ring index")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pb == nil {
		return 0, fmt.Errorf("perfbuf: DrainRing: %w", ErrClosed)
	}
	ret := C.perfbuf_go_drain_ring(C.uintptr_t(uintptr(unsafe.Pointer(r.pb))), C.uintptr_t(uintptr(unsafe.Pointer(r.stage))), C.size_t(idx))
	if ret < 0 {
		return 0, &Error{Op: "DrainRing", Errno: syscall.Errno(-ret)}
	}
	return int(ret), nil
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
		if err := r.pop(&recs[len(recs)-1]); err != nil {
			return recs[:len(recs)-1], err
		}
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

// TakeQueued moves the oldest record PollOnce, Consume or DrainRing
// staged into rec (as Read would return it), or reports false when none
// is. A record DrainRing could not decode is taken with an error: a
// *RecordTypeError when neither a sample nor a lost report.
func (r *Reader) TakeQueued(rec *Record) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.queued() || r.pb == nil {
		return false, nil
	}
	return true, r.pop(rec)
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
