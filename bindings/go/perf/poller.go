//go:build cgo

package perf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// poller waits for the rings' perf events, as cilium's reader does: an
// epoll set of the ring fds (not libperfbuf's, whose delay timer would
// hand over records below a watermark) plus an eventfd for Flush and one
// for Close.
type poller struct {
	epfd   int
	flush  int // eventfd: read when seen, one ErrFlushed per Flush
	closer int // eventfd: never read, so every later wait sees it
	events []syscall.EpollEvent

	mu     sync.Mutex // guards the eventfds against Close
	closed bool
	// wake, if set, also ends a wait in libperfbuf's poll (the fast mode);
	// it runs under mu, never after signalClose.
	wake func()
}

const (
	tokenFlush = -1
	tokenClose = -2
)

func newPoller(ringFDs []int) (*poller, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	p := &poller{epfd: epfd, flush: -1, closer: -1, events: make([]syscall.EpollEvent, len(ringFDs)+2)}
	if p.flush, err = newEventFD(); err == nil {
		p.closer, err = newEventFD()
	}
	if err != nil {
		p.release()
		return nil, err
	}
	add := func(fd int, token int32) error {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: token}
		if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fmt.Errorf("epoll_ctl: %w", err)
		}
		return nil
	}
	for i, fd := range ringFDs {
		if err = add(fd, int32(i)); err != nil {
			break
		}
	}
	if err == nil {
		if err = add(p.flush, tokenFlush); err == nil {
			err = add(p.closer, tokenClose)
		}
	}
	if err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

func newEventFD() (int, error) {
	fd, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if e != 0 {
		return -1, fmt.Errorf("eventfd: %w", e)
	}
	return int(fd), nil
}

func signal(fd int) error {
	one := uint64(1)
	_, err := syscall.Write(fd, (*[8]byte)(unsafe.Pointer(&one))[:])
	if errors.Is(err, syscall.EAGAIN) { // the counter is saturated: already signalled
		return nil
	}
	return err
}

// wait blocks until a ring is ready (nil), the deadline passes
// (os.ErrDeadlineExceeded), the bound passes (errBound), Flush
// (ErrFlushed, possibly with rings ready too) or Close (os.ErrClosed).
// A zero deadline or bound means none.
func (p *poller) wait(deadline time.Time, bound time.Duration) error {
	for {
		timeout, byBound := -1, false
		if !deadline.IsZero() {
			timeout = msUntil(deadline)
		}
		if bound > 0 && (timeout < 0 || int(bound/time.Millisecond) < timeout) {
			timeout, byBound = int((bound+time.Millisecond-1)/time.Millisecond), true
		}
		n, err := syscall.EpollWait(p.epfd, p.events, timeout)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("epoll wait: %w", err)
		}
		if n == 0 {
			if byBound {
				return errBound
			}
			return fmt.Errorf("epoll wait: %w", os.ErrDeadlineExceeded)
		}
		return p.signalled(n)
	}
}

// signalled is what the n events a wait returned say: Close, Flush or a
// ring (nil).
func (p *poller) signalled(n int) error {
	var result error
	for _, ev := range p.events[:n] {
		switch ev.Fd {
		case tokenClose:
			return fmt.Errorf("epoll wait: %w", os.ErrClosed)
		case tokenFlush:
			var buf [8]byte
			_, _ = syscall.Read(p.flush, buf[:])
			result = ErrFlushed
		}
	}
	return result
}

// check is wait without blocking, for Close and Flush only (the fast mode
// waits in libperfbuf's poll).
func (p *poller) check() error {
	for {
		n, err := syscall.EpollWait(p.epfd, p.events, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("epoll wait: %w", err)
		}
		return p.signalled(n)
	}
}

var errBound = errors.New("delay bound")

// msUntil is the epoll timeout reaching t: 0 once t has passed, rounded
// up so that a wait does not end before t.
func msUntil(t time.Time) int {
	left := time.Until(t)
	if left <= 0 {
		return 0
	}
	ms := (left + time.Millisecond - 1) / time.Millisecond
	if ms > 1<<31-1 {
		ms = 1<<31 - 1
	}
	return int(ms)
}

// signalFlush wakes a wait with ErrFlushed.
func (p *poller) signalFlush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("epoll wake: %w", os.ErrClosed)
	}
	err := signal(p.flush)
	if p.wake != nil {
		p.wake()
	}
	return err
}

// signalClose makes every wait return os.ErrClosed from now on; it
// reports false if it was already done.
func (p *poller) signalClose() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.closed = true
	_ = signal(p.closer)
	if p.wake != nil {
		p.wake()
	}
	return true
}

// release closes the fds; no wait may be running.
func (p *poller) release() {
	for _, fd := range []int{p.epfd, p.flush, p.closer} {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
	p.epfd, p.flush, p.closer = -1, -1, -1
}
