package perfbuf

// Every field of C's decoded sample reaches SampleFields: a cpu-clock
// group leader asks for every field a software event can carry here, and
// the kernel's samples must hold what the kernel must have written (ids
// from PERF_EVENT_IOC_ID, the ring's CPU, this process's cgroup id, the
// sample's IP in the registers); then a sample built here with a
// distinct value in every field goes through the reader's decoding and
// each must come out. Needs root; under CI=true nothing is skipped.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"math/bits"
	"os"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

const (
	psIP, psTID, psTime, psAddr, psRead, psCallchain = 1 << 0, 1 << 1, 1 << 2, 1 << 3, 1 << 4, 1 << 5
	psID, psCPU, psPeriod, psStreamID                = 1 << 6, 1 << 7, 1 << 8, 1 << 9
	psRegsUser, psStackUser, psWeight, psDataSrc     = 1 << 12, 1 << 13, 1 << 14, 1 << 15
	psIdentifier, psTransaction, psRegsIntr          = 1 << 16, 1 << 17, 1 << 18
	psPhysAddr, psCgroup, psDataPageSize, psCodePage = 1 << 19, 1 << 21, 1 << 22, 1 << 23
	pfTimes, pfID, pfGroup, pfLost                   = 3, 4, 8, 16
	x86IP, x86SP                                     = 8, 7 // bits of sample_regs_* on x86-64
	regsMask, stackDump                              = 0x1ff, 512

	everyField = psIP | psTID | psTime | psAddr | psRead | psCallchain | psID | psCPU | psPeriod | psStreamID |
		psRegsUser | psStackUser | psWeight | psDataSrc | psIdentifier | psTransaction | psRegsIntr |
		psPhysAddr | psCgroup | psDataPageSize | psCodePage
)

// fieldsAttr is a struct perf_event_attr (VER5): software cpu-clock every
// 200 µs asking for every field, registers and a user stack dump.
func fieldsAttr() []byte {
	a := make([]byte, 112)
	le := binary.LittleEndian
	le.PutUint32(a[0:], 1)   // PERF_TYPE_SOFTWARE
	le.PutUint32(a[4:], 112) // size
	le.PutUint64(a[16:], 200000)
	le.PutUint64(a[24:], everyField)
	le.PutUint64(a[32:], pfGroup|pfID|pfLost)
	le.PutUint64(a[80:], regsMask)  // sample_regs_user
	le.PutUint32(a[88:], stackDump) // sample_stack_user
	le.PutUint64(a[96:], regsMask)  // sample_regs_intr
	return a
}

func kernelIDs(t *testing.T, s *EventSet, ev int) map[uint64]bool {
	t.Helper()
	info, err := s.Info(ev)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[uint64]bool{}
	for i := 0; i < info.Instances; i++ {
		fd, err := s.FD(ev, i)
		if err != nil {
			t.Fatal(err)
		}
		var id uint64
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), 0x80082407, // PERF_EVENT_IOC_ID
			uintptr(unsafe.Pointer(&id))); e != 0 {
			t.Fatal(e)
		}
		ids[id] = true
	}
	return ids
}

// cgroupID is this process's cgroup v2 id: the inode of its directory.
func cgroupID(t *testing.T) uint64 {
	t.Helper()
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var path string
	for _, line := range strings.Split(string(own), "\n") {
		if strings.HasPrefix(line, "0::") {
			path = line[3:]
		}
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if ok && strings.HasPrefix(right, "cgroup2 ") {
			var st syscall.Stat_t
			if err := syscall.Stat(strings.Fields(left)[4]+path, &st); err != nil {
				t.Fatal(err)
			}
			return st.Ino
		}
	}
	needRoot(t, errors.New("no cgroup v2 mount"))
	return 0
}

func TestSampleFieldsOfTheKernel(t *testing.T) {
	needEvents(t)
	if runtime.GOARCH != "amd64" {
		needRoot(t, errors.New("the register checks know x86-64's perf_regs only"))
	}
	cg := cgroupID(t)
	onThread(func(tid int) {
		setAffinity(t, 0)
		s, err := NewEventSet(EventSetOptions{CPUs: []int{0}, PIDs: []int{tid}})
		if err != nil {
			t.Error(err)
			return
		}
		defer s.Close()
		leader, err := s.Add(Event{Kind: EventRaw, Attr: fieldsAttr(), GroupLeader: true})
		if err != nil {
			t.Error(err)
			return
		}
		member, err := s.Add(Event{Kind: EventSoftware, Config: SWPageFaults, Member: true, Leader: leader})
		if err != nil {
			t.Error(err)
			return
		}
		r, err := s.NewReader(EventReaderOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		defer r.Close()
		s.Enable(AllEvents)
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); {
			_ = make([]byte, 1<<12) // some work, some page faults
		}
		s.Disable(AllEvents)
		got := drainNow(t, r)
		leaderIDs, memberIDs := kernelIDs(t, s, leader), kernelIDs(t, s, member)
		n, user := 0, 0
		for _, g := range got {
			if g.LostSamples > 0 {
				continue
			}
			n++
			f := g.SampleFields
			ok := g.Event == leader && f.Present&everyField == everyField && g.CPU == 0 && f.SampleCPU == 0 &&
				f.Identifier == f.ID && f.ID == f.StreamID && leaderIDs[f.ID] &&
				f.Read != nil && f.Read.Group && len(f.Read.Values) == 2 && f.Read.TimeEnabled > 0 &&
				leaderIDs[f.Read.Values[0].ID] && memberIDs[f.Read.Values[1].ID] && f.Read.Values[0].Value > 0 &&
				f.Read.Values[0].Lost == 0 && f.Read.Values[1].Lost == 0 &&
				f.RegsUserMask == regsMask && f.RegsIntrMask == regsMask && f.RegsUserABI == 2 && f.RegsIntrABI == 2 &&
				len(f.RegsUser) == bits.OnesCount(regsMask) && len(f.RegsIntr) == bits.OnesCount(regsMask) &&
				f.RegsIntr[x86IP] == g.IP && f.StackUserSize == stackDump && len(f.StackUser) <= stackDump &&
				f.Cgroup == cg && f.CodePageSize >= 4096 && g.PID == uint32(os.Getpid()) && g.TID == uint32(tid)
			if f.Misc&7 == 2 { // PERF_RECORD_MISC_USER: the user registers are the sample's
				user++
				ok = ok && f.RegsUser[x86IP] == g.IP && f.RegsUser[x86SP] != 0 && len(f.StackUser) > 0
			}
			if !ok {
				t.Errorf("sample %+v\nfields %+v\nread %+v", g, f, f.Read)
				return
			}
		}
		if n < 10 || user == 0 {
			t.Errorf("%d samples, %d in user mode", n, user)
		}
	})
}

// A sample built here for the leader of the test above, a distinct value
// in every field, comes out of the reader's decoding field by field.
func TestSampleFieldsEveryValue(t *testing.T) {
	needEvents(t)
	s := newSet(t, EventSetOptions{CPUs: []int{0}, PIDs: []int{os.Getpid()}})
	leader := mustAdd(t, s, Event{Kind: EventRaw, Attr: fieldsAttr(), GroupLeader: true})
	mustAdd(t, s, Event{Kind: EventSoftware, Config: SWPageFaults, Member: true, Leader: leader})
	info, err := s.Info(leader)
	if err != nil {
		t.Fatal(err)
	}
	var id uint64
	for k := range kernelIDs(t, s, leader) {
		id = k
	}
	rd, err := s.NewReader(EventReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	// perf_output_sample's order, for the set's sample_type (it adds bits
	// of its own to the attr's; none beyond everyField here).
	if info.SampleType != everyField {
		t.Fatalf("sample_type %#x, want %#x", info.SampleType, uint64(everyField))
	}
	var rec []byte
	put := func(ws ...uint64) {
		for _, w := range ws {
			rec = binary.LittleEndian.AppendUint64(rec, w)
		}
	}
	stack := []byte("the user stack, 24 bytes")
	rec = append(rec, 9, 0, 0, 0, 2, 0, 0, 0)  // PERF_RECORD_SAMPLE, misc USER; size below
	put(id, 0x401000, 7|8<<32, 1000, 0xdead0)  // identifier, ip, pid|tid, time, addr
	put(id, id, 1, 250000)                     // id, stream_id, cpu, period
	put(2, 11, 12, 100, id, 1, 200, id+1, 2)   // group of 2: nr, enabled, running, {value, id, lost}
	put(2, 0xffffffff81000000, 0x401000)       // callchain
	put(2, 21, 22, 23, 24, 25, 26, 27, 28, 29) // regs user: abi 64, 9 values
	put(uint64(len(stack)))                    // stack size,
	rec = append(rec, stack...)                // its data,
	put(uint64(len(stack)))                    // dyn_size
	put(0x0003000200000001, 0x5080021, 0x46)   // weight, data_src, transaction
	put(2, 31, 32, 33, 34, 35, 36, 37, 38, 39) // regs intr
	put(0x12345000, 4242, 4096, 2<<20)         // phys addr, cgroup, page sizes
	binary.LittleEndian.PutUint16(rec[6:], uint16(len(rec)))
	rd.mu.Lock()
	if err := rd.decodeRecord(0, rec); err != nil { // decoded by libperfbuf, as the rings' records are
		t.Fatal(err)
	}
	rd.mu.Unlock()
	rd.SetDeadline(time.Now())
	g, err := rd.Read()
	if err != nil {
		t.Fatal(err)
	}
	want := SampleFields{
		Present: everyField, Misc: 2, Identifier: id, ID: id, StreamID: id, SampleCPU: 1,
		Read: &ReadValues{TimeEnabled: 11, TimeRunning: 12, Group: true,
			Values: []ReadValue{{Value: 100, ID: id, Lost: 1}, {Value: 200, ID: id + 1, Lost: 2}}},
		BranchHWIndex: -1, RegsUserABI: 2, RegsIntrABI: 2, RegsUserMask: regsMask, RegsIntrMask: regsMask,
		RegsUser:  []uint64{21, 22, 23, 24, 25, 26, 27, 28, 29},
		RegsIntr:  []uint64{31, 32, 33, 34, 35, 36, 37, 38, 39},
		StackUser: stack, StackUserSize: uint64(len(stack)),
		Weight: 0x0003000200000001, DataSrc: 0x5080021, Transaction: 0x46, PhysAddr: 0x12345000, Cgroup: 4242,
		DataPageSize: 4096, CodePageSize: 2 << 20,
	}
	if g.Event != leader || g.DecodeErr != nil || !reflect.DeepEqual(g.SampleFields, want) {
		t.Fatalf("event %d, err %v\n got %+v (read %+v)\nwant %+v (read %+v)", g.Event, g.DecodeErr,
			g.SampleFields, g.Read, want, want.Read)
	}
	if g.PID != 7 || g.TID != 8 || g.IP != 0x401000 || g.Addr != 0xdead0 || g.Period != 250000 ||
		!reflect.DeepEqual(g.Callchain, []uint64{0xffffffff81000000, 0x401000}) {
		t.Fatalf("the first fields: %+v", g)
	}
	if v1, v2, v3 := g.WeightStruct(); v1 != 1 || v2 != 2 || v3 != 3 {
		t.Fatalf("weight struct %d %d %d", v1, v2, v3)
	}
}
