package perfbuf

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"sort"
	"strings"
	"unsafe"
)

// Side-band records: what happens to processes and address spaces
// (EventSetOptions.Sideband), decoded by perfbuf_events_decode_sideband
// into SidebandRecord and delivered by the EventReader with the samples.

// sidebandFlags are perfbuf_events_opts.flags by the names
// EventSetOptions.Sideband takes (PERFBUF_EVENTS_SB_*).
var sidebandFlags = map[string]C.uint32_t{
	"comm":       C.PERFBUF_EVENTS_SB_COMM,
	"task":       C.PERFBUF_EVENTS_SB_TASK,
	"mmap":       C.PERFBUF_EVENTS_SB_MMAP,
	"mmap_data":  C.PERFBUF_EVENTS_SB_MMAP_DATA,
	"build_id":   C.PERFBUF_EVENTS_SB_BUILD_ID,
	"switch":     C.PERFBUF_EVENTS_SB_SWITCH,
	"namespaces": C.PERFBUF_EVENTS_SB_NAMESPACES,
	"cgroup":     C.PERFBUF_EVENTS_SB_CGROUP,
	"ksymbol":    C.PERFBUF_EVENTS_SB_KSYMBOL,
	"bpf_event":  C.PERFBUF_EVENTS_SB_BPF_EVENT,
}

// sidebandKinds are the PERF_RECORD_* types of side-band records, by the
// names SidebandRecord.Kind uses.
var sidebandKinds = map[uint32]string{
	1: "mmap", 3: "comm", 4: "exit", 7: "fork", 10: "mmap2", 14: "switch", 15: "switch_cpu_wide",
	16: "namespaces", 17: "ksymbol", 18: "bpf_event", 19: "cgroup",
}

// sidebandOptFlags is the opts flags for side-band record names; an
// unknown name is an error naming it and the known ones.
func sidebandOptFlags(names []string) (C.uint32_t, error) {
	var flags C.uint32_t
	for _, name := range names {
		f, ok := sidebandFlags[name]
		if !ok {
			known := make([]string, 0, len(sidebandFlags))
			for k := range sidebandFlags {
				known = append(known, k)
			}
			sort.Strings(known)
			return 0, fmt.Errorf("unknown side-band record %q: expected some of %s", name, strings.Join(known, ", "))
		}
		flags |= f
	}
	return flags, nil
}

// SidebandRecord is a side-band record, decoded. Fields a kind does not
// have are zero.
type SidebandRecord struct {
	// Kind is "comm", "fork", "exit", "mmap", "mmap2", "switch",
	// "switch_cpu_wide", "namespaces", "ksymbol", "bpf_event" or "cgroup".
	Kind string
	// RecordType and Misc are the record header's type (PERF_RECORD_*) and misc.
	RecordType uint32
	Misc       uint16
	// PID and TID: the task the record is about (comm, fork, exit, mmap*,
	// namespaces); for the other kinds, the sample_id trailer's.
	PID, TID uint32
	// PPID and PTID: fork and exit, the parent's process and thread ids.
	PPID, PTID uint32
	// CPU is the sample_id trailer's CPU (the ring's).
	CPU uint32
	// TaskTime: fork and exit, the record's own time (the perf clock).
	TaskTime uint64
	// Exec: a comm record whose name exec set.
	Exec bool
	// Name is the comm, the mapped file, the ksymbol's symbol or the
	// cgroup's path.
	Name string
	// Addr, Len: mmap* start and length (ksymbol: the symbol's); Pgoff the
	// mapping's offset into the file, in bytes.
	Addr, Len, Pgoff uint64
	// Maj, Min, Ino, InoGeneration: mmap2's device and inode (zero when
	// BuildID is set).
	Maj, Min           uint32
	Ino, InoGeneration uint64
	// BuildID: mmap2's build id where the kernel gave one ("build_id").
	BuildID []byte
	// Prot and MapFlags: mmap2's PROT_* and MAP_* bits; Data: a data (not
	// executable) mapping.
	Prot, MapFlags uint32
	Data           bool
	// SwitchOut: a switch out (else in); Preempt: out while still
	// runnable; NextPrevPID/TID (switch_cpu_wide, HasNextPrev): the task
	// switched to (out) or from (in).
	SwitchOut, Preempt, HasNextPrev bool
	NextPrevPID, NextPrevTID        uint32
	// ID: the cgroup id or the BPF program id; SubType and SubFlags:
	// ksymbol's and bpf_event's type and flags; Tag: the BPF program's tag.
	ID                uint64
	SubType, SubFlags uint16
	Tag               [8]byte
	// Namespaces: the namespaces record's (dev, inode) pairs.
	Namespaces [][2]uint64
}

// sidebandFromC copies s, a side-band record libperfbuf decoded in a
// record of size bytes (its pointers point into that record, C memory),
// into Go memory.
func sidebandFromC(s *C.struct_perfbuf_sideband, size uint64) *SidebandRecord {
	out := &SidebandRecord{
		Kind:       sidebandKinds[uint32(s.record_type)],
		RecordType: uint32(s.record_type), Misc: uint16(s.misc),
		PID: uint32(s.pid), TID: uint32(s.tid), PPID: uint32(s.ppid), PTID: uint32(s.ptid),
		CPU: uint32(s.cpu), TaskTime: uint64(s.task_time),
		Exec: s.flags&C.PERFBUF_SIDEBAND_F_EXEC != 0,
		Addr: uint64(s.addr), Len: uint64(s.len), Pgoff: uint64(s.pgoff),
		Maj: uint32(s.maj), Min: uint32(s.min), Ino: uint64(s.ino), InoGeneration: uint64(s.ino_generation),
		Prot: uint32(s.prot), MapFlags: uint32(s.map_flags),
		Data:        s.flags&C.PERFBUF_SIDEBAND_F_DATA != 0,
		SwitchOut:   s.flags&C.PERFBUF_SIDEBAND_F_SWITCH_OUT != 0,
		Preempt:     s.flags&C.PERFBUF_SIDEBAND_F_PREEMPT != 0,
		HasNextPrev: s.flags&C.PERFBUF_SIDEBAND_F_NEXT_PREV != 0,
		NextPrevPID: uint32(s.next_prev_pid), NextPrevTID: uint32(s.next_prev_tid),
		ID: uint64(s.id), SubType: uint16(s.sub_type), SubFlags: uint16(s.sub_flags),
	}
	// The pointers point into the record (C memory), bounded by it.
	if s.name != nil && s.name_len > 0 && uint64(s.name_len) < size {
		out.Name = C.GoStringN(s.name, C.int(s.name_len))
	}
	if s.flags&C.PERFBUF_SIDEBAND_F_BUILD_ID != 0 && s.build_id != nil && uint64(s.build_id_size) < size {
		out.BuildID = C.GoBytes(unsafe.Pointer(s.build_id), C.int(s.build_id_size))
	}
	for i := range out.Tag {
		out.Tag[i] = byte(s.tag[i])
	}
	if s.namespaces != nil && s.namespaces_nr > 0 && uint64(s.namespaces_nr)*16 < size {
		words := unsafe.Slice((*uint64)(unsafe.Pointer(s.namespaces)), 2*int(s.namespaces_nr))
		out.Namespaces = make([][2]uint64, s.namespaces_nr)
		for i := range out.Namespaces {
			out.Namespaces[i] = [2]uint64{words[2*i], words[2*i+1]}
		}
	}
	return out
}
