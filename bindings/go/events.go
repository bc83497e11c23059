package perfbuf

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime/cgo"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// EventKind is the kind of an Event.
type EventKind uint32

// The kinds of events (PERFBUF_EVENT_*).
const (
	// EventSoftware is a software event: Config is a PERF_COUNT_SW_* (SWCPUClock, ...).
	EventSoftware EventKind = C.PERFBUF_EVENT_SOFTWARE
	// EventHardware is a hardware event: Config is a PERF_COUNT_HW_* (HWCPUCycles, ...).
	EventHardware EventKind = C.PERFBUF_EVENT_HARDWARE
	// EventTracepoint is a tracepoint: Name is "subsystem:name".
	EventTracepoint EventKind = C.PERFBUF_EVENT_TRACEPOINT
	// EventKprobe is a kprobe: Name is the kernel function, Offset into it.
	EventKprobe EventKind = C.PERFBUF_EVENT_KPROBE
	// EventUprobe is a uprobe: Name is the binary, Symbol the function and
	// Offset bytes into it (or Symbol "" and Offset a file offset).
	EventUprobe EventKind = C.PERFBUF_EVENT_UPROBE
	// EventRaw is the caller's struct perf_event_attr, in Attr.
	EventRaw EventKind = C.PERFBUF_EVENT_RAW
)

func (k EventKind) String() string {
	switch k {
	case EventSoftware:
		return "software"
	case EventHardware:
		return "hardware"
	case EventTracepoint:
		return "tracepoint"
	case EventKprobe:
		return "kprobe"
	case EventUprobe:
		return "uprobe"
	case EventRaw:
		return "raw"
	}
	return fmt.Sprintf("EventKind(%d)", uint32(k))
}

// Configs of hardware events (PERF_COUNT_HW_*).
const (
	HWCPUCycles             = 0
	HWInstructions          = 1
	HWCacheReferences       = 2
	HWCacheMisses           = 3
	HWBranchInstructions    = 4
	HWBranchMisses          = 5
	HWBusCycles             = 6
	HWStalledCyclesFrontend = 7
	HWStalledCyclesBackend  = 8
	HWRefCPUCycles          = 9
)

// Configs of software events (PERF_COUNT_SW_*).
const (
	SWCPUClock        = 0
	SWTaskClock       = 1
	SWPageFaults      = 2
	SWContextSwitches = 3
	SWCPUMigrations   = 4
	SWPageFaultsMin   = 5
	SWPageFaultsMaj   = 6
	SWAlignmentFaults = 7
	SWEmulationFaults = 8
	SWDummy           = 9
)

// AllEvents stands for every event of the set in Enable and Disable.
const AllEvents = -1

// AllCPUs asks Read for the counts summed over every CPU and target.
const AllCPUs = -1

// EventSetOptions choose where an EventSet's events are opened. The zero
// value is every online CPU, every task, 8-page rings, a wake-up per
// sample.
type EventSetOptions struct {
	// CPUs opens the events only on these CPUs (offline ones are skipped).
	CPUs []int
	// PIDs watches these processes (or threads), on every CPU of the set.
	PIDs []int
	// Cgroups watches the tasks of these cgroup v2 directories.
	Cgroups []string
	// Inherit follows the children and threads PIDs create later.
	Inherit bool
	// Pages is each CPU's ring size in pages, a power of two (0: 8).
	Pages int
	// NoRings opens no rings: samples go only to the events' BPF programs
	// (a profiler's case). NewReader then fails.
	NoRings bool
	// WakeupEvents and WakeupBytes batch the reader's wake-ups.
	WakeupEvents, WakeupBytes int
	// MaxDelay bounds how long a sample may wait below the batch (default
	// 10ms, at most 1m; rounded up to whole milliseconds).
	MaxDelay time.Duration
	// Sideband asks every CPU's ring for side-band records by name:
	// "comm" (with the exec bit), "task" (fork, exit), "mmap" (mmap2 of
	// executable mappings), "mmap_data" (data mappings too), "build_id"
	// (build ids instead of device and inode), "switch", "namespaces",
	// "cgroup", "ksymbol", "bpf_event". The EventReader delivers them,
	// decoded, as EventSamples with Sideband set (sideband.go), as it does
	// those an event's raw attr asks for.
	Sideband []string
}

// Event describes an event to Add. Events are added disabled.
type Event struct {
	Kind EventKind
	// Name is the tracepoint ("sched:sched_process_exec"), the kernel
	// function of a kprobe or the binary of a uprobe.
	Name string
	// Symbol is a uprobe's function ("": Offset is a file offset).
	Symbol string
	// Offset is a kprobe's or uprobe's offset into its function (an
	// instruction's first byte; past a uprobe's function end: EINVAL), or
	// a uprobe's file offset without Symbol. A return probe goes at a
	// function's entry: a uretprobe with Symbol and an Offset is EINVAL
	// (the probed program would crash); without Symbol, Offset must be a
	// function's first byte.
	Offset uint64
	// RefCtrOffset is a uprobe's USDT semaphore (file offset; 0: none).
	RefCtrOffset uint64
	// Retprobe makes a kretprobe or uretprobe.
	Retprobe bool
	// Config is a software or hardware event's PERF_COUNT_* value.
	Config uint64
	// Fallback opens the software event FallbackConfig where a hardware
	// event cannot be opened (no PMU: a virtual machine); Info tells.
	Fallback       bool
	FallbackConfig uint64
	// Period takes a sample every Period occurrences; Frequency takes
	// Frequency samples a second instead (each sample then carries the
	// period the kernel chose, PERF_SAMPLE_PERIOD). With neither, tracing events
	// sample every hit and software and hardware events only count.
	Period, Frequency uint64
	// SampleType adds PERF_SAMPLE_* bits to the set's own.
	SampleType uint64
	// Filter is an ftrace filter for tracing events.
	Filter string
	// Attr is the struct perf_event_attr of an EventRaw (its size field
	// says how many bytes are read).
	Attr []byte
	// GroupLeader makes a counter group's leader; Member makes the event a
	// member of the group of event Leader.
	GroupLeader, Member bool
	Leader              int
	// Args are a kprobe's or uprobe's fetch arguments (see probe_args.go).
	Args string
	// Enabled enables the event as it is added.
	Enabled bool
}

// EventInfo is what Info reports about an event.
type EventInfo struct {
	// Kind is the kind opened: EventSoftware for a hardware event that fell back.
	Kind EventKind
	// AttrType and Config are the perf_event_attr's type and config as opened.
	AttrType uint32
	Config   uint64
	// FallbackErrno is why a hardware event fell back to software (0: it did not).
	FallbackErrno syscall.Errno
	// Instances is the number of kernel events open for it (CPUs × targets).
	Instances int
	// SampleType is its samples' PERF_SAMPLE_* bits.
	SampleType uint64
	// CPUCount is the number of CPUs it is open on.
	CPUCount    int
	Enabled     bool
	BPFAttached bool
	// BPFPrograms are, for an event on a tracepoint (a tracepoint, a probe
	// with Args), the BPF programs the kernel runs on every hit, whoever
	// attached them. Where one returns 0 the kernel drops the hit for every
	// perf event on the tracepoint, this set's included: its samples
	// vanish. Each one the set did not attach is also warned about once
	// (libperfbuf's log, stderr by default).
	BPFPrograms []BPFProgram
}

// BPFProgram is a BPF program on an event's tracepoint.
type BPFProgram struct {
	// ID is its id (bpftool prog show id ID).
	ID uint32
	// Name is the name it was loaded with ("" when the kernel would not say).
	Name string
	// Ours is whether this set attached it (AttachBPF).
	Ours bool
}

// OtherBPFPrograms are the programs on the event's tracepoint that this
// set did not attach.
func (i EventInfo) OtherBPFPrograms() []BPFProgram {
	var others []BPFProgram
	for _, p := range i.BPFPrograms {
		if !p.Ours {
			others = append(others, p)
		}
	}
	return others
}

// FellBack reports whether a hardware event was opened as its software fallback.
func (i EventInfo) FellBack() bool { return i.FallbackErrno != 0 }

var errnoNames = map[syscall.Errno]string{
	syscall.ENOENT: "ENOENT", syscall.EOPNOTSUPP: "EOPNOTSUPP", syscall.ENODEV: "ENODEV",
	syscall.EINVAL: "EINVAL", syscall.EACCES: "EACCES", syscall.EPERM: "EPERM", syscall.ENOSYS: "ENOSYS",
}

// FallbackReason says why a hardware event fell back, as libperfbuf words
// errors ("no such file or directory (ENOENT)"); "" if it did not.
func (i EventInfo) FallbackReason() string {
	if i.FallbackErrno == 0 {
		return ""
	}
	if name, ok := errnoNames[i.FallbackErrno]; ok {
		return fmt.Sprintf("%v (%s)", i.FallbackErrno, name)
	}
	return fmt.Sprintf("%v (errno %d)", i.FallbackErrno, int(i.FallbackErrno))
}

// Count is one counter's value from Read.
type Count struct {
	Event int
	Value uint64
}

// Counts are an event's counts from Read: the event's first, then a group
// leader's members in the order they were added.
type Counts struct {
	// TimeEnabled and TimeRunning are summed over CPUs and targets.
	TimeEnabled, TimeRunning time.Duration
	Values                   []Count
}

// eventMeta is what the set remembers of an event it added.
type eventMeta struct {
	kind   EventKind
	name   string
	fields []string      // a tracepoint's own fields (not common_*); nil if unknown
	layout *sampleLayout // asked for once, by the first sample that needs it
}

// EventSet is a set of perf events other than BPF output (tracepoints,
// kprobes, uprobes, software and hardware sampling events, raw attrs),
// opened on every CPU (and target), sharing one ring per CPU. Add events
// (disabled), attach BPF programs, Enable, and read the samples with
// NewReader. Its methods may be called from any goroutine.
//
// Closing the set while its reader is open disables every event at once
// and frees the set when the reader is closed: the reader can still drain
// and decode what its rings hold.
type EventSet struct {
	mu         sync.Mutex // every C call on cset, decoding included
	cset       *C.struct_perfbuf_events
	closed     bool
	readerOpen bool
	events     map[int]*eventMeta
}

// NewEventSet opens an event set with no events yet.
func NewEventSet(opts EventSetOptions) (*EventSet, error) {
	const op = "NewEventSet"
	pages := opts.Pages
	if pages == 0 {
		pages = 8
	}
	if pages < 0 || pages&(pages-1) != 0 {
		return nil, invalid(op, fmt.Sprintf("EventSetOptions.Pages is %d, it must be a power of two", opts.Pages))
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"WakeupEvents", opts.WakeupEvents}, {"WakeupBytes", opts.WakeupBytes}} {
		if f.v < 0 || int64(f.v) > 1<<32-1 {
			return nil, invalid(op, fmt.Sprintf("EventSetOptions.%s is %d, out of range", f.name, f.v))
		}
	}
	if opts.MaxDelay < 0 || opts.MaxDelay > time.Minute {
		return nil, invalid(op, fmt.Sprintf("EventSetOptions.MaxDelay is %v, it must be between 0 and 1m", opts.MaxDelay))
	}
	var o C.struct_perfbuf_events_opts
	o.sz = C.size_t(unsafe.Sizeof(o))
	o.page_cnt = C.size_t(pages)
	o.wakeup_events = C.uint32_t(opts.WakeupEvents)
	o.wakeup_bytes = C.uint32_t(opts.WakeupBytes)
	o.max_delay_ms = C.uint32_t((opts.MaxDelay + time.Millisecond - 1) / time.Millisecond)
	if opts.NoRings {
		o.flags |= C.PERFBUF_EVENTS_NO_RINGS
	}
	if opts.Inherit {
		o.flags |= C.PERFBUF_EVENTS_INHERIT
	}
	sbFlags, err := sidebandOptFlags(opts.Sideband)
	if err != nil {
		return nil, invalid(op, "EventSetOptions.Sideband: "+err.Error())
	}
	o.flags |= sbFlags
	// The arrays go in C memory: Go memory passed to C may not hold pointers.
	var frees []unsafe.Pointer
	defer func() {
		for _, p := range frees {
			C.free(p)
		}
	}()
	ints := func(v []int) *C.int {
		p := (*C.int)(C.malloc(C.size_t(len(v)+1) * C.size_t(unsafe.Sizeof(C.int(0)))))
		frees = append(frees, unsafe.Pointer(p))
		a := unsafe.Slice(p, len(v)+1)
		for i, x := range v {
			a[i] = C.int(x)
		}
		return p
	}
	if len(opts.CPUs) > 0 {
		o.cpus, o.cpu_cnt = ints(opts.CPUs), C.int(len(opts.CPUs))
	}
	if len(opts.PIDs) > 0 {
		o.pids, o.pid_cnt = ints(opts.PIDs), C.int(len(opts.PIDs))
	}
	if len(opts.Cgroups) > 0 {
		arr := (**C.char)(C.malloc(C.size_t(len(opts.Cgroups)) * C.size_t(unsafe.Sizeof(uintptr(0)))))
		frees = append(frees, unsafe.Pointer(arr))
		a := unsafe.Slice(arr, len(opts.Cgroups))
		for i, dir := range opts.Cgroups {
			a[i] = C.CString(dir)
			frees = append(frees, unsafe.Pointer(a[i]))
		}
		o.cgroups, o.cgroup_cnt = arr, C.int(len(opts.Cgroups))
	}
	var cset *C.struct_perfbuf_events
	if _, err := cCall(op, func() C.int {
		p, errno := C.perfbuf_events_new(&o)
		if p == nil {
			if e, ok := errno.(syscall.Errno); ok && e != 0 {
				return -C.int(e)
			}
			return -C.int(syscall.EINVAL)
		}
		cset = p
		return 0
	}); err != nil {
		return nil, err
	}
	return &EventSet{cset: cset, events: map[int]*eventMeta{}}, nil
}

func (s *EventSet) errClosed(op string) error {
	return &Error{Op: op, Errno: syscall.EBADF, Reason: "the EventSet is closed: " + os.ErrClosed.Error()}
}

// call runs fn on the live set under the set's lock.
func (s *EventSet) call(op string, fn func(*C.struct_perfbuf_events) C.int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cset == nil || s.closed {
		return 0, s.errClosed(op)
	}
	cset := s.cset
	ret, err := cCall(op, func() C.int { return fn(cset) })
	return int(ret), err
}

func (s *EventSet) id(op string, id int) error {
	if id < 0 || id > 1<<31-1 {
		return invalid(op, fmt.Sprintf("event id %d out of range", id))
	}
	return nil
}

// Add opens an event on every CPU and target of the set, disabled, its
// samples going to each CPU's ring; it returns the event's id. Errors wrap
// ENOENT for a tracepoint, binary or symbol that does not exist,
// EOPNOTSUPP for a kernel without the PMU (kprobes without CONFIG_KPROBES),
// EINVAL for a filter the kernel refuses.
func (s *EventSet) Add(ev Event) (int, error) {
	const op = "Add"
	if ev.Period != 0 && ev.Frequency != 0 {
		return 0, invalid(op, "give Event.Period or Event.Frequency, not both")
	}
	var d C.struct_perfbuf_event_desc
	d.sz = C.size_t(unsafe.Sizeof(d))
	d.kind = C.uint32_t(ev.Kind)
	d.config = C.uint64_t(ev.Config)
	d.fallback_config = C.uint64_t(ev.FallbackConfig)
	d.offset = C.uint64_t(ev.Offset)
	d.ref_ctr_offset = C.uint64_t(ev.RefCtrOffset)
	d.sample_type = C.uint64_t(ev.SampleType)
	d.period = C.uint64_t(ev.Period)
	flag := func(on bool, f C.uint32_t) {
		if on {
			d.flags |= f
		}
	}
	flag(ev.Retprobe, C.PERFBUF_EVENT_F_RETPROBE)
	flag(ev.Fallback, C.PERFBUF_EVENT_F_FALLBACK)
	flag(ev.GroupLeader, C.PERFBUF_EVENT_F_GROUP_LEADER)
	flag(ev.Member, C.PERFBUF_EVENT_F_MEMBER)
	flag(ev.Enabled, C.PERFBUF_EVENT_F_ENABLED)
	if ev.Frequency != 0 {
		d.flags |= C.PERFBUF_EVENT_F_FREQ
		d.period = C.uint64_t(ev.Frequency)
	}
	if ev.Member {
		if err := s.id(op, ev.Leader); err != nil {
			return 0, err
		}
		d.leader = C.int(ev.Leader)
	}
	var frees []unsafe.Pointer
	defer func() {
		for _, p := range frees {
			C.free(p)
		}
	}()
	str := func(v string) *C.char {
		if v == "" {
			return nil
		}
		p := C.CString(v)
		frees = append(frees, unsafe.Pointer(p))
		return p
	}
	d.name, d.symbol, d.filter, d.args = str(ev.Name), str(ev.Symbol), str(ev.Filter), str(ev.Args)
	if ev.Attr != nil {
		p := C.CBytes(ev.Attr)
		frees = append(frees, p)
		d.attr = (*C.struct_perf_event_attr)(p)
	}
	id, err := s.call(op, func(cset *C.struct_perfbuf_events) C.int { return C.perfbuf_events_add(cset, &d) })
	if err != nil {
		return 0, err
	}
	meta := &eventMeta{kind: ev.Kind, name: ev.Name}
	if ev.Kind == EventTracepoint || ev.Args != "" {
		meta.fields, _ = s.fieldNames(id)
	}
	s.mu.Lock()
	s.events[id] = meta
	s.mu.Unlock()
	return id, nil
}

// fieldNames lists tracepoint event id's own fields (not common_*), in
// the order of the format file the library parsed.
func (s *EventSet) fieldNames(id int) ([]string, error) {
	names := []string{}
	buf := make([]byte, 64)
	for i := 0; ; {
		n, err := s.call("Fields", func(cset *C.struct_perfbuf_events) C.int {
			return C.perfbuf_events_field_name(cset, C.int(id), C.size_t(i), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
		})
		switch {
		case errors.Is(err, syscall.ENOENT):
			return names, nil
		case err != nil:
			return nil, err
		case n >= len(buf): // cut: again with room for it
			buf = make([]byte, n+1)
		default:
			names = append(names, string(buf[:n]))
			i++
		}
	}
}

// Remove removes event id (EBUSY for a group leader that still has
// members). Its samples still in the rings are not delivered.
func (s *EventSet) Remove(id int) error {
	if err := s.id("Remove", id); err != nil {
		return err
	}
	if _, err := s.call("Remove", func(c *C.struct_perfbuf_events) C.int { return C.perfbuf_events_remove(c, C.int(id)) }); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.events, id)
	s.mu.Unlock()
	return nil
}

// Enable enables event id on every CPU and target (AllEvents: every event).
func (s *EventSet) Enable(id int) error {
	if id != AllEvents {
		if err := s.id("Enable", id); err != nil {
			return err
		}
	}
	_, err := s.call("Enable", func(c *C.struct_perfbuf_events) C.int { return C.perfbuf_events_enable(c, C.int(id)) })
	return err
}

// Disable disables event id (AllEvents: every event).
func (s *EventSet) Disable(id int) error {
	if id != AllEvents {
		if err := s.id("Disable", id); err != nil {
			return err
		}
	}
	_, err := s.call("Disable", func(c *C.struct_perfbuf_events) C.int { return C.perfbuf_events_disable(c, C.int(id)) })
	return err
}

// AttachBPF attaches a BPF program, such as cilium/ebpf's *ebpf.Program, to
// event id on every CPU and target; attach before Enable. Errors wrap
// EEXIST when one is attached already, EINVAL when the program's type
// does not suit the event.
func (s *EventSet) AttachBPF(id int, prog interface{ FD() int }) error {
	const op = "AttachBPF"
	if prog == nil {
		return invalid(op, "nil program")
	}
	if v := reflect.ValueOf(prog); (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface) && v.IsNil() {
		return invalid(op, fmt.Sprintf("nil %T", prog))
	}
	if err := s.id(op, id); err != nil {
		return err
	}
	fd := prog.FD()
	_, err := s.call(op, func(c *C.struct_perfbuf_events) C.int {
		return C.perfbuf_events_attach_bpf(c, C.int(id), C.int(fd))
	})
	return err
}

// Info reports what was opened for event id.
func (s *EventSet) Info(id int) (EventInfo, error) {
	if err := s.id("Info", id); err != nil {
		return EventInfo{}, err
	}
	var i C.struct_perfbuf_event_info
	i.sz = C.size_t(unsafe.Sizeof(i))
	if _, err := s.call("Info", func(c *C.struct_perfbuf_events) C.int { return C.perfbuf_events_info(c, C.int(id), &i) }); err != nil {
		return EventInfo{}, err
	}
	// The kernel attaches at most 64 programs to a tracepoint.
	var progs [64]C.struct_perfbuf_bpf_prog
	n, err := s.call("Info", func(c *C.struct_perfbuf_events) C.int {
		return C.perfbuf_events_bpf_progs(c, C.int(id), &progs[0], C.size_t(len(progs)))
	})
	if err != nil {
		return EventInfo{}, err
	}
	var attached []BPFProgram
	for _, p := range progs[:min(n, len(progs))] {
		attached = append(attached, BPFProgram{ID: uint32(p.id), Name: C.GoString(&p.name[0]), Ours: p.ours != 0})
	}
	return EventInfo{
		Kind: EventKind(i.kind), AttrType: uint32(i.attr_type), Config: uint64(i.config),
		FallbackErrno: syscall.Errno(i.fallback_errno), Instances: int(i.instances),
		SampleType: uint64(i.sample_type), CPUCount: int(i.cpu_cnt), Enabled: i.enabled != 0,
		BPFAttached: i.bpf_attached != 0, BPFPrograms: attached,
	}, nil
}

// FD returns the fd of kernel event idx of event id (CPU by CPU, each
// CPU's targets in order; Info's Instances of them) for the caller's own
// ioctls. The set keeps owning it.
func (s *EventSet) FD(id, idx int) (int, error) {
	if err := s.id("FD", id); err != nil {
		return -1, err
	}
	if idx < 0 {
		return -1, invalid("FD", fmt.Sprintf("index %d out of range", idx))
	}
	return s.call("FD", func(c *C.struct_perfbuf_events) C.int { return C.perfbuf_events_fd(c, C.int(id), C.size_t(idx)) })
}

func (s *EventSet) cpus(op string, offline C.int) ([]int, error) {
	n, err := s.call(op, func(c *C.struct_perfbuf_events) C.int { return C.perfbuf_events_cpus(c, offline, nil, 0) })
	if err != nil || n == 0 {
		return []int{}, err
	}
	buf := make([]C.int, n)
	m, err := s.call(op, func(c *C.struct_perfbuf_events) C.int {
		return C.perfbuf_events_cpus(c, offline, &buf[0], C.size_t(len(buf)))
	})
	if err != nil {
		return nil, err
	}
	out := make([]int, 0, n)
	for _, c := range buf[:min(n, m)] {
		out = append(out, int(c))
	}
	return out, nil
}

// CPUs returns the CPUs the set's events are opened on.
func (s *EventSet) CPUs() ([]int, error) { return s.cpus("CPUs", 0) }

// OfflineCPUs returns the CPUs asked for (or possible) that were offline, skipped.
func (s *EventSet) OfflineCPUs() ([]int, error) { return s.cpus("OfflineCPUs", 1) }

// Events returns the ids of the set's events.
func (s *EventSet) Events() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]int, 0, len(s.events))
	for id := range s.events {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	return ids
}

// Read returns event id's counts on cpu (AllCPUs: summed over every CPU and
// target), a group leader's members included.
func (s *EventSet) Read(id, cpu int) (Counts, error) {
	if err := s.id("Read", id); err != nil {
		return Counts{}, err
	}
	values := make([]C.struct_perfbuf_count, 8)
	for {
		var t C.struct_perfbuf_counts
		t.sz = C.size_t(unsafe.Sizeof(t))
		n, err := s.call("Read", func(c *C.struct_perfbuf_events) C.int {
			return C.perfbuf_events_read(c, C.int(id), C.int(cpu), &t, &values[0], C.size_t(len(values)))
		})
		if err != nil {
			return Counts{}, err
		}
		if n > len(values) {
			values = make([]C.struct_perfbuf_count, n)
			continue
		}
		out := Counts{TimeEnabled: time.Duration(t.time_enabled), TimeRunning: time.Duration(t.time_running)}
		for _, v := range values[:n] {
			out.Values = append(out.Values, Count{Event: int(v.event), Value: uint64(v.value)})
		}
		return out, nil
	}
}

// Close closes every event (detaching their programs) and the rings. With
// a reader still open, the events are disabled now and freed when the
// reader is closed. A second Close does nothing.
func (s *EventSet) Close() error {
	s.mu.Lock()
	if s.cset == nil || s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	if s.readerOpen {
		C.perfbuf_events_disable(s.cset, -1)
		s.mu.Unlock()
		return nil
	}
	cset := s.cset
	s.cset = nil
	s.mu.Unlock()
	C.perfbuf_events_free(cset)
	return nil
}

// readerClosed frees the set if it was closed while its reader was open.
func (s *EventSet) readerClosed() {
	s.mu.Lock()
	s.readerOpen = false
	var cset *C.struct_perfbuf_events
	if s.closed {
		cset, s.cset = s.cset, nil
	}
	s.mu.Unlock()
	if cset != nil {
		C.perfbuf_events_free(cset)
	}
}

// ---- the reader ----------------------------------------------------------

// EventReaderOptions control an EventReader.
type EventReaderOptions struct {
	// OrderByTime delivers the samples of every CPU in time order (a
	// sample waits until no ring can still hold an earlier one); call
	// Flush at the end for those still held back.
	OrderByTime bool
	// AllRecords is kept so that programs setting it still compile: the
	// reader now always hands over the records that are neither samples
	// nor lost reports (see EventSample.Sideband and Record), as the C
	// and Python faces do.
	//
	// Deprecated: it has no effect.
	AllRecords bool
}

// EventReader reads an EventSet's rings, decoding each record into an
// EventSample. It works as Reader: Read blocks until a sample arrives, the
// deadline passes (os.ErrDeadlineExceeded) or it is closed (ErrClosed);
// Close, Pause, Resume and SetDeadline may be called from any goroutine.
type EventReader struct {
	rings
	set          *EventSet
	queue        []EventSample
	ordered      bool
	unattributed atomic.Uint64
	undecodable  atomic.Uint64
	others       atomic.Uint64
}

// EventSample is one record of an event set's rings, decoded.
type EventSample struct {
	// Event is the id Add returned (-1 for a lost record of an event since removed).
	Event int
	// CPU is the ring's CPU.
	CPU int
	// PID and TID are the task's process and thread ids.
	PID, TID uint32
	// Time is the sample's CLOCK_MONOTONIC timestamp in nanoseconds.
	Time uint64
	// IP is the instruction pointer.
	IP uint64
	// Addr, Period and Callchain are set when the event's SampleType asked
	// for them (Period also with Frequency).
	Addr, Period uint64
	Callchain    []uint64
	// Raw is the tracing data of tracepoints, kprobes and uprobes.
	Raw []byte
	// LostSamples > 0 is a record of samples the kernel dropped (no other data).
	LostSamples uint64
	// Type is the record's perf_event_header type (PERF_RECORD_SAMPLE: 9).
	Type uint32
	// Record is the whole record, header included, when the package could
	// not decode it (Event -1; DecodeErr says why) or does not decode its
	// kind (throttling, a kind it does not know; Event -1, DecodeErr nil);
	// nil otherwise.
	Record []byte
	// DecodeErr is why a sample could not be decoded (a *Error), or nil.
	DecodeErr error
	// Sideband is a side-band record, decoded (Type is its PERF_RECORD_*;
	// Event the id of the event that asked for it, or -1 for the set's
	// own; PID, TID, Time from the record, Time and CPU as its sample_id
	// trailer gives them); nil for samples and lost reports.
	Sideband *SidebandRecord
	// SampleFields has the sample's other fields, as C's decoder gives
	// them (set when the event's SampleType asked for them).
	SampleFields
	set *EventSet
}

// NewReader makes the reader of the set's rings (one per set: EBUSY for a
// second; EINVAL for a set made with NoRings). Add events while it is open
// or before making it: its rings go when it is closed.
func (s *EventSet) NewReader(opts EventReaderOptions) (*EventReader, error) {
	const op = "NewReader"
	r := &EventReader{set: s, ordered: opts.OrderByTime}
	r.handle = cgo.NewHandle(r)
	s.mu.Lock()
	if s.cset == nil || s.closed {
		s.mu.Unlock()
		r.handle.Delete()
		return nil, s.errClosed(op)
	}
	cset := s.cset
	var pb *C.struct_perf_buffer
	_, err := cCall(op, func() C.int {
		var cerr C.int
		pb = C.perfbuf_go_events_reader(cset, C.uintptr_t(r.handle), &cerr)
		if pb == nil {
			return -cerr
		}
		return 0
	})
	if err == nil {
		s.readerOpen = true
	}
	s.mu.Unlock()
	if err != nil {
		r.handle.Delete()
		return nil, err
	}
	r.pb = pb
	if opts.OrderByTime {
		var o C.struct_perfbuf_order_opts
		o.sz = C.size_t(unsafe.Sizeof(o))
		o.flags = C.PERFBUF_ORDER_SAMPLE_TIME
		if _, err := cCall(op, func() C.int { return C.perfbuf_set_order(pb, &o) }); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// Read returns the next sample (or count of lost samples).
func (r *EventReader) Read() (EventSample, error) {
	var s EventSample
	err := r.ReadInto(&s)
	return s, err
}

// ReadInto is Read into a caller's EventSample (its Raw is reused when large enough).
func (r *EventReader) ReadInto(s *EventSample) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.wait(func() bool { return len(r.queue) > 0 }); err != nil {
		return err
	}
	next := r.queue[0]
	r.queue[0] = EventSample{}
	r.queue = r.queue[1:]
	raw := append(s.Raw[:0], next.Raw...)
	*s = next
	s.Raw = raw
	return nil
}

// Flush delivers, with OrderByTime, every sample the ordering still holds
// back (at the end: Disable the events, then Flush, then Read until the
// deadline). Without OrderByTime it does nothing.
func (r *EventReader) Flush() error {
	if !r.ordered {
		return nil
	}
	return r.control("Flush", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_ordered_flush(pb) })
}

// Consume drains every ring without waiting: the samples then come from
// Read without blocking.
func (r *EventReader) Consume() error {
	return r.control("Consume", func(pb *C.struct_perf_buffer) C.int { return C.perfbuf_consume(pb) })
}

// Unattributed is the number of samples of events removed from the set
// that were in the rings, not delivered.
func (r *EventReader) Unattributed() uint64 { return r.unattributed.Load() }

// Undecodable is the number of samples (and side-band records)
// libperfbuf could not decode: each was handed over raw (Event -1,
// Record, DecodeErr).
func (r *EventReader) Undecodable() uint64 { return r.undecodable.Load() }

// Others is the number of records that are neither samples nor lost
// reports (side-band records, throttling, kinds not decoded), each
// delivered: decoded (Sideband) or raw (Record).
func (r *EventReader) Others() uint64 { return r.others.Load() }

// Close unblocks a concurrent Read (which returns ErrClosed) and frees the
// rings, and the set if it was closed first.
func (r *EventReader) Close() error {
	if r.close(func() { r.queue = nil }) {
		r.set.readerClosed()
	}
	return nil
}

const (
	// perfRecordSample is EventSample.Type of a sample (PERF_RECORD_SAMPLE);
	// the rest of the record is libperfbuf's to read.
	perfRecordSample    = 9
	perfSampleAddr      = 1 << 3
	perfSampleCallchain = 1 << 5
	perfSamplePeriod    = 1 << 8
)

//export perfbufGoEventRecord
func perfbufGoEventRecord(h C.uintptr_t, rec *C.struct_perfbuf_event_record) {
	cgo.Handle(h).Value().(*EventReader).deliver(rec)
}

// deliver queues one record of the set's rings, finished by libperfbuf
// (perfbuf_events_decoded_reader): a sample, a lost count or a side-band
// record decoded; what it handed over whole goes raw, and is counted.
func (r *EventReader) deliver(rec *C.struct_perfbuf_event_record) {
	set := r.set
	out := EventSample{Event: int(rec.event), CPU: int(rec.cpu), Type: uint32(rec.record_type), set: set}
	switch rec.kind {
	case C.PERFBUF_EVENT_RECORD_SAMPLE:
		s := rec.sample
		var layout sampleLayout
		if s.present&needsLayout != 0 {
			set.mu.Lock()
			layout = set.layoutLocked(out.Event)
			set.mu.Unlock()
		}
		out.PID, out.TID, out.Time, out.IP = uint32(s.pid), uint32(s.tid), uint64(s.time), uint64(s.ip)
		if s.present&perfSampleAddr != 0 {
			out.Addr = uint64(s.addr)
		}
		if s.present&perfSamplePeriod != 0 {
			out.Period = uint64(s.period)
		}
		if s.present&perfSampleCallchain != 0 && s.callchain_nr > 0 {
			chain := unsafe.Slice((*uint64)(unsafe.Pointer(s.callchain)), int(s.callchain_nr))
			out.Callchain = append([]uint64(nil), chain...)
		}
		if s.raw != nil && s.raw_size > 0 {
			out.Raw = C.GoBytes(s.raw, C.int(s.raw_size))
		}
		out.SampleFields = decodeFields(s, layout)
	case C.PERFBUF_EVENT_RECORD_LOST:
		out.LostSamples = uint64(rec.lost)
	case C.PERFBUF_EVENT_RECORD_SIDEBAND:
		// Side-band records (asked by name or through raw attr bits): counted (Others).
		r.others.Add(1)
		sb := sidebandFromC(rec.sideband, uint64(rec.size))
		out.Sideband = sb
		out.PID, out.TID, out.Time = sb.PID, sb.TID, uint64(rec.sideband.time)
	default: // whole: rec.error says why
		errno := syscall.Errno(rec.error)
		if rec.record_type == perfRecordSample && errno == syscall.ENOENT {
			// An event removed from the set: counted (Unattributed).
			r.unattributed.Add(1)
			return
		}
		out.Event, out.Record = -1, C.GoBytes(unsafe.Pointer(rec.record), C.int(rec.size))
		if rec.record_type == perfRecordSample {
			r.undecodable.Add(1)
			out.DecodeErr = &Error{Op: "Read", Errno: errno, Reason: "cannot decode the sample: " + errno.Error()}
			break
		}
		// Throttling, a kind this package does not know, a record of no
		// event in the set, or a malformed one: every one handed over,
		// and counted (Others).
		r.others.Add(1)
		if errno != 0 && errno != syscall.EOPNOTSUPP && errno != syscall.ENOENT {
			r.undecodable.Add(1)
			out.DecodeErr = &Error{Op: "Read", Errno: errno, Reason: "cannot decode the side-band record: " + errno.Error()}
		}
	}
	r.queue = append(r.queue, out)
}

// decodeRecord hands rec, a whole record of cpu's ring read some other
// way (a test's own bytes), to deliver as libperfbuf finishes the rings'
// records (perfbuf_events_decode_record). The caller holds r.mu.
func (r *EventReader) decodeRecord(cpu int, rec []byte) error {
	r.set.mu.Lock()
	cset := r.set.cset
	r.set.mu.Unlock()
	if len(rec) == 0 {
		return invalid("decodeRecord", "empty record")
	}
	if cset == nil {
		return r.set.errClosed("decodeRecord")
	}
	_, err := cCall("decodeRecord", func() C.int {
		return C.perfbuf_go_decode_record(cset, C.uint32_t(cpu), unsafe.Pointer(&rec[0]), C.size_t(len(rec)), C.uintptr_t(r.handle))
	})
	return err
}

// cStructSizes are cgo's sizes of the header's structs this package fills
// (the tests compare them with the C compiler's).
var cStructSizes = map[string]uintptr{
	"perfbuf_events_opts": unsafe.Sizeof(C.struct_perfbuf_events_opts{}),
	"perfbuf_event_desc":  unsafe.Sizeof(C.struct_perfbuf_event_desc{}),
	"perfbuf_event_info":  unsafe.Sizeof(C.struct_perfbuf_event_info{}),
	"perfbuf_bpf_prog":    unsafe.Sizeof(C.struct_perfbuf_bpf_prog{}),
	"perfbuf_counts":      unsafe.Sizeof(C.struct_perfbuf_counts{}),
	"perfbuf_count":       unsafe.Sizeof(C.struct_perfbuf_count{}),
	"perfbuf_field":       unsafe.Sizeof(C.struct_perfbuf_field{}),
	"perfbuf_order_opts":  unsafe.Sizeof(C.struct_perfbuf_order_opts{}),
	"perfbuf_sample":      unsafe.Sizeof(C.struct_perfbuf_sample{}),
	"perfbuf_opts":        unsafe.Sizeof(C.struct_perfbuf_opts{}),
	"perfbuf_ring_stats":  unsafe.Sizeof(C.struct_perfbuf_ring_stats{}),
	"perfbuf_sideband":    unsafe.Sizeof(C.struct_perfbuf_sideband{}),
}

// ---- tracepoint fields ---------------------------------------------------

// FieldKind is the kind of a tracepoint field's value.
type FieldKind uint32

// The kinds of field values (PERFBUF_FIELD_*).
const (
	FieldInt    FieldKind = C.PERFBUF_FIELD_INT
	FieldUint   FieldKind = C.PERFBUF_FIELD_UINT
	FieldString FieldKind = C.PERFBUF_FIELD_STR
	FieldBytes  FieldKind = C.PERFBUF_FIELD_BYTES
)

// FieldValue is a decoded tracepoint field: Int (FieldInt), Uint
// (FieldUint, pointers too) or Bytes (FieldString, without the NUL, and
// FieldBytes: arrays and structs).
type FieldValue struct {
	Kind  FieldKind
	Int   int64
	Uint  uint64
	Bytes []byte
}

// String is the value as text: a string's characters, a number in decimal,
// bytes in hex.
func (v FieldValue) String() string {
	switch v.Kind {
	case FieldInt:
		return fmt.Sprint(v.Int)
	case FieldUint:
		return fmt.Sprint(v.Uint)
	case FieldString:
		return string(v.Bytes)
	}
	return fmt.Sprintf("%x", v.Bytes)
}

// Field decodes tracepoint field name from the sample's Raw data, by the
// tracepoint's format file. The error wraps ENOENT for no such field (or
// an event that is not a tracepoint), os.ErrClosed once the set and its
// reader are closed.
func (s *EventSample) Field(name string) (FieldValue, error) {
	const op = "Field"
	if s.set == nil || s.LostSamples > 0 || s.Event < 0 {
		return FieldValue{}, &Error{Op: op, Errno: syscall.ENOENT, Reason: "not a sample of an event set: no fields"}
	}
	set := s.set
	set.mu.Lock()
	defer set.mu.Unlock()
	if set.cset == nil {
		return FieldValue{}, fmt.Errorf("perfbuf: Field: the EventSet this sample came from is closed (and its reader too): %w", os.ErrClosed)
	}
	var raw unsafe.Pointer
	if len(s.Raw) > 0 {
		raw = unsafe.Pointer(&s.Raw[0])
	} else {
		raw = unsafe.Pointer(&[1]byte{}) // a readable pointer for an empty buffer
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var (
		kind   C.uint32_t
		i      C.int64_t
		u      C.uint64_t
		off, n C.size_t
	)
	_, err := cCall(op, func() C.int {
		return C.perfbuf_go_field(set.cset, C.int(s.Event), raw, C.size_t(len(s.Raw)), cname, &kind, &i, &u, &off, &n)
	})
	if err != nil {
		if pe := err.(*Error); pe.Errno == syscall.ENOENT {
			meta := set.events[s.Event]
			switch {
			case meta != nil && meta.kind != EventTracepoint:
				pe.Reason = fmt.Sprintf("event %d is a %v, not a tracepoint: it has no field %q", s.Event, meta.kind, name)
			case meta != nil:
				pe.Reason = fmt.Sprintf("tracepoint %s has no field %q", meta.name, name)
			default:
				pe.Reason = fmt.Sprintf("event %d has no field %q", s.Event, name)
			}
		}
		return FieldValue{}, err
	}
	v := FieldValue{Kind: FieldKind(kind), Int: int64(i), Uint: uint64(u)}
	if v.Kind == FieldString || v.Kind == FieldBytes {
		v.Bytes = append([]byte{}, s.Raw[off:off+n]...)
	}
	return v, nil
}

// Fields decodes every field of a tracepoint sample but the common_* ones,
// by name (empty for other events).
func (s *EventSample) Fields() (map[string]FieldValue, error) {
	out := map[string]FieldValue{}
	if s.set == nil || s.LostSamples > 0 || s.Event < 0 {
		return out, nil
	}
	s.set.mu.Lock()
	meta := s.set.events[s.Event]
	s.set.mu.Unlock()
	if meta == nil || (meta.kind != EventTracepoint && meta.fields == nil) {
		return out, nil
	}
	if meta.fields == nil {
		return nil, &Error{Op: "Fields", Errno: syscall.ENOENT,
			Reason: fmt.Sprintf("could not list the fields of tracepoint %s; Field(name) still works", meta.name)}
	}
	for _, name := range meta.fields {
		v, err := s.Field(name)
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func min(a, b int) int {
	if a < b {
		return a
	}
	return b
}
