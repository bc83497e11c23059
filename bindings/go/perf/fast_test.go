package perf

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

// The fast mode behind cilium's API: every record in order per CPU, the
// drain idiom, Flush, Close; Pause through the kernel (writes reported lost).
func TestFastMode(t *testing.T) {
	p := openProducer(t)
	if _, err := NewReaderWithOptions(fdMap(p.MapFD()), os.Getpagesize(), ReaderOptions{Fast: true, WakeupEvents: 4}); err == nil {
		t.Fatal("Fast with WakeupEvents accepted")
	}
	// 64 pages hold all 3000 records: a stalled reader loses none.
	rd := newReader(t, p, 64*os.Getpagesize(), ReaderOptions{Fast: true})
	const n = 3000
	done := make(chan error, 1)
	go func() {
		for i := 0; i < n; i += 100 {
			if ret, err := p.Emit(i/100%2, 64, byte(i/100), 100); err != nil || ret != 0 {
				done <- errors.New("emit failed")
				return
			}
		}
		done <- nil
	}()
	rd.SetDeadline(time.Now().Add(20 * time.Second))
	next := map[int]int{}
	for got := 0; got < n; got++ {
		rec, err := rd.Read()
		if err != nil {
			t.Fatalf("after %d: %v", got, err)
		}
		if rec.LostSamples > 0 {
			t.Fatalf("lost %d", rec.LostSamples)
		}
		batch := next[rec.CPU] / 100 * 2
		if rec.CPU == 1 {
			batch++
		}
		if !bytes.Equal(rec.RawSample[:64], producer.Expected(64, byte(batch))) {
			t.Fatalf("cpu %d record %d out of order", rec.CPU, next[rec.CPU])
		}
		next[rec.CPU]++
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	emit(t, p, 0, 16, 7, 5)
	rd.SetDeadline(time.Now())
	if recs, err := readUntil(t, rd); !errors.Is(err, os.ErrDeadlineExceeded) || len(recs) != 5 {
		t.Fatalf("drain: %d records, %v", len(recs), err)
	}
	rd.SetDeadline(time.Time{})
	if err := rd.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Read(); !errors.Is(err, ErrFlushed) {
		t.Fatalf("after Flush: %v", err)
	}

	got := reading(rd)
	if err := rd.Pause(); err != nil {
		t.Fatal(err)
	}
	if ret, _ := p.Emit(0, 16, 1, 3); ret != enospc {
		t.Fatalf("write while paused: %d", ret)
	}
	if err := rd.Resume(); err != nil {
		t.Fatal(err)
	}
	emit(t, p, 0, 16, 2, 1)
	if r := <-got; r.err != nil || r.rec.LostSamples != 3 {
		t.Fatalf("after Resume: %+v", r)
	}
	if r := <-got; r.err != nil || !bytes.Equal(r.rec.RawSample[:16], producer.Expected(16, 2)) {
		t.Fatalf("after the lost record: %+v", r)
	}
	rd.Close()
	select {
	case r := <-got:
		if !errors.Is(r.err, ErrClosed) {
			t.Fatalf("after Close: %+v", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not interrupt Read")
	}
}
