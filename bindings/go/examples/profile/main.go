// Command profile samples every CPU at 99 Hz with a BPF program attached
// to each CPU's event, which counts the samples per CPU, and reports the
// counts at exit (the Go twin of examples/profile.c).
//
//	profile [-obj profile.bpf.o] [-t 1s]      (as root)
//
// The BPF object is examples/bpf/profile.bpf.c (build/profile.bpf.o, built
// by make): program "on_sample", array map "counts" (CPU -> samples),
// loaded with cilium/ebpf and attached through a perfbuf.EventSet. The
// event is CPU cycles where the machine has a PMU, else the software CPU
// clock (a virtual machine): the set says which it got, and why. No rings:
// the program does all the work. While it samples, a goroutine locked to
// an OS thread pinned to each CPU spins (an idle vCPU may take no clock
// samples). It exits 1 if a CPU took no sample.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"perfbuf.dev/perfbuf"
)

const hz = 99

func main() {
	obj := flag.String("obj", "profile.bpf.o", "the BPF object (build/profile.bpf.o)")
	duration := flag.Duration("t", time.Second, "how long to sample")
	flag.Parse()
	silent, err := run(*obj, *duration)
	if err != nil {
		fmt.Fprintln(os.Stderr, "profile:", err)
		os.Exit(1)
	}
	if silent > 0 {
		fmt.Fprintf(os.Stderr, "profile: %d CPUs took no sample\n", silent)
		os.Exit(1)
	}
}

func run(path string, duration time.Duration) (silent int, err error) {
	if err := rlimit.RemoveMemlock(); err != nil { // kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK
		return 0, err
	}
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return 0, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return 0, fmt.Errorf("load %s (root?): %w", path, err)
	}
	defer coll.Close()
	prog, counts := coll.Programs["on_sample"], coll.Maps["counts"]
	if prog == nil || counts == nil {
		return 0, fmt.Errorf("%s has no program on_sample or no map counts", path)
	}

	set, err := perfbuf.NewEventSet(perfbuf.EventSetOptions{NoRings: true})
	if err != nil {
		return 0, err
	}
	defer set.Close()
	ev, err := set.Add(perfbuf.Event{
		Kind: perfbuf.EventHardware, Config: perfbuf.HWCPUCycles,
		Fallback: true, FallbackConfig: perfbuf.SWCPUClock,
		Frequency: hz,
	})
	if err != nil {
		return 0, err
	}
	// Opened disabled: the program (an *ebpf.Program) is attached before any sample is taken.
	if err := set.AttachBPF(ev, prog); err != nil {
		return 0, err
	}
	if err := set.Enable(ev); err != nil {
		return 0, err
	}
	info, err := set.Info(ev)
	if err != nil {
		return 0, err
	}
	if info.FellBack() {
		fmt.Printf("no hardware cycles here: %s; sampling the software CPU clock\n", info.FallbackReason())
	} else if info.Kind == perfbuf.EventHardware {
		fmt.Println("sampling CPU cycles")
	} else {
		fmt.Println("sampling the CPU clock")
	}
	cpus, err := set.CPUs()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	spin(cpus, duration)
	if err := set.Disable(ev); err != nil {
		return 0, err
	}
	elapsed := time.Since(start)

	for _, cpu := range cpus {
		var samples uint64
		if err := counts.Lookup(uint32(cpu), &samples); err != nil {
			return 0, err
		}
		fmt.Printf("cpu %d: %d samples (%.0f expected at %d Hz)\n", cpu, samples, elapsed.Seconds()*hz, hz)
		if samples == 0 {
			silent++
		}
	}
	if len(cpus) == 0 {
		return 0, fmt.Errorf("no CPU to sample")
	}
	return silent, nil
}

// spin keeps each CPU busy for d: a goroutine locked to an OS thread
// pinned to it.
func spin(cpus []int, d time.Duration) {
	var wg sync.WaitGroup
	for _, cpu := range cpus {
		wg.Add(1)
		go func(cpu int) {
			defer wg.Done()
			runtime.LockOSThread() // never unlocked: the pinned thread exits with the goroutine
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				fmt.Fprintf(os.Stderr, "profile: pin to cpu %d: %v\n", cpu, err)
			}
			for end := time.Now().Add(d); time.Now().Before(end); {
			}
		}(cpu)
	}
	wg.Wait()
}
