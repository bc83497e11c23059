package perf

import (
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"

	"perfbuf.dev/perfbuf/internal/producer"
)

// The reader's cost per record while a BPF program streams 64-byte samples
// on CPU 0 as fast as BPF_PROG_TEST_RUN runs it (needs root):
//
//	go test -run - -bench . perfbuf.dev/perfbuf/perf
//
// ns/op is wall time per record read; reader-cpu-ns/op the reading
// thread's CPU time per record; lost/op the records the kernel could not
// write for want of room; batch-switches the fast mode's switches to
// batched wake-ups (0: it never engaged). Compare with cilium/ebpf's
// ReadInto by the same loop (bench/peers reads both on one producer).
func BenchmarkReadInto(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchRead(b, ReaderOptions{}, 0) })
	b.Run("fast", func(b *testing.B) { benchRead(b, ReaderOptions{Fast: true}, 0) })
}

// BenchmarkReadBatch is ReadBatch with 256 records per call.
func BenchmarkReadBatch(b *testing.B) {
	b.Run("default", func(b *testing.B) { benchRead(b, ReaderOptions{}, 256) })
	b.Run("fast", func(b *testing.B) { benchRead(b, ReaderOptions{Fast: true}, 256) })
}

func benchRead(b *testing.B, opts ReaderOptions, batch int) {
	p, err := producer.Open()
	if err != nil {
		b.Skipf("need root with BPF: %v", err)
	}
	defer p.Close()
	rd, err := NewReaderWithOptions(fdMap(p.MapFD()), 64*os.Getpagesize(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer rd.Close()
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		for !stop.Load() {
			p.Emit(0, 64, 1, 64) // EINTR midway only shortens a call
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rec := Record{RawSample: make([]byte, 0, 128)}
	recs := make([]Record, batch)
	for i := range recs {
		recs[i].RawSample = make([]byte, 0, 128)
	}
	var lost uint64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := threadCPUNs()
	for n := 0; n < b.N; {
		if batch == 0 {
			if err := rd.ReadInto(&rec); err != nil {
				b.Fatal(err)
			}
			lost += rec.LostSamples
			n++
			continue
		}
		got, err := rd.ReadBatch(recs)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range recs[:got] {
			lost += r.LostSamples
		}
		n += got
	}
	cpu := threadCPUNs() - cpu0
	b.StopTimer()
	stop.Store(true)
	<-done
	b.ReportMetric(float64(cpu)/float64(b.N), "reader-cpu-ns/op")
	b.ReportMetric(float64(lost)/float64(b.N), "lost/op")
	if st, err := rd.Stats(); err == nil {
		var switches uint64
		for _, s := range st {
			switches += s.BatchSwitches
		}
		b.ReportMetric(float64(switches), "batch-switches")
	}
}

func threadCPUNs() int64 {
	var ru syscall.Rusage
	const rusageThread = 1
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
