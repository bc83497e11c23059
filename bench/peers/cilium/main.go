// Command peer-cilium is the cilium/ebpf row of the benchmark: the reader
// of github.com/cilium/ebpf (perf.NewReader + ReadInto, its default
// per-record wake-ups) over the PERF_EVENT_ARRAY of the same C producer
// bench/perfbench.c uses (c-tests/producer.c, driven by
// bench/peers/peer_producer.c on CPU 0), the reader on CPU 1. Prints one
// JSON line per row in perfbench's stream format. The ring buffer rows
// (mode "ringbuf") read the same producer shape written into a
// BPF_MAP_TYPE_RINGBUF with cilium's ringbuf.NewReader + ReadInto, as
// perfbench's ringbuf rows do with ring_buffer__poll.
//
// usage: peer-cilium [ROW_PREFIX]   (stream_full, stream_100k, ringbuf; default all)
package main

/*
#cgo CFLAGS: -O2 -std=gnu11
#include "../../../c-tests/producer.c"
#include "../peer_producer.c"
*/
import "C"

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

const pages = 64 // per CPU, as perfbench's stream rows

type result struct {
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
}

func processCPUNs() float64 {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano() + ru.Stime.Nano())
}

// reader is what a row reads with: perf.Reader or ringbuf.Reader. next
// returns the records lost it reports, or errClosed once closed.
type reader interface {
	next() (lost uint64, err error)
	Close() error
}

var errClosed = errors.New("closed")

type perfReader struct {
	rd  *perf.Reader
	rec perf.Record
}

func (p *perfReader) next() (uint64, error) {
	err := p.rd.ReadInto(&p.rec)
	if errors.Is(err, perf.ErrClosed) {
		return 0, errClosed
	}
	return p.rec.LostSamples, err
}

func (p *perfReader) Close() error { return p.rd.Close() }

type ringReader struct {
	rd  *ringbuf.Reader
	rec ringbuf.Record
}

func (r *ringReader) next() (uint64, error) {
	err := r.rd.ReadInto(&r.rec)
	if errors.Is(err, ringbuf.ErrClosed) {
		return 0, errClosed
	}
	return 0, err
}

func (r *ringReader) Close() error { return r.rd.Close() }

func runRow(rd reader, row string, rate uint, seconds float64) (*result, error) {
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
	// no timeout in 0.9.1). records/s is over the time from the producer's
	// start to the last change of the count seen here, checked every 1 ms,
	// as perfbench counts to its last poll that delivered records.
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
		l, err := rd.next()
		if errors.Is(err, errClosed) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ReadInto: %w", err)
		}
		if l > 0 {
			lost += l
		} else {
			atomic.AddUint64(&delivered, 1)
		}
	}
	cpu := float64(C.peer_thread_cpu_ns()) - cpu0
	other := processCPUNs() - proc0 - cpu - prodCPU
	wall := endNs - t0
	r := &result{Row: row, Lib: "cilium-ebpf", Mode: "default", Version: "0.9.1", Produced: produced,
		Delivered: delivered, Lost: lost, RecordsPerS: float64(delivered) / (wall / 1e9),
		ReaderCPUMs: cpu / 1e6, OtherCPUMs: other / 1e6, WallMs: (closeNs - t0) / 1e6}
	if delivered > 0 {
		r.ReaderCPUNsPerRc = cpu / float64(delivered)
	}
	return r, nil
}

func main() {
	only := ""
	if len(os.Args) > 1 {
		only = os.Args[1]
	}
	// The reader is this goroutine, on its own OS thread, on CPU 1.
	runtime.LockOSThread()
	fd := int(C.peer_producer_open())
	if fd < 0 {
		fmt.Fprintf(os.Stderr, "cannot create the BPF producer: %v\n", syscall.Errno(-fd))
		os.Exit(1)
	}
	defer C.peer_producer_close()
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dup:", err)
		os.Exit(1)
	}
	m, err := ebpf.NewMapFromFD(dup) // takes ownership of dup
	if err != nil {
		fmt.Fprintln(os.Stderr, "ebpf.NewMapFromFD:", err)
		os.Exit(1)
	}
	defer m.Close()
	C.peer_pin(1)
	rows := []struct {
		name string
		rate uint
	}{{"stream_full", 0}, {"stream_100k", 100000}}
	enc := json.NewEncoder(os.Stdout)
	for _, row := range rows {
		if !strings.HasPrefix(row.name, only) {
			continue
		}
		rd, err := perf.NewReader(m, pages*os.Getpagesize())
		if err != nil {
			fmt.Fprintln(os.Stderr, "perf.NewReader:", err)
			os.Exit(1)
		}
		r, err := runRow(&perfReader{rd: rd}, row.name, row.rate, 1.0)
		if err != nil {
			fmt.Fprintln(os.Stderr, row.name+":", err)
			os.Exit(1)
		}
		enc.Encode(r)
	}
	if strings.HasPrefix("ringbuf", only) {
		if err := ringbufRows(enc); err != nil {
			fmt.Fprintln(os.Stderr, "ringbuf:", err)
			os.Exit(1)
		}
	}
}

// ringbufRows: perfbench's ringbuf rows (2000, 64 and 1 records per call
// at full rate, and 100 k/s) read by cilium's ringbuf.Reader; a full ring
// fails the program's output, which it counts: reported as lost.
func ringbufRows(enc *json.Encoder) error {
	fd := int(C.peer_ringbuf_open())
	if fd < 0 {
		return fmt.Errorf("cannot create the BPF ring buffer producer: %v", syscall.Errno(-fd))
	}
	defer C.peer_ringbuf_close()
	defer C.peer_set_target(0, 0)
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("dup: %w", err)
	}
	m, err := ebpf.NewMapFromFD(dup)
	if err != nil {
		return fmt.Errorf("ebpf.NewMapFromFD: %w", err)
	}
	defer m.Close()
	rows := []struct {
		name          string
		rate, perCall uint
	}{{"stream_full", 0, 2000}, {"stream_100k", 100000, 0}, {"stream_full_c64", 0, 64}, {"stream_full_c1", 0, 1}}
	for _, row := range rows {
		C.peer_set_target(1, C.uint(row.perCall))
		rd, err := ringbuf.NewReader(m)
		if err != nil {
			return fmt.Errorf("ringbuf.NewReader: %w", err)
		}
		failed0 := uint64(C.peer_ringbuf_failed())
		r, err := runRow(&ringReader{rd: rd}, row.name, row.rate, 1.0)
		if err != nil {
			return fmt.Errorf("%s: %w", row.name, err)
		}
		r.Mode = "ringbuf"
		r.Lost = uint64(C.peer_ringbuf_failed()) - failed0
		enc.Encode(r)
	}
	return nil
}
