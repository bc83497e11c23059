//go:build cgo

package ringbuf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

type fdMap int

func (m fdMap) FD() int { return int(m) }

func openRing(t *testing.T, size int) (*producer.RingProducer, *Reader) {
	t.Helper()
	p, err := producer.OpenRing(size)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("need root with BPF: %v", err) // under CI, never a skip
		}
		t.Skipf("need root with BPF: %v", err)
	}
	t.Cleanup(p.Close)
	rd, err := NewReader(fdMap(p.MapFD()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return p, rd
}

func emit(t *testing.T, p *producer.RingProducer, n int, seed byte, repeat int) {
	t.Helper()
	if ret, err := p.Emit(0, n, seed, repeat); err != nil || ret != 0 {
		t.Fatalf("emit: %d %v", ret, err)
	}
}

func TestRecordsInOrderWithRemaining(t *testing.T) {
	p, rd := openRing(t, 4*os.Getpagesize())
	if rd.BufferSize() != 4*os.Getpagesize() {
		t.Fatalf("BufferSize %d", rd.BufferSize())
	}
	sizes := []int{8, 13, 64, 100}
	for i, n := range sizes {
		emit(t, p, n, byte(i), 1)
	}
	left := 0
	for _, n := range sizes {
		left += 8 + (n+7)&^7
	}
	for i, n := range sizes {
		rec, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.RawSample, producer.Expected(n, byte(i))) {
			t.Fatalf("record %d: %x", i, rec.RawSample)
		}
		left -= 8 + (n+7)&^7
		if rec.Remaining != left {
			t.Fatalf("record %d: Remaining %d, want %d", i, rec.Remaining, left)
		}
	}
}

func TestDiscardedAndNoWakeupRecords(t *testing.T) {
	p, rd := openRing(t, os.Getpagesize())
	for i, op := range []int{producer.RingReserveSubmit, producer.RingReserveDiscard, producer.RingOutput} {
		if ret, err := p.Ctl(0, op, producer.RingNoWakeup, uint64(100+i)); err != nil || ret != 0 {
			t.Fatalf("ctl: %d %v", ret, err)
		}
	}
	// Written without a wake-up: the records are there all the same.
	rd.SetDeadline(time.Now().Add(time.Second))
	var got []uint64
	for {
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.RawSample) != 16 {
			t.Fatalf("record of %d bytes", len(rec.RawSample))
		}
		got = append(got, binary.LittleEndian.Uint64(rec.RawSample))
	}
	if len(got) != 2 || got[0] != 100 || got[1] != 102 {
		t.Fatalf("records %v, want [100 102]", got)
	}
}

func TestPastDeadlineDrainsThenErrors(t *testing.T) {
	p, rd := openRing(t, os.Getpagesize())
	emit(t, p, 16, 1, 3)
	rd.SetDeadline(time.Now().Add(-time.Second))
	for i := 0; i < 3; i++ {
		if _, err := rd.Read(); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	start := time.Now()
	if _, err := rd.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after the records: %v, want os.ErrDeadlineExceeded", err)
	}
	if time.Since(start) > 500*time.Millisecond {
		t.Fatal("a past deadline blocked")
	}
	rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
	start = time.Now()
	if _, err := rd.Read(); !errors.Is(err, os.ErrDeadlineExceeded) || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("future deadline: %v after %v", err, time.Since(start))
	}
	rd.SetDeadline(time.Time{})
	emit(t, p, 16, 2, 1)
	if _, err := rd.Read(); err != nil {
		t.Fatalf("no deadline: %v", err)
	}
}

func TestFlush(t *testing.T) {
	p, rd := openRing(t, os.Getpagesize())
	emit(t, p, 24, 3, 2)
	if err := rd.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := rd.Read(); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
	}
	if _, err := rd.Read(); !errors.Is(err, ErrFlushed) {
		t.Fatalf("after the records: %v, want ErrFlushed", err)
	}
	// A Flush unblocks a waiting Read.
	done := make(chan error, 1)
	go func() { _, err := rd.Read(); done <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := rd.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrFlushed) {
			t.Fatalf("blocked Read: %v, want ErrFlushed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Flush did not unblock Read")
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	_, rd := openRing(t, os.Getpagesize())
	done := make(chan error, 1)
	go func() { _, err := rd.Read(); done <- err }()
	time.Sleep(20 * time.Millisecond)
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked Read: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not unblock Read")
	}
	if _, err := rd.Read(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if err := rd.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := rd.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
}

func TestWrongMap(t *testing.T) {
	p, err := producer.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := NewReader(fdMap(p.MapFD())); err == nil || err.Error() != "invalid Map type: BPF_MAP_TYPE_PERF_EVENT_ARRAY" {
		t.Fatalf("perf event array: %v", err)
	}
	if _, err := NewReader(fdMap(0)); err == nil {
		t.Fatal("stdin accepted")
	}
	if _, err := NewReader(nil); err == nil {
		t.Fatal("nil map accepted")
	}
}

func TestReadIntoGrowsAndReuses(t *testing.T) {
	p, rd := openRing(t, 16*os.Getpagesize())
	rec := Record{RawSample: make([]byte, 0, 8)}
	emit(t, p, 200, 4, 1)
	if err := rd.ReadInto(&rec); err != nil || !bytes.Equal(rec.RawSample, producer.Expected(200, 4)) {
		t.Fatalf("grown: %v %x", err, rec.RawSample)
	}
	buf := &rec.RawSample[:1][0]
	emit(t, p, 64, 5, 1)
	if err := rd.ReadInto(&rec); err != nil || !bytes.Equal(rec.RawSample, producer.Expected(64, 5)) {
		t.Fatalf("reused: %v %x", err, rec.RawSample)
	}
	if &rec.RawSample[:1][0] != buf {
		t.Fatal("RawSample not reused")
	}
	const batch = 100
	emit(t, p, 64, 6, 2*batch) // AllocsPerRun runs the function once more to warm up
	allocs := testing.AllocsPerRun(1, func() {
		for i := 0; i < batch; i++ {
			if err := rd.ReadInto(&rec); err != nil {
				t.Fatal(err)
			}
		}
	})
	if allocs/batch >= 0.05 {
		t.Fatalf("%.2f allocations per record in ReadInto's steady state", allocs/batch)
	}
}
