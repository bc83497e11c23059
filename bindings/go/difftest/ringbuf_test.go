package difftest

import (
	"encoding/hex"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	cilium "github.com/cilium/ebpf/ringbuf"

	"perfbuf.dev/perfbuf/internal/producer"
	perfbuf "perfbuf.dev/perfbuf/ringbuf"
)

// ringReader is what cilium/ebpf 0.9.1's ringbuf.Reader and
// perfbuf.dev/perfbuf/ringbuf's share.
type ringReader interface {
	Read() (string, error)
	ReadInto(buf []byte) (string, []byte, error)
	Close() error
}

type ciliumRing struct{ *cilium.Reader }

func (r ciliumRing) Read() (string, error) {
	rec, err := r.Reader.Read()
	return string(rec.RawSample), err
}

func (r ciliumRing) ReadInto(buf []byte) (string, []byte, error) {
	rec := cilium.Record{RawSample: buf}
	err := r.Reader.ReadInto(&rec)
	return string(rec.RawSample), rec.RawSample, err
}

type perfbufRing struct{ *perfbuf.Reader }

func (r perfbufRing) Read() (string, error) {
	rec, err := r.Reader.Read()
	return string(rec.RawSample), err
}

func (r perfbufRing) ReadInto(buf []byte) (string, []byte, error) {
	rec := perfbuf.Record{RawSample: buf}
	err := r.Reader.ReadInto(&rec)
	return string(rec.RawSample), rec.RawSample, err
}

var ringImpls = []struct {
	name string
	open func(m *ebpf.Map) (ringReader, error)
}{
	{"cilium", func(m *ebpf.Map) (ringReader, error) {
		rd, err := cilium.NewReader(m)
		if err != nil {
			return nil, err
		}
		return ciliumRing{rd}, nil
	}},
	{"perfbuf", func(m *ebpf.Map) (ringReader, error) {
		rd, err := perfbuf.NewReader(m)
		if err != nil {
			return nil, err
		}
		return perfbufRing{rd}, nil
	}},
}

func openRingProducer(t *testing.T, size int) (*producer.RingProducer, *ebpf.Map) {
	t.Helper()
	p, err := producer.OpenRing(size)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("need root with BPF: %v", err)
		}
		t.Skipf("need root with BPF: %v", err)
	}
	t.Cleanup(p.Close)
	fd, err := dup(p.MapFD())
	if err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMapFromFD(fd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return p, m
}

// ringScenario runs one scenario through both readers, each with its own
// producer, and returns the transcripts, which must be equal.
func ringScenario(t *testing.T, size int, run func(t *testing.T, p *producer.RingProducer, m *ebpf.Map, open func(*ebpf.Map) (ringReader, error)) []string) {
	t.Helper()
	var transcripts [][]string
	for _, impl := range ringImpls {
		p, m := openRingProducer(t, size)
		transcripts = append(transcripts, run(t, p, m, impl.open))
	}
	a, b := strings.Join(transcripts[0], "\n"), strings.Join(transcripts[1], "\n")
	if a != b {
		t.Fatalf("transcripts differ:\n--- cilium\n%s\n--- perfbuf\n%s", a, b)
	}
	if len(transcripts[0]) == 0 {
		t.Fatal("empty transcript")
	}
	t.Logf("%d lines alike, e.g. %q", len(transcripts[0]), transcripts[0][0])
}

func errText(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, os.ErrClosed):
		return "ErrClosed"
	}
	return "error"
}

// Records of every size and way of writing (output, reserve and submit,
// reserve and discard, with and without wake-ups), read one by one: the
// same bytes in the same order, discarded ones never seen.
func TestRingbufRecords(t *testing.T) {
	ringScenario(t, 8*os.Getpagesize(), func(t *testing.T, p *producer.RingProducer, m *ebpf.Map, open func(*ebpf.Map) (ringReader, error)) []string {
		rd, err := open(m)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		var lines []string
		want := 0
		for i, n := range []int{8, 9, 15, 16, 17, 64, 255, 1000} {
			ret, err := p.Emit(i%2, n, byte(i), 2)
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, "emit "+strconv.Itoa(n)+" -> "+strconv.Itoa(ret))
			want += 2
		}
		ops := []int{producer.RingOutput, producer.RingReserveSubmit, producer.RingReserveDiscard}
		for i := 0; i < 9; i++ {
			flags := uint(0)
			if i%2 == 1 {
				flags = producer.RingForceWakeup
			}
			op := ops[i%3]
			ret, err := p.Ctl(0, op, flags, uint64(1000+i))
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, "ctl "+strconv.Itoa(op)+" -> "+strconv.Itoa(ret))
			if op != producer.RingReserveDiscard {
				want++
			}
		}
		for i := 0; i < want; i++ {
			s, err := rd.Read()
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, "record "+strconv.Itoa(len(s))+" "+hex.EncodeToString([]byte(s)))
		}
		return lines
	})
}

// A full ring: BPF's output fails alike (the reader does not change what
// the kernel returns), and the records that fitted are read.
func TestRingbufFull(t *testing.T) {
	ringScenario(t, os.Getpagesize(), func(t *testing.T, p *producer.RingProducer, m *ebpf.Map, open func(*ebpf.Map) (ringReader, error)) []string {
		rd, err := open(m)
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		var lines []string
		fitted := 0
		for i := 0; ; i++ {
			ret, err := p.Emit(0, 200, byte(i), 1)
			if err != nil {
				t.Fatal(err)
			}
			if ret != 0 {
				lines = append(lines, "full after "+strconv.Itoa(fitted)+": "+strconv.Itoa(ret))
				break
			}
			fitted++
		}
		got := 0
		buf := []byte(nil)
		for got < fitted {
			s, b, err := rd.ReadInto(buf)
			if err != nil {
				t.Fatal(err)
			}
			buf = b
			lines = append(lines, "record "+hex.EncodeToString([]byte(s[:8])))
			got++
		}
		ret, _ := p.Emit(0, 200, 0, 1)
		lines = append(lines, "after reading: "+strconv.Itoa(ret))
		return lines
	})
}

// Close interrupts a blocked Read; later Reads fail with ErrClosed; a
// second Close returns nil. The map object closed before the reader does
// not stop it.
func TestRingbufClose(t *testing.T) {
	ringScenario(t, os.Getpagesize(), func(t *testing.T, p *producer.RingProducer, m *ebpf.Map, open func(*ebpf.Map) (ringReader, error)) []string {
		rd, err := open(m)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		m.Close()
		if _, err := p.Emit(0, 32, 7, 1); err != nil {
			t.Fatal(err)
		}
		s, err := rd.Read()
		lines = append(lines, "after the map's Close: "+strconv.Itoa(len(s))+" "+errText(err))
		done := make(chan error, 1)
		go func() { _, err := rd.Read(); done <- err }()
		time.Sleep(30 * time.Millisecond)
		lines = append(lines, "Close: "+errText(rd.Close()))
		select {
		case err := <-done:
			lines = append(lines, "blocked Read: "+errText(err))
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not interrupt Read")
		}
		_, err = rd.Read()
		lines = append(lines, "Read after Close: "+errText(err))
		lines = append(lines, "second Close: "+errText(rd.Close()))
		return lines
	})
}

// NewReader on a map of another type fails in both, naming the type.
func TestRingbufWrongMap(t *testing.T) {
	p := openProducer(t)
	m := producerMap(t, p)
	for _, impl := range ringImpls {
		_, err := impl.open(m)
		if err == nil || !strings.HasPrefix(err.Error(), "invalid Map type: ") {
			t.Fatalf("%s: %v", impl.name, err)
		}
		t.Logf("%s: %v", impl.name, err)
	}
}
