package perf

/*
#cgo pkg-config: perfbuf
#include <errno.h>
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
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

var (
	// ErrClosed is returned by Read after Close (or while Close runs).
	ErrClosed = os.ErrClosed
	// ErrFlushed is returned by Read once per Flush, after the records
	// the rings held when Flush was called.
	ErrFlushed = errors.New("data was flushed")

	errMustBePaused = errors.New("perf ringbuffer: must have been paused before reading overwritable buffer")
)

// Map is what the reader needs of the BPF_MAP_TYPE_PERF_EVENT_ARRAY:
// cilium/ebpf's *ebpf.Map (any version) has it.
type Map interface {
	FD() int
}

// Record is a sample or a count of lost samples.
type Record struct {
	// The CPU this record was generated on.
	CPU int

	// The data submitted via bpf_perf_event_output, with the kernel's
	// padding (0 to 7 trailing bytes).
	RawSample []byte

	// The number of samples which could not be output, since the ring
	// was full.
	LostSamples uint64

	// The number of bytes still in the CPU's ring after this record;
	// -1 for overwritable rings.
	Remaining int
}

// ReaderOptions control the reader. The zero value reads as cilium's
// NewReader does.
type ReaderOptions struct {
	// The number of events required in any per CPU buffer before Read
	// processes data; mutually exclusive with Watermark.
	WakeupEvents int
	// The number of written bytes required in any per CPU buffer before
	// Read processes data; must be smaller than perCPUBuffer. The default
	// is to start as soon as data is available.
	Watermark int
	// Overwritable rings keep the newest records; read them between
	// Pause and Resume.
	Overwritable bool

	// MaxDelay (not in cilium/ebpf) bounds how long a record below
	// WakeupEvents or Watermark waits: after MaxDelay without a wake-up,
	// Read looks at every ring. Zero: records wait for a wake-up, Flush or
	// the deadline, as in cilium/ebpf.
	MaxDelay time.Duration
	// Fast (not in cilium/ebpf) turns on libperfbuf's fast mode (adaptive
	// wake-ups, see the README): while a CPU's rate is high the kernel
	// wakes the reader only at a quarter of a spill ring and a timer hands
	// over the rest within about 1ms. Not with WakeupEvents, Watermark or Overwritable. It moves
	// the map slots itself, so Pause and Resume use the kernel's pause
	// instead: BPF gets -ENOSPC and the writes are reported lost.
	Fast bool
}

// Reader reads records from a BPF_MAP_TYPE_PERF_EVENT_ARRAY through
// libperfbuf.
type Reader struct {
	// mu is held by ReadInto, across its waits, and by Close.
	mu           sync.Mutex
	pb           *C.struct_perf_buffer
	next         *C.struct_perf_next // C memory: the cgo call allocates nothing
	poll         *poller
	mapFD        int   // a duplicate of the map's fd
	cpus         []int // CPU of each ring (libperfbuf's order)
	ringFDs      []int // perf event fd of each ring
	pending      []int // rings to read since the last wake, from the back
	pendingErr   error // returned once pending is empty
	queue        *queue
	handle       cgo.Handle
	overwritable bool
	bufferSize   int
	maxDelay     time.Duration
	fast         bool
	waiters      atomic.Int32 // fast mode: Pause/Resume waiting for the buffer

	deadlineMu sync.Mutex
	deadline   time.Time

	// pauseMu guards paused and the map slots; Pause and Resume run while
	// a Read waits. Take mu first when taking both.
	pauseMu sync.Mutex
	paused  bool
	closed  bool
}

// NewReader creates a reader with the default options. perCPUBuffer is
// each CPU's ring size in bytes, rounded up to a power of two number of
// pages.
func NewReader(array Map, perCPUBuffer int) (*Reader, error) {
	return NewReaderWithOptions(array, perCPUBuffer, ReaderOptions{})
}

// NewReaderWithOptions creates a reader with the given options.
func NewReaderWithOptions(array Map, perCPUBuffer int, opts ReaderOptions) (*Reader, error) {
	if array == nil {
		return nil, errors.New("nil map")
	}
	if v := reflect.ValueOf(array); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, fmt.Errorf("nil %T", array)
	}
	if perCPUBuffer < 1 {
		return nil, errors.New("perCPUBuffer must be larger than 0")
	}
	if opts.WakeupEvents > 0 && opts.Watermark > 0 {
		return nil, errors.New("WakeupEvents and Watermark cannot both be non-zero")
	}
	if opts.WakeupEvents < 0 || opts.Watermark < 0 || opts.MaxDelay < 0 {
		return nil, errors.New("WakeupEvents, Watermark and MaxDelay cannot be negative")
	}
	if opts.Watermark >= perCPUBuffer {
		return nil, errors.New("watermark must be smaller than perCPUBuffer")
	}
	fd := array.FD()
	if fd < 0 {
		return nil, fmt.Errorf("map fd %d: %w", fd, syscall.EBADF)
	}
	dup, err := dupFD(fd)
	if err != nil {
		return nil, err
	}
	page := os.Getpagesize()
	pages := 1
	for pages*page < perCPUBuffer {
		pages <<= 1
	}
	pr := &Reader{
		mapFD:        dup,
		queue:        &queue{},
		overwritable: opts.Overwritable,
		bufferSize:   pages * page,
		maxDelay:     opts.MaxDelay,
		fast:         opts.Fast,
	}
	pr.handle = cgo.NewHandle(pr.queue)
	if err := pr.open(pages, opts); err != nil {
		pr.release()
		return nil, err
	}
	runtime.SetFinalizer(pr, (*Reader).Close)
	return pr, nil
}

func (pr *Reader) open(pages int, opts ReaderOptions) error {
	var flags C.uint32_t
	if opts.Overwritable {
		flags |= C.PERFBUF_F_OVERWRITE
	}
	if opts.Fast {
		flags |= C.PERFBUF_F_ADAPTIVE
	}
	// libperfbuf's own delay timer is never waited on (Read polls the
	// ring fds itself): the longest bound keeps it quiet.
	const quietDelayMS = 60000
	var cerr C.int
	runtime.LockOSThread()
	pr.pb = C.perf_new_buffer(C.int(pr.mapFD), C.size_t(pages), C.uintptr_t(pr.handle),
		C.uint32_t(opts.WakeupEvents), C.uint32_t(opts.Watermark), quietDelayMS, flags, nil, 0, &cerr)
	var reason string
	if pr.pb == nil {
		reason = C.GoString(C.perfbuf_last_error())
	}
	runtime.UnlockOSThread()
	if pr.pb == nil {
		return fmt.Errorf("perfbuf: %s: %w", reason, syscall.Errno(cerr))
	}
	for i := 0; i < int(C.perfbuf_buffer_cnt(pr.pb)); i++ {
		pr.cpus = append(pr.cpus, int(C.perfbuf_buffer_cpu(pr.pb, C.size_t(i))))
		pr.ringFDs = append(pr.ringFDs, int(C.perfbuf_buffer_fd(pr.pb, C.size_t(i))))
	}
	pr.pending = make([]int, 0, len(pr.cpus))
	pr.next = (*C.struct_perf_next)(C.calloc(1, C.size_t(unsafe.Sizeof(C.struct_perf_next{}))))
	if !pr.fast {
		var err error
		pr.poll, err = newPoller(pr.ringFDs)
		return err
	}
	// The fast mode waits in libperfbuf's poll (its spill rings and
	// timer are in that epoll set); Flush and Close wake it.
	var err error
	if pr.poll, err = newPoller(nil); err != nil {
		return err
	}
	pb := pr.pb
	pr.poll.wake = func() { C.perfbuf_wake(pb) }
	return nil
}

func dupFD(fd int) (int, error) {
	dup, _, e := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if e != 0 {
		return -1, fmt.Errorf("duplicate map fd %d: %w", fd, e)
	}
	return int(dup), nil
}

// release frees what open made; mu and pauseMu are held or unneeded.
func (pr *Reader) release() {
	if pr.poll != nil {
		pr.poll.release()
	}
	if pr.pb != nil {
		// libperfbuf deletes the map slots it filled.
		C.perfbuf_free(pr.pb)
		pr.pb = nil
	}
	if pr.next != nil {
		C.free(unsafe.Pointer(pr.next))
		pr.next = nil
	}
	if pr.mapFD >= 0 {
		syscall.Close(pr.mapFD)
		pr.mapFD = -1
	}
	pr.handle.Delete()
}

// Close frees the reader. It interrupts a Read, which returns an error
// wrapping ErrClosed; BPF's bpf_perf_event_output returns -ENOENT after
// it. Closing twice returns nil.
func (pr *Reader) Close() error {
	if pr.poll == nil || !pr.poll.signalClose() {
		return nil
	}
	runtime.SetFinalizer(pr, nil)
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.pauseMu.Lock()
	defer pr.pauseMu.Unlock()
	pr.closed = true
	pr.release()
	return nil
}

// SetDeadline controls how long Read and ReadInto block waiting for
// samples: once t has passed they return the records the rings hold, then
// os.ErrDeadlineExceeded. The zero time removes the deadline. A Read
// already waiting keeps the deadline it started with.
func (pr *Reader) SetDeadline(t time.Time) {
	pr.deadlineMu.Lock()
	pr.deadline = t
	pr.deadlineMu.Unlock()
}

// BufferSize is the size in bytes of each per-CPU ring.
func (pr *Reader) BufferSize() int { return pr.bufferSize }

// Flush unblocks Read: the following Reads return the records the rings
// hold now, then ErrFlushed once.
func (pr *Reader) Flush() error {
	return pr.poll.signalFlush()
}

// Read returns the next record, blocking until there is one. See ReadInto.
func (pr *Reader) Read() (Record, error) {
	var r Record
	return r, pr.ReadInto(&r)
}

// ReadInto is Read into a caller's Record, reusing its RawSample: in a
// steady state it allocates nothing.
//
// It blocks until a ring reaches its wake-up threshold (Watermark,
// WakeupEvents; any record by default), then returns the records of every
// ring, highest CPU first, each CPU's in order. Close interrupts it with
// an error wrapping ErrClosed; Flush makes it return the records held,
// then ErrFlushed; past the deadline it returns the records held, then
// os.ErrDeadlineExceeded. An overwritable reader must be paused.
func (pr *Reader) ReadInto(rec *Record) error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if err := pr.readable(); err != nil {
		return err
	}
	for {
		if len(pr.pending) == 0 && pr.queue.empty() {
			if pe := pr.pendingErr; pe != nil {
				pr.pendingErr = nil
				return pe
			}
			pr.deadlineMu.Lock()
			deadline := pr.deadline
			pr.deadlineMu.Unlock()
			var err error
			if pr.fast {
				err = pr.waitFast(deadline)
			} else {
				err = pr.poll.wait(deadline, pr.maxDelay)
			}
			switch {
			case errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, ErrFlushed):
				// Hand over what the rings hold (below the thresholds too) first.
				pr.pendingErr = err
			case err == errBound || err == nil:
			default:
				return err
			}
			if err := pr.readable(); err != nil {
				return err
			}
			if err := pr.load(); err != nil {
				return err
			}
			continue
		}
		if !pr.queue.empty() {
			pr.queue.pop(rec)
			if pr.fast {
				rec.Remaining = pr.remaining(rec.CPU)
			}
			return nil
		}
		ring := pr.pending[len(pr.pending)-1]
		ok, err := pr.readRing(ring, rec)
		if !ok && err == nil {
			pr.pending = pr.pending[:len(pr.pending)-1]
			continue
		}
		return err
	}
}

// readable is ReadInto's check of the reader's state.
func (pr *Reader) readable() error {
	pr.pauseMu.Lock()
	defer pr.pauseMu.Unlock()
	// cilium's order of the checks.
	if pr.overwritable && !pr.paused {
		return errMustBePaused
	}
	if pr.closed {
		return fmt.Errorf("perf ringbuffer: %w", ErrClosed)
	}
	return nil
}

// load marks every ring to be read after a wake-up: forward rings are
// read record by record; an overwritable ring's records since the last
// read are taken at once, newest first, as cilium returns them.
func (pr *Reader) load() error {
	if pr.fast {
		if ret := C.perfbuf_consume(pr.pb); ret < 0 {
			return fmt.Errorf("perfbuf: consume: %w", syscall.Errno(-ret))
		}
		return nil
	}
	if !pr.overwritable {
		for i := range pr.cpus {
			pr.pending = append(pr.pending, i)
		}
		return nil
	}
	for i := len(pr.cpus) - 1; i >= 0; i-- {
		start := len(pr.queue.recs)
		if ret := C.perfbuf_snapshot(pr.pb, C.size_t(i)); ret < 0 {
			return fmt.Errorf("perfbuf: snapshot of CPU %d: %w", pr.cpus[i], syscall.Errno(-ret))
		}
		for j := start; j < len(pr.queue.recs); j++ {
			pr.queue.recs[j].Remaining = -1
		}
		pr.queue.reverseFrom(start)
	}
	return nil
}

// readRing consumes ring i's next record into rec; false with a nil error
// when the ring is empty.
func (pr *Reader) readRing(i int, rec *Record) (bool, error) {
	for {
		var dst unsafe.Pointer
		if cap(rec.RawSample) > 0 {
			dst = unsafe.Pointer(&rec.RawSample[:1][0])
		}
		ret := C.perf_next_record(C.uintptr_t(uintptr(unsafe.Pointer(pr.pb))), C.size_t(i), dst, C.size_t(cap(rec.RawSample)), pr.next)
		switch {
		case ret == C.PERF_NEXT_EMPTY:
			return false, nil
		case ret == C.PERF_NEXT_GROW:
			rec.RawSample = make([]byte, 0, int(pr.next.size))
			continue
		case ret < 0:
			return false, fmt.Errorf("perfbuf: reading CPU %d: %w", pr.cpus[i], syscall.Errno(-ret))
		}
		rec.CPU = pr.cpus[i]
		rec.Remaining = int(pr.next.remaining)
		switch pr.next._type {
		case C.PERF_RECORD_SAMPLE:
			rec.RawSample = rec.RawSample[:pr.next.size]
			rec.LostSamples = 0
		case C.PERF_RECORD_LOST:
			rec.RawSample = rec.RawSample[:0]
			rec.LostSamples = uint64(pr.next.lost)
		default:
			return true, &unknownEventError{uint32(pr.next._type)}
		}
		return true, nil
	}
}

// Pause stops the output into the rings by deleting the map's slots, as
// cilium/ebpf does: bpf_perf_event_output then returns -ENOENT and nothing
// is reported lost. Reads go on returning what the rings hold.
func (pr *Reader) Pause() error {
	if pr.fast {
		return pr.fastControl(func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_pause(pb) }, true)
	}
	pr.pauseMu.Lock()
	defer pr.pauseMu.Unlock()
	if pr.closed || pr.pb == nil {
		return fmt.Errorf("%w", ErrClosed)
	}
	for _, cpu := range pr.cpus {
		if ret := C.perf_map_slot(C.int(pr.mapFD), C.uint32_t(cpu), -1); ret < 0 && ret != -C.ENOENT {
			return fmt.Errorf("could't delete event fd for CPU %d: %w", cpu, syscall.Errno(-ret))
		}
	}
	pr.paused = true
	return nil
}

// Resume restores the map's slots after Pause.
func (pr *Reader) Resume() error {
	if pr.fast {
		return pr.fastControl(func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_resume(pb) }, false)
	}
	pr.pauseMu.Lock()
	defer pr.pauseMu.Unlock()
	if pr.closed || pr.pb == nil {
		return fmt.Errorf("%w", ErrClosed)
	}
	for i, cpu := range pr.cpus {
		if ret := C.perf_map_slot(C.int(pr.mapFD), C.uint32_t(cpu), C.int(pr.ringFDs[i])); ret < 0 {
			return fmt.Errorf("couldn't put event fd %d for CPU %d: %w", pr.ringFDs[i], cpu, syscall.Errno(-ret))
		}
	}
	pr.paused = false
	return nil
}

type unknownEventError struct {
	eventType uint32
}

func (uev *unknownEventError) Error() string {
	return fmt.Sprintf("unknown event type: %d", uev.eventType)
}

// IsUnknownEvent returns true if the error occurred because an unknown
// event was submitted to the perf event ring.
func IsUnknownEvent(err error) bool {
	var uee *unknownEventError
	return errors.As(err, &uee)
}
