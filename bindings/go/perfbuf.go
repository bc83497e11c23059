// Package perfbuf reads BPF perf event arrays (bpf_perf_event_output)
// through libperfbuf, with libbpf's defaults and libperfbuf's options. Its
// Reader is shaped like cilium/ebpf's perf.Reader; for cilium's exact API
// and semantics (a one-line import switch) use perfbuf.dev/perfbuf/perf.
//
//	rd, err := perfbuf.NewReaderFromMap(coll.Maps["events"], os.Getpagesize()*8, perfbuf.ReaderOptions{})
//	if err != nil { ... }
//	defer rd.Close()
//	for {
//		rec, err := rd.Read()
//		if errors.Is(err, perfbuf.ErrClosed) { return }
//		...
//	}
//
// NewEventSet opens perf events that are not BPF output (tracepoints with
// their fields decoded by name, kprobes, uprobes, software and hardware
// sampling events) on every CPU, read by an EventReader in the same way.
//
// It links libperfbuf (not libbpf), found with pkg-config (perfbuf.pc,
// installed by libperfbuf's make install), and calls only libperfbuf's own
// perfbuf_* functions, so a program that also links libbpf is safe
// whatever the link order. It depends on nothing beyond the standard
// library: NewReaderFromMap takes a cilium/ebpf *ebpf.Map through an
// interface.
package perfbuf

/*
#cgo pkg-config: perfbuf
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/cgo"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// ErrClosed is returned by Read after Close, as in cilium/ebpf.
var ErrClosed = os.ErrClosed

// ReaderOptions control the Reader. The zero value is exactly C's
// perf_buffer__new: a wake-up for every sample, as libbpf, and libperfbuf's
// environment variables (PERFBUF_ADAPTIVE, PERFBUF_WAKEUP_EVENTS,
// PERFBUF_MAX_DELAY_MS) apply as they do in C. Any other value builds the
// buffer with these options and the environment is not read.
type ReaderOptions struct {
	// Watermark wakes the reader after this many bytes (overrides WakeupEvents).
	Watermark int
	// WakeupEvents wakes the reader after this many samples.
	WakeupEvents int
	// Overwritable makes the rings keep the newest records (read with Pause/Read/Resume).
	Overwritable bool
	// MaxDelay bounds how long a record may wait below Watermark/WakeupEvents
	// before Read delivers it (libperfbuf extension; default 10ms when
	// batching, at most 60s; rounded up to whole milliseconds).
	MaxDelay time.Duration
	// Fast turns on the fast mode (adaptive wake-ups, PERFBUF_F_ADAPTIVE):
	// while a CPU's rate stays high and the reader keeps up, the kernel
	// wakes the reader only when a quarter of a spill ring 16 times the ring
	// is full, and a timer delivers the rest within 1ms; at a low rate, or
	// for a reader that cannot take it, it behaves as the default. It needs
	// per-record wake-ups and forward rings: not with Watermark,
	// WakeupEvents > 1 or Overwritable.
	Fast bool
	// CPUs reads only these CPUs' rings (map key = CPU id); offline or
	// absent ones are skipped (Rings lists the rings made). Empty: every
	// online CPU, as libbpf.
	CPUs []int
	// CountLost makes the lost figures exact (PERFBUF_F_COUNT_LOST, Linux
	// 6.0+): each CPU's event counts the records it could not write, so
	// RingStats.Lost includes the LostUnreported ones the kernel has not
	// yet written as a LOST record, and DrainFinal reports them. Off by
	// default because a read() of the ring's event then returns 16 bytes
	// instead of libbpf's 8. With Fast, the fast mode's own events'
	// losses count too.
	CountLost bool
	// OutputCounts is the PERFBUF_OUTPUT_COUNTS map (include/perfbuf.bpf.h)
	// the BPF program sends through, such as a cilium *ebpf.Map: with it
	// RingStats.Produced and OutputFailed are known, the outputs the helper
	// refused without the kernel counting them (see the top README's "Lost
	// counts"). Its fd is used while NewReader runs (the reader keeps a
	// duplicate).
	OutputCounts interface{ FD() int }
	// NoHotplug reads the CPUs online now, for good (libbpf's way). By
	// default a Reader with options serves CPUs that come and go: a CPU
	// that comes online gets a ring within a second, one going offline has
	// its ring read and kept, one coming back a fresh event (the kernel
	// leaves the old one dead). With no option set the Reader is
	// perf_buffer__new's (PERFBUF_HOTPLUG=1 opts in).
	NoHotplug bool
	// KeepSlots makes Close leave the map's slots as they are, as
	// cilium/ebpf's Close does (PERFBUF_F_KEEP_SLOTS), instead of deleting
	// them as libbpf does: a reader opened on the same map while this one
	// closes keeps its slots. A slot left behind holds its closed ring's
	// event, and BPF output into it fails with -ENOSPC until a reader
	// replaces it.
	KeepSlots bool
}

func (o ReaderOptions) isZero() bool {
	return o.Watermark == 0 && o.WakeupEvents == 0 && !o.Overwritable && o.MaxDelay == 0 && !o.Fast &&
		len(o.CPUs) == 0 && !o.CountLost && o.OutputCounts == nil && !o.NoHotplug && !o.KeepSlots
}

// Record is one record read from a CPU's ring.
type Record struct {
	CPU         int
	RawSample   []byte
	LostSamples uint64
	// Remaining is how many bytes were still waiting in this CPU's ring
	// after the drain that delivered the record (DrainRing: after the
	// record, up to the head the drain found).
	Remaining int
}

// Error is a failure of the Reader or of libperfbuf. It wraps the errno:
// errors.Is(err, syscall.EACCES) and errors.Is(err, os.ErrPermission)
// work, and Error() carries libperfbuf's explanation (perfbuf_last_error:
// what failed, the errno's name and text, a hint at the fix), e.g.
//
//	perfbuf: NewReader: failed to open perf buffer event on cpu #0: Permission denied (EACCES); run as root, or grant CAP_BPF and CAP_PERFMON (CAP_SYS_ADMIN on kernels before 5.8)
type Error struct {
	// Op is the method that failed: "NewReader", "Read", "Pause", ...
	Op string
	// Errno is the error number.
	Errno syscall.Errno
	// Reason says what failed and why (empty when there is nothing to add
	// to the errno).
	Reason string
}

func (e *Error) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("perfbuf: %s: %v", e.Op, e.Errno)
	}
	return fmt.Sprintf("perfbuf: %s: %s", e.Op, e.Reason)
}

// Unwrap returns the errno.
func (e *Error) Unwrap() error { return e.Errno }

func invalid(op, reason string) error {
	return &Error{Op: op, Errno: syscall.EINVAL, Reason: reason + ": " + syscall.EINVAL.Error() + " (EINVAL)"}
}

// cCall runs fn on a locked OS thread, so that a failure's text is read
// from the thread that failed (perfbuf_last_error is per thread).
func cCall(op string, fn func() C.int) (C.int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ret := fn()
	if ret < 0 {
		return ret, &Error{Op: op, Errno: syscall.Errno(-ret), Reason: C.GoString(C.perfbuf_last_error())}
	}
	return ret, nil
}

// rings is what Reader and EventReader share: a C perf_buffer drained by
// one goroutine at a time (Read), which the others may wake (Close,
// Pause, Resume, SetDeadline) without ever reaching a freed buffer.
type rings struct {
	mu sync.Mutex // held by the goroutine inside poll
	// pb is freed and cleared under both mu and wakeMu; wake holds wakeMu
	// shared, so perfbuf_wake never runs on a freed buffer.
	wakeMu   sync.RWMutex
	pb       *C.struct_perf_buffer
	handle   cgo.Handle
	closed   atomic.Bool
	waiters  atomic.Int32 // control calls waiting for the buffer
	stateMu  sync.Mutex   // deadline
	deadline time.Time
	// drained: since the deadline passed, the rings were consumed once;
	// the next Read finding nothing queued returns os.ErrDeadlineExceeded.
	drained bool
	// stage, if set, is where the callbacks put the records (a Reader's):
	// polls and consumes go through perfbuf_go_drain.
	stage *C.struct_perfbuf_go_stage
}

// Reader reads records from a BPF_MAP_TYPE_PERF_EVENT_ARRAY.
type Reader struct {
	rings
	ownedFD int // a dup of the map's fd (NewReaderFromMap), or -1
	// head is the next of the stage's entries to hand out (the stage is
	// emptied once every entry was).
	head  int
	size  int
	mapFD int // the map the rings are stored in
}

// NewReader opens one ring of perCPUBuffer bytes (rounded up to a power of
// two number of pages) per online CPU and stores them in the map mapFD,
// a BPF_MAP_TYPE_PERF_EVENT_ARRAY. The map fd must stay open until Close.
func NewReader(mapFD int, perCPUBuffer int, opts ReaderOptions) (*Reader, error) {
	return newReader(mapFD, -1, perCPUBuffer, opts)
}

// NewReaderFromMap is NewReader for a map object that has an fd, such as
// cilium/ebpf's *ebpf.Map (this package does not depend on cilium/ebpf):
//
//	coll, err := ebpf.NewCollection(spec)
//	...
//	rd, err := perfbuf.NewReaderFromMap(coll.Maps["events"], 8*os.Getpagesize(), perfbuf.ReaderOptions{})
//
// The Reader works on a duplicate of the map's fd, closed by Close, so the
// map object may be closed before the Reader.
func NewReaderFromMap(m interface{ FD() int }, perCPUBuffer int, opts ReaderOptions) (*Reader, error) {
	if m == nil {
		return nil, invalid("NewReaderFromMap", "nil map")
	}
	if v := reflect.ValueOf(m); (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return nil, invalid("NewReaderFromMap", fmt.Sprintf("nil %T", m))
	}
	fd := m.FD()
	if fd < 0 {
		return nil, &Error{Op: "NewReaderFromMap", Errno: syscall.EBADF,
			Reason: fmt.Sprintf("the map's fd is %d: is the map closed?", fd)}
	}
	dup, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return nil, &Error{Op: "NewReaderFromMap", Errno: e, Reason: "cannot duplicate the map's fd: " + e.Error()}
	}
	r, err := newReader(int(dup), int(dup), perCPUBuffer, opts)
	if err != nil {
		syscall.Close(int(dup))
		if pe, ok := err.(*Error); ok {
			pe.Op = "NewReaderFromMap"
		}
		return nil, err
	}
	return r, nil
}

func newReader(mapFD, ownedFD, perCPUBuffer int, opts ReaderOptions) (*Reader, error) {
	const op = "NewReader"
	if perCPUBuffer < 1 {
		return nil, invalid(op, fmt.Sprintf("perCPUBuffer is %d, it must be at least 1 byte", perCPUBuffer))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"Watermark", opts.Watermark}, {"WakeupEvents", opts.WakeupEvents}} {
		if f.v < 0 || int64(f.v) > 1<<32-1 {
			return nil, invalid(op, fmt.Sprintf("ReaderOptions.%s is %d, out of range", f.name, f.v))
		}
	}
	if opts.MaxDelay < 0 || opts.MaxDelay > time.Minute {
		return nil, invalid(op, fmt.Sprintf("ReaderOptions.MaxDelay is %v, it must be between 0 and 1m", opts.MaxDelay))
	}
	page := os.Getpagesize()
	pages := 1
	for pages*page < perCPUBuffer {
		pages <<= 1
	}
	r := &Reader{size: pages * page, ownedFD: ownedFD, mapFD: mapFD}
	if r.stage = C.perfbuf_go_stage_new(); r.stage == nil {
		return nil, &Error{Op: op, Errno: syscall.ENOMEM, Reason: "cannot allocate the record stage"}
	}
	var flags C.uint32_t
	if opts.Overwritable {
		flags |= C.PERFBUF_F_OVERWRITE
	}
	if opts.Fast {
		flags |= C.PERFBUF_F_ADAPTIVE
	}
	if opts.CountLost {
		flags |= C.PERFBUF_F_COUNT_LOST
	}
	if opts.NoHotplug {
		flags |= C.PERFBUF_F_NO_HOTPLUG
	}
	if opts.KeepSlots {
		flags |= C.PERFBUF_F_KEEP_SLOTS
	}
	countsFD := 0
	if opts.OutputCounts != nil {
		if countsFD = opts.OutputCounts.FD(); countsFD <= 0 {
			return nil, invalid(op, fmt.Sprintf("ReaderOptions.OutputCounts has fd %d: is the map closed?", countsFD))
		}
	}
	useOpts := C.int(0)
	if !opts.isZero() {
		useOpts = 1
	}
	var cpus *C.int
	if len(opts.CPUs) > 0 {
		list := make([]C.int, len(opts.CPUs))
		for i, c := range opts.CPUs {
			list[i] = C.int(c)
		}
		cpus = &list[0]
	}
	delayMS := (opts.MaxDelay + time.Millisecond - 1) / time.Millisecond
	var pb *C.struct_perf_buffer
	_, err := cCall(op, func() C.int {
		var cerr C.int
		pb = C.perfbuf_go_new(C.int(mapFD), C.size_t(pages), r.stage, useOpts,
			C.uint32_t(opts.WakeupEvents), C.uint32_t(opts.Watermark), C.uint32_t(delayMS), flags,
			cpus, C.int(len(opts.CPUs)), C.int(countsFD), &cerr)
		if pb == nil {
			return -cerr
		}
		return 0
	})
	if err != nil {
		C.perfbuf_go_stage_free(r.stage)
		pe := err.(*Error)
		if pe.Errno == syscall.EINVAL || pe.Errno == syscall.EBADF {
			if target, lerr := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", mapFD)); lerr == nil && target != "anon_inode:bpf-map" {
				pe.Reason += fmt.Sprintf("; map fd %d is not a BPF_MAP_TYPE_PERF_EVENT_ARRAY: it is %s, not a BPF map", mapFD, target)
			}
		}
		return nil, err
	}
	r.pb = pb
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
	if err := r.wait(r.queued); err != nil {
		return err
	}
	return r.pop(rec)
}

// pop moves the oldest staged record into rec, reusing its RawSample
// (mu held, a record staged). No call into C: the stage is C memory Go
// reads directly. A record DrainRing could not decode is consumed with an
// error.
func (r *Reader) pop(rec *Record) error {
	st := r.stage
	e := (*C.struct_perfbuf_go_entry)(unsafe.Add(unsafe.Pointer(st.ents), uintptr(r.head)*unsafe.Sizeof(*st.ents)))
	r.head++
	rec.CPU, rec.LostSamples, rec.Remaining = int(e.cpu), uint64(e.lost), int(e.remaining)
	if e.size > 0 {
		rec.RawSample = append(rec.RawSample[:0], unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(st.data), uintptr(e.off))), int(e.size))...)
	} else {
		rec.RawSample = rec.RawSample[:0]
	}
	typ, errno := uint32(e._type), syscall.Errno(-e.err)
	if r.head == int(st.n) {
		r.head = 0
		C.perfbuf_go_stage_reset(C.uintptr_t(uintptr(unsafe.Pointer(st))))
	}
	switch {
	case typ != C.PERF_RECORD_SAMPLE && typ != C.PERF_RECORD_LOST:
		return &RecordTypeError{typ}
	case errno != 0:
		return &Error{Op: "Read", Errno: errno, Reason: fmt.Sprintf("a malformed record of type %d: %v", typ, errno)}
	}
	return nil
}

// ReadBatch fills recs with ready records, at least one: it blocks as Read
// does until one is, then hands over what the drain delivered, up to
// len(recs), reusing each Record's RawSample. It returns how many. A drain
// is one call into libperfbuf for every ring, its records staged in C
// memory and copied out here, so a batch costs no crossing per record;
// in a steady state it allocates nothing.
func (r *Reader) ReadBatch(recs []Record) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.wait(r.queued); err != nil {
		return 0, err
	}
	n := 0
	for n < len(recs) && r.queued() {
		if err := r.pop(&recs[n]); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (r *Reader) queued() bool { return r.stage != nil && r.head < int(r.stage.n) }

// wait polls, with mu held, until ready reports a queued record (nil), the
// deadline passes (os.ErrDeadlineExceeded) or the buffer is closed
// (ErrClosed).
func (r *rings) wait(ready func() bool) error {
	for {
		if r.closed.Load() || r.pb == nil {
			return fmt.Errorf("perfbuf: Read: %w", ErrClosed)
		}
		if ready() {
			return nil
		}
		timeout := -1
		r.stateMu.Lock()
		deadline := r.deadline
		r.stateMu.Unlock()
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				// Hand over what the rings hold first (those below a
				// wake-up threshold too), then report the deadline once.
				if r.drained {
					r.drained = false
					return os.ErrDeadlineExceeded
				}
				r.drained = true
				if _, err := r.drain(-1, true); err != nil {
					return err
				}
				continue
			}
			timeout = int(left/time.Millisecond) + 1
		}
		// Waiting for records again: the next past deadline drains anew.
		r.drained = false
		if err := r.pollOnce(timeout); err != nil {
			return err
		}
	}
}

// pollOnce is one perfbuf_poll of at most timeout ms (-1: no limit), with
// mu held. Woken (Close, Pause/Resume, SetDeadline, Wake) or interrupted
// by a signal, it lets a waiting control call have the buffer and returns
// nil.
func (r *rings) pollOnce(timeout int) error {
	_, err := r.drain(timeout, false)
	if err == nil {
		return nil
	}
	if e := err.(*Error).Errno; e != syscall.ECANCELED && e != syscall.EINTR {
		return err
	}
	if r.waiters.Load() > 0 {
		r.mu.Unlock()
		for r.waiters.Load() > 0 {
			time.Sleep(50 * time.Microsecond)
		}
		r.mu.Lock()
	}
	return nil
}

// Close unblocks a concurrent Read (which returns ErrClosed) and frees the
// rings (and closes the fd NewReaderFromMap duplicated).
func (r *Reader) Close() error {
	r.close(func() {
		if r.ownedFD >= 0 {
			syscall.Close(r.ownedFD)
			r.ownedFD = -1
		}
	})
	return nil
}

// drain is perfbuf_poll (timeout ms, -1: none) or perfbuf_consume, into
// the stage when there is one; mu held.
func (r *rings) drain(timeout int, consume bool) (C.int, error) {
	pb, stage := r.pb, r.stage
	return cCall("Read", func() C.int {
		switch {
		case stage != nil:
			return stageDrain(pb, stage, timeout, consume)
		case consume:
			return C.perfbuf_consume(pb)
		}
		return C.perfbuf_poll(pb, C.int(timeout))
	})
}

// stageDrain is perfbuf_go_drain: a poll or consume into the stage.
func stageDrain(pb *C.struct_perf_buffer, stage *C.struct_perfbuf_go_stage, timeout int, consume bool) C.int {
	cons := C.int(0)
	if consume {
		cons = 1
	}
	return C.perfbuf_go_drain(C.uintptr_t(uintptr(unsafe.Pointer(pb))), C.uintptr_t(uintptr(unsafe.Pointer(stage))), C.int(timeout), cons)
}

// close frees the buffer once (a concurrent Read returns ErrClosed), then
// runs after with mu held; it reports whether this call closed it.
func (r *rings) close(after func()) bool {
	if r.closed.Swap(true) {
		return false
	}
	r.wake()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wakeMu.Lock()
	pb := r.pb
	r.pb = nil
	r.wakeMu.Unlock()
	C.perfbuf_free(pb)
	if r.handle != 0 {
		r.handle.Delete()
	}
	if r.stage != nil {
		C.perfbuf_go_stage_free(r.stage)
		r.stage = nil
	}
	after()
	return true
}

// wake ends a blocked poll: perfbuf_wake is the one call libperfbuf allows
// during a poll, but not during or after perfbuf_free.
func (r *rings) wake() {
	r.wakeMu.RLock()
	defer r.wakeMu.RUnlock()
	if r.pb != nil {
		C.perfbuf_wake(r.pb)
	}
}

// Pause stops the kernel's output into every ring: records produced while
// paused are dropped and reported as LostSamples after Resume.
func (r *rings) Pause() error {
	return r.control("Pause", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_pause(pb) })
}

// Resume restarts output after Pause.
func (r *rings) Resume() error {
	return r.control("Resume", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_resume(pb) })
}

// control runs fn with the buffer to itself, waking a blocked Read first.
func (r *rings) control(op string, fn func(*C.struct_perf_buffer) C.int) error {
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
	pb := r.pb
	_, err := cCall(op, func() C.int { return fn(pb) })
	return err
}

// DrainFinal is the final drain, once the producers have stopped: it
// drains every ring (an ordered EventReader flushes what it holds), then
// queues one lost report (a record with LostSamples) per ring of what the
// kernel counted lost and has not yet written as a LOST record, so a burst
// that filled a ring at the end is not missed for want of a later record.
// It returns the number that last step reported lost; the records come
// from Read without blocking. Only rings whose events count their losses
// have such a count (ReaderOptions.CountLost, an EventSet's rings; Linux
// 6.0+); elsewhere it only drains the rings and returns 0.
func (r *rings) DrainFinal() (uint64, error) {
	var lost C.uint64_t
	err := r.control("DrainFinal", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_drain_final(pb, &lost) })
	return uint64(lost), err
}

// SetDeadline makes Read return os.ErrDeadlineExceeded once t has passed,
// after the records the rings still hold (so SetDeadline(time.Now()) and
// Read until os.ErrDeadlineExceeded drains them); the zero time means no
// deadline.
func (r *rings) SetDeadline(t time.Time) {
	r.stateMu.Lock()
	r.deadline = t
	r.stateMu.Unlock()
	r.wake()
}
