package perfbuf

// Probes with fetch arguments on the real kernel: a uprobe on a C function
// of this test binary reads an int, a string and a struct field at each
// call, a uretprobe reads $retval, a uprobe with arguments inside a function
// fires there, rejected arguments carry the kernel's
// words, SetFilter changes and clears a filter, Enabled adds an event
// enabled, and the probes go with their set.

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"perfbuf.dev/perfbuf/internal/probe"
	"perfbuf.dev/perfbuf/internal/probeargs"
)

func needUprobeEvents(t *testing.T) {
	t.Helper()
	needEvents(t)
	if _, err := os.Stat("/sys/kernel/tracing/uprobe_events"); err != nil {
		needRoot(t, err)
	}
}

func ourProbes(t *testing.T) int {
	t.Helper()
	text, err := os.ReadFile("/sys/kernel/tracing/uprobe_events")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(text), ":perfbuf_"+strconv.Itoa(os.Getpid())+"_")
}

func TestProbeArguments(t *testing.T) {
	needUprobeEvents(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"alpha", "", "with spaces", "z"}
	onThread(func(tid int) {
		s, err := NewEventSet(EventSetOptions{PIDs: []int{tid}})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		entry, err1 := s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probeargs.Symbol, Args: probeargs.Args()})
		exit, err2 := s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probeargs.Symbol, Retprobe: true,
			Args: "ret=$retval:s64", Enabled: true})
		if err1 != nil || err2 != nil {
			t.Error(err1, err2)
			return
		}
		if n := ourProbes(t); n != 2 {
			t.Errorf("%d probes defined", n)
		}
		r, err := s.NewReader(EventReaderOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Close()
		s.Enable(entry)
		var want []int64
		for i := 0; i < 20; i++ {
			want = append(want, probeargs.Call(i-5, names[i%4], uint32(i*3+1)))
		}
		got := drainNow(t, r)
		calls, rets := 0, 0
		for _, g := range got {
			switch g.Event {
			case entry:
				f, err := g.Fields()
				i := calls
				calls++
				if err != nil || f["n"].Int != int64(i-5) || string(f["name"].Bytes) != names[i%4] || f["count"].Uint != uint64(i*3+1) {
					t.Errorf("call %d: %v %v", i, f, err)
				}
			case exit:
				v, err := g.Field("ret")
				if err != nil || rets >= len(want) || v.Int != want[rets] {
					t.Errorf("return %d: %v %v", rets, v, err)
				}
				rets++
			}
		}
		if calls != 20 || rets != 20 {
			t.Errorf("%d calls, %d returns; want 20 each", calls, rets)
		}
		_, err = s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probeargs.Symbol, Args: "n=%nosuchreg:s32"})
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "Invalid register name") ||
			!strings.Contains(err.Error(), probeargs.Symbol) {
			t.Errorf("rejected arguments: %v", err)
		}
		if err := s.SetFilter(entry, "no_such_field == 1"); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("a bad filter: %v", err)
		}
		// A filter set, then cleared, on the enabled event: the calls it
		// lets through, exactly.
		entryArgs := func() []int64 {
			var ns []int64
			for _, g := range drainNow(t, r) {
				if g.Event == entry {
					v, err := g.Field("n")
					if err != nil {
						t.Error(err)
					}
					ns = append(ns, v.Int)
				}
			}
			return ns
		}
		if err := s.SetFilter(entry, "n > 0"); err != nil {
			t.Error(err)
		}
		for n := -2; n <= 3; n++ {
			probeargs.Call(n, "f", 1)
		}
		if got := entryArgs(); fmt.Sprint(got) != "[1 2 3]" {
			t.Errorf("with the filter n > 0, calls with n = -2..3 gave n = %v, want [1 2 3]", got)
		}
		if err := s.SetFilter(entry, ""); err != nil {
			t.Error(err)
		}
		for n := -1; n <= 1; n++ {
			probeargs.Call(n, "f", 1)
		}
		if got := entryArgs(); fmt.Sprint(got) != "[-1 0 1]" {
			t.Errorf("with the filter cleared, calls with n = -1..1 gave n = %v, want [-1 0 1]", got)
		}
	})
	if n := ourProbes(t); n != 0 {
		t.Errorf("%d probes left after Close", n)
	}
}

func TestProbeArgumentsInsideAFunction(t *testing.T) {
	needUprobeEvents(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	inside := probe.OffsetAddr() + probe.OffsetInside
	onThreadWithSet(t, func(s *EventSet, tid int) {
		ev := mustAdd(t, s, Event{Kind: EventUprobe, Name: exe, Symbol: probe.OffsetSymbol, Offset: probe.OffsetInside,
			Args: probe.OffsetArg(), Enabled: true})
		r := mustReader(t, s)
		defer r.Close()
		for i := uint64(0); i < 20; i++ {
			probe.OffsetCall(i * 11)
		}
		got := drainNow(t, r)
		if len(got) != 20 {
			t.Errorf("%d samples, want 20", len(got))
		}
		for i, g := range got {
			f, err := g.Fields()
			if err != nil || g.Event != ev || g.IP != inside || f["__probe_ip"].Uint != inside || f["x"].Uint != uint64(i*11) {
				t.Errorf("sample %d: event %d ip %#x fields %v %v; want ip %#x x=%d", i, g.Event, g.IP, f, err, inside, i*11)
			}
		}
		_, err = s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probe.OffsetSymbol, Offset: probe.OffsetInside,
			Retprobe: true, Args: "r=$retval"})
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "uretprobe") {
			t.Errorf("a uretprobe with arguments inside the function: %v", err)
		}
	})
	if n := ourProbes(t); n != 0 {
		t.Errorf("%d probes left", n)
	}
}
