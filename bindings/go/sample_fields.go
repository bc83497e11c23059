package perfbuf

/*
#include "shim.h"
*/
import "C"

import "unsafe"

// SampleFields are a sample's fields beyond pid, tid, time, IP, address,
// period, callchain and raw data: what C's perfbuf_events_decode gives.
type SampleFields struct {
	// Present is the PERF_SAMPLE_* bits of the fields the sample carried.
	Present uint64
	// Misc is the record header's misc (PERF_RECORD_MISC_*: the CPU mode
	// the sample was taken in, exact IP...).
	Misc uint16
	// Identifier, ID, StreamID: PERF_SAMPLE_IDENTIFIER, _ID, _STREAM_ID.
	Identifier, ID, StreamID uint64
	// SampleCPU: PERF_SAMPLE_CPU, the CPU the sample was written on.
	SampleCPU uint32
	// Read: PERF_SAMPLE_READ's counter values (nil without it).
	Read *ReadValues
	// Branches: PERF_SAMPLE_BRANCH_STACK; BranchHWIndex is -1 without
	// PERF_SAMPLE_BRANCH_HW_INDEX; BranchCounters with
	// PERF_SAMPLE_BRANCH_COUNTERS.
	Branches       []Branch
	BranchHWIndex  int64
	BranchCounters []uint64
	// RegsUserABI and RegsUser: PERF_SAMPLE_REGS_USER (one value per bit
	// of RegsUserMask, the attr's sample_regs_user, lowest first);
	// RegsIntr likewise.
	RegsUserABI, RegsIntrABI   uint64
	RegsUser, RegsIntr         []uint64
	RegsUserMask, RegsIntrMask uint64
	// StackUser: PERF_SAMPLE_STACK_USER, the bytes actually copied (the
	// dump's dyn_size); StackUserSize the dump's size.
	StackUser     []byte
	StackUserSize uint64
	// Weight (PERF_SAMPLE_WEIGHT or _WEIGHT_STRUCT, the whole word),
	// DataSrc, Transaction, PhysAddr, Cgroup, DataPageSize, CodePageSize.
	Weight, DataSrc, Transaction, PhysAddr, Cgroup, DataPageSize, CodePageSize uint64
	// Aux: PERF_SAMPLE_AUX data.
	Aux []byte
}

// ReadValues are PERF_SAMPLE_READ's: one value, or a group's (Group:
// PERF_FORMAT_GROUP, the leader first).
type ReadValues struct {
	TimeEnabled, TimeRunning uint64
	Values                   []ReadValue
	Group                    bool
}

// WeightStruct splits Weight as PERF_SAMPLE_WEIGHT_STRUCT lays it out:
// var1_dw (low 32 bits), var2_w and var3_w.
func (f *SampleFields) WeightStruct() (var1 uint32, var2, var3 uint16) {
	return uint32(f.Weight), uint16(f.Weight >> 32), uint16(f.Weight >> 48)
}

// ReadValue is one counter's value; ID and Lost with PERF_FORMAT_ID and
// PERF_FORMAT_LOST.
type ReadValue struct{ Value, ID, Lost uint64 }

// Branch is one perf_branch_entry: from, to and the flags word.
type Branch struct{ From, To, Flags uint64 }

const (
	perfFormatID       = 1 << 2
	perfSampleRead     = 1 << 4
	perfSampleRegsUser = 1 << 12
	perfSampleStack    = 1 << 13
	perfSampleRegsIntr = 1 << 18
	perfSampleAux      = 1 << 20
	needsLayout        = perfSampleRead | perfSampleRegsUser | perfSampleRegsIntr
)

// sampleLayout is what of an event's attr decoding needs beyond the
// record: what a group entry's second word is, which register each value
// is.
type sampleLayout struct{ readFormat, regsUserMask, regsIntrMask uint64 }

// layoutLocked is event ev's sampleLayout, asked for once; s.mu held.
func (s *EventSet) layoutLocked(ev int) sampleLayout {
	meta := s.events[ev]
	if meta != nil && meta.layout != nil {
		return *meta.layout
	}
	var da C.struct_perfbuf_decode_attr
	da.sz = C.size_t(unsafe.Sizeof(da))
	if s.cset == nil || C.perfbuf_events_decode_attr(s.cset, C.int(ev), &da) != 0 {
		return sampleLayout{}
	}
	l := sampleLayout{uint64(da.read_format), uint64(da.sample_regs_user), uint64(da.sample_regs_intr)}
	if meta != nil {
		meta.layout = &l
	}
	return l
}

func words(p *C.uint64_t, n C.uint64_t) []uint64 {
	if p == nil || n == 0 {
		return nil
	}
	return append([]uint64(nil), unsafe.Slice((*uint64)(unsafe.Pointer(p)), int(n))...)
}

func cBytes(p unsafe.Pointer, n C.uint64_t) []byte {
	if p == nil || n == 0 {
		return nil
	}
	return C.GoBytes(p, C.int(n))
}

// decodeFields copies what s points into (the ring, valid during the
// callback) into Go memory.
// layout (from the event's attr) tells what a group entry's second word
// is when it has two, and the register masks.
func decodeFields(s *C.struct_perfbuf_sample, layout sampleLayout) SampleFields {
	readFormat := layout.readFormat
	f := SampleFields{
		Present: uint64(s.present), Misc: uint16(s.misc), Identifier: uint64(s.identifier), ID: uint64(s.id),
		StreamID: uint64(s.stream_id), SampleCPU: uint32(s.cpu), BranchHWIndex: -1,
		RegsUserABI: uint64(s.regs_user_abi), RegsIntrABI: uint64(s.regs_intr_abi),
		RegsUser: words(s.regs_user, s.regs_user_nr), RegsIntr: words(s.regs_intr, s.regs_intr_nr),
		BranchCounters: words(s.branch_counters, s.branch_nr),
		Weight:         uint64(s.weight), DataSrc: uint64(s.data_src), Transaction: uint64(s.transaction),
		PhysAddr: uint64(s.phys_addr), Cgroup: uint64(s.cgroup), DataPageSize: uint64(s.data_page_size),
		CodePageSize: uint64(s.code_page_size),
	}
	if s.flags&C.PERFBUF_DECODE_F_BRANCH_HW_IDX != 0 {
		f.BranchHWIndex = int64(s.branch_hw_idx)
	}
	if entries := words(s.branch_entries, 3*s.branch_nr); len(entries) > 0 {
		f.Branches = make([]Branch, s.branch_nr)
		for i := range f.Branches {
			f.Branches[i] = Branch{entries[3*i], entries[3*i+1], entries[3*i+2]}
		}
	}
	if s.present&perfSampleRead != 0 {
		rv := &ReadValues{TimeEnabled: uint64(s.read_time_enabled), TimeRunning: uint64(s.read_time_running)}
		if s.flags&C.PERFBUF_DECODE_F_READ_GROUP != 0 && s.read_group != nil && s.read_stride > 0 {
			rv.Group = true
			group := words(s.read_group, s.read_nr*s.read_stride)
			stride := int(s.read_stride)
			for i := 0; i+stride <= len(group); i += stride {
				v := ReadValue{Value: group[i]}
				// The words after the value: id with PERF_FORMAT_ID, then lost
				// with PERF_FORMAT_LOST.
				switch {
				case stride > 2:
					v.ID, v.Lost = group[i+1], group[i+2]
				case stride == 2 && readFormat&perfFormatID != 0:
					v.ID = group[i+1]
				case stride == 2:
					v.Lost = group[i+1]
				}
				rv.Values = append(rv.Values, v)
			}
		} else {
			rv.Values = []ReadValue{{Value: uint64(s.read_value), ID: uint64(s.read_id), Lost: uint64(s.read_lost)}}
		}
		f.Read = rv
	}
	if s.present&perfSampleStack != 0 {
		f.StackUser = cBytes(s.stack_user, s.stack_user_dyn_size)
		f.StackUserSize = uint64(s.stack_user_size)
	}
	if s.present&perfSampleRegsUser != 0 {
		f.RegsUserMask = layout.regsUserMask
	}
	if s.present&perfSampleRegsIntr != 0 {
		f.RegsIntrMask = layout.regsIntrMask
	}
	if s.present&perfSampleAux != 0 {
		f.Aux = cBytes(s.aux, s.aux_size)
	}
	return f
}
