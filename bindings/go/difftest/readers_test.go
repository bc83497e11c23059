package difftest

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	cilium "github.com/cilium/ebpf/perf"

	"perfbuf.dev/perfbuf/internal/producer"
	perfbuf "perfbuf.dev/perfbuf/perf"
)

// record is what a program sees of a Record in both packages.
type record struct {
	CPU  int
	Raw  string
	Lost uint64
}

// reader is the API both packages share.
type reader interface {
	Read() (record, error)
	Close() error
	Pause() error
	Resume() error
}

type impl struct {
	name string
	open func(t *testing.T, p *producer.Producer, size, watermark int) (reader, error)
}

var impls = []impl{
	{"cilium", openCilium},
	{"perfbuf", openPerfbuf},
}

type ciliumReader struct{ *cilium.Reader }

func (r ciliumReader) Read() (record, error) {
	rec, err := r.Reader.Read()
	return record{rec.CPU, string(rec.RawSample), rec.LostSamples}, err
}

type perfbufReader struct{ *perfbuf.Reader }

func (r perfbufReader) Read() (record, error) {
	rec, err := r.Reader.Read()
	return record{rec.CPU, string(rec.RawSample), rec.LostSamples}, err
}

// producerMap is the producer's map as a cilium *ebpf.Map (on a duplicate
// of its fd, which the map object owns).
func producerMap(t *testing.T, p *producer.Producer) *ebpf.Map {
	t.Helper()
	fd, err := dup(p.MapFD())
	if err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMapFromFD(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func ciliumNew(m *ebpf.Map, size int) (*cilium.Reader, error)   { return cilium.NewReader(m, size) }
func ciliumRecord(buf []byte) *cilium.Record                    { return &cilium.Record{RawSample: buf} }
func perfbufNew(m *ebpf.Map, size int) (*perfbuf.Reader, error) { return perfbuf.NewReader(m, size) }
func perfbufRecord(buf []byte) *perfbuf.Record                  { return &perfbuf.Record{RawSample: buf} }

func openCilium(t *testing.T, p *producer.Producer, size, watermark int) (reader, error) {
	rd, err := cilium.NewReaderWithOptions(producerMap(t, p), size, cilium.ReaderOptions{Watermark: watermark})
	if err != nil {
		return nil, err
	}
	return ciliumReader{rd}, nil
}

// The same *ebpf.Map goes to perfbuf's reader: the only change a program
// makes is the import line.
func openPerfbuf(t *testing.T, p *producer.Producer, size, watermark int) (reader, error) {
	rd, err := perfbuf.NewReaderWithOptions(producerMap(t, p), size, perfbuf.ReaderOptions{Watermark: watermark})
	if err != nil {
		return nil, err
	}
	return perfbufReader{rd}, nil
}

func openProducer(t *testing.T) *producer.Producer {
	t.Helper()
	p, err := producer.Open()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("need root with BPF: %v", err) // under CI, never a skip
		}
		t.Skipf("need root with BPF: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

type result struct {
	rec record
	err error
}

// reading runs Read in a goroutine until it fails; the channel gets every
// result, the failure last.
func reading(rd reader) <-chan result {
	out := make(chan result, 4096)
	go func() {
		defer close(out)
		for {
			rec, err := rd.Read()
			out <- result{rec, err}
			if err != nil {
				return
			}
		}
	}()
	return out
}

// take waits for n records (a generous bound only catches a hang).
func take(t *testing.T, got <-chan result, n int) []record {
	t.Helper()
	var recs []record
	for len(recs) < n {
		select {
		case r, ok := <-got:
			if !ok || r.err != nil {
				t.Fatalf("after %d records: %v", len(recs), r.err)
			}
			recs = append(recs, r.rec)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d records after 10s", len(recs), n)
		}
	}
	return recs
}

// quiet reports a result arriving within d (a program would see it).
func quiet(got <-chan result, d time.Duration) (result, bool) {
	select {
	case r := <-got:
		return r, false
	case <-time.After(d):
		return result{}, true
	}
}

// closeAndEnd closes rd and returns what the blocked Read returned.
func closeAndEnd(t *testing.T, rd reader, got <-chan result) error {
	t.Helper()
	if err := rd.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case r := <-got:
		if r.err == nil {
			t.Fatalf("a record after Close: %+v", r.rec)
		}
		return r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not interrupt Read")
	}
	return nil
}

// perCPU splits records by CPU, keeping each CPU's order (the order across
// CPUs is not part of either package's contract).
func perCPU(recs []record) map[int][]record {
	out := map[int][]record{}
	for _, r := range recs {
		out[r.CPU] = append(out[r.CPU], r)
	}
	return out
}

func errClass(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, os.ErrClosed):
		return "ErrClosed"
	default:
		return "other: " + err.Error()
	}
}
