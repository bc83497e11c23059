package perfbuf

import (
	"bytes"
	"encoding/binary"
	"os"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

func TestCPUSubset(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{CPUs: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if cpus, err := rd.Rings(); err != nil || len(cpus) != 1 || cpus[0] != 1 {
		t.Fatalf("Rings: %v %v", cpus, err)
	}
	if ret, _ := p.Emit(0, 16, 1, 1); ret != -2 {
		t.Fatalf("CPU 0 has a slot: bpf_perf_event_output returned %d", ret)
	}
	if ret, _ := p.Emit(1, 16, 2, 1); ret != 0 {
		t.Fatalf("CPU 1: %d", ret)
	}
	rd.SetDeadline(time.Now().Add(5 * time.Second))
	rec, err := rd.Read()
	if err != nil || rec.CPU != 1 || !bytes.Equal(rec.RawSample[:16], producer.Expected(16, 2)) {
		t.Fatalf("%+v %v", rec, err)
	}
}

func TestStats(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), 2*os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	p.Emit(0, 24, 1, 5)
	rd.SetDeadline(time.Now())
	for {
		if _, err := rd.Read(); err != nil {
			break
		}
	}
	stats, err := rd.Stats()
	if err != nil {
		t.Fatal(err)
	}
	cpus, _ := rd.Rings()
	for i, st := range stats {
		want := uint64(0)
		if cpus[i] == 0 {
			want = 5
		}
		if st.CPU != cpus[i] || st.Records != want || st.Bytes != want*40 || st.DataSize != uint64(rd.BufferSize()) || st.PendingBytes != 0 {
			t.Fatalf("ring %d: %+v", i, st)
		}
	}
}

func TestRawRingAccess(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	cpus, _ := rd.Rings()
	idx := -1
	for i, c := range cpus {
		if c == 1 {
			idx = i
		}
	}
	for i := 0; i < 3; i++ {
		p.Emit(1, 16, byte(i), 1)
	}
	var buf []byte
	for i := 0; i < 3; i++ {
		for again := 0; again < 2; again++ { // Peek does not consume
			buf, err = rd.Peek(idx, buf)
			if err != nil || len(buf) != 32 || binary.LittleEndian.Uint32(buf[0:]) != 9 ||
				!bytes.Equal(buf[12:28], producer.Expected(16, byte(i))) {
				t.Fatalf("record %d: %x %v", i, buf, err)
			}
		}
		if err := rd.Advance(idx); err != nil {
			t.Fatal(err)
		}
	}
	if buf, err := rd.Peek(idx, buf); buf != nil || err != nil {
		t.Fatalf("after the last record: %x %v", buf, err)
	}
	before, _ := rd.Stats()
	if err := rd.Publish(idx); err != nil {
		t.Fatal(err)
	}
	after, _ := rd.Stats()
	if before[idx].PendingBytes != 96 || after[idx].PendingBytes != 0 {
		t.Fatalf("pending before Publish %d, after %d", before[idx].PendingBytes, after[idx].PendingBytes)
	}
	if _, err := rd.Peek(99, nil); err == nil {
		t.Fatal("a bad index accepted")
	}
}
