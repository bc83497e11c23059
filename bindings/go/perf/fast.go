package perf

/*
#include <errno.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// waitFast is poller.wait for the fast mode: libperfbuf's poll delivers
// into the queue; Flush and Close wake it (perfbuf_wake), and so do Pause
// and Resume, which ReadInto lets have the buffer.
func (pr *Reader) waitFast(deadline time.Time) error {
	for {
		if err := pr.readable(); err != nil {
			return err
		}
		if err := pr.poll.check(); err != nil {
			return err
		}
		timeout := -1
		if !deadline.IsZero() {
			timeout = msUntil(deadline)
		}
		ret := C.perfbuf_poll(pr.pb, C.int(timeout))
		if !pr.queue.empty() {
			return nil
		}
		switch {
		case ret == -C.ECANCELED || ret == -C.EINTR:
			pr.yield()
		case ret < 0:
			return fmt.Errorf("perfbuf: poll: %w", syscall.Errno(-ret))
		case !deadline.IsZero() && time.Until(deadline) <= 0:
			return fmt.Errorf("epoll wait: %w", os.ErrDeadlineExceeded)
		}
	}
}

// yield lets waiting Pause/Resume calls have the buffer (mu is held).
func (pr *Reader) yield() {
	if pr.waiters.Load() == 0 {
		return
	}
	pr.mu.Unlock()
	for pr.waiters.Load() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	pr.mu.Lock()
}

// fastControl runs fn with the buffer to itself, waking a Read in
// libperfbuf's poll until it yields.
func (pr *Reader) fastControl(fn func(*C.struct_perf_buffer) C.int, paused bool) error {
	pr.waiters.Add(1)
	defer pr.waiters.Add(-1)
	for !pr.mu.TryLock() {
		pr.poll.mu.Lock()
		if !pr.poll.closed {
			pr.poll.wake()
		}
		pr.poll.mu.Unlock()
		time.Sleep(50 * time.Microsecond)
	}
	defer pr.mu.Unlock()
	pr.pauseMu.Lock()
	defer pr.pauseMu.Unlock()
	if pr.closed || pr.pb == nil {
		return fmt.Errorf("%w", ErrClosed)
	}
	if ret := fn(pr.pb); ret < 0 {
		return fmt.Errorf("perfbuf: pause/resume: %w", syscall.Errno(-ret))
	}
	pr.paused = paused
	return nil
}

// remaining is the backlog of cpu's ring (the fast mode's records come
// through the queue).
func (pr *Reader) remaining(cpu int) int {
	for i, c := range pr.cpus {
		if c == cpu {
			return int(C.perf_pending(C.uintptr_t(uintptr(unsafe.Pointer(pr.pb))), C.size_t(i)))
		}
	}
	return 0
}
