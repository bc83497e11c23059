package perfbuf

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// PerfDataSource is a reader whose rings a PerfDataWriter drains: an
// *EventReader (for NewPerfDataWriter) or a *Reader (for
// NewPerfDataWriterBPFOutput).
type PerfDataSource interface {
	perfDataRings() *rings
}

func (r *rings) perfDataRings() *rings { return r }

// PerfDataWriter writes what a reader's rings hold into a perf.data file,
// for perf report, perf script and the tools built on perf.data:
//
//	w, err := perfbuf.NewPerfDataWriter("perf.data", set)
//	r, err := set.NewReader(perfbuf.EventReaderOptions{})
//	set.Enable(perfbuf.AllEvents)
//	for running { w.Poll(r, 100*time.Millisecond) }
//	w.Close()
//
// Each Poll or Drain ends a round: a writer that dies leaves a file perf
// reads up to its last round. The records it writes are not delivered by
// the reader's Read (the two take turns on the rings: use one or the
// other). Its methods may be called from any goroutine. Errors are
// *Error values naming the file (ENOSPC for a full disk).
type PerfDataWriter struct {
	mu   sync.Mutex // every C call on w
	w    *C.struct_perfbuf_perfdata
	path string
}

// NewPerfDataWriter creates (or truncates) path as a perf.data file of the
// set's events. It adds to the set, enabled, a dummy event asking the
// kernel for COMM, FORK, EXIT and MMAP2 records, and writes COMM and MMAP2
// records from /proc for the tasks the set watches, as perf record does.
// Events added to the set later join the file when it is closed (a file
// whose writer was killed describes only the events of its start: perf
// skips the others' samples).
func NewPerfDataWriter(path string, set *EventSet) (*PerfDataWriter, error) {
	const op = "NewPerfDataWriter"
	if set == nil {
		return nil, invalid(op, "a nil EventSet")
	}
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.cset == nil || set.closed {
		return nil, set.errClosed(op)
	}
	cset := set.cset
	return newPerfDataWriter(op, path, func(cpath *C.char) (*C.struct_perfbuf_perfdata, error) {
		w, err := C.perfbuf_perfdata_new_events(cpath, cset)
		return w, err
	})
}

// NewPerfDataWriterBPFOutput creates (or truncates) path as a perf.data
// file of a BPF output Reader's samples (perf_buffer__new's event,
// PERF_COUNT_SW_BPF_OUTPUT sampling raw data); perf script -F
// -ip,-sym,-dso,-symoff shows them with their bytes.
func NewPerfDataWriterBPFOutput(path string) (*PerfDataWriter, error) {
	return newPerfDataWriter("NewPerfDataWriterBPFOutput", path, func(cpath *C.char) (*C.struct_perfbuf_perfdata, error) {
		w, err := C.perfbuf_perfdata_new_bpf_output(cpath)
		return w, err
	})
}

func newPerfDataWriter(op, path string, create func(*C.char) (*C.struct_perfbuf_perfdata, error)) (*PerfDataWriter, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	// On a locked thread: errno and the error's text are per thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	w, errno := create(cpath)
	if w == nil {
		e, ok := errno.(syscall.Errno)
		if !ok || e == 0 {
			e = syscall.EINVAL
		}
		return nil, perfDataError(op, "create", path, e)
	}
	return &PerfDataWriter{w: w, path: path}, nil
}

// perfDataError names the file: libperfbuf logs the path with the
// message, perfbuf_last_error cannot hold it.
func perfDataError(op, what, path string, e syscall.Errno) error {
	return &Error{Op: op, Errno: e, Reason: fmt.Sprintf("cannot %s %s: %v", what, path, e)}
}

// Path is the file being written.
func (w *PerfDataWriter) Path() string { return w.path }

// Drain writes every record the reader's rings hold now, then ends the
// round; it returns the records written.
func (w *PerfDataWriter) Drain(src PerfDataSource) (int, error) {
	return w.run("Drain", src, func(cw *C.struct_perfbuf_perfdata, pb *C.struct_perf_buffer) C.int {
		return C.perfbuf_perfdata_drain(cw, pb)
	})
}

// Poll waits up to timeout (negative: forever) for the reader's rings to
// hold records, then drains as Drain; it returns the records written (0:
// the timeout passed, a signal came, or the reader was woken: Close,
// Pause, Resume, SetDeadline, Consume or Flush, which then run).
// Closing the reader ends a Poll in progress.
func (w *PerfDataWriter) Poll(src PerfDataSource, timeout time.Duration) (int, error) {
	ms := -1
	if timeout >= 0 {
		ms = int((timeout + time.Millisecond - 1) / time.Millisecond)
		if int64(ms) > 1<<31-1 {
			ms = 1<<31 - 1
		}
	}
	n, err := w.run("Poll", src, func(cw *C.struct_perfbuf_perfdata, pb *C.struct_perf_buffer) C.int {
		return C.perfbuf_perfdata_poll(cw, pb, C.int(ms))
	})
	if e, ok := err.(*Error); ok && e.Errno == syscall.ECANCELED {
		return 0, nil // a wake-up for a control call waiting on the reader
	}
	return n, err
}

// run calls fn with the writer and the reader's buffer, both to itself.
func (w *PerfDataWriter) run(op string, src PerfDataSource, fn func(*C.struct_perfbuf_perfdata, *C.struct_perf_buffer) C.int) (int, error) {
	if src == nil {
		return 0, invalid(op, "a nil reader")
	}
	r := src.perfDataRings()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.w == nil {
		return 0, &Error{Op: op, Errno: syscall.EBADF, Reason: "the PerfDataWriter of " + w.path + " is closed"}
	}
	if r.closed.Load() {
		return 0, fmt.Errorf("perfbuf: %s: %w", op, ErrClosed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pb == nil {
		return 0, fmt.Errorf("perfbuf: %s: %w", op, ErrClosed)
	}
	cw, pb := w.w, r.pb
	ret := fn(cw, pb)
	if ret < 0 {
		return 0, perfDataError(op, "write", w.path, syscall.Errno(-ret))
	}
	return int(ret), nil
}

// Close finishes the file (the last round; the header features: event
// names, machine, command line, sample times, clock, tracepoint formats;
// the header rewritten) and frees the writer, whatever the outcome. A
// second Close does nothing.
func (w *PerfDataWriter) Close() error {
	w.mu.Lock()
	cw := w.w
	w.w = nil
	w.mu.Unlock()
	if cw == nil {
		return nil
	}
	if ret := C.perfbuf_perfdata_close(cw); ret < 0 {
		return perfDataError("Close", "finish", w.path, syscall.Errno(-ret))
	}
	return nil
}
