package perf

import (
	"bytes"
	"errors"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

// ReadBatch hands over every record in order per CPU, several per call,
// in the default mode and the fast one.
func TestReadBatch(t *testing.T) {
	for _, opts := range []ReaderOptions{{}, {Fast: true}} {
		p := openProducer(t)
		rd := newReader(t, p, 16*os.Getpagesize(), opts)
		const per = 150
		for i := 0; i < per; i++ {
			emit(t, p, 0, 40, byte(i), 1)
			emit(t, p, 1, 40, byte(100+i), 1)
		}
		rd.SetDeadline(time.Now().Add(10 * time.Second))
		recs := make([]Record, 64)
		next := map[int]int{}
		calls, most := 0, 0
		for got := 0; got < 2*per; {
			n, err := rd.ReadBatch(recs)
			if err != nil {
				t.Fatalf("%+v: after %d: %v", opts, got, err)
			}
			calls++
			if n > most {
				most = n
			}
			for _, rec := range recs[:n] {
				i := next[rec.CPU]
				next[rec.CPU]++
				if rec.LostSamples != 0 || !bytes.Equal(rec.RawSample[:40], producer.Expected(40, byte(rec.CPU*100+i))) {
					t.Fatalf("%+v: cpu %d record %d wrong", opts, rec.CPU, i)
				}
			}
			got += n
		}
		if most < 2 {
			t.Fatalf("%+v: %d calls for %d records, never more than one a call", opts, calls, 2*per)
		}
		// What a batch drained is not lost to ReadInto.
		emit(t, p, 0, 16, 7, 3)
		if n, err := rd.ReadBatch(recs[:1]); n != 1 || err != nil {
			t.Fatalf("%+v: %d %v", opts, n, err)
		}
		rd.SetDeadline(time.Now())
		if rest, err := readUntil(t, rd); len(rest) != 2 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%+v: after a one-record batch: %d records, %v", opts, len(rest), err)
		}
		rd.Close()
	}
}

// Streaming, with a producer writing while the reader reads, ReadInto and
// ReadBatch allocate nothing per record (the whole process is counted,
// the producer's few allocations per call of 1000 records included).
func TestStreamingAllocatesNothing(t *testing.T) {
	for _, c := range []struct {
		name  string
		opts  ReaderOptions
		batch int
	}{{"default", ReaderOptions{}, 0}, {"fast", ReaderOptions{Fast: true}, 0}, {"fast batch", ReaderOptions{Fast: true}, 64}} {
		p := openProducer(t)
		rd := newReader(t, p, 64*os.Getpagesize(), c.opts)
		// The producer writes until the reader has read what it wants: a
		// call that EINTR cuts short wrote a number nobody can count.
		const per = 1000
		done, stop := make(chan struct{}), make(chan struct{})
		var stopOnce sync.Once
		stopProducer := func() { stopOnce.Do(func() { close(stop) }); <-done }
		defer stopProducer() // also when a check below fails
		go func() {
			defer close(done)
			runtime.LockOSThread()
			for {
				select {
				case <-stop:
					return
				default:
					p.Emit(0, 64, 1, per)
				}
			}
		}()
		rec := Record{RawSample: make([]byte, 0, 128)}
		recs := make([]Record, c.batch)
		for i := range recs {
			recs[i].RawSample = make([]byte, 0, 128)
		}
		// Warm: the first records grow the stage.
		rd.SetDeadline(time.Now().Add(10 * time.Second))
		if err := rd.ReadInto(&rec); err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		// Records lost (a reader slowed down, by the race detector say)
		// count as read.
		count := func(r *Record) int {
			if r.LostSamples > 0 {
				return int(r.LostSamples)
			}
			return 1
		}
		n := 0
		for n < 10000 {
			if c.batch == 0 {
				if err := rd.ReadInto(&rec); err != nil {
					t.Fatalf("%s: after %d: %v", c.name, n, err)
				}
				n += count(&rec)
				continue
			}
			got, err := rd.ReadBatch(recs)
			if err != nil {
				t.Fatalf("%s: after %d: %v", c.name, n, err)
			}
			for i := range recs[:got] {
				n += count(&recs[i])
			}
		}
		runtime.ReadMemStats(&after)
		stopProducer()
		if per := float64(after.Mallocs-before.Mallocs) / float64(n); per > 0.01 {
			t.Fatalf("%s: %.3f allocations per record over %d records", c.name, per, n)
		}
		rd.Close()
	}
}

// PERFBUF_ADAPTIVE=1 turns the fast mode on where the options allow it:
// its Pause is the kernel's (BPF gets -ENOSPC, not -ENOENT).
func TestAdaptiveFromTheEnvironment(t *testing.T) {
	p := openProducer(t)
	t.Setenv("PERFBUF_ADAPTIVE", "1")
	for _, c := range []struct {
		opts ReaderOptions
		want int
	}{{ReaderOptions{}, enospc}, {ReaderOptions{WakeupEvents: 4}, enoent}} {
		rd := newReader(t, p, os.Getpagesize(), c.opts)
		if err := rd.Pause(); err != nil {
			t.Fatal(err)
		}
		if ret, _ := p.Emit(0, 16, 1, 1); ret != c.want {
			t.Fatalf("%+v: output while paused: %d, want %d", c.opts, ret, c.want)
		}
		rd.Close()
	}
	t.Setenv("PERFBUF_ADAPTIVE", "yes")
	if _, err := NewReader(fdMap(p.MapFD()), os.Getpagesize()); err == nil {
		t.Fatal("PERFBUF_ADAPTIVE=yes accepted")
	}
}

// The drain idiom takes a backlog larger than one batch read holds (4096
// records): every record, then os.ErrDeadlineExceeded.
func TestDrainIdiomTakesAWholeBacklog(t *testing.T) {
	for _, opts := range []ReaderOptions{{}, {Fast: true}} {
		p := openProducer(t)
		rd := newReader(t, p, 64*os.Getpagesize(), opts)
		const n = 6000
		emit(t, p, 0, 16, 3, n)
		rd.SetDeadline(time.Now())
		recs, err := readUntil(t, rd)
		if !errors.Is(err, os.ErrDeadlineExceeded) || len(recs) != n {
			t.Fatalf("%+v: %d of %d records, then %v", opts, len(recs), n, err)
		}
		rd.Close()
	}
}
