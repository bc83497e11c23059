package perfbuf

import (
	"encoding/binary"
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
	for _, g := range got {
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
	// The child's own records in time order (those of other tasks are not
	// checked: one written by a CPU the host held back between timestamp
	// and commit comes late, rightly, and says nothing of the ordering).
	if strings.Join(kinds, " ") != "fork comm mmap2 exec exit" {
		t.Fatalf("the child's records: %s", strings.Join(kinds, " "))
	}
	for i := 1; i < len(mine); i++ {
		if mine[i].Time < mine[i-1].Time {
			t.Fatalf("the child's %s at %d after its %s at %d", kinds[i], mine[i].Time, kinds[i-1], mine[i-1].Time)
		}
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

// Side-band records asked for by name come decoded, AllRecords or not
// (it no longer changes anything). An unknown name is refused.
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
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Fatal(err)
		}
		got := drainNow(t, r)
		r.Close()
		tasks := map[string]bool{}
		for _, g := range got {
			if g.Sideband == nil {
				t.Fatalf("AllRecords %v: not decoded: %+v", all, g)
			}
			tasks[g.Sideband.Kind] = true
		}
		if !tasks["fork"] || !tasks["exit"] || r.Others() != uint64(len(got)) {
			t.Fatalf("AllRecords %v: kinds %v, others %d, %d delivered", all, tasks, r.Others(), len(got))
		}
	}
}

// A raw attr asking for context switches through its own bit
// (attr.context_switch), in a set that asked for no side-band record by
// name and a reader without AllRecords: the SWITCH records reach Read,
// decoded, attributed to that event, and counted.
func TestSidebandThroughRawAttr(t *testing.T) {
	needEvents(t)
	const (
		perfTypeSoftware, perfCountSWDummy = 1, 9
		attrContextSwitch                  = 1 << 26
		attrSize                           = 112
	)
	attr := make([]byte, attrSize)
	binary.LittleEndian.PutUint32(attr[0:], perfTypeSoftware)
	binary.LittleEndian.PutUint32(attr[4:], attrSize)
	binary.LittleEndian.PutUint64(attr[8:], perfCountSWDummy)
	binary.LittleEndian.PutUint64(attr[40:], attrContextSwitch)
	onThread(func(tid int) {
		setAffinity(t, 0)
		s, err := NewEventSet(EventSetOptions{CPUs: []int{0}, PIDs: []int{tid}})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		ev, err := s.Add(Event{Kind: EventRaw, Attr: attr})
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
		if err := s.Enable(AllEvents); err != nil {
			t.Error(err)
			return
		}
		for i := 0; i < 5; i++ {
			time.Sleep(2 * time.Millisecond) // off the CPU and back: a switch out, then in
		}
		s.Disable(AllEvents)
		got := drainNow(t, r)
		var out, in int
		for _, g := range got {
			sb := g.Sideband
			if sb == nil || sb.Kind != "switch" || g.Event != ev || g.Type != 14 || g.Record != nil ||
				sb.PID != uint32(os.Getpid()) || sb.TID != uint32(tid) {
				t.Errorf("not a decoded switch of this thread: %+v (sideband %+v)", g, sb)
				return
			}
			if sb.SwitchOut {
				out++
			} else {
				in++
			}
		}
		if out < 5 || in < 5 || r.Others() != uint64(len(got)) || r.Undecodable() != 0 {
			t.Errorf("%d out, %d in, others %d of %d delivered, undecodable %d", out, in, r.Others(), len(got), r.Undecodable())
		}
	})
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
