//go:build !cilium

// Command switch is a cilium/ebpf program reading execs from a perf event
// array, written against cilium's perf package; it reads through
// libperfbuf after one change, its import line (main_cilium.go is the
// same file with cilium's import, built with -tags cilium).
//
//	switch -obj build/exec_events.bpf.o -runs 3
//
// loads the example BPF program, runs /bin/true -runs times, prints the
// execs it reports and exits 0 once it saw ours (1 after -timeout).
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"perfbuf.dev/perfbuf/perf"
)

// execEvent is what examples/bpf/exec_events.bpf.c writes for every exec.
type execEvent struct {
	PID    uint32
	Unused uint32
	Comm   [16]byte
}

func main() {
	obj := flag.String("obj", "exec_events.bpf.o", "the example BPF object")
	runs := flag.Int("runs", 3, "run /bin/true this many times")
	timeout := flag.Duration("timeout", 10*time.Second, "give up after this long")
	flag.Parse()
	if err := run(*obj, *runs, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "switch:", err)
		os.Exit(1)
	}
}

func run(obj string, runs int, timeout time.Duration) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	coll, err := ebpf.LoadCollection(obj)
	if err != nil {
		return fmt.Errorf("load %s (root?): %w", obj, err)
	}
	defer coll.Close()
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: coll.Programs["on_exec"]})
	if err != nil {
		return err
	}
	defer l.Close()

	rd, err := perf.NewReader(coll.Maps["events"], 8*os.Getpagesize())
	if err != nil {
		return err
	}
	defer rd.Close()

	want := map[uint32]bool{}
	for i := 0; i < runs; i++ {
		cmd := exec.Command("/bin/true")
		if err := cmd.Run(); err != nil {
			return err
		}
		want[uint32(cmd.Process.Pid)] = true
	}
	// Close from another goroutine ends a blocked Read with ErrClosed.
	seen := make(chan struct{})
	go func() {
		select {
		case <-seen:
		case <-time.After(timeout):
		}
		rd.Close()
	}()

	var rec perf.Record
	for len(want) > 0 {
		err := rd.ReadInto(&rec)
		if errors.Is(err, perf.ErrClosed) {
			break
		} else if err != nil {
			return err
		}
		if rec.LostSamples > 0 {
			fmt.Printf("cpu %d: lost %d\n", rec.CPU, rec.LostSamples)
			continue
		}
		var e execEvent
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &e); err != nil {
			return fmt.Errorf("a record of %d bytes: %w", len(rec.RawSample), err)
		}
		comm := string(bytes.TrimRight(e.Comm[:], "\x00"))
		fmt.Printf("cpu %d: pid %d ran %s\n", rec.CPU, e.PID, comm)
		if comm == "true" {
			delete(want, e.PID)
		}
	}
	close(seen)
	if len(want) > 0 {
		return fmt.Errorf("%d of our %d execs not seen", len(want), runs)
	}
	fmt.Printf("all %d execs of /bin/true seen\n", runs)
	return nil
}
