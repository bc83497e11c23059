package perfbuf

// Exact lost counts and the final drain: a 1-page ring overflowed by a
// burst after which nothing is written, so the kernel never writes the
// LOST record that would report it.

import (
	"errors"
	"os"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/probe"
	"perfbuf.dev/perfbuf/internal/producer"
)

func needFormatLost(t *testing.T) {
	t.Helper()
	if !hasFormatLost() {
		needRoot(t, errors.New("counting lost records (PERF_FORMAT_LOST) needs Linux 6.0"))
	}
}

// readQueued reads what the Reader can deliver now (a past deadline
// drains the rings once): the samples' count and the lost reports.
func readQueued(t *testing.T, rd *Reader) (samples uint64, lost []Record) {
	t.Helper()
	rd.SetDeadline(time.Now())
	defer rd.SetDeadline(time.Time{})
	for {
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return samples, lost
		} else if err != nil {
			t.Fatal(err)
		}
		if rec.LostSamples > 0 {
			lost = append(lost, rec)
		} else {
			samples++
		}
	}
}

// burstOnCPU0 overflows CPU 0's 1-page ring and reads what it holds; it
// returns the samples delivered and the ring's figures.
func burstOnCPU0(t *testing.T, p *producer.Producer, rd *Reader) (uint64, RingStats) {
	t.Helper()
	if ret := emitEach(t, p, 0, 72, 3, 300); ret != -28 {
		t.Fatalf("ring did not fill: %d", ret)
	}
	samples, lost := readQueued(t, rd)
	if len(lost) != 0 {
		t.Fatalf("a lost report before any later record: %+v", lost)
	}
	return samples, cpu0Stats(t, rd)
}

func cpu0Stats(t *testing.T, rd *Reader) RingStats {
	t.Helper()
	stats, err := rd.Stats()
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range stats {
		if st.CPU == 0 {
			return st
		}
	}
	t.Fatal("no ring for CPU 0")
	return RingStats{}
}

func TestCountLostAndDrainFinal(t *testing.T) {
	needFormatLost(t)
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{CountLost: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	samples, st := burstOnCPU0(t, p, rd)
	missing := 300 - samples
	if missing == 0 || st.Lost != missing || st.LostUnreported != missing {
		t.Fatalf("before the final drain: lost %d (%d unreported), want %d", st.Lost, st.LostUnreported, missing)
	}
	n, err := rd.DrainFinal()
	if err != nil || n != missing {
		t.Fatalf("DrainFinal = %d, %v; want %d", n, err, missing)
	}
	if more, lost := readQueued(t, rd); more != 0 || len(lost) != 1 || lost[0].CPU != 0 || lost[0].LostSamples != missing {
		t.Fatalf("after DrainFinal: %d samples, lost reports %+v; want one of %d on CPU 0", more, lost, missing)
	}
	if n, err := rd.DrainFinal(); err != nil || n != 0 {
		t.Fatalf("a second DrainFinal = %d, %v; want 0 (reported once)", n, err)
	}
	// The LOST record the kernel writes with its next record adds nothing.
	if ret, err := p.Emit(0, 72, 4, 1); err != nil || ret != 0 {
		t.Fatalf("emit: %d %v", ret, err)
	}
	if more, lost := readQueued(t, rd); more != 1 || len(lost) != 0 {
		t.Fatalf("after a later record: %d samples, lost reports %+v; want 1 sample, no report", more, lost)
	}
	if st := cpu0Stats(t, rd); st.Lost != missing {
		t.Fatalf("lost %d after the LOST record, want %d", st.Lost, missing)
	}
}

func TestWithoutCountLostTheFiguresAreLibbpfs(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	samples, st := burstOnCPU0(t, p, rd)
	if st.Lost != 0 || st.LostUnreported != 0 {
		t.Fatalf("without CountLost: lost %d (%d unreported), want libbpf's 0", st.Lost, st.LostUnreported)
	}
	if n, err := rd.DrainFinal(); err != nil || n != 0 {
		t.Fatalf("DrainFinal = %d, %v; want 0", n, err)
	}
	if more, lost := readQueued(t, rd); more != 0 || len(lost) != 0 {
		t.Fatalf("after DrainFinal: %d samples, lost reports %+v; want nothing", more, lost)
	}
	p.Emit(0, 72, 4, 1)
	more, lost := readQueued(t, rd)
	if len(lost) != 1 || samples+more+lost[0].LostSamples != 301 {
		t.Fatalf("the kernel's LOST record: %+v, samples %d+%d; want one report adding up to 301", lost, samples, more)
	}
}

func TestEventReaderDrainFinal(t *testing.T) {
	needEvents(t)
	needFormatLost(t)
	onThread(func(tid int) {
		s, r := uprobeFlood(t, tid)
		if s == nil {
			return
		}
		defer s.Close()
		defer r.Close()
		count := func() (samples uint64, lost []EventSample) {
			for _, g := range drainNow(t, r) {
				if g.LostSamples > 0 {
					lost = append(lost, g)
				} else {
					samples++
				}
			}
			return samples, lost
		}
		samples, lost := count()
		missing := 3000 - samples
		stats, err := r.Stats()
		if err != nil || len(lost) != 0 || missing == 0 || stats[0].Lost != missing || stats[0].LostUnreported != missing {
			t.Errorf("before the final drain: %v, reports %+v, lost %d (%d unreported), want %d",
				err, lost, stats[0].Lost, stats[0].LostUnreported, missing)
			return
		}
		if n, err := r.DrainFinal(); err != nil || n != missing {
			t.Errorf("DrainFinal = %d, %v; want %d", n, err, missing)
		}
		if more, lost := count(); more != 0 || len(lost) != 1 || lost[0].CPU != 0 || lost[0].LostSamples != missing {
			t.Errorf("after DrainFinal: %d samples, reports %+v; want one of %d on CPU 0", more, lost, missing)
		}
		probe.Call(1) // the kernel writes its LOST record now
		if more, lost := count(); more != 1 || len(lost) != 0 {
			t.Errorf("after a later record: %d samples, reports %+v; want 1 sample, no report", more, lost)
		}
	})
}
