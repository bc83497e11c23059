// Command execmon is a tracing monitor of process execs, without BPF: the
// sched:sched_process_exec tracepoint is opened on every CPU with a
// perfbuf.EventSet, its samples are read in time order across CPUs, and
// each one's fields are decoded by name from the tracepoint's format file
// (the Go twin of examples/execmon.c).
//
//	execmon [-f FILTER] [-t DURATION] [COMMAND [ARGS...]]
//
// With a COMMAND, it runs it and stops once it has exited (its own execs
// and its children's are shown among everyone else's), exiting with its
// status; otherwise it runs for DURATION (default: until Ctrl-C). FILTER
// is an ftrace filter on the tracepoint's fields, e.g. 'filename ~
// "*bin/sh"'. Needs root (or CAP_PERFMON) and a mounted tracefs.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"perfbuf.dev/perfbuf"
)

func main() {
	filter := flag.String("f", "", `an ftrace filter, e.g. 'filename ~ "*bin/sh"'`)
	duration := flag.Duration("t", 0, "stop after this long (without a COMMAND; 0: until Ctrl-C)")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: execmon [-f FILTER] [-t DURATION] [COMMAND [ARGS...]]")
		flag.PrintDefaults()
	}
	flag.Parse()
	status, err := run(*filter, *duration, flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "execmon:", err)
		os.Exit(1)
	}
	os.Exit(status)
}

func run(filter string, duration time.Duration, command []string) (int, error) {
	set, err := perfbuf.NewEventSet(perfbuf.EventSetOptions{})
	if err != nil {
		return 1, err
	}
	defer set.Close()
	execEvent, err := set.Add(perfbuf.Event{Kind: perfbuf.EventTracepoint, Name: "sched:sched_process_exec", Filter: filter})
	if err != nil {
		return 1, err
	}
	rd, err := set.NewReader(perfbuf.EventReaderOptions{OrderByTime: true})
	if err != nil {
		return 1, err
	}
	defer rd.Close()
	if err := set.Enable(perfbuf.AllEvents); err != nil {
		return 1, err
	}

	// The end: the command exits, the duration passes, or a signal.
	done := make(chan struct{})
	status := 0
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	var cmd *exec.Cmd
	if len(command) > 0 {
		cmd = exec.Command(command[0], command[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			return 127, err
		}
	}
	go func() {
		defer close(done)
		switch {
		case cmd != nil:
			cmd.Wait()
			status = cmd.ProcessState.ExitCode()
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				status = 128 + int(ws.Signal())
			}
		case duration > 0:
			select {
			case <-time.After(duration):
			case <-sig:
			}
		default:
			<-sig
		}
	}()

	var execs, lost, outOfOrder, last uint64
	show := func(s perfbuf.EventSample) {
		if s.LostSamples > 0 {
			lost += s.LostSamples
			return
		}
		if s.Event != execEvent {
			return
		}
		file, err1 := s.Field("filename")
		oldPID, err2 := s.Field("old_pid")
		if err1 != nil || err2 != nil {
			return
		}
		if s.Time < last {
			outOfOrder++
		}
		last = s.Time
		execs++
		fmt.Printf("%d.%06d cpu %d pid %d (was %d) exec %s\n", s.Time/1e9, s.Time%1e9/1000, s.CPU, s.PID, oldPID.Int, file)
	}
	var s perfbuf.EventSample
	for running := true; running; {
		select {
		case <-done:
			running = false
			continue
		default:
		}
		rd.SetDeadline(time.Now().Add(100 * time.Millisecond))
		if err := rd.ReadInto(&s); errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		} else if err != nil {
			return 1, err
		}
		show(s)
	}
	// Whatever the command's last execs left in the rings, in order.
	set.Disable(perfbuf.AllEvents)
	if err := rd.Consume(); err != nil {
		return 1, err
	}
	if err := rd.Flush(); err != nil {
		return 1, err
	}
	for {
		rd.SetDeadline(time.Now().Add(10 * time.Millisecond))
		if err := rd.ReadInto(&s); errors.Is(err, os.ErrDeadlineExceeded) {
			break
		} else if err != nil {
			return 1, err
		}
		show(s)
	}
	fmt.Fprintf(os.Stderr, "execmon: %d execs, %d lost, %d out of order\n", execs, lost, outOfOrder)
	return status, nil
}
