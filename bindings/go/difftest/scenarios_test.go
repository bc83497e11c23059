package difftest

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

// compare runs scenario with each package, on a producer (and map) of its
// own, and fails unless both observed the same; check validates the
// observation itself (so that two equal failures do not pass).
func compare(t *testing.T, scenario func(*testing.T, *producer.Producer, impl) interface{}, check func(interface{}) error) {
	t.Helper()
	var seen []interface{}
	for _, im := range impls {
		p := openProducer(t)
		obs := scenario(t, p, im)
		if err := check(obs); err != nil {
			t.Errorf("%s: %v\nobserved: %+v", im.name, err, obs)
		}
		seen = append(seen, obs)
	}
	if !reflect.DeepEqual(seen[0], seen[1]) {
		t.Fatalf("the packages differ:\n%s: %+v\n%s: %+v", impls[0].name, seen[0], impls[1].name, seen[1])
	}
}

func emit(t *testing.T, p *producer.Producer, cpu, n int, seed byte, repeat int) int {
	t.Helper()
	// One BPF_PROG_TEST_RUN per record: a run with repeat > 1 fails with
	// EINTR when a signal reaches the thread midway (the Go runtime's own),
	// after writes nobody can count; a single run is never interrupted.
	ret := 0
	for i := 0; i < repeat; i++ {
		var err error
		if ret, err = p.Emit(cpu, n, seed, 1); err != nil {
			t.Fatal(err)
		}
	}
	return ret
}

func expected(n int, seed byte) string { return string(producer.Expected(n, seed)) }

// padded is the sample's bytes as the kernel pads them (the size field
// counts them, so both packages return them).
func hasPrefix(r record, n int, seed byte) bool {
	return len(r.Raw) >= n && len(r.Raw) <= n+7 && strings.HasPrefix(r.Raw, expected(n, seed))
}

type recordsObs struct {
	Rets   []int
	PerCPU map[int][]record
	Extra  bool
	End    string
}

func TestRecordsAndOrderPerCPU(t *testing.T) {
	sizes := []int{8, 9, 15, 64, 100, 1000, 1500}
	compare(t, func(t *testing.T, p *producer.Producer, im impl) interface{} {
		rd, err := im.open(t, p, 4*os.Getpagesize(), 0)
		if err != nil {
			t.Fatal(err)
		}
		got := reading(rd)
		var o recordsObs
		for i, n := range sizes {
			for cpu := 0; cpu < 2; cpu++ {
				o.Rets = append(o.Rets, emit(t, p, cpu, n, byte(cpu*64+i), 1))
			}
		}
		o.PerCPU = perCPU(take(t, got, 2*len(sizes)))
		// No record beyond those: an observation window, not a speed
		// assertion (an extra record would be in the ring already).
		_, q := quiet(got, 100*time.Millisecond)
		o.Extra = !q
		o.End = errClass(closeAndEnd(t, rd, got))
		return o
	}, func(v interface{}) error {
		o := v.(recordsObs)
		for cpu := 0; cpu < 2; cpu++ {
			if len(o.PerCPU[cpu]) != len(sizes) {
				return fmt.Errorf("cpu %d: %d records", cpu, len(o.PerCPU[cpu]))
			}
			for i, n := range sizes {
				if r := o.PerCPU[cpu][i]; r.Lost != 0 || !hasPrefix(r, n, byte(cpu*64+i)) {
					return fmt.Errorf("cpu %d record %d: wrong", cpu, i)
				}
			}
		}
		if o.Extra || o.End != "ErrClosed" {
			return fmt.Errorf("extra %v, end %s", o.Extra, o.End)
		}
		return nil
	})
}

type lostObs struct {
	FillRet, LastRet int
	Delivered        int
	Lost             uint64
	Sequence         []string
}

// A full ring: the writes that did not fit come back as one lost record
// once there is room again, between the samples as the kernel wrote them.
func TestLostSamples(t *testing.T) {
	compare(t, func(t *testing.T, p *producer.Producer, im impl) interface{} {
		rd, err := im.open(t, p, os.Getpagesize(), 0)
		if err != nil {
			t.Fatal(err)
		}
		var o lostObs
		o.FillRet = emit(t, p, 0, 72, 1, 300)
		got := reading(rd)
		note := func(r result) {
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.rec.Lost > 0 {
				o.Lost += r.rec.Lost
				o.Sequence = append(o.Sequence, fmt.Sprintf("lost %d", r.rec.Lost))
			} else {
				o.Delivered++
				o.Sequence = append(o.Sequence, fmt.Sprintf("sample %d", len(r.rec.Raw)))
			}
		}
		// The full ring must be read before the last write (else it is
		// lost too, LastRet -28): it holds what fits in one page of 88-byte
		// records (the 8-byte header, the u32 size and 72 bytes, padded to
		// 8), read once that many are delivered (a quiet moment, which a
		// loaded machine can fake, is not waited for; 10 s only catches a
		// hang). The counts are checked on what arrives after the last
		// write, waited for below.
		for full := os.Getpagesize() / 88; o.Delivered < full; {
			r, q := quiet(got, 10*time.Second)
			if q {
				t.Fatalf("%d of the full ring's %d records after 10s", o.Delivered, full)
			}
			note(r)
		}
		o.LastRet = emit(t, p, 0, 72, 2, 1)
		// Every write comes back, delivered or counted lost: wait for all
		// 301 (10 s only catches a hang). A last write that was lost too
		// reports nothing: the check below says so.
		for o.LastRet == 0 && uint64(o.Delivered)+o.Lost < 301 {
			r, q := quiet(got, 10*time.Second)
			if q {
				t.Fatalf("delivered %d + lost %d after 10s, want 301", o.Delivered, o.Lost)
			}
			note(r)
		}
		closeAndEnd(t, rd, got)
		return o
	}, func(v interface{}) error {
		o := v.(lostObs)
		if o.FillRet != -28 || o.LastRet != 0 || o.Lost == 0 || uint64(o.Delivered)+o.Lost != 301 {
			return fmt.Errorf("delivered %d + lost %d, rets %d %d", o.Delivered, o.Lost, o.FillRet, o.LastRet)
		}
		return nil
	})
}

type pauseObs struct {
	Before     []record // written before Pause, read while paused
	PausedRets []int
	ResumedRet int
	After      []record
	Extra      bool
}

// Pause deletes the map's slots: BPF gets -ENOENT and nothing is lost.
func TestPauseOnTheBPFSide(t *testing.T) {
	compare(t, func(t *testing.T, p *producer.Producer, im impl) interface{} {
		rd, err := im.open(t, p, os.Getpagesize(), 0)
		if err != nil {
			t.Fatal(err)
		}
		var o pauseObs
		emit(t, p, 1, 24, 9, 2)
		if err := rd.Pause(); err != nil {
			t.Fatal(err)
		}
		got := reading(rd)
		o.Before = take(t, got, 2)
		o.PausedRets = []int{emit(t, p, 0, 16, 1, 3), emit(t, p, 1, 16, 1, 1)}
		if err := rd.Resume(); err != nil {
			t.Fatal(err)
		}
		o.ResumedRet = emit(t, p, 0, 16, 2, 1)
		o.After = take(t, got, 1)
		// Nothing more: an observation window, not a speed assertion.
		_, q := quiet(got, 200*time.Millisecond)
		o.Extra = !q
		closeAndEnd(t, rd, got)
		return o
	}, func(v interface{}) error {
		o := v.(pauseObs)
		if len(o.Before) != 2 || !hasPrefix(o.Before[1], 24, 9) ||
			o.PausedRets[0] != -2 || o.PausedRets[1] != -2 || o.ResumedRet != 0 || o.Extra ||
			o.After[0].Lost != 0 || !hasPrefix(o.After[0], 16, 2) {
			return fmt.Errorf("unexpected")
		}
		return nil
	})
}

type closeObs struct {
	Blocked, ReadAfter, PauseAfter, ResumeAfter, CloseAgain string
}

// After Close, while the program still holds the map, BPF gets -ENOSPC in
// both packages: the map keeps the closed events, their rings unmapped
// (cilium's Close documents -ENOENT, but never deletes the slots).
const emitAfterClose = -28

func TestCloseBehaviour(t *testing.T) {
	compare(t, func(t *testing.T, p *producer.Producer, im impl) interface{} {
		rd, err := im.open(t, p, os.Getpagesize(), 0)
		if err != nil {
			t.Fatal(err)
		}
		got := reading(rd)
		// Time for Read to block (cilium's Reader shows no sign of it); not
		// a synchronisation the result depends on: a Read that starts after
		// Close returns ErrClosed as well.
		time.Sleep(20 * time.Millisecond)
		var o closeObs
		o.Blocked = errClass(closeAndEnd(t, rd, got))
		_, err = rd.Read()
		o.ReadAfter = errClass(err)
		o.PauseAfter = errClass(rd.Pause())
		o.ResumeAfter = errClass(rd.Resume())
		o.CloseAgain = errClass(rd.Close())
		if ret := emit(t, p, 0, 16, 1, 1); ret != emitAfterClose {
			t.Errorf("%s: bpf_perf_event_output after Close: %d, want %d", im.name, ret, emitAfterClose)
		}
		return o
	}, func(v interface{}) error {
		o := v.(closeObs)
		if o != (closeObs{"ErrClosed", "ErrClosed", "ErrClosed", "ErrClosed", "nil"}) {
			return fmt.Errorf("unexpected")
		}
		return nil
	})
}

type watermarkObs struct {
	Held    bool
	Records []record
}

// Records below the watermark wait; a write crossing it hands over the ring.
func TestWatermark(t *testing.T) {
	compare(t, func(t *testing.T, p *producer.Producer, im impl) interface{} {
		rd, err := im.open(t, p, 4*os.Getpagesize(), 2048)
		if err != nil {
			t.Fatal(err)
		}
		got := reading(rd)
		var o watermarkObs
		emit(t, p, 0, 16, 1, 3)
		// Held below the watermark: an observation window, not a speed
		// assertion (a record handed over early would arrive at once).
		_, o.Held = quiet(got, 300*time.Millisecond)
		emit(t, p, 0, 3000, 2, 1)
		o.Records = take(t, got, 4)
		closeAndEnd(t, rd, got)
		return o
	}, func(v interface{}) error {
		o := v.(watermarkObs)
		if !o.Held || !hasPrefix(o.Records[0], 16, 1) || !hasPrefix(o.Records[3], 3000, 2) {
			return fmt.Errorf("unexpected")
		}
		return nil
	})
}

type otherRingObs struct {
	Woken     []record // what a wake-up of CPU 0's ring returns
	OtherHeld bool     // CPU 1's records, below the watermark, still wait
}

// A wake-up hands over the rings that signalled: another CPU's records
// below the watermark keep waiting.
func TestWatermarkOfAnotherRing(t *testing.T) {
	compare(t, func(t *testing.T, p *producer.Producer, im impl) interface{} {
		rd, err := im.open(t, p, 4*os.Getpagesize(), 2048)
		if err != nil {
			t.Fatal(err)
		}
		got := reading(rd)
		var o otherRingObs
		emit(t, p, 1, 16, 5, 3)
		emit(t, p, 0, 3000, 6, 1)
		o.Woken = take(t, got, 1)
		// An observation window, not a speed assertion: CPU 1's records
		// handed over with CPU 0's would arrive at once.
		_, o.OtherHeld = quiet(got, 300*time.Millisecond)
		closeAndEnd(t, rd, got)
		return o
	}, func(v interface{}) error {
		o := v.(otherRingObs)
		if !o.OtherHeld || o.Woken[0].CPU != 0 || !hasPrefix(o.Woken[0], 3000, 6) {
			return fmt.Errorf("unexpected")
		}
		return nil
	})
}

type argsObs struct{ ZeroSize, WatermarkTooBig bool }

func TestBadArguments(t *testing.T) {
	compare(t, func(t *testing.T, p *producer.Producer, im impl) interface{} {
		var o argsObs
		if rd, err := im.open(t, p, 0, 0); err == nil {
			rd.Close()
		} else {
			o.ZeroSize = true
		}
		if rd, err := im.open(t, p, os.Getpagesize(), os.Getpagesize()); err == nil {
			rd.Close()
		} else {
			o.WatermarkTooBig = true
		}
		return o
	}, func(v interface{}) error {
		if v.(argsObs) != (argsObs{true, true}) {
			return fmt.Errorf("accepted")
		}
		return nil
	})
}
