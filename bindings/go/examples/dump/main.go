// Command dump prints the records of a BPF_MAP_TYPE_PERF_EVENT_ARRAY.
//
//	dump /sys/fs/bpf/MAP            a map pinned on a bpffs (e.g. by bpftool map pin)
//	dump -obj exec_events.bpf.o     loads the repository's example BPF program
//	                                (build/exec_events.bpf.o, make examples) with
//	                                cilium/ebpf and prints the execs it reports
//	dump -obj exec_events.bpf.o -check 3
//	                                runs /bin/true 3 times and exits 0 once it saw
//	                                those execs (1 after -timeout)
//
// Ctrl-C stops it. The -obj mode reads the collection's "events" map, a
// cilium/ebpf *ebpf.Map, through perfbuf.NewReaderFromMap.
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"perfbuf.dev/perfbuf"
)

func main() {
	obj := flag.String("obj", "", "load this BPF object (exec_events.bpf.o) instead of opening a pinned map")
	check := flag.Int("check", 0, "with -obj: run /bin/true this many times, exit 0 once all were seen")
	timeout := flag.Duration("timeout", 10*time.Second, "with -check: give up after this long")
	fast := flag.Bool("fast", false, "the fast mode (adaptive wake-ups)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: dump [-fast] /sys/fs/bpf/MAP\n       dump [-fast] -obj exec_events.bpf.o [-check N [-timeout D]]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	opts := perfbuf.ReaderOptions{Fast: *fast}
	var err error
	switch {
	case *obj != "" && flag.NArg() == 0:
		err = dumpObject(*obj, *check, *timeout, opts)
	case *obj == "" && flag.NArg() == 1 && *check == 0:
		err = dumpPinned(flag.Arg(0), opts)
	default:
		flag.Usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "dump:", err)
		os.Exit(1)
	}
}

// dumpPinned prints every record of the map pinned at path until Ctrl-C.
func dumpPinned(path string, opts perfbuf.ReaderOptions) error {
	fd, err := objGet(path)
	if err != nil {
		return fmt.Errorf("open %s: %w (is a bpffs mounted there, with the map pinned?)", path, err)
	}
	defer syscall.Close(fd)
	rd, err := perfbuf.NewReader(fd, 8*os.Getpagesize(), opts)
	if err != nil {
		return err
	}
	closeOnInterrupt(rd)
	return readAll(rd, func(rec perfbuf.Record) bool {
		fmt.Printf("cpu %d: %d bytes %x\n", rec.CPU, len(rec.RawSample), rec.RawSample[:min(16, len(rec.RawSample))])
		return false
	})
}

// objGet opens a pinned BPF object (BPF_OBJ_GET).
func objGet(path string) (int, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	attr := [16]uint64{uint64(uintptr(unsafe.Pointer(p)))} // union bpf_attr { pathname; bpf_fd; file_flags }
	fd, _, errno := syscall.Syscall(321 /* SYS_bpf */, 7 /* BPF_OBJ_GET */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// execEvent is what the example BPF program writes for every exec
// (examples/bpf/exec_events.bpf.c).
type execEvent struct {
	PID    uint32
	Unused uint32
	Comm   [16]byte
}

// dumpObject loads the example BPF program, attaches it to the
// sched_process_exec raw tracepoint and prints the execs it reports; with
// check > 0 it runs /bin/true check times and returns once it saw them.
func dumpObject(path string, check int, timeout time.Duration, opts perfbuf.ReaderOptions) error {
	if err := rlimit.RemoveMemlock(); err != nil { // kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK
		return err
	}
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return fmt.Errorf("load %s (root?): %w", path, err)
	}
	defer coll.Close()
	prog, events := coll.Programs["on_exec"], coll.Maps["events"]
	if prog == nil || events == nil {
		return fmt.Errorf("%s has no program on_exec or no map events", path)
	}
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: prog})
	if err != nil {
		return err
	}
	defer l.Close()
	rd, err := perfbuf.NewReaderFromMap(events, 8*os.Getpagesize(), opts) // an *ebpf.Map
	if err != nil {
		return err
	}
	closeOnInterrupt(rd)

	want := map[uint32]bool{} // pids of our /bin/true runs not seen yet
	for i := 0; i < check; i++ {
		cmd := exec.Command("/bin/true")
		if err := cmd.Start(); err != nil {
			return err
		}
		want[uint32(cmd.Process.Pid)] = true
		if err := cmd.Wait(); err != nil {
			return err
		}
	}
	if check > 0 {
		rd.SetDeadline(time.Now().Add(timeout))
	}
	err = readAll(rd, func(rec perfbuf.Record) bool {
		var e execEvent
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &e); err != nil {
			fmt.Printf("cpu %d: short record of %d bytes\n", rec.CPU, len(rec.RawSample))
			return false
		}
		comm := string(bytes.TrimRight(e.Comm[:], "\x00"))
		fmt.Printf("cpu %d: pid %d ran %s\n", rec.CPU, e.PID, comm)
		if want[e.PID] && comm == "true" {
			delete(want, e.PID)
		}
		return check > 0 && len(want) == 0
	})
	if check > 0 {
		fmt.Printf("%d of our %d execs of true seen\n", check-len(want), check)
		if len(want) > 0 {
			return fmt.Errorf("%d execs not seen (%v)", len(want), err)
		}
		return nil
	}
	return err
}

// readAll hands every record to show until show returns true (nil), the
// Reader is closed (nil) or fails.
func readAll(rd *perfbuf.Reader, show func(perfbuf.Record) bool) error {
	defer rd.Close()
	var rec perfbuf.Record
	for {
		err := rd.ReadInto(&rec)
		if errors.Is(err, perfbuf.ErrClosed) {
			return nil
		} else if err != nil {
			return err
		}
		if rec.LostSamples > 0 {
			fmt.Printf("cpu %d: lost %d\n", rec.CPU, rec.LostSamples)
			continue
		}
		if show(rec) {
			return nil
		}
	}
}

func closeOnInterrupt(rd *perfbuf.Reader) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() { <-sig; rd.Close() }()
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
