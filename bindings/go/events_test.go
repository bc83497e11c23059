package perfbuf

// Event sets on the real kernel: a tracepoint's samples with decoded fields
// in time order, filters, uprobes on a function of this test binary
// (internal/probe), a pid target, the profiler's fallback and deferred
// enable with a BPF program, the kprobe PMU's absence, lost samples,
// counter groups, events added and removed while reading, lifetimes,
// errors, and the struct sizes against the C compiler's. Needs root and
// tracefs; under CI=true nothing is skipped.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"perfbuf.dev/perfbuf/internal/probe"
)

func needEvents(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		needRoot(t, errors.New("event sets need root (CAP_PERFMON and access to tracefs)"))
	}
	for _, root := range []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"} {
		if st, err := os.Stat(filepath.Join(root, "events")); err == nil && st.IsDir() {
			return
		}
	}
	needRoot(t, errors.New("no tracefs at /sys/kernel/tracing (mount -t tracefs nodev /sys/kernel/tracing)"))
}

func openFDs(t *testing.T) int {
	// The runtime's poller keeps the fds it opens on first use: start it.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// setAffinity pins the calling thread (lock the goroutine to it first).
// Usable from any goroutine: it reports with t.Error.
func setAffinity(t *testing.T, cpus ...int) {
	t.Helper()
	var mask [16]uint64
	for _, c := range cpus {
		mask[c/64] |= 1 << (c % 64)
	}
	if _, _, e := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask))); e != 0 {
		t.Error("sched_setaffinity:", e)
	}
}

func allCPUs() []int {
	cpus := make([]int, runtime.NumCPU())
	for i := range cpus {
		cpus[i] = i
	}
	return cpus
}

// drainNow returns every sample the rings hold now: Consume, then Read
// until a past deadline, with no wait. That is all the samples of what the
// test did before: tracepoints, uprobes and the sampling events write in
// the context of the thread that hit them, before the call that made them
// returns (a Disable'd event stops on every CPU before Disable returns).
// So a count taken from it is exact, and an event that must not fire
// (disabled, filtered, not yet enabled) would already be there. Usable from
// any goroutine: it reports with t.Error.
func drainNow(t *testing.T, r *EventReader) []EventSample {
	t.Helper()
	var out []EventSample
	if err := r.Consume(); err != nil {
		t.Error(err)
		return out
	}
	r.SetDeadline(time.Now())
	for {
		s, err := r.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			r.SetDeadline(time.Time{})
			return out
		} else if err != nil {
			t.Error(err)
			return out
		}
		out = append(out, s)
	}
}

func newSet(t *testing.T, opts EventSetOptions) *EventSet {
	t.Helper()
	s, err := NewEventSet(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func mustAdd(t *testing.T, s *EventSet, ev Event) int {
	t.Helper()
	id, err := s.Add(ev)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestEventStructSizes(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		needRoot(t, err)
	}
	names := make([]string, 0, len(cStructSizes))
	for name := range cStructSizes {
		names = append(names, name)
	}
	sort.Strings(names)
	src := "#include <stdio.h>\n#include <perfbuf.h>\nint main(void) {\n"
	for _, name := range names {
		src += fmt.Sprintf("printf(\"%s %%zu\\n\", sizeof(struct %s));\n", name, name)
	}
	src += "return 0;\n}\n"
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "sizes.c"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cc, "-Wall", "-Werror", "-I../../include", "-o", filepath.Join(dir, "sizes"), filepath.Join(dir, "sizes.c")).CombinedOutput()
	if err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	out, err = exec.Command(filepath.Join(dir, "sizes")).Output()
	if err != nil {
		t.Fatal(err)
	}
	want := ""
	for _, name := range names {
		want += fmt.Sprintf("%s %d\n", name, cStructSizes[name])
	}
	if string(out) != want {
		t.Fatalf("C sizes:\n%s\ncgo's:\n%s", out, want)
	}
	// The sizes libperfbuf itself asserts (capi/src/events.rs).
	if cStructSizes["perfbuf_events_opts"] != 80 || cStructSizes["perfbuf_event_desc"] != 112 {
		t.Fatalf("opts %d desc %d", cStructSizes["perfbuf_events_opts"], cStructSizes["perfbuf_event_desc"])
	}
}

// execTrue runs /bin/true n times, alternating CPUs (the child inherits
// the forking thread's affinity); it returns the pids.
func execTrue(t *testing.T, n int) []uint32 {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer setAffinity(t, allCPUs()...)
	var pids []uint32
	for i := 0; i < n; i++ {
		setAffinity(t, i%runtime.NumCPU())
		cmd := exec.Command("/bin/true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, uint32(cmd.Process.Pid))
	}
	return pids
}

func contains(pids []uint32, pid uint32) bool {
	for _, p := range pids {
		if p == pid {
			return true
		}
	}
	return false
}

func TestEventTracepointExecOrdered(t *testing.T) {
	needEvents(t)
	fds := openFDs(t)
	s, err := NewEventSet(EventSetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev := mustAdd(t, s, Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
	r, err := s.NewReader(EventReaderOptions{OrderByTime: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Enable(AllEvents); err != nil {
		t.Fatal(err)
	}
	const n = 10
	t0 := monotonicNS()
	pids := execTrue(t, n)
	t1 := monotonicNS()
	var got []EventSample
	deadline := time.Now().Add(10 * time.Second) // only catches a hang
	for mine := 0; mine < n && time.Now().Before(deadline); {
		r.SetDeadline(deadline)
		smp, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, smp)
		if contains(pids, smp.PID) {
			mine++
		}
	}
	s.Disable(AllEvents)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	got = append(got, drainNow(t, r)...)
	cpus := map[int]bool{}
	var seen []uint32
	var last uint64
	for _, g := range got {
		if !contains(pids, g.PID) {
			continue
		}
		// Ours in time order: the children ran one after the other on
		// alternate CPUs, so reading one ring after the other would not
		// give it. (Other tasks' execs are not checked: one written by a
		// CPU the host held back between timestamp and commit comes late,
		// rightly.)
		if g.Time < last {
			t.Fatalf("exec of pid %d out of time order: %d after %d", g.PID, g.Time, last)
		}
		last = g.Time
		seen = append(seen, g.PID)
		cpus[g.CPU] = true
		f, err := g.Field("filename")
		if err != nil || f.Kind != FieldString || f.String() != "/bin/true" {
			t.Fatalf("filename: %v %v", f, err)
		}
		fields, err := g.Fields()
		if err != nil || len(fields) != 3 || fields["pid"].Int != int64(g.PID) || fields["old_pid"].Int != int64(g.PID) || fields["filename"].String() != "/bin/true" {
			t.Fatalf("fields: %v %v", fields, err)
		}
		if g.Event != ev || g.TID != g.PID || g.Time < t0 || g.Time > t1 {
			t.Fatalf("sample %+v (window %d..%d)", g, t0, t1)
		}
	}
	sort.Slice(seen, func(i, j int) bool { return seen[i] < seen[j] })
	sort.Slice(pids, func(i, j int) bool { return pids[i] < pids[j] })
	if fmt.Sprint(seen) != fmt.Sprint(pids) {
		t.Fatalf("execs seen %v, want %v", seen, pids)
	}
	if runtime.NumCPU() > 1 && len(cpus) < 2 {
		t.Fatalf("samples from CPUs %v only", cpus)
	}
	if _, err := got[0].Field("no_such_field"); !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), `has no field "no_such_field"`) {
		t.Fatalf("no such field: %v", err)
	}
	info, err := s.Info(ev)
	if err != nil || info.Kind != EventTracepoint || info.Instances != runtime.NumCPU() || info.Enabled || info.FellBack() {
		t.Fatalf("info %+v %v", info, err)
	}
	r.Close()
	s.Close()
	if openFDs(t) != fds {
		t.Fatalf("fds %d -> %d", fds, openFDs(t))
	}
}

func monotonicNS() uint64 {
	var ts syscall.Timespec
	syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 1 /* CLOCK_MONOTONIC */, uintptr(unsafe.Pointer(&ts)), 0)
	return uint64(ts.Sec)*1e9 + uint64(ts.Nsec)
}

func TestEventFilterDisableEnable(t *testing.T) {
	needEvents(t)
	s := newSet(t, EventSetOptions{})
	ev := mustAdd(t, s, Event{Kind: EventTracepoint, Name: "sched:sched_process_exec", Filter: `filename ~ "/bin/true"`})
	r, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Enable(ev)
	pids := execTrue(t, 2)
	sh := exec.Command("/bin/sh", "-c", ":")
	sh.Run()
	got := drainNow(t, r)
	var mine []uint32
	for _, g := range got {
		if f, _ := g.Field("filename"); f.String() != "/bin/true" || g.PID == uint32(sh.Process.Pid) {
			t.Fatalf("the filter let %s (pid %d) through", f, g.PID)
		}
		if contains(pids, g.PID) {
			mine = append(mine, g.PID)
		}
	}
	if fmt.Sprint(mine) != fmt.Sprint(pids) {
		t.Fatalf("filtered: %v, want %v", mine, pids)
	}
	s.Disable(ev)
	execTrue(t, 2)
	if got := drainNow(t, r); len(got) != 0 {
		t.Fatalf("disabled: %d samples", len(got))
	}
	s.Enable(ev)
	pids = execTrue(t, 1)
	mine = nil
	for _, g := range drainNow(t, r) {
		if contains(pids, g.PID) {
			mine = append(mine, g.PID)
		}
	}
	if len(mine) != 1 {
		t.Fatalf("enabled again: %v", mine)
	}
	_, err = s.Add(Event{Kind: EventTracepoint, Name: "sched:sched_process_exec", Filter: "no_such_field == 1"})
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "filter") {
		t.Fatalf("bad filter: %v", err)
	}
	r.Close()
	// The rings went with the reader: no more events.
	_, err = s.Add(Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "reader freed") {
		t.Fatalf("after the reader: %v", err)
	}
}

func TestEventBadTracepoint(t *testing.T) {
	needEvents(t)
	s := newSet(t, EventSetOptions{})
	_, err := s.Add(Event{Kind: EventTracepoint, Name: "nope:no_such_tracepoint"})
	var pe *Error
	if !errors.As(err, &pe) || pe.Op != "Add" || pe.Errno != syscall.ENOENT || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "tracepoint") {
		t.Fatalf("missing tracepoint: %#v", err)
	}
	if _, err := s.Add(Event{Kind: EventTracepoint, Name: "../../etc"}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bad name: %v", err)
	}
}

// onThread runs fn locked to one thread; fn gets the thread's id.
func onThread(fn func(tid int)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine (it may be pinned)
		fn(syscall.Gettid())
	}()
	<-done
}

// onThreadWithSet runs fn as onThread does, with an event set watching
// that thread, closed after fn.
func onThreadWithSet(t *testing.T, fn func(s *EventSet, tid int)) {
	onThread(func(tid int) {
		s, err := NewEventSet(EventSetOptions{PIDs: []int{tid}})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		fn(s, tid)
	})
}

// mustReader opens s's reader (the caller closes it).
func mustReader(t *testing.T, s *EventSet) *EventReader {
	t.Helper()
	r, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEventUprobes(t *testing.T) {
	needEvents(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fds := openFDs(t)
	const n = 100
	var got []EventSample
	var tid int
	onThread(func(id int) {
		tid = id
		s, err := NewEventSet(EventSetOptions{PIDs: []int{tid}})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		up, err1 := s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probe.Symbol})
		ret, err2 := s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probe.Symbol, Retprobe: true})
		if err1 != nil || err2 != nil {
			t.Error(err1, err2)
			return
		}
		r, err := s.NewReader(EventReaderOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Close()
		s.Enable(AllEvents)
		probe.Call(n)
		got = drainNow(t, r)
		ups, rets := 0, 0
		for _, g := range got {
			if g.PID != uint32(os.Getpid()) || g.TID != uint32(tid) {
				t.Errorf("sample of %d/%d", g.PID, g.TID)
			}
			switch g.Event {
			case up:
				ups++
				if g.IP != probe.Addr() {
					t.Errorf("uprobe at %#x, the function is at %#x", g.IP, probe.Addr())
				}
			case ret:
				rets++
			}
		}
		if ups != n || rets != n || len(got) != 2*n {
			t.Errorf("uprobe %d, uretprobe %d, %d samples; want %d each", ups, rets, len(got), n)
		}
		info, err := s.Info(up)
		cpus, _ := s.CPUs()
		if err != nil || info.Kind != EventUprobe || !info.Enabled || info.Instances != len(cpus) || len(cpus) != runtime.NumCPU() {
			t.Errorf("info %+v %v (cpus %v)", info, err, cpus)
		}
		if fd, err := s.FD(up, 0); err != nil || fd < 0 {
			t.Errorf("FD: %d %v", fd, err)
		}
		if f, err := got[0].Fields(); err != nil || len(f) != 0 {
			t.Errorf("a uprobe's fields: %v %v", f, err)
		}
		if _, err := s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: "no_such_function"}); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("missing symbol: %v", err)
		}
		if _, err := s.Add(Event{Kind: EventUprobe, Name: "/nonexistent/binary", Symbol: probe.Symbol}); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("missing binary: %v", err)
		}
	})
	if openFDs(t) != fds {
		t.Fatalf("fds %d -> %d", fds, openFDs(t))
	}
}

// TestEventUprobesInsideAFunction: uprobes at Symbol+4 and at that
// instruction's file offset fire there, a uretprobe at the function's file
// offset fires on return; a uretprobe inside a function and an offset past
// its end are EINVAL, naming the probe.
func TestEventUprobesInsideAFunction(t *testing.T) {
	needEvents(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	entry := probe.OffsetAddr()
	inside := entry + probe.OffsetInside
	fileEntry, err := probe.FileOffset(entry)
	if err != nil {
		t.Fatal(err)
	}
	const n = 40
	onThreadWithSet(t, func(s *EventSet, tid int) {
		atSymbol := mustAdd(t, s, Event{Kind: EventUprobe, Name: exe, Symbol: probe.OffsetSymbol, Offset: probe.OffsetInside})
		atFileOffset := mustAdd(t, s, Event{Kind: EventUprobe, Name: exe, Offset: fileEntry + probe.OffsetInside})
		returns := mustAdd(t, s, Event{Kind: EventUprobe, Name: exe, Offset: fileEntry, Retprobe: true})
		_, err = s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probe.OffsetSymbol, Offset: probe.OffsetInside, Retprobe: true})
		want := "uretprobe " + exe + ":" + probe.OffsetSymbol + "+0x4"
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), want) {
			t.Errorf("a uretprobe inside the function: %v (want EINVAL naming %q)", err, want)
		}
		_, err = s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probe.OffsetSymbol, Offset: probe.OffsetSize()})
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "past the end") {
			t.Errorf("an offset past the function's end: %v", err)
		}
		r := mustReader(t, s)
		defer r.Close()
		s.Enable(AllEvents)
		for i := uint64(0); i < n; i++ {
			if got := probe.OffsetCall(i); got != i+1 {
				t.Errorf("call %d returned %d", i, got)
			}
		}
		counts := map[int]int{}
		for _, g := range drainNow(t, r) {
			counts[g.Event]++
			inFunction := g.IP >= entry && g.IP < entry+probe.OffsetSize()
			switch {
			case g.Event == returns && inFunction:
				t.Errorf("a return sampled at %#x, inside the function", g.IP)
			case g.Event != returns && g.IP != inside:
				t.Errorf("event %d sampled at %#x, want %#x (entry %#x + %d)", g.Event, g.IP, inside, entry, probe.OffsetInside)
			}
		}
		if counts[atSymbol] != n || counts[atFileOffset] != n || counts[returns] != n {
			t.Errorf("samples per event %v, want %d each", counts, n)
		}
	})
}

// TestEventFrequencySamplesCarryThePeriod: the kernel turns 999 Hz of
// cpu-clock into a period of 1e9/999 ns, which each sample carries (what it
// stands for: perf report's event count).
func TestEventFrequencySamplesCarryThePeriod(t *testing.T) {
	needEvents(t)
	onThreadWithSet(t, func(s *EventSet, tid int) {
		ev := mustAdd(t, s, Event{Kind: EventSoftware, Config: SWCPUClock, Frequency: 999})
		if info, err := s.Info(ev); err != nil || info.SampleType&perfSamplePeriod == 0 {
			t.Errorf("info %+v %v: no PERF_SAMPLE_PERIOD", info, err)
		}
		r := mustReader(t, s)
		defer r.Close()
		s.Enable(ev)
		// 50 ms of this thread's CPU time: a loaded machine may deschedule it.
		threadCPU := func() time.Duration {
			var u syscall.Rusage
			syscall.Getrusage(1 /* RUSAGE_THREAD */, &u)
			return time.Duration(u.Utime.Nano() + u.Stime.Nano())
		}
		for start, x := threadCPU(), 0; threadCPU()-start < 50*time.Millisecond; x++ {
			_ = x * x
		}
		s.Disable(ev)
		got := drainNow(t, r)
		if len(got) == 0 {
			t.Error("no sample")
		}
		for _, g := range got {
			if g.Period != 1001001 {
				t.Errorf("a sample's period is %d, want 1001001", g.Period)
				break
			}
		}
	})
}

// quietTracepoint is a tracepoint only these tests trace, hit by getpgid.
const quietTracepoint = "syscalls:sys_enter_getpgid"

// loadDropProgram loads a classic tracepoint program returning 0 as name.
func loadDropProgram(t *testing.T, name string) int {
	t.Helper()
	code := append(insn(0xb7, 0, 0, 0, 0), insn(0x95, 0, 0, 0, 0)...) // r0 = 0; exit
	license := []byte("GPL\x00")
	attr := make([]byte, 128)
	binary.LittleEndian.PutUint32(attr[0:], 5 /* BPF_PROG_TYPE_TRACEPOINT */)
	binary.LittleEndian.PutUint32(attr[4:], 2)
	binary.LittleEndian.PutUint64(attr[8:], uint64(uintptr(unsafe.Pointer(&code[0]))))
	binary.LittleEndian.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	copy(attr[48:64], name)
	prog, err := bpfSyscall(5 /* BPF_PROG_LOAD */, attr)
	runtime.KeepAlive(code)
	runtime.KeepAlive(license)
	if err != nil {
		t.Fatal("BPF_PROG_LOAD:", err)
	}
	return prog
}

// attachElsewhere attaches prog to the tracepoint through a perf event of
// its own, as another tool would; closing the returned fd detaches it.
func attachElsewhere(t *testing.T, prog int, tracepoint string) int {
	t.Helper()
	text, err := os.ReadFile("/sys/kernel/tracing/events/" + strings.Replace(tracepoint, ":", "/", 1) + "/id")
	if err != nil {
		t.Fatal(err)
	}
	config, err := strconv.ParseUint(strings.TrimSpace(string(text)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	attr := make([]byte, 128)
	binary.LittleEndian.PutUint32(attr[0:], 2 /* PERF_TYPE_TRACEPOINT */)
	binary.LittleEndian.PutUint32(attr[4:], 128)
	binary.LittleEndian.PutUint64(attr[8:], config)
	binary.LittleEndian.PutUint64(attr[16:], 1) // sample_period
	fd, _, errno := syscall.Syscall6(syscall.SYS_PERF_EVENT_OPEN, uintptr(unsafe.Pointer(&attr[0])),
		^uintptr(0) /* pid -1 */, 0, ^uintptr(0) /* no group */, 8 /* PERF_FLAG_FD_CLOEXEC */, 0)
	runtime.KeepAlive(attr)
	if errno != 0 {
		t.Fatal("perf_event_open:", errno)
	}
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, 0x40042408 /* PERF_EVENT_IOC_SET_BPF */, uintptr(prog)); errno != 0 {
		syscall.Close(int(fd))
		t.Fatal("PERF_EVENT_IOC_SET_BPF:", errno)
	}
	return int(fd)
}

// TestEventBPFProgramThatDropsTheHitsIsNamed: another tool's tracepoint
// program returning 0 makes the kernel drop every hit for every perf event
// on the tracepoint; Info names it.
func TestEventBPFProgramThatDropsTheHitsIsNamed(t *testing.T) {
	needEvents(t)
	onThreadWithSet(t, func(s *EventSet, tid int) {
		ev := mustAdd(t, s, Event{Kind: EventTracepoint, Name: quietTracepoint, Enabled: true})
		r := mustReader(t, s)
		defer r.Close()
		hits := func() int {
			for i := 0; i < 5; i++ {
				syscall.Getpgid(0)
			}
			return len(drainNow(t, r))
		}
		info := func() EventInfo {
			i, err := s.Info(ev)
			if err != nil {
				t.Fatal(err)
			}
			return i
		}
		if got := info().BPFPrograms; len(got) != 0 || hits() != 5 {
			t.Errorf("nothing attached: programs %v", got)
		}
		prog := loadDropProgram(t, "perfbuf_go_drop")
		other := attachElsewhere(t, prog, quietTracepoint)
		attached := info()
		if len(attached.BPFPrograms) != 1 || attached.BPFPrograms[0].Name != "perfbuf_go_drop" ||
			attached.BPFPrograms[0].Ours || attached.BPFPrograms[0].ID == 0 || len(attached.OtherBPFPrograms()) != 1 {
			t.Errorf("attached: programs %+v", attached.BPFPrograms)
		}
		if n := hits(); n != 0 {
			t.Errorf("%d hits sampled while the program dropped them", n)
		}
		syscall.Close(other)
		syscall.Close(prog)
		if got := info().BPFPrograms; len(got) != 0 || hits() != 5 {
			t.Errorf("detached: programs %v", got)
		}
	})
}

// TestHelperProbeChild is the child of TestEventPIDTarget: it prints its
// thread id, waits for stdin to close, calls the target 20 times.
func TestHelperProbeChild(t *testing.T) {
	if os.Getenv("PERFBUF_GO_TEST_PROBE_CHILD") == "" {
		return // run by TestEventPIDTarget only (a pass, not a skip: none under CI)
	}
	runtime.LockOSThread()
	fmt.Printf("tid %d\n", syscall.Gettid())
	os.Stdin.Read(make([]byte, 1))
	probe.Call(20)
}

func TestEventPIDTarget(t *testing.T) {
	needEvents(t)
	exe, _ := os.Executable()
	child := exec.Command(exe, "-test.run=^TestHelperProbeChild$")
	child.Env = append(os.Environ(), "PERFBUF_GO_TEST_PROBE_CHILD=1")
	child.Stderr = os.Stderr
	stdin, _ := child.StdinPipe()
	out, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	child.Stdout = w
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	defer child.Process.Kill() // if the test fails before the child is done
	line, _ := bufio.NewReader(out).ReadString('\n')
	tid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "tid ")))
	if err != nil {
		stdin.Close()
		t.Fatalf("child said %q", line)
	}
	s := newSet(t, EventSetOptions{PIDs: []int{tid}})
	ev := mustAdd(t, s, Event{Kind: EventUprobe, Name: exe, Symbol: probe.Symbol})
	r, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s.Enable(ev)
	probe.Call(5) // not watched
	stdin.Close()
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	got := drainNow(t, r)
	for _, g := range got {
		if g.PID != uint32(child.Process.Pid) || g.Event != ev {
			t.Fatalf("a sample of %d", g.PID)
		}
	}
	if len(got) != 20 {
		t.Fatalf("%d samples of the watched child, want 20", len(got))
	}
}

// kernelLacks notes a success path that needs a kernel option this kernel
// lacks (no CONFIG_KPROBES here): the caller checked the clear error
// instead, so the test passes, and make test lists the path as not run on
// this kernel.
func kernelLacks(t *testing.T, why string) {
	t.Helper()
	fmt.Fprintf(os.Stderr, "\nnot-on-this-kernel: %s: %s\n", t.Name(), why)
}

// A kprobe through the kprobe PMU, watching one thread: exactly its 50
// calls. Without the PMU (no CONFIG_KPROBES), the clear error, and the
// success path is listed as not run on this kernel.
func TestEventKprobeCountsOrSaysConfigKprobes(t *testing.T) {
	needEvents(t)
	fn := map[string]string{"amd64": "__x64_sys_getppid", "arm64": "__arm64_sys_getppid"}[runtime.GOARCH]
	if fn == "" {
		fn = "sys_getppid"
	}
	noPMU := false
	onThread(func(tid int) {
		s, err := NewEventSet(EventSetOptions{PIDs: []int{tid}})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		ev, err := s.Add(Event{Kind: EventKprobe, Name: fn})
		if _, statErr := os.Stat("/sys/bus/event_source/devices/kprobe"); statErr != nil {
			if !errors.Is(err, syscall.EOPNOTSUPP) || !strings.Contains(err.Error(), "CONFIG_KPROBES") ||
				!strings.Contains(err.Error(), fn) {
				t.Errorf("no kprobe PMU: %v", err)
			}
			noPMU = true
			return
		}
		if err != nil {
			t.Error(err)
			return
		}
		r, err := s.NewReader(EventReaderOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Close()
		s.Enable(ev)
		for i := 0; i < 50; i++ {
			syscall.Getppid()
		}
		s.Disable(ev)
		got := drainNow(t, r)
		ours := 0
		for _, g := range got {
			if g.Event == ev && g.PID == uint32(os.Getpid()) && g.TID == uint32(tid) {
				ours++
			}
		}
		if len(got) != 50 || ours != 50 {
			t.Errorf("kprobe: %d samples, %d of the watched thread, for its 50 calls", len(got), ours)
		}
	})
	if noPMU {
		kernelLacks(t, "its success path, a thread's 50 calls: the kernel has no kprobe PMU")
	}
}

// perfEventCounter is a BPF_PROG_TYPE_PERF_EVENT program counting its runs
// per CPU in an array map (what examples/bpf/profile.bpf.c does), built
// with bpf(2) directly: this module depends on no BPF loader.
type perfEventCounter struct{ prog, counts int }

func (p perfEventCounter) FD() int { return p.prog }

func insn(code, dst, src uint8, off int16, imm int32) []byte {
	b := make([]byte, 8)
	b[0], b[1] = code, dst|src<<4
	binary.LittleEndian.PutUint16(b[2:], uint16(off))
	binary.LittleEndian.PutUint32(b[4:], uint32(imm))
	return b
}

func newPerfEventCounter(t *testing.T) perfEventCounter {
	t.Helper()
	attr := make([]byte, 128)
	for i, v := range []uint32{2 /* BPF_MAP_TYPE_ARRAY */, 4, 8, 1024} {
		binary.LittleEndian.PutUint32(attr[4*i:], v)
	}
	counts, err := bpfSyscall(0 /* BPF_MAP_CREATE */, attr)
	if err != nil {
		needRoot(t, err)
	}
	var code []byte
	for _, i := range [][]byte{
		insn(0x85, 0, 0, 0, 8),   // call bpf_get_smp_processor_id
		insn(0x63, 10, 0, -4, 0), // *(u32 *)(r10 - 4) = r0
		insn(0xbf, 2, 10, 0, 0),  // r2 = r10
		insn(0x07, 2, 0, 0, -4),  // r2 += -4
		insn(0x18, 1, 1, 0, 0),   // r1 = the map (BPF_PSEUDO_MAP_FD), patched below
		insn(0, 0, 0, 0, 0),      //   (second half of the 16-byte load)
		insn(0x85, 0, 0, 0, 1),   // call bpf_map_lookup_elem
		insn(0x15, 0, 0, 2, 0),   // if r0 == 0 goto +2
		insn(0xb7, 1, 0, 0, 1),   // r1 = 1
		insn(0xdb, 0, 1, 0, 0),   // lock *(u64 *)(r0 + 0) += r1
		insn(0xb7, 0, 0, 0, 1),   // r0 = 1: the sample goes to the ring too
		insn(0x95, 0, 0, 0, 0),   // exit
	} {
		code = append(code, i...)
	}
	binary.LittleEndian.PutUint32(code[4*8+4:], uint32(counts))
	license := []byte("GPL\x00")
	attr = make([]byte, 128)
	binary.LittleEndian.PutUint32(attr[0:], 7 /* BPF_PROG_TYPE_PERF_EVENT */)
	binary.LittleEndian.PutUint32(attr[4:], uint32(len(code)/8))
	binary.LittleEndian.PutUint64(attr[8:], uint64(uintptr(unsafe.Pointer(&code[0]))))
	binary.LittleEndian.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&license[0]))))
	prog, err := bpfSyscall(5 /* BPF_PROG_LOAD */, attr)
	runtime.KeepAlive(code)
	runtime.KeepAlive(license)
	if err != nil {
		syscall.Close(counts)
		t.Fatal("BPF_PROG_LOAD:", err)
	}
	p := perfEventCounter{prog, counts}
	t.Cleanup(func() { syscall.Close(p.prog); syscall.Close(p.counts) })
	return p
}

func (p perfEventCounter) count(t *testing.T, cpu int) uint64 {
	key, value := uint32(cpu), uint64(0)
	attr := make([]byte, 128)
	binary.LittleEndian.PutUint32(attr[0:], uint32(p.counts))
	binary.LittleEndian.PutUint64(attr[8:], uint64(uintptr(unsafe.Pointer(&key))))
	binary.LittleEndian.PutUint64(attr[16:], uint64(uintptr(unsafe.Pointer(&value))))
	if _, err := bpfSyscall(1 /* BPF_MAP_LOOKUP_ELEM */, attr); err != nil {
		t.Fatal("lookup:", err)
	}
	runtime.KeepAlive(&key)
	runtime.KeepAlive(&value)
	return value
}

// spinAll keeps every CPU busy (an idle vCPU here takes no clock samples).
func spinAll(cpus []int, d time.Duration) {
	var wg sync.WaitGroup
	for _, cpu := range cpus {
		wg.Add(1)
		go func(cpu int) {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the pinned thread ends with the goroutine
			var mask [16]uint64
			mask[cpu/64] |= 1 << (cpu % 64)
			syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, unsafe.Sizeof(mask), uintptr(unsafe.Pointer(&mask)))
			for end := time.Now().Add(d); time.Now().Before(end); {
			}
		}(cpu)
	}
	wg.Wait()
}

func TestEventProfilerFallbackAndDeferredEnable(t *testing.T) {
	needEvents(t)
	prog := newPerfEventCounter(t)
	fds := openFDs(t)
	s, err := NewEventSet(EventSetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ev := mustAdd(t, s, Event{Kind: EventHardware, Config: HWCPUCycles, Fallback: true, FallbackConfig: SWCPUClock, Frequency: 99})
	info, err := s.Info(ev)
	if err != nil {
		t.Fatal(err)
	}
	_, e1 := os.Stat("/sys/bus/event_source/devices/cpu")
	_, e2 := os.Stat("/sys/bus/event_source/devices/armv8_pmuv3_0")
	if e1 == nil || e2 == nil {
		if info.Kind != EventHardware || info.FellBack() {
			t.Fatalf("a PMU, yet %+v", info)
		}
	} else if info.Kind != EventSoftware || info.AttrType != 1 || info.Config != SWCPUClock || !info.FellBack() ||
		info.FallbackReason() != fmt.Sprintf("%v (%s)", info.FallbackErrno, errnoNames[info.FallbackErrno]) {
		t.Fatalf("no PMU: want the software fallback with its reason, got %+v (%s)", info, info.FallbackReason())
	}
	t.Logf("opened %v, fallback: %s", info.Kind, info.FallbackReason())
	r, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cpus, _ := s.CPUs()
	// Deferred enable: opened disabled, nothing is sampled before.
	spinAll(cpus, 300*time.Millisecond)
	if got := drainNow(t, r); len(got) != 0 {
		t.Fatalf("%d samples before Enable", len(got))
	}
	c, err := s.Read(ev, AllCPUs)
	if err != nil || len(c.Values) != 1 || c.Values[0] != (Count{ev, 0}) || c.TimeEnabled != 0 {
		t.Fatalf("counted before Enable: %+v %v", c, err)
	}
	if err := s.AttachBPF(ev, prog); err != nil {
		t.Fatal(err)
	}
	if err := s.AttachBPF(ev, prog); !errors.Is(err, syscall.EEXIST) {
		t.Fatalf("attached twice: %v", err)
	}
	if info, _ := s.Info(ev); !info.BPFAttached || info.Enabled {
		t.Fatalf("info %+v", info)
	}
	// Sample until the program has run 20 times on every CPU (0.2 s at
	// 99 Hz; the 20 s deadline only catches an event that never fires).
	const want = 20
	start := time.Now()
	s.Enable(ev)
	for deadline := start.Add(20 * time.Second); ; {
		spinAll(cpus, 100*time.Millisecond)
		least := uint64(math.MaxUint64)
		for _, cpu := range cpus {
			if n := prog.count(t, cpu); n < least {
				least = n
			}
		}
		if least >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the program ran %d times at least on a CPU in 20s, want %d on each", least, want)
		}
	}
	s.Disable(ev)
	elapsed := time.Since(start).Seconds()
	perCPU := map[int]uint64{}
	for _, g := range drainNow(t, r) {
		perCPU[g.CPU]++
	}
	for _, cpu := range cpus {
		runs := prog.count(t, cpu)
		t.Logf("cpu %d: the program ran %d times, %d samples in the ring", cpu, runs, perCPU[cpu])
		// Frequency is honoured: no more than 99 Hz allows over the time
		// enabled (with slack). A slow machine only makes elapsed longer,
		// so this bound measures no speed; it fails when the event samples
		// by period (say every CPU-clock tick) instead of at 99 Hz.
		if runs < want || float64(runs) > 99*elapsed*1.5+10 {
			t.Errorf("cpu %d: %d samples in %.2fs at 99 Hz", cpu, runs, elapsed)
		}
		if perCPU[cpu] != runs {
			t.Errorf("cpu %d: ring %d, program %d", cpu, perCPU[cpu], runs)
		}
	}
	if c, _ := s.Read(ev, AllCPUs); c.TimeEnabled == 0 {
		t.Fatal("no time enabled")
	}
	r.Close()
	s.Close()
	if openFDs(t) != fds {
		t.Fatalf("fds %d -> %d", fds, openFDs(t))
	}
}

// uprobeFlood, on thread tid pinned to CPU 0: a set with a 1-page ring
// and an enabled uprobe on probe.Symbol, its reader, and 3000 calls of the
// probe, more than the ring holds. Returns nil, nil when a step failed
// (reported); the caller closes both.
func uprobeFlood(t *testing.T, tid int) (*EventSet, *EventReader) {
	setAffinity(t, 0)
	exe, _ := os.Executable()
	s, err := NewEventSet(EventSetOptions{CPUs: []int{0}, Pages: 1, PIDs: []int{tid}})
	if err != nil {
		t.Error(err)
		return nil, nil
	}
	if _, err := s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probe.Symbol}); err != nil {
		t.Error(err)
		s.Close()
		return nil, nil
	}
	r, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Error(err)
		s.Close()
		return nil, nil
	}
	s.Enable(AllEvents)
	probe.Call(3000)
	return s, r
}

func TestEventLost(t *testing.T) {
	needEvents(t)
	onThread(func(tid int) {
		s, r := uprobeFlood(t, tid)
		if s == nil {
			return
		}
		defer s.Close()
		defer r.Close()
		r.Consume()
		before, err := r.Stats()
		if err != nil {
			t.Error(err)
			return
		}
		probe.Call(1) // the kernel reports the loss with its next write
		r.Consume()
		var samples, lost uint64
		for _, g := range drainNow(t, r) {
			if g.LostSamples > 0 {
				lost += g.LostSamples
			} else {
				samples++
			}
		}
		if lost == 0 || samples+lost != 3001 {
			t.Errorf("samples %d + lost %d != 3001", samples, lost)
		}
		// With PERF_FORMAT_LOST the figures knew before the LOST record.
		if hasFormatLost() && (before[0].Lost != lost || before[0].LostUnreported != lost) {
			t.Errorf("stats before the LOST record: lost %d (%d unreported), want %d",
				before[0].Lost, before[0].LostUnreported, lost)
		}
	})
}

// hasFormatLost: Linux 6.0 or later (PERF_FORMAT_LOST).
func hasFormatLost() bool {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return false
	}
	var b []byte
	for _, c := range u.Release {
		b = append(b, byte(c))
	}
	var major int
	fmt.Sscanf(string(b), "%d.", &major)
	return major >= 6
}

func TestEventCounterGroup(t *testing.T) {
	needEvents(t)
	onThread(func(tid int) {
		s, err := NewEventSet(EventSetOptions{PIDs: []int{tid}, NoRings: true})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		leader, err1 := s.Add(Event{Kind: EventSoftware, Config: SWTaskClock, GroupLeader: true})
		member, err2 := s.Add(Event{Kind: EventSoftware, Config: SWPageFaults, Member: true, Leader: leader})
		if err1 != nil || err2 != nil {
			t.Error(err1, err2)
			return
		}
		s.Enable(AllEvents)
		mem, _ := syscall.Mmap(-1, 0, 64<<20, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
		for i := 0; i < len(mem); i += 4096 {
			mem[i] = 1
		}
		syscall.Munmap(mem)
		s.Disable(AllEvents)
		c, err := s.Read(leader, AllCPUs)
		if err != nil || len(c.Values) != 2 || c.Values[0].Event != leader || c.Values[1].Event != member ||
			c.Values[0].Value == 0 || c.Values[1].Value < 16 || c.TimeEnabled == 0 || c.TimeRunning == 0 {
			t.Errorf("group: %+v %v", c, err)
		}
		if err := s.Remove(leader); !errors.Is(err, syscall.EBUSY) {
			t.Errorf("remove a leader with members: %v", err)
		}
		if err1, err2 := s.Remove(member), s.Remove(leader); err1 != nil || err2 != nil || len(s.Events()) != 0 {
			t.Errorf("remove: %v %v %v", err1, err2, s.Events())
		}
		if _, err := s.NewReader(EventReaderOptions{}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("a reader without rings: %v", err)
		}
	})
}

func TestEventAddRemoveWhileReading(t *testing.T) {
	needEvents(t)
	exe, _ := os.Executable()
	onThread(func(tid int) {
		s, err := NewEventSet(EventSetOptions{PIDs: []int{tid}})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		s.Add(Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
		r, _ := s.NewReader(EventReaderOptions{})
		defer r.Close()
		s.Enable(AllEvents)
		up, err := s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probe.Symbol})
		if err != nil || s.Enable(up) != nil {
			t.Error("add while reading:", err)
			return
		}
		probe.Call(10)
		if got := drainNow(t, r); len(got) != 10 {
			t.Errorf("added later: %d samples", len(got))
		}
		probe.Call(7) // in the rings when the event goes
		s.Remove(up)
		probe.Call(10)
		if got := drainNow(t, r); len(got) != 0 || r.Unattributed() != 7 {
			t.Errorf("after removal: %d samples, %d unattributed", len(got), r.Unattributed())
		}
	})
}

// Closing the set first: its events stop at once, the reader still drains
// and decodes, and frees the set when closed; Close from another goroutine
// unblocks a Read.
func TestEventLifetimes(t *testing.T) {
	needEvents(t)
	fds := openFDs(t)
	s, err := NewEventSet(EventSetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Add(Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
	r, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Enable(AllEvents)
	first := execTrue(t, 2)
	s.Close()
	if err := s.Enable(AllEvents); !errors.Is(err, syscall.EBADF) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Enable after Close: %v", err)
	}
	later := execTrue(t, 2)
	var mine []EventSample
	for _, g := range drainNow(t, r) {
		if contains(first, g.PID) || contains(later, g.PID) {
			mine = append(mine, g)
		}
	}
	if len(mine) != 2 || !contains(first, mine[0].PID) || !contains(first, mine[1].PID) {
		t.Fatalf("after the set's Close: %+v (first %v, later %v)", mine, first, later)
	}
	if f, err := mine[0].Field("filename"); err != nil || f.String() != "/bin/true" {
		t.Fatalf("decoding after the set's Close: %v %v", f, err)
	}
	done := make(chan error)
	go func() {
		// Another exec on the machine ends a Read with its record: read
		// on until the Close ends one.
		for {
			if _, err := r.Read(); err != nil {
				done <- err
				return
			}
		}
	}()
	waitInPoll(t, &r.rings)
	r.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Read: %v", err)
		}
	case <-time.After(10 * time.Second): // only a hang takes this long
		t.Fatal("Read still blocked 10s after Close")
	}
	if _, err := mine[0].Field("filename"); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("after both: %v", err)
	}
	if openFDs(t) != fds {
		t.Fatalf("fds %d -> %d", fds, openFDs(t))
	}
	r.Close()
	s.Close()
}

func TestEventErrors(t *testing.T) {
	needEvents(t)
	if _, err := NewEventSet(EventSetOptions{Pages: 3}); !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "power of two") {
		t.Fatalf("3 pages: %v", err)
	}
	if _, err := NewEventSet(EventSetOptions{CPUs: []int{4096}}); !errors.Is(err, syscall.ENODEV) {
		t.Fatalf("no such CPU: %v", err)
	}
	if _, err := NewEventSet(EventSetOptions{PIDs: []int{0x3fffffff}}); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("no such pid: %v", err)
	}
	if _, err := NewEventSet(EventSetOptions{Cgroups: []string{"/tmp"}}); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("not a cgroup: %v", err)
	}
	s := newSet(t, EventSetOptions{})
	if _, err := s.Add(Event{Kind: 99}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("bad kind: %v", err)
	}
	if _, err := s.Add(Event{Kind: EventSoftware, Period: 1000, Frequency: 99}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("period and frequency: %v", err)
	}
	if err := s.Enable(42); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("no such event: %v", err)
	}
	if err := s.AttachBPF(0, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("nil program: %v", err)
	}
	r, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewReader(EventReaderOptions{}); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second reader: %v", err)
	}
	r.Close()
	if _, err := r.Read(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	s.Close()
	if _, err := s.Add(Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"}); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("Add after Close: %v", err)
	}
	if _, err := s.NewReader(EventReaderOptions{}); err == nil {
		t.Fatal("a reader of a closed set")
	}
}

// A sample libperfbuf cannot decode is handed over raw and counted, never
// dropped; other record types too (raw: Record without DecodeErr), with
// AllRecords or without.
func TestEventUndecodableHandedOverRaw(t *testing.T) {
	needEvents(t)
	for _, all := range []bool{false, true} {
		s := newSet(t, EventSetOptions{CPUs: []int{0}, Pages: 1, PIDs: []int{os.Getpid()}})
		ev := mustAdd(t, s, Event{Kind: EventSoftware, Config: SWCPUClock, Period: 1000000})
		rd, err := s.NewReader(EventReaderOptions{AllRecords: all})
		if err != nil {
			t.Fatal(err)
		}
		// A SAMPLE of this event (PERF_SAMPLE_IDENTIFIER first) too short
		// for its other fields, then a THROTTLE (type 5).
		fd, err := s.FD(ev, 0)
		if err != nil {
			t.Fatal(err)
		}
		var id uint64
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), 0x80082407, // PERF_EVENT_IOC_ID
			uintptr(unsafe.Pointer(&id))); e != 0 {
			t.Fatal(e)
		}
		short := make([]byte, 16)
		short[0], short[6] = 9, 16
		binary.LittleEndian.PutUint64(short[8:], id)
		throttle := make([]byte, 32)
		throttle[0], throttle[6] = 5, 32
		rd.mu.Lock()
		for _, rec := range [][]byte{short, throttle} { // decoded by libperfbuf, as the rings' records are
			if err := rd.decodeRecord(0, rec); err != nil {
				t.Fatal(err)
			}
		}
		rd.mu.Unlock()
		rd.SetDeadline(time.Now())
		var got []EventSample
		for {
			smp, err := rd.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
			got = append(got, smp)
		}
		if len(got) != 2 || rd.Undecodable() != 1 || rd.Others() != 1 {
			t.Fatalf("AllRecords %v: %d records, undecodable %d, others %d, unattributed %d", all, len(got), rd.Undecodable(), rd.Others(), rd.Unattributed())
		}
		if g := got[0]; g.Event != -1 || g.Type != 9 || !bytes.Equal(g.Record, short) || g.DecodeErr == nil {
			t.Fatalf("undecodable sample: %+v", g)
		}
		if g := got[1]; g.Event != -1 || g.Type != 5 || !bytes.Equal(g.Record, throttle) || g.DecodeErr != nil {
			t.Fatalf("throttle record: %+v", g)
		}
		rd.Close()
	}
}

// The fields beyond pid/tid/time/ip come through SampleFields.
func TestEventSampleFields(t *testing.T) {
	needEvents(t)
	exe, _ := os.Executable()
	const (
		sampleRead, sampleID, sampleCPU, sampleStreamID = 1 << 4, 1 << 6, 1 << 7, 1 << 9
		sampleWeight, sampleDataSrc, sampleTransaction  = 1 << 14, 1 << 15, 1 << 17
	)
	extra := uint64(sampleRead | sampleID | sampleCPU | sampleStreamID | sampleWeight | sampleDataSrc | sampleTransaction)
	onThread(func(tid int) {
		setAffinity(t, 0)
		s, err := NewEventSet(EventSetOptions{CPUs: []int{0}, PIDs: []int{tid}})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		if _, err := s.Add(Event{Kind: EventUprobe, Name: exe, Symbol: probe.Symbol, SampleType: extra}); err != nil {
			t.Error(err)
			return
		}
		r, _ := s.NewReader(EventReaderOptions{})
		defer r.Close()
		s.Enable(AllEvents)
		probe.Call(5)
		got := drainNow(t, r)
		if len(got) != 5 {
			t.Errorf("%d samples", len(got))
			return
		}
		for i, g := range got {
			f := g.SampleFields
			if f.Present&extra != extra || f.SampleCPU != 0 || f.ID == 0 || f.StreamID != f.ID ||
				f.Read == nil || len(f.Read.Values) != 1 || f.Read.Values[0].Value != uint64(i+1) {
				t.Errorf("sample %d: %+v (read %+v)", i, f, f.Read)
			}
		}
	})
}
