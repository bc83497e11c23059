// Package gopeer is what the Go peer readers of the benchmark share: the
// producer perfbench.c uses (c-tests/producer.c driven by
// bench/peers/peer_producer.c on CPU 0) and the row loop, which reads
// until the producer has stopped and measures records/s and the reader's
// CPU per record. Each peer brings its reader.
package gopeer

/*
#cgo CFLAGS: -O2 -std=gnu11
#include "../../../c-tests/producer.c"
#include "../peer_producer.c"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
)

// Result is one JSON line in perfbench's stream format.
type Result struct {
	Row              string  `json:"row"`
	Lib              string  `json:"lib"`
	Mode             string  `json:"mode"`
	Version          string  `json:"version"`
	Produced         uint64  `json:"produced"`
	Delivered        uint64  `json:"delivered"`
	Lost             uint64  `json:"lost"`
	RecordsPerS      float64 `json:"records_per_s"`
	ReaderCPUNsPerRc float64 `json:"reader_cpu_ns_per_record"`
	ReaderCPUMs      float64 `json:"reader_cpu_ms"`
	OtherCPUMs       float64 `json:"other_threads_cpu_ms"`
	WallMs           float64 `json:"wall_ms"`
	// The fast mode's switches to batched wake-ups (readers that have one).
	BatchSwitches *uint64 `json:"batch_switches,omitempty"`
}

// Reader is what a row reads with. Next blocks until it has records: the
// number of samples, and the records lost it reports; ErrClosed once the
// row closed it.
type Reader interface {
	Next() (samples, lost uint64, err error)
	Close() error
}

// ErrClosed is what Next returns once closed.
var ErrClosed = errors.New("closed")

// OpenProducer creates the producer; it returns the PERF_EVENT_ARRAY's fd.
func OpenProducer() (int, error) {
	fd := int(C.peer_producer_open())
	if fd < 0 {
		return -1, fmt.Errorf("cannot create the BPF producer: %w", syscall.Errno(-fd))
	}
	return fd, nil
}

// CloseProducer releases it.
func CloseProducer() { C.peer_producer_close() }

// OpenRingbuf creates the ring buffer producer; it returns its map fd.
func OpenRingbuf() (int, error) {
	fd := int(C.peer_ringbuf_open())
	if fd < 0 {
		return -1, fmt.Errorf("cannot create the BPF ring buffer producer: %w", syscall.Errno(-fd))
	}
	return fd, nil
}

// CloseRingbuf releases it.
func CloseRingbuf() { C.peer_ringbuf_close() }

// RingbufFailed is how many bpf_ringbuf_output calls failed so far.
func RingbufFailed() uint64 { return uint64(C.peer_ringbuf_failed()) }

// SetTarget: where the producer writes (ringbuf false: the perf event
// array) and how many records per call at full rate (0: 2000).
func SetTarget(ringbuf bool, perCall uint) {
	rb := C.int(0)
	if ringbuf {
		rb = 1
	}
	C.peer_set_target(rb, C.uint(perCall))
}

// Start is a peer's beginning: the row prefix it was given (os.Args[1],
// "" for all), the calling goroutine locked to its OS thread pinned to CPU
// 1 (the reader's), and the producer's map fd; CloseProducer releases it.
// It exits the program on failure.
func Start() (only string, mapFD int) {
	if len(os.Args) > 1 {
		only = os.Args[1]
	}
	runtime.LockOSThread()
	fd, err := OpenProducer()
	if err != nil {
		Fail("producer", err)
	}
	C.peer_pin(1)
	return only, fd
}

// Fail reports what failed and exits.
func Fail(what string, err error) {
	fmt.Fprintln(os.Stderr, what+":", err)
	os.Exit(1)
}

func processCPUNs() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano() + ru.Stime.Nano())
}

// RunRow produces for `seconds` at `rate` records/s (0: full rate) on CPU
// 0 while rd reads on the calling thread, then closes rd and measures.
func RunRow(rd Reader, row, lib, mode, version string, rate uint, seconds float64) (*Result, error) {
	var delivered, lost, produced uint64
	var prodCPU float64
	var done C.int
	finished := make(chan struct{})
	var endNs, closeNs float64

	proc0 := processCPUNs()
	cpu0, t0 := float64(C.peer_thread_cpu_ns()), float64(C.peer_now_ns())
	go func() {
		runtime.LockOSThread()
		c0 := float64(C.peer_thread_cpu_ns())
		produced = uint64(C.peer_produce(C.double(seconds), C.uint(rate), 64, &done))
		prodCPU = float64(C.peer_thread_cpu_ns()) - c0
		close(finished)
	}()
	// Once the producer has stopped and nothing new arrived for 10 ms,
	// close the reader: that ends the blocking read loop below (Read has
	// no timeout in cilium 0.9.1). records/s is over the time from the
	// producer's start to the last change of the count seen here, checked
	// every 1 ms, as perfbench counts to its last poll that delivered
	// records.
	go func() {
		<-finished
		last, lastNs, quiet := atomic.LoadUint64(&delivered), float64(C.peer_now_ns()), 0
		for quiet < 10 {
			time.Sleep(time.Millisecond)
			if n := atomic.LoadUint64(&delivered); n != last {
				last, lastNs, quiet = n, float64(C.peer_now_ns()), 0
			} else {
				quiet++
			}
		}
		endNs, closeNs = lastNs, float64(C.peer_now_ns())
		rd.Close()
	}()

	for {
		n, l, err := rd.Next()
		if errors.Is(err, ErrClosed) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		lost += l
		atomic.AddUint64(&delivered, n)
	}
	cpu := float64(C.peer_thread_cpu_ns()) - cpu0
	other := processCPUNs() - proc0 - cpu - prodCPU
	wall := endNs - t0
	r := &Result{Row: row, Lib: lib, Mode: mode, Version: version, Produced: produced,
		Delivered: delivered, Lost: lost, RecordsPerS: float64(delivered) / (wall / 1e9),
		ReaderCPUMs: cpu / 1e6, OtherCPUMs: other / 1e6, WallMs: (closeNs - t0) / 1e6}
	if delivered > 0 {
		r.ReaderCPUNsPerRc = cpu / float64(delivered)
	}
	return r, nil
}
