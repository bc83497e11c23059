package perfbuf

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

func openProducer(t *testing.T) *producer.Producer {
	t.Helper()
	p, err := producer.Open()
	if err != nil {
		needRoot(t, err)
	}
	t.Cleanup(p.Close)
	return p
}

// needRoot skips a test the machine cannot run (fails it under CI=true).
func needRoot(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("need root with BPF: %v", err) // under CI, never a skip
	}
	t.Skipf("need root with BPF: %v", err)
}

// waitInPoll returns once a Read holds the rings (the goroutine inside
// poll holds rings.mu), so that what follows acts on a blocked Read; a
// generous deadline only catches a Read that never started.
func waitInPoll(t *testing.T, r *rings) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); r.mu.TryLock(); {
		r.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatal("no Read blocked within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}

// emitEach writes count records of n bytes on cpu one BPF_PROG_TEST_RUN
// at a time and returns the last helper result. A run with repeat > 1
// fails with EINTR when a signal reaches the thread midway (the Go
// runtime's own), after writes nobody can count; a single run is never
// interrupted.
func emitEach(t *testing.T, p *producer.Producer, cpu, n int, seed byte, count int) int {
	t.Helper()
	ret := 0
	for i := 0; i < count; i++ {
		var err error
		if ret, err = p.Emit(cpu, n, seed, 1); err != nil {
			t.Fatal(err)
		}
	}
	return ret
}

func padded(n int) int { return (n+4+7)/8*8 - 4 }

func TestRecordsBytesSizesAndCPUs(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), 8*os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	sizes := []int{8, 15, 64, 100, 1000}
	for cpu := 0; cpu < 2; cpu++ {
		for i, n := range sizes {
			if ret, err := p.Emit(cpu, n, byte(cpu*50+i), 1); err != nil || ret != 0 {
				t.Fatalf("emit: %d %v", ret, err)
			}
		}
	}
	next := map[int]int{}
	for got := 0; got < 2*len(sizes); got++ {
		rd.SetDeadline(time.Now().Add(2 * time.Second))
		rec, err := rd.Read()
		if err != nil {
			t.Fatal(err)
		}
		i := next[rec.CPU]
		next[rec.CPU]++
		n := sizes[i]
		if len(rec.RawSample) != padded(n) || !bytes.Equal(rec.RawSample[:n], producer.Expected(n, byte(rec.CPU*50+i))) {
			t.Fatalf("cpu %d record %d: %d bytes, wrong content", rec.CPU, i, len(rec.RawSample))
		}
	}
	if next[0] != len(sizes) || next[1] != len(sizes) {
		t.Fatalf("per cpu: %v", next)
	}
}

func TestLostSamplesAddUp(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if ret := emitEach(t, p, 0, 72, 1, 300); ret != -28 {
		t.Fatalf("ring did not fill: %d", ret)
	}
	var delivered, lost uint64
	// Emit writes synchronously: a past deadline drains exactly what the
	// ring holds, with no wait.
	drain := func() {
		rd.SetDeadline(time.Now())
		for {
			rec, err := rd.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return
			} else if err != nil {
				t.Fatal(err)
			}
			if rec.LostSamples > 0 {
				lost += rec.LostSamples
			} else {
				delivered++
			}
		}
	}
	drain()
	p.Emit(0, 72, 2, 1)
	drain()
	if lost == 0 || delivered+lost != 301 {
		t.Fatalf("delivered %d + lost %d != 301", delivered, lost)
	}
}

func TestCloseUnblocksRead(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() {
		_, err := rd.Read()
		done <- err
	}()
	waitInPoll(t, &rd.rings)
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Read returned %v", err)
		}
	case <-time.After(10 * time.Second): // only a hang takes this long
		t.Fatal("Read still blocked 10s after Close")
	}
	if _, err := p.Emit(0, 8, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := rd.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
}

// Close may run while other goroutines call SetDeadline, Pause and Resume:
// none of them may reach libperfbuf once the buffer is freed (run under
// -race, an unguarded read of the buffer pointer is reported).
func TestCloseDuringControls(t *testing.T) {
	p := openProducer(t)
	for round := 0; round < 50; round++ {
		rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan error, 3)
		go func() {
			_, err := rd.Read()
			done <- err
		}()
		for _, control := range []func(){
			func() { rd.SetDeadline(time.Now().Add(time.Hour)) },
			func() { _ = rd.Pause(); _ = rd.Resume() },
		} {
			control := control
			go func() {
				for {
					select {
					case <-stop:
						done <- nil
						return
					default:
						control()
					}
				}
			}()
		}
		// Jitter, not synchronisation: Close lands at a different point
		// of the controls' loops each round; any point must be safe.
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		if err := rd.Close(); err != nil {
			t.Fatal(err)
		}
		close(stop)
		for i := 0; i < 3; i++ {
			if err := <-done; err != nil && !errors.Is(err, ErrClosed) {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if err := rd.Pause(); !errors.Is(err, ErrClosed) {
			t.Fatalf("Pause after Close: %v", err)
		}
	}
}

func TestPauseResume(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), 2*os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	// A Read blocked in another goroutine must not keep Pause waiting.
	got := make(chan Record, 8)
	go func() {
		for {
			rec, err := rd.Read()
			if err != nil {
				return
			}
			got <- rec
		}
	}()
	waitInPoll(t, &rd.rings)
	if err := rd.Pause(); err != nil {
		t.Fatal(err)
	}
	if ret, _ := p.Emit(0, 16, 1, 5); ret != -28 {
		t.Fatalf("write while paused: %d", ret)
	}
	if err := rd.Resume(); err != nil {
		t.Fatal(err)
	}
	p.Emit(0, 16, 2, 1)
	var recs [2]Record
	for i := range recs {
		select {
		case recs[i] = <-got:
		case <-time.After(10 * time.Second): // only a hang takes this long
			t.Fatalf("after resume: record %d not read within 10s", i)
		}
	}
	first, second := recs[0], recs[1]
	if first.LostSamples != 5 || second.LostSamples != 0 || !bytes.Equal(second.RawSample[:16], producer.Expected(16, 2)) {
		t.Fatalf("after resume: %+v then %+v", first, second)
	}
}

func TestDeadline(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	start := time.Now()
	rd.SetDeadline(start.Add(50 * time.Millisecond))
	if _, err := rd.Read(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read: %v", err)
	}
	// Never before the deadline; the upper bound only catches a deadline
	// that was ignored (a hang), it measures no speed.
	if d := time.Since(start); d < 50*time.Millisecond || d > 10*time.Second {
		t.Fatalf("deadline after %v", d)
	}
}

func TestBatchedWakeupsDeliverWithinMaxDelay(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), 4*os.Getpagesize(), ReaderOptions{WakeupEvents: 64, MaxDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	p.Emit(1, 24, 9, 3)
	readPartialBatch(t, rd, 1, 9, 3)
}

func TestBadArguments(t *testing.T) {
	if _, err := NewReader(-1, os.Getpagesize(), ReaderOptions{}); err == nil {
		t.Fatal("bad fd accepted")
	}
	if _, err := NewReader(0, 0, ReaderOptions{}); err == nil {
		t.Fatal("zero size accepted")
	}
}

// cilium's drain idiom: SetDeadline(time.Now()), then Read until
// os.ErrDeadlineExceeded, returns every record still in the rings first,
// also records that never woke the reader (below WakeupEvents).
func TestPastDeadlineDrainsTheRings(t *testing.T) {
	p := openProducer(t)
	for _, opts := range []ReaderOptions{{}, {WakeupEvents: 64, MaxDelay: time.Minute}} {
		rd, err := NewReader(p.MapFD(), 4*os.Getpagesize(), opts)
		if err != nil {
			t.Fatal(err)
		}
		for cpu := 0; cpu < 2; cpu++ {
			if ret, err := p.Emit(cpu, 16, byte(cpu), 5); err != nil || ret != 0 {
				t.Fatalf("emit: %d %v", ret, err)
			}
		}
		rd.SetDeadline(time.Now())
		per := map[int]int{}
		for {
			rec, err := rd.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rec.RawSample[:16], producer.Expected(16, byte(rec.CPU))) {
				t.Fatalf("%+v: cpu %d: wrong content", opts, rec.CPU)
			}
			per[rec.CPU]++
		}
		if per[0] != 5 || per[1] != 5 {
			t.Fatalf("%+v: drained %v, want 5 per CPU", opts, per)
		}
		rd.Close()
	}
}

// ReadInto reuses the Record's buffer and the queue's: nothing is
// allocated per record in a steady state.
func TestReadIntoAllocatesNothing(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), 16*os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rec := Record{RawSample: make([]byte, 0, 128)}
	rd.SetDeadline(time.Now().Add(10 * time.Second))
	// Warm the queue's buffers up with a first burst.
	emitEach(t, p, 0, 64, 5, 200)
	for i := 0; i < 200; i++ {
		if err := rd.ReadInto(&rec); err != nil {
			t.Fatal(err)
		}
	}
	emitEach(t, p, 0, 64, 6, 300)
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
	if !bytes.Equal(rec.RawSample[:64], producer.Expected(64, 6)) {
		t.Fatal("wrong content")
	}
}

// A drain that was cut short by a new, later deadline drains again when
// that one passes.
func TestDrainAgainAfterANewDeadline(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), 4*os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	p.Emit(0, 16, 1, 2)
	rd.SetDeadline(time.Now())
	if _, err := rd.Read(); err != nil { // the drain has started
		t.Fatal(err)
	}
	rd.SetDeadline(time.Now().Add(time.Hour))
	if _, err := rd.Read(); err != nil { // the second record, queued
		t.Fatal(err)
	}
	p.Emit(0, 16, 3, 1)
	if _, err := rd.Read(); err != nil { // polled for, before the deadline
		t.Fatal(err)
	}
	p.Emit(1, 16, 2, 3)
	rd.SetDeadline(time.Now())
	n := 0
	for ; ; n++ {
		if _, err := rd.Read(); errors.Is(err, os.ErrDeadlineExceeded) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if n != 3 {
		t.Fatalf("the second drain returned %d records", n)
	}
}
