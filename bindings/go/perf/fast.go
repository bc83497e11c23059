//go:build cgo

package perf

import (
	"fmt"
	"os"
	"strings"
	"time"

	"perfbuf.dev/perfbuf"
	"perfbuf.dev/perfbuf/internal/poller"
)

// fastFromEnv turns the fast mode on for PERFBUF_ADAPTIVE=1, as
// libperfbuf does for an unchanged C program behind perf_buffer__new:
// where the options keep per-record wake-ups on forward rings (no
// WakeupEvents above 1, Watermark or Overwritable). Unset or 0 changes
// nothing; any other value is refused, never ignored.
func fastFromEnv(opts *ReaderOptions) error {
	switch v, _ := os.LookupEnv("PERFBUF_ADAPTIVE"); strings.TrimSpace(v) {
	case "", "0":
		return nil
	case "1":
		if opts.WakeupEvents <= 1 && opts.Watermark == 0 && !opts.Overwritable {
			opts.Fast = true
		}
		return nil
	default:
		return fmt.Errorf("PERFBUF_ADAPTIVE=%q is not 0 or 1", v)
	}
}

// readFast is ReadInto in the fast mode: libperfbuf's poll delivers the
// records (its spill rings and timer are in its epoll set); Flush and Close
// wake it (perfbuf_wake), and so do Pause and Resume, which ReadInto lets
// have the buffer. mu is held.
func (pr *Reader) readFast(rec *Record) error {
	for {
		if ok, err := pr.rd.TakeQueued((*perfbuf.Record)(rec)); ok {
			if err != nil {
				return pr.recordError(rec.CPU, err)
			}
			return nil
		}
		if pe := pr.pendingErr; pe != nil {
			pr.pendingErr = nil
			return pe
		}
		if err := pr.readable(); err != nil {
			return err
		}
		pr.deadlineMu.Lock()
		deadline := pr.deadline
		pr.deadlineMu.Unlock()
		switch err := pr.poll.Check(); {
		case err == ErrFlushed:
			pr.pendingErr = err
		case err != nil:
			return fmt.Errorf("epoll wait: %w", err)
		case !deadline.IsZero() && time.Until(deadline) <= 0:
			pr.pendingErr = fmt.Errorf("epoll wait: %w", os.ErrDeadlineExceeded)
		}
		if pr.pendingErr != nil {
			// Hand over what the rings hold first.
			if err := pr.rd.Consume(); err != nil {
				return err
			}
			continue
		}
		timeout := time.Duration(-1)
		if !deadline.IsZero() {
			timeout = time.Duration(poller.MsUntil(deadline)) * time.Millisecond
		}
		if err := pr.rd.PollOnce(timeout); err != nil {
			return err
		}
		pr.yield()
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

// fastControl runs fn (the kernel's pause or resume) with the reader to
// itself, waking a Read in libperfbuf's poll until it yields.
func (pr *Reader) fastControl(fn func() error, paused bool) error {
	pr.waiters.Add(1)
	defer pr.waiters.Add(-1)
	for !pr.mu.TryLock() {
		pr.poll.WakeOpen()
		time.Sleep(50 * time.Microsecond)
	}
	defer pr.mu.Unlock()
	pr.pauseMu.Lock()
	defer pr.pauseMu.Unlock()
	if pr.closed {
		return fmt.Errorf("%w", ErrClosed)
	}
	if err := fn(); err != nil {
		return err
	}
	pr.paused = paused
	return nil
}
