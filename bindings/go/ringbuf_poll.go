//go:build cgo

package perfbuf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// ringPoller is RingBuffer's wait: an epoll set of the map's fd (readable
// while the ring holds data) and an eventfd each for Flush and Close.
type ringPoller struct {
	epfd   int
	flush  int // read when seen: one ErrFlushed per Flush
	closer int // never read, so every later wait sees it
	events [3]syscall.EpollEvent

	mu     sync.Mutex // guards the eventfds against Close
	closed bool
}

const (
	ringTokenData  = 0
	ringTokenFlush = 1
	ringTokenClose = 2
)

func newRingPoller(mapFD int) (*ringPoller, error) {
	p := &ringPoller{epfd: -1, flush: -1, closer: -1}
	fail := func(what string, err error) (*ringPoller, error) {
		p.release()
		errno, _ := err.(syscall.Errno)
		return nil, &Error{Op: "NewRingBuffer", Errno: errno, Reason: what + ": " + err.Error()}
	}
	var err error
	if p.epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		return fail("epoll_create1", err)
	}
	for _, fd := range []*int{&p.flush, &p.closer} {
		r, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
		if e != 0 {
			return fail("eventfd", e)
		}
		*fd = int(r)
	}
	for token, fd := range []int{mapFD, p.flush, p.closer} {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(token)}
		if err := syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
			return fail("epoll_ctl", err)
		}
	}
	return p, nil
}

// wait blocks until the ring is readable (nil), Flush (ErrFlushed), Close
// (os.ErrClosed) or the deadline (os.ErrDeadlineExceeded; a zero deadline
// is none).
func (p *ringPoller) wait(deadline time.Time) error {
	for {
		timeout := -1
		if !deadline.IsZero() {
			timeout = 0
			if left := time.Until(deadline); left > 0 {
				ms := (left + time.Millisecond - 1) / time.Millisecond
				if ms > 1<<31-1 {
					ms = 1<<31 - 1
				}
				timeout = int(ms)
			}
		}
		n, err := syscall.EpollWait(p.epfd, p.events[:], timeout)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return &Error{Op: "Read", Errno: err.(syscall.Errno), Reason: "epoll_wait: " + err.Error()}
		}
		if n == 0 {
			return fmt.Errorf("perfbuf: ring buffer: %w", os.ErrDeadlineExceeded)
		}
		var result error
		for _, ev := range p.events[:n] {
			switch ev.Fd {
			case ringTokenClose:
				return fmt.Errorf("perfbuf: ring buffer: %w", os.ErrClosed)
			case ringTokenFlush:
				var buf [8]byte
				_, _ = syscall.Read(p.flush, buf[:])
				result = ErrFlushed
			}
		}
		return result
	}
}

func signalEventFD(fd int) error {
	one := uint64(1)
	_, err := syscall.Write(fd, (*[8]byte)(unsafe.Pointer(&one))[:])
	if errors.Is(err, syscall.EAGAIN) { // saturated: already signalled
		return nil
	}
	return err
}

func (p *ringPoller) signalFlush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("perfbuf: ring buffer: %w", os.ErrClosed)
	}
	return signalEventFD(p.flush)
}

// signalClose makes every wait return os.ErrClosed from now on; false if
// that was done already.
func (p *ringPoller) signalClose() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.closed = true
	_ = signalEventFD(p.closer)
	return true
}

// release closes the fds; no wait may be running.
func (p *ringPoller) release() {
	for _, fd := range []*int{&p.epfd, &p.flush, &p.closer} {
		if *fd >= 0 {
			syscall.Close(*fd)
			*fd = -1
		}
	}
}
