//go:build cgo

package perf

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"perfbuf.dev/perfbuf"
	"perfbuf.dev/perfbuf/internal/poller"
)

var (
	// ErrClosed is returned by Read after Close (or while Close runs).
	ErrClosed = os.ErrClosed
	// ErrFlushed is returned by Read once per Flush, after the records
	// the rings held when Flush was called.
	ErrFlushed = perfbuf.ErrFlushed

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
	// over the rest within about 1ms. Not with WakeupEvents, Watermark or
	// Overwritable. PERFBUF_ADAPTIVE=1 in the environment turns it on for
	// a reader whose options allow it, as for a C program behind
	// perf_buffer__new. It moves the map slots itself, so Pause and Resume
	// use the kernel's pause instead: BPF gets -ENOSPC and the writes are
	// reported lost. Stats shows its wake-ups (Batched, BatchSwitches).
	Fast bool
}

// Reader reads records from a BPF_MAP_TYPE_PERF_EVENT_ARRAY through
// libperfbuf (the root package's Reader, ring by ring).
type Reader struct {
	// mu is held by ReadInto, across its waits, and by Close.
	mu         sync.Mutex
	rd         *perfbuf.Reader
	poll       *poller.Poller
	cpus       []int // CPU of each ring (libperfbuf's order)
	pending    []int // rings to read since the last wake, from the back
	pendingErr error // returned once pending is empty
	// snap holds an overwritable reader's records from head on, newest
	// first per ring; they keep their buffers when read.
	snap         []perfbuf.Record
	snapHead     int
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
	if fd := array.FD(); fd < 0 {
		return nil, fmt.Errorf("map fd %d: %w", fd, syscall.EBADF)
	}
	if err := fastFromEnv(&opts); err != nil {
		return nil, err
	}
	rd, err := perfbuf.NewReaderFromMap(array, perCPUBuffer, perfbuf.ReaderOptions{
		WakeupEvents: opts.WakeupEvents,
		Watermark:    opts.Watermark,
		Overwritable: opts.Overwritable,
		Fast:         opts.Fast,
		// cilium/ebpf reads the CPUs online at creation, for good (and its
		// Pause empties the slots, which a CPU coming online must not refill).
		NoHotplug: true,
		// cilium/ebpf's Close leaves the slots: a reader opened on the map
		// while this one closes keeps its own.
		KeepSlots: true,
		// libperfbuf's own delay timer is never waited on (Read polls the
		// ring fds itself): the longest bound keeps it quiet.
		MaxDelay: time.Minute,
	})
	if err != nil {
		return nil, err
	}
	pr := &Reader{
		rd:           rd,
		overwritable: opts.Overwritable,
		bufferSize:   rd.BufferSize(),
		maxDelay:     opts.MaxDelay,
		fast:         opts.Fast,
	}
	if err := pr.open(); err != nil {
		pr.release()
		return nil, err
	}
	runtime.SetFinalizer(pr, (*Reader).Close)
	return pr, nil
}

func (pr *Reader) open() error {
	var err error
	if pr.cpus, err = pr.rd.Rings(); err != nil {
		return err
	}
	pr.pending = make([]int, 0, len(pr.cpus))
	if pr.fast {
		// The fast mode waits in libperfbuf's poll (its spill rings and
		// timer are in that epoll set); Flush and Close wake it.
		if pr.poll, err = poller.New(nil); err != nil {
			return err
		}
		pr.poll.Wake = pr.rd.Wake
		return nil
	}
	fds, err := pr.rd.RingFDs()
	if err != nil {
		return err
	}
	pr.poll, err = poller.New(fds)
	return err
}

// release frees what open made; mu and pauseMu are held or unneeded.
func (pr *Reader) release() {
	if pr.poll != nil {
		pr.poll.Release()
	}
	// The map's slots stay as they are (KeepSlots).
	pr.rd.Close()
}

// Close frees the reader. It interrupts a Read, which returns an error
// wrapping ErrClosed. As cilium/ebpf's Close, it leaves the map's slots as
// they are: a reader opened on the map meanwhile keeps its own, and BPF's
// bpf_perf_event_output into a slot left behind returns -ENOSPC. Closing
// twice returns nil.
func (pr *Reader) Close() error {
	if pr.poll == nil || !pr.poll.Close() {
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
	if err := pr.poll.Flush(); err != nil {
		return fmt.Errorf("epoll wake: %w", err)
	}
	return nil
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
	if pr.fast {
		return pr.readFast(rec)
	}
	return pr.readRings(rec)
}

// ReadBatch (not in cilium/ebpf) fills recs with records, at least one: it
// blocks as ReadInto does until one is, then adds, up to len(recs), what
// the rings a wake-up found hold (each drained by one call into
// libperfbuf, as ReadInto's are; the fast mode's poll stages them too);
// each Record's RawSample is reused. It returns how many, and the error
// ReadInto would return for the first; an error with n > 0 is that of the
// record after the n returned (consumed).
func (pr *Reader) ReadBatch(recs []Record) (int, error) {
	if len(recs) == 0 {
		return 0, nil
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if err := pr.readable(); err != nil {
		return 0, err
	}
	var err error
	if pr.fast {
		err = pr.readFast(&recs[0])
	} else {
		err = pr.readRings(&recs[0])
	}
	if err != nil {
		return 0, err
	}
	// Then what is staged, and the rings the wake-up found, without
	// waiting again.
	for n := 1; ; {
		if n == len(recs) {
			return n, nil
		}
		if pr.snapHead < len(pr.snap) {
			pr.popSnap(&recs[n])
			n++
			continue
		}
		if ok, err := pr.rd.TakeQueued((*perfbuf.Record)(&recs[n])); ok {
			if err != nil {
				return n, pr.recordError(recs[n].CPU, err)
			}
			n++
			continue
		}
		if pr.fast || len(pr.pending) == 0 {
			return n, nil
		}
		ring := pr.pending[len(pr.pending)-1]
		pr.pending = pr.pending[:len(pr.pending)-1]
		if _, err := pr.rd.DrainRing(ring); err != nil {
			return n, fmt.Errorf("perfbuf: reading CPU %d: %w", pr.cpus[ring], err)
		}
	}
}

// readRings is ReadInto but in the fast mode; mu held. Each ring a wake-up
// found is drained at once into the root Reader's stage (one call into C),
// then handed out record by record.
func (pr *Reader) readRings(rec *Record) error {
	for {
		if ok, err := pr.rd.TakeQueued((*perfbuf.Record)(rec)); ok {
			if err != nil {
				return pr.recordError(rec.CPU, err)
			}
			return nil
		}
		if pr.snapHead < len(pr.snap) {
			pr.popSnap(rec)
			return nil
		}
		if len(pr.pending) == 0 {
			if pe := pr.pendingErr; pe != nil {
				pr.pendingErr = nil
				return pe
			}
			pr.deadlineMu.Lock()
			deadline := pr.deadline
			pr.deadlineMu.Unlock()
			err := pr.poll.Wait(deadline, pr.maxDelay)
			all := true // every ring, the ones below their thresholds too
			switch {
			case err == os.ErrDeadlineExceeded:
				// Hand over what the rings hold first, as cilium does.
				pr.pendingErr = fmt.Errorf("epoll wait: %w", err)
			case err == ErrFlushed:
				pr.pendingErr = err
			case err == poller.ErrBound:
			case err == nil:
				all = false // the rings that woke the wait, as cilium reads
			default:
				return fmt.Errorf("epoll wait: %w", err)
			}
			if err := pr.readable(); err != nil {
				return err
			}
			if err := pr.load(all); err != nil {
				return err
			}
			continue
		}
		ring := pr.pending[len(pr.pending)-1]
		pr.pending = pr.pending[:len(pr.pending)-1]
		if _, err := pr.rd.DrainRing(ring); err != nil {
			return fmt.Errorf("perfbuf: reading CPU %d: %w", pr.cpus[ring], err)
		}
	}
}

// recordError is the error of a record the root Reader could not decode,
// as cilium's reader reports it (out of ReadInto's way: its errors.As
// target escapes).
func (pr *Reader) recordError(cpu int, err error) error {
	var rte *perfbuf.RecordTypeError
	if errors.As(err, &rte) {
		return &unknownEventError{rte.Type}
	}
	return fmt.Errorf("perfbuf: reading CPU %d: %w", cpu, err)
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

// load marks the rings to be read after a wake-up (those the wait found
// ready, or all): forward rings are drained ring by ring; an overwritable
// ring's records since the last read are taken at once, newest first, as
// cilium returns them.
func (pr *Reader) load(all bool) error {
	if !pr.overwritable {
		if !all {
			pr.pending = append(pr.pending, pr.poll.Ready()...)
			return nil
		}
		for i := range pr.cpus {
			pr.pending = append(pr.pending, i)
		}
		return nil
	}
	pr.snap, pr.snapHead = pr.snap[:0], 0
	for i := len(pr.cpus) - 1; i >= 0; i-- {
		start := len(pr.snap)
		var err error
		if pr.snap, err = pr.rd.Snapshot(i, pr.snap); err != nil {
			return fmt.Errorf("perfbuf: snapshot of CPU %d: %w", pr.cpus[i], err)
		}
		for j, k := start, len(pr.snap)-1; j < k; j, k = j+1, k-1 {
			pr.snap[j], pr.snap[k] = pr.snap[k], pr.snap[j]
		}
		for j := start; j < len(pr.snap); j++ {
			pr.snap[j].Remaining = -1
		}
	}
	return nil
}

// popSnap copies the next snapshot record into rec (reusing rec.RawSample).
func (pr *Reader) popSnap(rec *Record) {
	r := &pr.snap[pr.snapHead]
	pr.snapHead++
	rec.CPU, rec.LostSamples, rec.Remaining = r.CPU, r.LostSamples, r.Remaining
	if r.LostSamples > 0 {
		rec.RawSample = rec.RawSample[:0]
	} else {
		rec.RawSample = append(rec.RawSample[:0], r.RawSample...)
	}
}

// Pause stops the output into the rings by deleting the map's slots, as
// cilium/ebpf does: bpf_perf_event_output then returns -ENOENT and nothing
// is reported lost. Reads go on returning what the rings hold.
func (pr *Reader) Pause() error {
	if pr.fast {
		return pr.fastControl(pr.rd.Pause, true)
	}
	pr.pauseMu.Lock()
	defer pr.pauseMu.Unlock()
	if pr.closed {
		return fmt.Errorf("%w", ErrClosed)
	}
	for i, cpu := range pr.cpus {
		if err := pr.rd.SetMapSlot(i, false); err != nil && err != syscall.ENOENT {
			return fmt.Errorf("could't delete event fd for CPU %d: %w", cpu, err)
		}
	}
	pr.paused = true
	return nil
}

// Resume restores the map's slots after Pause.
func (pr *Reader) Resume() error {
	if pr.fast {
		return pr.fastControl(pr.rd.Resume, false)
	}
	pr.pauseMu.Lock()
	defer pr.pauseMu.Unlock()
	if pr.closed {
		return fmt.Errorf("%w", ErrClosed)
	}
	for i, cpu := range pr.cpus {
		if err := pr.rd.SetMapSlot(i, true); err != nil {
			return fmt.Errorf("couldn't put event fd for CPU %d: %w", cpu, err)
		}
	}
	pr.paused = false
	return nil
}

// Stats (not in cilium/ebpf) returns each ring's figures from libperfbuf:
// records, lost, wake-ups, and the fast mode's state (Batched,
// BatchSwitches).
func (pr *Reader) Stats() ([]perfbuf.RingStats, error) {
	pr.pauseMu.Lock()
	closed := pr.closed
	pr.pauseMu.Unlock()
	if closed {
		return nil, fmt.Errorf("%w", ErrClosed)
	}
	return pr.rd.Stats()
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
