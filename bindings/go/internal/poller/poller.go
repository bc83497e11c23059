// Package poller is the wait cilium/ebpf's readers make, shared by
// perfbuf.dev/perfbuf's RingBuffer and perfbuf.dev/perfbuf/perf: an epoll
// set of the fds that become readable with data (a ring buffer's map, the
// perf rings' events) plus an eventfd for Flush and one for Close.
package poller

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

var (
	// ErrFlushed is what a wait returns once per Flush.
	ErrFlushed = errors.New("data was flushed")
	// ErrBound is what a wait returns when its bound passed first.
	ErrBound = errors.New("delay bound")
)

const (
	tokenFlush = -1
	tokenClose = -2
)

// Poller waits for its fds, Flush or Close.
type Poller struct {
	epfd   int
	flush  int // read when seen: one ErrFlushed per Flush
	closer int // never read, so every later wait sees it
	events []syscall.EpollEvent
	ready  []int // see Ready

	mu     sync.Mutex // guards the eventfds against Close
	closed bool
	// Wake, if set, also ends a wait elsewhere (libperfbuf's poll in the
	// fast mode); it runs under mu, never after Close.
	Wake func()
}

// New watches fds (none: only Flush and Close). On error it names the
// call that failed and wraps its errno.
func New(fds []int) (*Poller, error) {
	p := &Poller{epfd: -1, flush: -1, closer: -1, events: make([]syscall.EpollEvent, len(fds)+2),
		ready: make([]int, 0, len(fds))}
	var err error
	if p.epfd, err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC); err != nil {
		p.Release()
		return nil, fmt.Errorf("epoll_create1: %w", err)
	}
	for _, fd := range []*int{&p.flush, &p.closer} {
		r, _, e := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
		if e != 0 {
			p.Release()
			return nil, fmt.Errorf("eventfd: %w", e)
		}
		*fd = int(r)
	}
	add := func(fd int, token int32) error {
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: token}
		return syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev)
	}
	for i, fd := range fds {
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
		p.Release()
		return nil, fmt.Errorf("epoll_ctl: %w", err)
	}
	return p, nil
}

// Wait blocks until a watched fd is ready (nil), the deadline passes
// (os.ErrDeadlineExceeded), the bound passes (ErrBound), Flush
// (ErrFlushed, possibly with fds ready too) or Close (os.ErrClosed). A
// zero deadline or bound means none. An epoll failure is its errno.
// Ready then lists the fds it found ready.
func (p *Poller) Wait(deadline time.Time, bound time.Duration) error {
	for {
		timeout, byBound := -1, false
		if !deadline.IsZero() {
			timeout = MsUntil(deadline)
		}
		if bound > 0 && (timeout < 0 || int(bound/time.Millisecond) < timeout) {
			timeout, byBound = int((bound+time.Millisecond-1)/time.Millisecond), true
		}
		n, err := syscall.EpollWait(p.epfd, p.events, timeout)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			p.ready = p.ready[:0]
			if byBound {
				return ErrBound
			}
			return os.ErrDeadlineExceeded
		}
		return p.signalled(n)
	}
}

// Check is Wait without blocking, for Close and Flush only: nil when
// neither was signalled.
func (p *Poller) Check() error {
	for {
		n, err := syscall.EpollWait(p.epfd, p.events, 0)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		return p.signalled(n)
	}
}

// signalled is what the n events a wait returned say: Close, Flush or a
// watched fd (nil), noting the fds ready.
func (p *Poller) signalled(n int) error {
	var result error
	p.ready = p.ready[:0]
	for _, ev := range p.events[:n] {
		switch ev.Fd {
		case tokenClose:
			return os.ErrClosed
		case tokenFlush:
			var buf [8]byte
			_, _ = syscall.Read(p.flush, buf[:])
			result = ErrFlushed
		default:
			p.ready = append(p.ready, int(ev.Fd))
		}
	}
	return result
}

// Ready is the indexes (in New's fds) of the fds the last Wait or Check
// found ready, in the order epoll gave them; valid until the next.
func (p *Poller) Ready() []int { return p.ready }

// MsUntil is the epoll timeout reaching t: 0 once t has passed, rounded
// up so that a wait does not end before t.
func MsUntil(t time.Time) int {
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

func signal(fd int) error {
	one := uint64(1)
	_, err := syscall.Write(fd, (*[8]byte)(unsafe.Pointer(&one))[:])
	if errors.Is(err, syscall.EAGAIN) { // the counter is saturated: already signalled
		return nil
	}
	return err
}

// Flush wakes a wait with ErrFlushed; os.ErrClosed after Close.
func (p *Poller) Flush() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return os.ErrClosed
	}
	err := signal(p.flush)
	if p.Wake != nil {
		p.Wake()
	}
	return err
}

// Close makes every wait return os.ErrClosed from now on; it reports
// false if that was done already.
func (p *Poller) Close() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.closed = true
	_ = signal(p.closer)
	if p.Wake != nil {
		p.Wake()
	}
	return true
}

// WakeOpen runs Wake unless Close ran (the fast mode's Pause and Resume
// use it to end a wait in libperfbuf's poll).
func (p *Poller) WakeOpen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed && p.Wake != nil {
		p.Wake()
	}
}

// Release closes the fds; no wait may be running.
func (p *Poller) Release() {
	for _, fd := range []*int{&p.epfd, &p.flush, &p.closer} {
		if *fd >= 0 {
			syscall.Close(*fd)
			*fd = -1
		}
	}
}
