// Command dump prints every record of a BPF_MAP_TYPE_PERF_EVENT_ARRAY
// pinned at the path given (e.g. by bpftool map pin).
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"unsafe"

	"perfbuf.dev/perfbuf"
)

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

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dump /sys/fs/bpf/MAP")
		os.Exit(2)
	}
	fd, err := objGet(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "open map:", err)
		os.Exit(1)
	}
	rd, err := perfbuf.NewReader(fd, 8*os.Getpagesize(), perfbuf.ReaderOptions{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	go func() { <-sig; rd.Close() }()
	for {
		rec, err := rd.Read()
		if errors.Is(err, perfbuf.ErrClosed) {
			return
		} else if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if rec.LostSamples > 0 {
			fmt.Printf("cpu %d: lost %d\n", rec.CPU, rec.LostSamples)
			continue
		}
		fmt.Printf("cpu %d: %d bytes %x\n", rec.CPU, len(rec.RawSample), rec.RawSample[:min(16, len(rec.RawSample))])
	}
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
