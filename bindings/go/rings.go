package perfbuf

/*
#include "shim.h"
*/
import "C"

import (
	"time"
	"unsafe"
)

// RingStats are one ring's figures (perfbuf_ring_stats).
type RingStats struct {
	// CPU is the CPU the ring reads.
	CPU int
	// Records and Bytes read from the ring (headers included); Lost is
	// the records lost so far: exact at any moment where the ring's
	// events count their losses (an event set's rings on Linux 6.0+),
	// including the LostUnreported ones the kernel has not yet written
	// as a lost report; elsewhere what lost reports said.
	Records, Bytes, Lost, LostUnreported uint64
	// Wakeups is how often epoll reported the ring ready.
	Wakeups uint64
	// PendingBytes wait in the ring now; DataSize is its data area.
	PendingBytes, DataSize uint64
	// Resyncs and SkippedBytes count recoveries from an inconsistent
	// ring; Malformed the records too short for their fields, skipped.
	Resyncs, SkippedBytes, Malformed uint64
	// OverwrittenBytes: overwritable rings, bytes overwritten unread.
	OverwrittenBytes uint64
	// Batched: the fast mode batches this ring's wake-ups now;
	// BatchSwitches counts the switches; SpillSize is its spill ring.
	Batched                  bool
	BatchSwitches, SpillSize uint64
	// The loss identity (see the top README's "Lost counts"): once the
	// ring is read to its head, Produced = Delivered + LostTotal, where
	// LostTotal = Lost + OutputFailed + Dropped. Produced is known (non-nil)
	// only with ReaderOptions.OutputCounts; Samples are the sample records
	// read, Delivered those the caller kept (Samples - Dropped), Dropped
	// what it counted with CountDropped, OutputFailed the outputs the
	// helper refused that no kernel figure counts (perfbuf.bpf.h's counts).
	Produced                                             *uint64
	Samples, Delivered, OutputFailed, Dropped, LostTotal uint64
}

// RingHealth is how one ring is doing (perfbuf_ring_health).
type RingHealth struct {
	// CPU is the CPU the ring reads; Online whether it is online as the
	// reader last saw it (a ring whose CPU went offline is kept and read).
	CPU    int
	Online bool
	// PendingBytes wait in the ring now; PeakPendingBytes is the most the
	// reader found waiting (the fill high-water mark); DataSize the ring.
	PendingBytes, PeakPendingBytes, DataSize uint64
	// RecordsPerSec, BytesPerSec and WakeupsPerSec over the last second.
	RecordsPerSec, BytesPerSec, WakeupsPerSec float64
	// SinceLastRecord: since the reader last found records (-1: never).
	SinceLastRecord time.Duration
	// NeededBytes is the backlog a ring losing nothing would have held
	// (the peak, plus the bytes of the records lost meanwhile);
	// SuggestedPages the smallest ring (pages, a power of two) holding it.
	NeededBytes, SuggestedPages uint64
	// Replaced counts the times the CPU came back and got a fresh event.
	Replaced uint64
}

// withBuffer runs fn with the buffer to itself: at once when no Read
// holds it, else after waking that Read.
func (r *rings) withBuffer(op string, fn func(*C.struct_perf_buffer) C.int) (C.int, error) {
	if r.closed.Load() {
		return 0, ErrClosed
	}
	if !r.mu.TryLock() {
		r.waiters.Add(1)
		r.wake()
		r.mu.Lock()
		r.waiters.Add(-1)
	}
	defer r.mu.Unlock()
	if r.pb == nil {
		return 0, ErrClosed
	}
	pb := r.pb
	return cCall(op, func() C.int { return fn(pb) })
}

// Rings lists the CPU of each ring, by ring index (the index Stats, Peek,
// Advance and Publish take).
func (r *rings) Rings() ([]int, error) {
	var cpus []int
	_, err := r.withBuffer("Rings", func(pb *C.struct_perf_buffer) C.int {
		for i := 0; i < int(C.perfbuf_buffer_cnt(pb)); i++ {
			cpus = append(cpus, int(C.perfbuf_buffer_cpu(pb, C.size_t(i))))
		}
		return 0
	})
	return cpus, err
}

// Stats returns every ring's figures, by ring index.
func (r *rings) Stats() ([]RingStats, error) {
	var out []RingStats
	_, err := r.withBuffer("Stats", func(pb *C.struct_perf_buffer) C.int {
		for i := 0; i < int(C.perfbuf_buffer_cnt(pb)); i++ {
			var st C.struct_perfbuf_ring_stats
			st.sz = C.size_t(unsafe.Sizeof(st))
			if ret := C.perfbuf_ring_stats(pb, C.size_t(i), &st); ret < 0 {
				return ret
			}
			out = append(out, RingStats{
				CPU: int(st.cpu), Records: uint64(st.records), Bytes: uint64(st.bytes), Lost: uint64(st.lost),
				Wakeups: uint64(st.wakeups), PendingBytes: uint64(st.pending_bytes), DataSize: uint64(st.data_size),
				Resyncs: uint64(st.resyncs), SkippedBytes: uint64(st.skipped_bytes), Malformed: uint64(st.malformed),
				OverwrittenBytes: uint64(st.overwritten_bytes), Batched: st.batched != 0,
				BatchSwitches: uint64(st.batch_switches), SpillSize: uint64(st.spill_size),
				LostUnreported: uint64(st.lost_unreported),
				Samples:        uint64(st.samples), Delivered: uint64(st.delivered),
				OutputFailed: uint64(st.output_failed), Dropped: uint64(st.dropped),
				LostTotal: uint64(st.lost_total),
			})
			if st.produced_known != 0 {
				produced := uint64(st.produced)
				out[len(out)-1].Produced = &produced
			}
		}
		return 0
	})
	return out, err
}

// Health returns every ring's health, by ring index.
func (r *rings) Health() ([]RingHealth, error) {
	var out []RingHealth
	_, err := r.withBuffer("Health", func(pb *C.struct_perf_buffer) C.int {
		for i := 0; i < int(C.perfbuf_buffer_cnt(pb)); i++ {
			var h C.struct_perfbuf_ring_health
			h.sz = C.size_t(unsafe.Sizeof(h))
			if ret := C.perfbuf_ring_health(pb, C.size_t(i), &h); ret < 0 {
				return ret
			}
			out = append(out, RingHealth{
				CPU: int(h.cpu), Online: h.online != 0, PendingBytes: uint64(h.pending_bytes),
				PeakPendingBytes: uint64(h.peak_pending_bytes), DataSize: uint64(h.data_size),
				RecordsPerSec: float64(h.records_per_sec), BytesPerSec: float64(h.bytes_per_sec),
				WakeupsPerSec: float64(h.wakeups_per_sec), SinceLastRecord: time.Duration(h.ns_since_last_record),
				NeededBytes: uint64(h.needed_bytes), SuggestedPages: uint64(h.suggested_pages),
				Replaced: uint64(h.replaced),
			})
		}
		return 0
	})
	return out, err
}

// CountDropped counts n records of ring idx the caller read and then
// dropped by its own policy: they move from Delivered to Dropped in Stats,
// so the loss identity still adds up.
func (r *rings) CountDropped(idx int, n uint64) error {
	if idx < 0 {
		return invalid("CountDropped", "negative ring index")
	}
	_, err := r.withBuffer("CountDropped", func(pb *C.struct_perf_buffer) C.int {
		return C.perfbuf_count_dropped(pb, C.size_t(idx), C.uint64_t(n))
	})
	return err
}

// Peek returns ring idx's next record, its perf_event_header included,
// appended to buf[:0] (nil when the ring is empty), without consuming it.
// With Advance and Publish it is C's raw ring access
// (perfbuf_ring_peek/advance/publish): read records in place of Read, not
// alongside it.
func (r *rings) Peek(idx int, buf []byte) ([]byte, error) {
	if idx < 0 {
		return nil, invalid("Peek", "negative ring index")
	}
	var size C.size_t
	for {
		var dst unsafe.Pointer
		if cap(buf) > 0 {
			dst = unsafe.Pointer(&buf[:1][0])
		}
		ret, err := r.withBuffer("Peek", func(pb *C.struct_perf_buffer) C.int {
			return C.perfbuf_go_peek(pb, C.size_t(idx), dst, C.size_t(cap(buf)), &size)
		})
		switch {
		case err != nil:
			return nil, err
		case ret == 0:
			return nil, nil
		case ret == 2:
			buf = make([]byte, 0, int(size))
			continue
		}
		return buf[:size], nil
	}
}

// Advance moves ring idx's read position past its next record; the kernel
// may reuse the space once Publish is called.
func (r *rings) Advance(idx int) error {
	if idx < 0 {
		return invalid("Advance", "negative ring index")
	}
	_, err := r.withBuffer("Advance", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_ring_advance(pb, C.size_t(idx)) })
	return err
}

// Publish hands the space of the records advanced past back to the kernel.
func (r *rings) Publish(idx int) error {
	if idx < 0 {
		return invalid("Publish", "negative ring index")
	}
	_, err := r.withBuffer("Publish", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_ring_publish(pb, C.size_t(idx)) })
	return err
}
