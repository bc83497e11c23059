package perfbuf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"perfbuf.dev/perfbuf/internal/producer"
)

// The package calls only libperfbuf's perfbuf_* names: libbpf exports
// perf_buffer__* too, and whichever library the linker saw first would
// serve them (run-tests.sh also runs the tests linked with -lbpf first).
func TestOnlyPerfbufNames(t *testing.T) {
	for file, re := range map[string]*regexp.Regexp{
		"perfbuf.go": regexp.MustCompile(`C\.perf_buffer__`),
		"events.go":  regexp.MustCompile(`C\.perf_buffer__`),
		"shim.c":     regexp.MustCompile(`\bperf_buffer__[a-z_]+\s*\(`),
	} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if m := re.Find(src); m != nil {
			t.Errorf("%s calls %s: use the perfbuf_* name", file, m)
		}
	}
}

// The zero ReaderOptions is perf_buffer__new: perfbuf_new with NULL opts,
// which reads the environment as C does (an invalid PERFBUF_ADAPTIVE is
// refused); explicit options do not read it.
func TestDefaultsAreThoseOfPerfBufferNew(t *testing.T) {
	p := openProducer(t)
	t.Setenv("PERFBUF_ADAPTIVE", "maybe")
	_, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{})
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "PERFBUF_ADAPTIVE") {
		t.Fatalf("zero options with PERFBUF_ADAPTIVE=maybe: %v", err)
	}
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{WakeupEvents: 1})
	if err != nil {
		t.Fatalf("explicit options read the environment: %v", err)
	}
	rd.Close()
}

// stall writes 1000 records into a 1-page (128-record) ring nobody reads,
// reads everything, writes one more (the kernel reports losses with the
// next record it writes) and reads again: how many arrived, how many were
// lost.
func stall(t *testing.T, p *producer.Producer, opts ReaderOptions) (delivered, lost uint64) {
	t.Helper()
	rd, err := NewReader(p.MapFD(), os.Getpagesize(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	// The producer writes synchronously: once Emit returns, its records
	// are in the ring (or the fast mode's spill ring), and a past deadline
	// drains exactly those, with no wait.
	drain := func() {
		rd.SetDeadline(time.Now())
		for {
			rec, err := rd.Read()
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return
			} else if err != nil {
				t.Fatal(err)
			}
			delivered += boolToUint(rec.LostSamples == 0)
			lost += rec.LostSamples
		}
	}
	// Half a 128-record ring, read (where the fast mode gives the CPU a
	// spill ring), then the stall, then one more record.
	for _, n := range []int{80, 1000, 1} {
		emitEach(t, p, 0, 16, 1, n)
		drain()
	}
	return delivered, lost
}

func boolToUint(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// Fast: the spill ring (16 times the ring) the fast mode gives a CPU once
// a read finds its ring half full keeps all the records a stalled
// 128-record ring would lose; without it they are lost, as with libbpf.
// PERFBUF_ADAPTIVE=1 does the same for the zero options.
func TestFastOption(t *testing.T) {
	p := openProducer(t)
	t.Setenv("PERFBUF_ADAPTIVE", "0")
	if d, l := stall(t, p, ReaderOptions{}); l == 0 || d+l != 1081 {
		t.Fatalf("default: delivered %d lost %d, want losses", d, l)
	}
	if d, l := stall(t, p, ReaderOptions{Fast: true}); d != 1081 || l != 0 {
		t.Fatalf("Fast: delivered %d lost %d, want 1081 and 0", d, l)
	}
	t.Setenv("PERFBUF_ADAPTIVE", "1")
	if d, l := stall(t, p, ReaderOptions{}); d != 1081 || l != 0 {
		t.Fatalf("PERFBUF_ADAPTIVE=1: delivered %d lost %d, want 1081 and 0", d, l)
	}
	_, err := NewReader(p.MapFD(), os.Getpagesize(), ReaderOptions{Fast: true, WakeupEvents: 8})
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "fast mode") {
		t.Fatalf("Fast with batching: %v", err)
	}
}

// A batch below WakeupEvents arrives by the default MaxDelay (10ms): the
// reads wait for it with a far deadline (20 s, only there to catch a hang).
// Without the delay bound nothing would wake the reader before that
// deadline (whose drain would then hand the records over), so they must
// come well before it: the 10 s bound tells the two apart, it is no
// measure of speed.
func TestBatchedWakeupsDefaultMaxDelay(t *testing.T) {
	p := openProducer(t)
	rd, err := NewReader(p.MapFD(), 4*os.Getpagesize(), ReaderOptions{WakeupEvents: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	p.Emit(0, 24, 3, 3)
	readPartialBatch(t, rd, 0, 3, 3)
}

// readPartialBatch reads n 24-byte records of a batch below WakeupEvents
// (written on cpu with seed) and fails unless the delay bound, not the
// deadline, handed them over (see above).
func readPartialBatch(t *testing.T, rd *Reader, cpu int, seed byte, n int) {
	t.Helper()
	const deadline, bound = 20 * time.Second, 10 * time.Second
	start := time.Now()
	rd.SetDeadline(start.Add(deadline))
	for i := 0; i < n; i++ {
		rec, err := rd.Read()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if rec.CPU != cpu || !bytes.Equal(rec.RawSample[:24], producer.Expected(24, seed)) {
			t.Fatalf("record %d: %+v", i, rec)
		}
	}
	if d := time.Since(start); d >= bound {
		t.Fatalf("a partial batch came after %v: the deadline's drain, not the delay bound, handed it over", d)
	}
}

func bpfSyscall(cmd uintptr, attr []byte) (int, error) {
	fd, _, e := syscall.Syscall(321 /* SYS_bpf, amd64 */, cmd, uintptr(unsafe.Pointer(&attr[0])), uintptr(len(attr)))
	if e != 0 {
		return -1, e
	}
	return int(fd), nil
}

func TestErrorsSayWhy(t *testing.T) {
	// A hash map.
	attr := make([]byte, 128)
	for i, v := range []uint32{1 /* BPF_MAP_TYPE_HASH */, 4, 4, 4} {
		*(*uint32)(unsafe.Pointer(&attr[4*i])) = v
	}
	fd, err := bpfSyscall(0 /* BPF_MAP_CREATE */, attr)
	if err != nil {
		needRoot(t, err)
	}
	defer syscall.Close(fd)
	_, err = NewReader(fd, os.Getpagesize(), ReaderOptions{})
	var pe *Error
	if !errors.As(err, &pe) || pe.Op != "NewReader" || pe.Errno != syscall.EINVAL || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("hash map: %#v", err)
	}
	// perfbuf_new reads ring buffers too: the message names both kinds.
	if want := "should be BPF_MAP_TYPE_PERF_EVENT_ARRAY (type 4) or BPF_MAP_TYPE_RINGBUF (type 27), but is of type 1: Invalid argument (EINVAL)"; !strings.HasPrefix(err.Error(), "perfbuf: NewReader: map fd=") || !strings.Contains(err.Error(), want) {
		t.Fatalf("hash map: %q\nwant %q", err, want)
	}
	// A pipe.
	var pipe [2]int
	if err := syscall.Pipe(pipe[:]); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(pipe[0])
	defer syscall.Close(pipe[1])
	_, err = NewReader(pipe[0], os.Getpagesize(), ReaderOptions{})
	if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), fmt.Sprintf("map fd %d is not a BPF_MAP_TYPE_PERF_EVENT_ARRAY: it is pipe:", pipe[0])) {
		t.Fatalf("pipe: %v", err)
	}
	// No fd.
	_, err = NewReader(-1, os.Getpagesize(), ReaderOptions{})
	if !errors.Is(err, syscall.EBADFD) || !strings.Contains(err.Error(), "failed to get map info for map FD -1") {
		t.Fatalf("fd -1: %v", err)
	}
	// Our own checks.
	for _, c := range []struct {
		size int
		opts ReaderOptions
		want string
	}{
		{0, ReaderOptions{}, "perCPUBuffer is 0"},
		{4096, ReaderOptions{WakeupEvents: -1}, "ReaderOptions.WakeupEvents is -1"},
		{4096, ReaderOptions{MaxDelay: time.Hour}, "ReaderOptions.MaxDelay is 1h0m0s"},
	} {
		_, err := NewReader(fd, c.size, c.opts)
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// Without privileges: errors.Is(err, syscall.EACCES), and the text says
// what failed and how to fix it. The check runs in a child process that
// drops to uid nobody (see TestHelperUnprivileged).
func TestPermissionDenied(t *testing.T) {
	p := openProducer(t)
	paranoidAtLeast(t, 2)
	dup, err := syscall.Dup(p.MapFD())
	if err != nil {
		t.Fatal(err)
	}
	mapFile := os.NewFile(uintptr(dup), "map") // closes the dup, not the producer's fd
	defer mapFile.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperUnprivileged$", "-test.v")
	cmd.Env = append(os.Environ(), "PERFBUF_GO_TEST_UNPRIV_FD=3")
	cmd.ExtraFiles = []*os.File{mapFile}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "unprivileged:") {
			t.Log(line)
		}
	}
}

// paranoidAtLeast makes perf_event_paranoid at least level for the test
// (raised as root, restored at cleanup), so that uid nobody may not open
// per-CPU events; where it cannot be raised the test skips (fails under
// CI=true).
func paranoidAtLeast(t *testing.T, level int) {
	t.Helper()
	const path = "/proc/sys/kernel/perf_event_paranoid"
	text, err := os.ReadFile(path)
	if err != nil {
		needRoot(t, err)
		return
	}
	before, err := strconv.Atoi(strings.TrimSpace(string(text)))
	if err != nil {
		t.Fatalf("%s: %q", path, text)
	}
	if before >= level {
		return
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(level)), 0); err != nil {
		needRoot(t, fmt.Errorf("perf_event_paranoid is %d (unprivileged processes may open per-CPU events) and cannot be raised: %w", before, err))
		return
	}
	t.Cleanup(func() {
		if err := os.WriteFile(path, []byte(strconv.Itoa(before)), 0); err != nil {
			t.Errorf("restoring perf_event_paranoid %d: %v", before, err)
		}
	})
}

func TestHelperUnprivileged(t *testing.T) {
	fdText := os.Getenv("PERFBUF_GO_TEST_UNPRIV_FD")
	if fdText == "" {
		return // a helper process: only TestPermissionDenied's child runs it
	}
	fd, _ := strconv.Atoi(fdText)
	if err := syscall.Setgroups(nil); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setgid(65534); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setuid(65534); err != nil {
		t.Fatal(err)
	}
	_, err := NewReader(fd, os.Getpagesize(), ReaderOptions{})
	fmt.Println("unprivileged:", err)
	if !errors.Is(err, syscall.EACCES) || !errors.Is(err, os.ErrPermission) {
		t.Fatalf("not EACCES: %#v", err)
	}
	for _, want := range []string{"failed to open perf buffer event on cpu #", "(EACCES)", "run as root, or grant CAP_BPF and CAP_PERFMON"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("%q lacks %q", err, want)
		}
	}
}

// A map object such as cilium/ebpf's *ebpf.Map.
type fdMap struct{ fd int }

func (m *fdMap) FD() int { return m.fd }

func TestNewReaderFromMap(t *testing.T) {
	p := openProducer(t)
	dup, err := syscall.Dup(p.MapFD())
	if err != nil {
		t.Fatal(err)
	}
	m := &fdMap{dup}
	rd, err := NewReaderFromMap(m, os.Getpagesize(), ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(dup) // the Reader has its own fd: closing the map's does not matter
	p.Emit(1, 32, 6, 1)
	rd.SetDeadline(time.Now().Add(time.Second))
	rec, err := rd.Read()
	if err != nil || rec.CPU != 1 || !bytes.Equal(rec.RawSample[:32], producer.Expected(32, 6)) {
		t.Fatalf("read: %+v %v", rec, err)
	}
	rd.Close()
	if ret, _ := p.Emit(0, 8, 0, 1); ret != -2 {
		t.Fatalf("after Close the map still has rings: %d", ret)
	}

	var nilMap *fdMap
	if _, err := NewReaderFromMap(nilMap, os.Getpagesize(), ReaderOptions{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("nil *fdMap: %v", err)
	}
	if _, err := NewReaderFromMap(nil, os.Getpagesize(), ReaderOptions{}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("nil: %v", err)
	}
	if _, err := NewReaderFromMap(&fdMap{-1}, os.Getpagesize(), ReaderOptions{}); !errors.Is(err, syscall.EBADF) {
		t.Fatalf("closed map: %v", err)
	}
}
