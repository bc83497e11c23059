//go:build !cilium

// Command ringbuf is a cilium/ebpf program reading execs from a BPF ring
// buffer, written against cilium's ringbuf package; it reads through
// libperfbuf after one change, its import line (main_cilium.go is the
// same file with cilium's import, built with -tags cilium).
//
//	ringbuf -runs 3
//
// creates a BPF_MAP_TYPE_RINGBUF and a raw tracepoint program on
// sched_process_exec writing each exec's pid and comm into it with
// bpf_ringbuf_output, runs /bin/true -runs times, prints the execs it
// reads and exits 0 once it saw ours (1 after -timeout).
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
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"perfbuf.dev/perfbuf/ringbuf"
)

// execEvent is what the program writes for every exec.
type execEvent struct {
	PID    uint32
	Unused uint32
	Comm   [16]byte
}

func main() {
	runs := flag.Int("runs", 3, "run /bin/true this many times")
	timeout := flag.Duration("timeout", 10*time.Second, "give up after this long")
	flag.Parse()
	if err := run(*runs, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "ringbuf:", err)
		os.Exit(1)
	}
}

// load creates the ring buffer and the program writing execs into it.
func load() (*ebpf.Map, *ebpf.Program, error) {
	events, err := ebpf.NewMap(&ebpf.MapSpec{Name: "events", Type: ebpf.RingBuf, MaxEntries: 64 * 1024})
	if err != nil {
		return nil, nil, err
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:    "on_exec",
		Type:    ebpf.RawTracepoint,
		License: "GPL",
		Instructions: asm.Instructions{
			// struct execEvent at fp-24: the tgid, 0, then the comm.
			asm.FnGetCurrentPidTgid.Call(),
			asm.RSh.Imm(asm.R0, 32),
			asm.StoreMem(asm.RFP, -24, asm.R0, asm.Word),
			asm.StoreImm(asm.RFP, -20, 0, asm.Word),
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, -16),
			asm.Mov.Imm(asm.R2, 16),
			asm.FnGetCurrentComm.Call(),
			asm.LoadMapPtr(asm.R1, events.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -24),
			asm.Mov.Imm(asm.R3, 24),
			asm.Mov.Imm(asm.R4, 0),
			asm.FnRingbufOutput.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
	})
	if err != nil {
		events.Close()
		return nil, nil, err
	}
	return events, prog, nil
}

func run(runs int, timeout time.Duration) error {
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	events, prog, err := load()
	if err != nil {
		return fmt.Errorf("load the BPF program (root?): %w", err)
	}
	defer events.Close()
	defer prog.Close()
	l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: "sched_process_exec", Program: prog})
	if err != nil {
		return err
	}
	defer l.Close()

	rd, err := ringbuf.NewReader(events)
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

	var rec ringbuf.Record
	for len(want) > 0 {
		err := rd.ReadInto(&rec)
		if errors.Is(err, ringbuf.ErrClosed) {
			break
		} else if err != nil {
			return err
		}
		var e execEvent
		if err := binary.Read(bytes.NewReader(rec.RawSample), binary.LittleEndian, &e); err != nil {
			return fmt.Errorf("a record of %d bytes: %w", len(rec.RawSample), err)
		}
		comm := string(bytes.TrimRight(e.Comm[:], "\x00"))
		fmt.Printf("pid %d ran %s\n", e.PID, comm)
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
