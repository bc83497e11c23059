// Command peer-perfbuf-go is the perfbuf.dev/perfbuf/perf row of the
// benchmark: cilium/ebpf's perf API over libperfbuf (the import line is
// the only change from bench/peers/cilium) on the same producer, the
// reader on CPU 1. Three modes: "default" (NewReader + ReadInto, per-record
// wake-ups as cilium), "fast" (ReaderOptions{Fast: true} + ReadInto) and
// "batch" (Fast + ReadBatch, 256 records per call). One JSON line per row
// in perfbench's stream format, with the fast mode's batch switches.
//
// usage: peer-perfbuf-go [ROW_PREFIX]   (stream_full, stream_100k; default all)
package main

import (
	"encoding/json"
	"errors"
	"os"
	"strings"

	"perfbench/peers/gopeer"
	"perfbuf.dev/perfbuf/perf"
)

const pages = 64 // per CPU, as perfbench's stream rows

type fdMap int

func (m fdMap) FD() int { return int(m) }

// reader reads one record (ReadInto) or up to len(recs) (ReadBatch).
type reader struct {
	rd       *perf.Reader
	rec      perf.Record
	recs     []perf.Record
	switches uint64
}

func (r *reader) Next() (uint64, uint64, error) {
	if r.recs == nil {
		err := r.rd.ReadInto(&r.rec)
		if errors.Is(err, perf.ErrClosed) {
			return 0, 0, gopeer.ErrClosed
		}
		if r.rec.LostSamples > 0 {
			return 0, r.rec.LostSamples, err
		}
		return 1, 0, err
	}
	n, err := r.rd.ReadBatch(r.recs)
	if errors.Is(err, perf.ErrClosed) {
		return 0, 0, gopeer.ErrClosed
	}
	var samples, lost uint64
	for _, rec := range r.recs[:n] {
		if rec.LostSamples > 0 {
			lost += rec.LostSamples
		} else {
			samples++
		}
	}
	return samples, lost, err
}

// Close takes the fast mode's figures first (the row ends with Close).
func (r *reader) Close() error {
	if st, err := r.rd.Stats(); err == nil {
		for _, s := range st {
			r.switches += s.BatchSwitches
		}
	}
	return r.rd.Close()
}

func main() {
	// The reader is this goroutine, on its own OS thread, on CPU 1.
	only, fd := gopeer.Start()
	defer gopeer.CloseProducer()
	enc := json.NewEncoder(os.Stdout)
	for _, row := range []struct {
		name string
		rate uint
	}{{"stream_full", 0}, {"stream_100k", 100000}} {
		if !strings.HasPrefix(row.name, only) {
			continue
		}
		for _, mode := range []string{"default", "fast", "batch"} {
			rd, err := perf.NewReaderWithOptions(fdMap(fd), pages*os.Getpagesize(), perf.ReaderOptions{Fast: mode != "default"})
			if err != nil {
				gopeer.Fail("perf.NewReaderWithOptions", err)
			}
			r := &reader{rd: rd}
			if mode == "batch" {
				r.recs = make([]perf.Record, 256)
			}
			res, err := gopeer.RunRow(r, row.name, "perfbuf-go", mode, "", row.rate, 1.0)
			if err != nil {
				gopeer.Fail(row.name+" "+mode, err)
			}
			if mode != "default" {
				res.BatchSwitches = &r.switches
			}
			enc.Encode(res)
		}
	}
}
