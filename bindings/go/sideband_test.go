package perfbuf

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const sidebandMarker = "pb_go_sb_mark"

// A child that forks, execs a marked binary and exits shows up, in time
// order with the exec tracepoint's sample, as FORK (with this process as
// its parent), COMM with the exec bit and the marked name, MMAP2 of the
// marked binary's code (its device and inode), and EXIT.
func TestSidebandForkExecExit(t *testing.T) {
	needEvents(t)
	exe := filepath.Join(t.TempDir(), sidebandMarker)
	copyFile(t, "/bin/true", exe)
	s := newSet(t, EventSetOptions{Sideband: []string{"comm", "task", "mmap"}, Pages: 64})
	ev := mustAdd(t, s, Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
	r, err := s.NewReader(EventReaderOptions{OrderByTime: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := s.Enable(AllEvents); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := uint32(cmd.Process.Pid)
	// Read until the child's EXIT (a generous deadline only catches a hang).
	var got []EventSample
	deadline := time.Now().Add(10 * time.Second)
	for exited := false; !exited; {
		r.SetDeadline(deadline)
		smp, err := r.Read()
		if err != nil {
			t.Fatalf("before the child's exit: %v (%d records)", err, len(got))
		}
		got = append(got, smp)
		exited = smp.Sideband != nil && smp.Sideband.Kind == "exit" && smp.PID == child
	}
	s.Disable(AllEvents)
	if err := r.Flush(); err != nil {
		t.Fatal(err)
	}
	got = append(got, drainNow(t, r)...)

	var kinds []string
	var mine []EventSample
	for i, g := range got {
		if i > 0 && g.Time < got[i-1].Time {
			t.Fatalf("record %d out of time order: %d after %d", i, g.Time, got[i-1].Time)
		}
		if g.Record != nil {
			t.Fatalf("a record not decoded: %+v", g)
		}
		sb := g.Sideband
		switch {
		case sb == nil:
			if g.Event == ev && g.PID == child {
				kinds, mine = append(kinds, "exec"), append(mine, g)
			}
		case sb.Kind == "mmap2":
			if sb.PID == child && sb.Name == exe {
				kinds, mine = append(kinds, sb.Kind), append(mine, g)
			}
		case sb.Kind == "fork" || sb.Kind == "comm" || sb.Kind == "exit":
			if sb.TID == child {
				kinds, mine = append(kinds, sb.Kind), append(mine, g)
			}
			if g.Event != -1 || g.Type != 3 && g.Type != 4 && g.Type != 7 || g.Time == 0 {
				t.Fatalf("side-band record %+v: %+v", g, *sb)
			}
		default:
			t.Fatalf("a side-band record not asked for: %+v", *sb)
		}
	}
	if strings.Join(kinds, " ") != "fork comm mmap2 exec exit" {
		t.Fatalf("the child's records: %s", strings.Join(kinds, " "))
	}
	fork, comm, mm, exit := mine[0].Sideband, mine[1].Sideband, mine[2].Sideband, mine[4].Sideband
	me := uint32(os.Getpid())
	if fork.PID != child || fork.PPID != me || fork.TaskTime == 0 {
		t.Fatalf("fork: %+v (child %d, parent %d)", *fork, child, me)
	}
	if !comm.Exec || comm.Name != sidebandMarker || comm.PID != child {
		t.Fatalf("comm: %+v", *comm)
	}
	t.Logf("fork %+v\ncomm %+v\nmmap2 %+v\nexit %+v", *fork, *comm, *mm, *exit)
	var st syscall.Stat_t
	if err := syscall.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	major, minor := uint32(st.Dev>>8&0xfff|st.Dev>>32&^0xfff), uint32(st.Dev&0xff|st.Dev>>12&^0xff)
	if mm.Ino != st.Ino || mm.Maj != major || mm.Min != minor || mm.BuildID != nil || mm.Data ||
		mm.Prot&syscall.PROT_EXEC == 0 || mm.Addr == 0 || mm.Len == 0 || mm.Addr%4096 != 0 || mm.Pgoff%4096 != 0 {
		t.Fatalf("mmap2: %+v (inode %d, device %d:%d)", *mm, st.Ino, major, minor)
	}
	if exit.PID != child || exit.PPID != me {
		t.Fatalf("exit: %+v", *exit)
	}
	if r.Others() < 3 || r.Undecodable() != 0 {
		t.Fatalf("others %d undecodable %d", r.Others(), r.Undecodable())
	}
}

// Without asking by name (nor AllRecords) side-band records are only
// counted; with AllRecords they come decoded. An unknown name is refused.
func TestSidebandOptions(t *testing.T) {
	needEvents(t)
	_, err := NewEventSet(EventSetOptions{Sideband: []string{"comm", "nope"}})
	var pe *Error
	if !errors.As(err, &pe) || pe.Errno != syscall.EINVAL || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("unknown name: %v", err)
	}
	for _, all := range []bool{false, true} {
		s := newSet(t, EventSetOptions{Sideband: []string{"task"}})
		mustAdd(t, s, Event{Kind: EventTracepoint, Name: "sched:sched_process_exec"})
		r, err := s.NewReader(EventReaderOptions{AllRecords: all})
		if err != nil {
			t.Fatal(err)
		}
		// As a set whose events asked through raw attr bits, not by name.
		s.mu.Lock()
		s.sideband = false
		s.mu.Unlock()
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Fatal(err)
		}
		got := drainNow(t, r)
		r.Close()
		if r.Others() < 2 {
			t.Fatalf("AllRecords %v: others %d", all, r.Others())
		}
		if !all && len(got) != 0 {
			t.Fatalf("delivered without asking: %+v", got[0])
		}
		if all {
			tasks := map[string]bool{}
			for _, g := range got {
				if g.Sideband == nil {
					t.Fatalf("not decoded: %+v", g)
				}
				tasks[g.Sideband.Kind] = true
			}
			if !tasks["fork"] || !tasks["exit"] {
				t.Fatalf("kinds %v", tasks)
			}
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
