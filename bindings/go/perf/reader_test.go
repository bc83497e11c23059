package perf

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

// fdMap is a map as the reader sees it: anything with FD() int.
type fdMap int

func (m fdMap) FD() int { return int(m) }

const enoent, enospc = -2, -28

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

// waitInRead returns once a ReadInto holds the reader (it holds mu across
// its waits), so that what follows acts on a blocked Read; a generous
// deadline only catches a Read that never started.
func waitInRead(t *testing.T, rd *Reader) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); rd.mu.TryLock(); {
		rd.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no Read blocked within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

func newReader(t *testing.T, p *producer.Producer, size int, opts ReaderOptions) *Reader {
	t.Helper()
	rd, err := NewReaderWithOptions(fdMap(p.MapFD()), size, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return rd
}

// emit writes repeat records, one BPF_PROG_TEST_RUN each: a run with
// repeat > 1 fails with EINTR when a signal reaches the thread midway (the
// Go runtime's own), after writes nobody can count; a single run is never
// interrupted.
func emit(t *testing.T, p *producer.Producer, cpu, n int, seed byte, repeat int) {
	t.Helper()
	for i := 0; i < repeat; i++ {
		if ret, err := p.Emit(cpu, n, seed, 1); err != nil || ret != 0 {
			t.Fatalf("emit on cpu %d: %d %v", cpu, ret, err)
		}
	}
}

// readUntil reads until an error, which it returns with the records.
func readUntil(t *testing.T, rd *Reader) ([]Record, error) {
	t.Helper()
	var recs []Record
	for {
		rec, err := rd.Read()
		if err != nil {
			return recs, err
		}
		recs = append(recs, rec)
		if len(recs) > 100000 {
			t.Fatal("no end to the records")
		}
	}
}

func TestRecordsInOrderPerCPUWithRemaining(t *testing.T) {
	p := openProducer(t)
	rd := newReader(t, p, 4*os.Getpagesize(), ReaderOptions{})
	for cpu := 0; cpu < 2; cpu++ {
		for i := 0; i < 5; i++ {
			emit(t, p, cpu, 20+i, byte(cpu*10+i), 1)
		}
	}
	rd.SetDeadline(time.Now().Add(2 * time.Second))
	next := map[int]int{}
	for got := 0; got < 10; got++ {
		rec, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		i := next[rec.CPU]
		next[rec.CPU]++
		n := 20 + i
		if len(rec.RawSample) < n || len(rec.RawSample) > n+7 || !bytes.Equal(rec.RawSample[:n], producer.Expected(n, byte(rec.CPU*10+i))) {
			t.Fatalf("cpu %d record %d: %d bytes, wrong content", rec.CPU, i, len(rec.RawSample))
		}
		// Remaining: the CPU's later records are still in its ring.
		if i < 4 && rec.Remaining <= 0 || i == 4 && rec.Remaining != 0 {
			t.Fatalf("cpu %d record %d: Remaining %d", rec.CPU, i, rec.Remaining)
		}
	}
	if rd.BufferSize() != 4*os.Getpagesize() {
		t.Fatalf("BufferSize %d", rd.BufferSize())
	}
}

// The drain idiom: every record, then os.ErrDeadlineExceeded, also for
// records below the wake-up thresholds.
func TestPastDeadlineDrains(t *testing.T) {
	p := openProducer(t)
	for _, opts := range []ReaderOptions{{}, {WakeupEvents: 50}, {Watermark: 2048}} {
		rd := newReader(t, p, 4*os.Getpagesize(), opts)
		emit(t, p, 0, 16, 1, 3)
		emit(t, p, 1, 16, 2, 4)
		rd.SetDeadline(time.Now())
		recs, err := readUntil(t, rd)
		if !errors.Is(err, os.ErrDeadlineExceeded) || len(recs) != 7 {
			t.Fatalf("%+v: %d records, then %v", opts, len(recs), err)
		}
		// Again: nothing left, the deadline at once.
		if recs, err := readUntil(t, rd); !errors.Is(err, os.ErrDeadlineExceeded) || len(recs) != 0 {
			t.Fatalf("%+v: second drain: %d records, %v", opts, len(recs), err)
		}
		rd.Close()
	}
}

type result struct {
	rec Record
	err error
}

func reading(rd *Reader) <-chan result {
	out := make(chan result, 1000)
	go func() {
		for {
			rec, err := rd.Read()
			out <- result{rec, err}
			if errors.Is(err, ErrClosed) {
				close(out)
				return
			}
		}
	}()
	return out
}

// Records below the watermark wait for Flush (libperfbuf's own delay
// bound does not hand them over); Flush returns them, then ErrFlushed
// once.
func TestWatermarkHoldsUntilFlush(t *testing.T) {
	p := openProducer(t)
	rd := newReader(t, p, 4*os.Getpagesize(), ReaderOptions{Watermark: 4096})
	got := reading(rd)
	emit(t, p, 0, 16, 3, 4)
	// Nothing must arrive: an observation window, not a speed assertion (a
	// record handed over early would be here long before it ends).
	select {
	case r := <-got:
		t.Fatalf("below the watermark, Read returned %+v", r)
	case <-time.After(300 * time.Millisecond):
	}
	if err := rd.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if r := <-got; r.err != nil || !bytes.Equal(r.rec.RawSample[:16], producer.Expected(16, 3)) {
			t.Fatalf("record %d after Flush: %+v", i, r)
		}
	}
	if r := <-got; !errors.Is(r.err, ErrFlushed) {
		t.Fatalf("after the records: %+v", r)
	}
	// Nothing more must arrive: an observation window, not a speed assertion.
	select {
	case r := <-got:
		t.Fatalf("a second result for one Flush: %+v", r)
	case <-time.After(100 * time.Millisecond):
	}
	rd.Close()
	if r := <-got; !errors.Is(r.err, ErrClosed) {
		t.Fatalf("after Close: %+v", r)
	}
}

func TestFlushWithEmptyRings(t *testing.T) {
	p := openProducer(t)
	rd := newReader(t, p, os.Getpagesize(), ReaderOptions{})
	if err := rd.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Read(); !errors.Is(err, ErrFlushed) {
		t.Fatalf("Read: %v", err)
	}
	rd.SetDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := rd.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("second Read: %v", err)
	}
}

func TestMaxDelayHandsOverBelowWakeupEvents(t *testing.T) {
	p := openProducer(t)
	rd := newReader(t, p, 4*os.Getpagesize(), ReaderOptions{WakeupEvents: 64, MaxDelay: 10 * time.Millisecond})
	emit(t, p, 1, 24, 9, 3)
	got := reading(rd)
	for i := 0; i < 3; i++ {
		select {
		case r := <-got:
			if r.err != nil || r.rec.CPU != 1 {
				t.Fatalf("record %d: %+v", i, r)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("MaxDelay did not hand the records over")
		}
	}
}

func TestPauseDeletesTheMapSlots(t *testing.T) {
	p := openProducer(t)
	rd := newReader(t, p, os.Getpagesize(), ReaderOptions{})
	got := reading(rd) // a blocked Read must not keep Pause waiting
	if err := rd.Pause(); err != nil {
		t.Fatal(err)
	}
	if ret, _ := p.Emit(0, 16, 1, 3); ret != enoent {
		t.Fatalf("bpf_perf_event_output while paused: %d, want -ENOENT", ret)
	}
	if err := rd.Resume(); err != nil {
		t.Fatal(err)
	}
	emit(t, p, 0, 16, 2, 1)
	r := <-got
	if r.err != nil || r.rec.LostSamples != 0 || !bytes.Equal(r.rec.RawSample[:16], producer.Expected(16, 2)) {
		t.Fatalf("after Resume: %+v (nothing is lost while paused)", r)
	}
}

func TestOverwritableMustBePaused(t *testing.T) {
	p := openProducer(t)
	rd := newReader(t, p, os.Getpagesize(), ReaderOptions{Overwritable: true})
	if _, err := rd.Read(); err == nil || err.Error() != errMustBePaused.Error() {
		t.Fatalf("unpaused Read: %v", err)
	}
	// 200 records of 32 bytes overwrite a 4 KiB ring: the newest are kept.
	for i := 0; i < 200; i++ {
		emit(t, p, 0, 32, byte(i), 1)
	}
	if err := rd.Pause(); err != nil {
		t.Fatal(err)
	}
	rd.SetDeadline(time.Now())
	recs, err := readUntil(t, rd)
	if !errors.Is(err, os.ErrDeadlineExceeded) || len(recs) < 50 || len(recs) >= 200 {
		t.Fatalf("%d records, then %v", len(recs), err)
	}
	for i, rec := range recs {
		if want := byte(199 - i); rec.CPU != 0 || rec.Remaining != -1 || !bytes.Equal(rec.RawSample[:32], producer.Expected(32, want)) {
			t.Fatalf("record %d (newest first): cpu %d remaining %d, not seed %d", i, rec.CPU, rec.Remaining, want)
		}
	}
	if err := rd.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := rd.Read(); err != errMustBePaused {
		t.Fatalf("Read after Resume: %v", err)
	}
}

func TestOptionErrors(t *testing.T) {
	p := openProducer(t)
	page := os.Getpagesize()
	for _, c := range []struct {
		size int
		opts ReaderOptions
	}{
		{0, ReaderOptions{}},
		{page, ReaderOptions{WakeupEvents: 1, Watermark: 1}},
		{page, ReaderOptions{Watermark: page}},
	} {
		if rd, err := NewReaderWithOptions(fdMap(p.MapFD()), c.size, c.opts); err == nil {
			rd.Close()
			t.Fatalf("%d %+v accepted", c.size, c.opts)
		}
	}
	if _, err := NewReader(nil, page); err == nil {
		t.Fatal("nil map accepted")
	}
	if _, err := NewReader(fdMap(-1), page); err == nil {
		t.Fatal("fd -1 accepted")
	}
}

func TestCloseSemantics(t *testing.T) {
	p := openProducer(t)
	rd := newReader(t, p, os.Getpagesize(), ReaderOptions{})
	got := reading(rd)
	waitInRead(t, rd)
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if !errors.Is(r.err, ErrClosed) {
			t.Fatalf("blocked Read: %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not interrupt Read")
	}
	if _, err := rd.Read(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if err := rd.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := rd.Pause(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Pause after Close: %v", err)
	}
	if err := rd.Resume(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Resume after Close: %v", err)
	}
	if err := rd.Flush(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Flush after Close: %v", err)
	}
	// The slots keep the closed rings' events, as cilium's Close leaves them.
	if ret, _ := p.Emit(0, 8, 0, 1); ret != enospc {
		t.Fatalf("bpf_perf_event_output after Close: %d, want -ENOSPC", ret)
	}
}

func TestReadIntoAllocatesNothing(t *testing.T) {
	p := openProducer(t)
	rd := newReader(t, p, 16*os.Getpagesize(), ReaderOptions{})
	emit(t, p, 0, 64, 5, 300)
	rec := Record{RawSample: make([]byte, 0, 128)}
	var failed error
	allocs := testing.AllocsPerRun(200, func() {
		if err := rd.ReadInto(&rec); err != nil && failed == nil {
			failed = err
		}
	})
	if failed != nil {
		t.Fatal(failed)
	}
	if allocs != 0 {
		t.Fatalf("ReadInto allocates %v times per record", allocs)
	}
	if !bytes.Equal(rec.RawSample[:64], producer.Expected(64, 5)) {
		t.Fatal("wrong content")
	}
}

func TestIsUnknownEvent(t *testing.T) {
	if !IsUnknownEvent(&unknownEventError{42}) || IsUnknownEvent(ErrFlushed) {
		t.Fatal("IsUnknownEvent")
	}
}
