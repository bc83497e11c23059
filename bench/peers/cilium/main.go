// Command peer-cilium is the cilium/ebpf row of the benchmark: the reader
// of github.com/cilium/ebpf (perf.NewReader + ReadInto, its default
// per-record wake-ups) over the PERF_EVENT_ARRAY of the same C producer
// bench/perfbench.c uses (bench/peers/gopeer: c-tests/producer.c, driven
// by bench/peers/peer_producer.c on CPU 0), the reader on CPU 1. Prints one
// JSON line per row in perfbench's stream format. The ring buffer rows
// (mode "ringbuf") read the same producer shape written into a
// BPF_MAP_TYPE_RINGBUF with cilium's ringbuf.NewReader + ReadInto, as
// perfbench's ringbuf rows do with ring_buffer__poll.
//
// usage: peer-cilium [ROW_PREFIX]   (stream_full, stream_100k, ringbuf; default all)
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"perfbench/peers/gopeer"
)

const pages = 64 // per CPU, as perfbench's stream rows

type perfReader struct {
	rd  *perf.Reader
	rec perf.Record
}

func (p *perfReader) Next() (uint64, uint64, error) {
	err := p.rd.ReadInto(&p.rec)
	if errors.Is(err, perf.ErrClosed) {
		return 0, 0, gopeer.ErrClosed
	}
	if p.rec.LostSamples > 0 {
		return 0, p.rec.LostSamples, err
	}
	return 1, 0, err
}

func (p *perfReader) Close() error { return p.rd.Close() }

type ringReader struct {
	rd  *ringbuf.Reader
	rec ringbuf.Record
}

func (r *ringReader) Next() (uint64, uint64, error) {
	err := r.rd.ReadInto(&r.rec)
	if errors.Is(err, ringbuf.ErrClosed) {
		return 0, 0, gopeer.ErrClosed
	}
	return 1, 0, err
}

func (r *ringReader) Close() error { return r.rd.Close() }

func main() {
	// The reader is this goroutine, on its own OS thread, on CPU 1.
	only, fd := gopeer.Start()
	defer gopeer.CloseProducer()
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		gopeer.Fail("dup", err)
	}
	m, err := ebpf.NewMapFromFD(dup) // takes ownership of dup
	if err != nil {
		gopeer.Fail("ebpf.NewMapFromFD", err)
	}
	defer m.Close()
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
			gopeer.Fail("perf.NewReader", err)
		}
		r, err := gopeer.RunRow(&perfReader{rd: rd}, row.name, "cilium-ebpf", "default", "0.9.1", row.rate, 1.0)
		if err != nil {
			gopeer.Fail(row.name, err)
		}
		enc.Encode(r)
	}
	if strings.HasPrefix("ringbuf", only) {
		if err := ringbufRows(enc); err != nil {
			gopeer.Fail("ringbuf", err)
		}
	}
}

// ringbufRows: perfbench's ringbuf rows (2000, 64 and 1 records per call
// at full rate, and 100 k/s) read by cilium's ringbuf.Reader; a full ring
// fails the program's output, which it counts: reported as lost.
func ringbufRows(enc *json.Encoder) error {
	fd, err := gopeer.OpenRingbuf()
	if err != nil {
		return err
	}
	defer gopeer.CloseRingbuf()
	defer gopeer.SetTarget(false, 0)
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
		gopeer.SetTarget(true, row.perCall)
		rd, err := ringbuf.NewReader(m)
		if err != nil {
			return fmt.Errorf("ringbuf.NewReader: %w", err)
		}
		failed0 := gopeer.RingbufFailed()
		r, err := gopeer.RunRow(&ringReader{rd: rd}, row.name, "cilium-ebpf", "ringbuf", "0.9.1", row.rate, 1.0)
		if err != nil {
			return fmt.Errorf("%s: %w", row.name, err)
		}
		r.Lost = gopeer.RingbufFailed() - failed0
		enc.Encode(r)
	}
	return nil
}
