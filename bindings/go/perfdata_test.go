package perfbuf

// perf.data out through the Go face: what PerfDataWriter writes is read
// back by perf itself (perf script, perf evlist). Needs root, tracefs and
// perf (linux-perf); under CI=true nothing is skipped.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

func needPerf(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("perf"); err != nil {
		needRoot(t, fmt.Errorf("perf is not installed (apt-get install linux-perf): %v", err))
	}
}

// perfOutput runs perf with args and returns its standard output.
func perfOutput(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("perf", args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("perf %s: %v\n%s", strings.Join(args, " "), err, stderr)
	}
	return string(out)
}

// newWriterAndReader opens a perf.data writer at path over s and a reader
// of s's rings; both are closed when the test ends (the reader first), if
// the test has not closed them.
func newWriterAndReader(t *testing.T, path string, s *EventSet) (*PerfDataWriter, *EventReader) {
	t.Helper()
	w, err := NewPerfDataWriter(path, s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	r, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return w, r
}

// ringRecordsInFile counts the records perf report -D reads from path that
// came from the rings: those with a time (sample_id's), which the records
// the writer synthesized from /proc and its FINISHED_ROUNDs lack.
func ringRecordsInFile(t *testing.T, path string) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(perfOutput(t, "report", "-D", "-i", path), "\n") {
		// CPU TIME OFFSET [SIZE]: PERF_RECORD_...
		f := strings.Fields(line)
		if len(f) >= 5 && strings.HasPrefix(f[2], "0x") && strings.HasPrefix(f[4], "PERF_RECORD_") &&
			f[1] != "0" && !strings.HasPrefix(f[4], "PERF_RECORD_FINISHED_ROUND") {
			n++
		}
	}
	return n
}

func TestPerfDataEventSetReadByPerfScript(t *testing.T) {
	needEvents(t)
	needPerf(t)
	path := filepath.Join(t.TempDir(), "go.data")
	s := newSet(t, EventSetOptions{})
	mustAdd(t, s, Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
	mustAdd(t, s, Event{Kind: EventSoftware, Config: SWCPUClock, Frequency: 99})
	w, r := newWriterAndReader(t, path, s)
	if w.Path() != path {
		t.Fatalf("Path() = %q", w.Path())
	}
	if err := s.Enable(AllEvents); err != nil {
		t.Fatal(err)
	}
	// Polls written while the children run, and a busy spell so that the
	// 99 Hz CPU clock samples: the deadline only catches a hang.
	written := 0
	pids := execTrue(t, 4)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		spinAll(allCPUs(), 50*time.Millisecond)
		n, err := w.Poll(r, 10*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		written += n
		if written >= len(pids)+4 {
			break
		}
	}
	if err := s.Disable(AllEvents); err != nil {
		t.Fatal(err)
	}
	n, err := w.Drain(r)
	if err != nil {
		t.Fatal(err)
	}
	written += n
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := w.Drain(r); !errors.Is(err, syscall.EBADF) || !strings.Contains(err.Error(), path) {
		t.Fatalf("Drain after Close: %v", err)
	}

	// Every record the writer took from the rings is in the file: perf
	// reads exactly as many with a time (what it synthesized from /proc
	// has none), and exactly one exec of /bin/true by each child.
	if inFile := ringRecordsInFile(t, path); inFile != written {
		t.Fatalf("%d records written, perf reads %d from the rings", written, inFile)
	}
	script := perfOutput(t, "script", "-F", "pid,event,trace", "-i", path)
	for _, pid := range pids {
		found := 0
		for _, line := range strings.Split(script, "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == fmt.Sprint(pid) && strings.Contains(line, "sched:sched_process_exec") &&
				strings.Contains(line, "filename=/bin/true") {
				found++
			}
		}
		if found != 1 {
			t.Fatalf("perf script has %d execs of /bin/true by pid %d, want 1:\n%s", found, pid, script)
		}
	}
	clock := 0
	for _, line := range strings.Split(perfOutput(t, "script", "-F", "pid,event", "-i", path), "\n") {
		if strings.Contains(line, "cpu-clock") {
			clock++
		}
	}
	if clock == 0 {
		t.Fatalf("perf script shows no cpu-clock sample:\n%s", script)
	}
	var names []string
	for _, line := range strings.Split(perfOutput(t, "evlist", "-i", path), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			names = append(names, line)
		}
	}
	if strings.Join(names, ",") != "sched:sched_process_exec,cpu-clock,dummy" {
		t.Fatalf("perf evlist: %q", names)
	}
	t.Logf("%d records written; perf script: %d execs of /bin/true, %d cpu-clock samples", written, len(pids), clock)
}

func TestPerfDataBPFOutputReadByPerfScript(t *testing.T) {
	needPerf(t)
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), 8*os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	path := filepath.Join(t.TempDir(), "bpf.data")
	w, err := NewPerfDataWriterBPFOutput(path)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	emitEach(t, p, 0, 24, 7, 10)
	emitEach(t, p, 1, 24, 7, 10)
	// The samples are in the rings already (bpf_perf_event_output wrote
	// them before Emit returned): Poll finds the rings signalled.
	n, err := w.Poll(rd, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n != 20 {
		t.Fatalf("%d records written, want 20", n)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// libbpf's attr samples nothing but the raw data: perf script's
	// default ip and symbol fields have to go.
	script := perfOutput(t, "script", "-F", "-ip,-sym,-dso,-symoff", "-i", path)
	var hex []string
	for _, b := range producer.Expected(24, 7)[:8] {
		hex = append(hex, fmt.Sprintf("%02x", b))
	}
	if c := strings.Count(script, "bpf-output"); c != 20 {
		t.Fatalf("perf script shows %d bpf-output samples, want 20:\n%s", c, script)
	}
	if c := strings.Count(script, strings.Join(hex, " ")); c != 20 {
		t.Fatalf("perf script shows the bytes %s %d times, want 20:\n%s", strings.Join(hex, " "), c, script)
	}
}

func TestPerfDataErrorsNameThePath(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such", "dir.data")
	_, err := NewPerfDataWriterBPFOutput(missing)
	var perr *Error
	if !errors.As(err, &perr) || !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("NewPerfDataWriterBPFOutput(%s): %v", missing, err)
	}
	if perr.Op != "NewPerfDataWriterBPFOutput" {
		t.Fatalf("Op %q", perr.Op)
	}
	if _, err := NewPerfDataWriter(missing, nil); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("a nil set: %v", err)
	}
	needEvents(t)
	s := newSet(t, EventSetOptions{})
	mustAdd(t, s, Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
	if _, err := NewPerfDataWriter(missing, s); !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("NewPerfDataWriter(%s): %v", missing, err)
	}
	s.Close()
	if _, err := NewPerfDataWriter(filepath.Join(t.TempDir(), "x.data"), s); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("a closed set: %v", err)
	}
}

func TestPerfDataPollEndsWhenTheReaderCloses(t *testing.T) {
	needEvents(t)
	s := newSet(t, EventSetOptions{})
	mustAdd(t, s, Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
	w, r := newWriterAndReader(t, filepath.Join(t.TempDir(), "closed.data"), s)
	done := make(chan error, 1)
	go func() {
		// Any exec on the machine ends a Poll with records written; poll
		// again until the Close ends one (0 records) or finds the reader
		// closed between two Polls.
		for {
			n, err := w.Poll(r, -1)
			if errors.Is(err, ErrClosed) {
				err = nil
			}
			if err != nil || n == 0 {
				done <- err
				return
			}
		}
	}()
	waitInPoll(t, &r.rings)
	r.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Poll ended by Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Poll still blocked 30s after the reader's Close")
	}
	if _, err := w.Poll(r, 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Poll on a closed reader: %v", err)
	}
}

// Polls after a wake-up of the reader (Pause and Resume wake it) sleep
// until records come, instead of returning at once while the wake-up
// stays pending (a busy loop: CPU time close to the time spent); then the
// exec of the watched child is written.
func TestPerfDataPollSleepsAfterAWakeUp(t *testing.T) {
	needEvents(t)
	child := exec.Command("/bin/sh", "-c", "echo ready; read line; exec /bin/true")
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	// Watched once it says so: its own exec and loading are over.
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("the child: %q, %v", line, err)
	}
	s := newSet(t, EventSetOptions{PIDs: []int{child.Process.Pid}})
	mustAdd(t, s, Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
	w, r := newWriterAndReader(t, filepath.Join(t.TempDir(), "woken.data"), s)
	if err := s.Enable(AllEvents); err != nil {
		t.Fatal(err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	// The CPU time of the thread that polls (a busy Poll spins there), not
	// the process's: the runtime's other threads (the GC, the test's
	// other goroutines) use CPU of their own meanwhile.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const rusageThread = 1 // RUSAGE_THREAD
	cpu := func() time.Duration {
		var u syscall.Rusage
		if err := syscall.Getrusage(rusageThread, &u); err != nil {
			t.Fatal(err)
		}
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	start, cpu0 := time.Now(), cpu()
	polls := 0
	for time.Since(start) < 300*time.Millisecond {
		n, err := w.Poll(r, 50*time.Millisecond)
		if err != nil || n != 0 {
			t.Fatalf("a quiet Poll: %d, %v", n, err)
		}
		polls++
	}
	wall, used := time.Since(start), cpu()-cpu0
	if used > wall/2 {
		t.Fatalf("%d Polls used %v of CPU in %v: a busy loop", polls, used, wall)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatal(err)
	}
	written := 0
	for deadline := time.Now().Add(30 * time.Second); written == 0 && time.Now().Before(deadline); {
		n, err := w.Poll(r, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		written += n
	}
	if written == 0 {
		t.Fatal("the child's exec was not written")
	}
}
