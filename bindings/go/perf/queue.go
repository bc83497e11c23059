package perf

/*
#include "shim.h"
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// queue holds the records libperfbuf's callbacks hand over (overwritable
// snapshots, the fast mode) until ReadInto returns them. Its records keep
// their sample buffers when popped, so a steady state allocates nothing.
type queue struct {
	recs []Record
	head int
}

func (q *queue) empty() bool { return q.head == len(q.recs) }

func (q *queue) push(cpu int, data []byte, lost uint64) {
	if len(q.recs) < cap(q.recs) {
		q.recs = q.recs[:len(q.recs)+1]
	} else {
		q.recs = append(q.recs, Record{})
	}
	r := &q.recs[len(q.recs)-1]
	r.CPU, r.LostSamples, r.Remaining = cpu, lost, 0
	r.RawSample = append(r.RawSample[:0], data...)
}

// reverseFrom puts the records from index start on newest first (cilium
// reads an overwritable ring from its head back).
func (q *queue) reverseFrom(start int) {
	for i, j := start, len(q.recs)-1; i < j; i, j = i+1, j-1 {
		q.recs[i], q.recs[j] = q.recs[j], q.recs[i]
	}
}

// pop copies the oldest record into rec (reusing rec.RawSample).
func (q *queue) pop(rec *Record) {
	r := &q.recs[q.head]
	rec.CPU, rec.LostSamples, rec.Remaining = r.CPU, r.LostSamples, r.Remaining
	if r.LostSamples > 0 {
		rec.RawSample = rec.RawSample[:0]
	} else {
		rec.RawSample = append(rec.RawSample[:0], r.RawSample...)
	}
	q.head++
	if q.head == len(q.recs) {
		q.recs, q.head = q.recs[:0], 0
	}
}

//export perfGoSample
func perfGoSample(h C.uintptr_t, cpu C.int, data unsafe.Pointer, size C.uint32_t) {
	q := cgo.Handle(h).Value().(*queue)
	q.push(int(cpu), unsafe.Slice((*byte)(data), int(size)), 0)
}

//export perfGoLost
func perfGoLost(h C.uintptr_t, cpu C.int, cnt C.uint64_t) {
	q := cgo.Handle(h).Value().(*queue)
	q.push(int(cpu), nil, uint64(cnt))
}
