package perfbuf

import (
	"encoding/binary"
	"os"
	"sort"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/accounted"
)

// openAccounted loads the loss identity's BPF program (make accounted-lib),
// failing under CI=true, skipping otherwise, where it cannot.
func openAccounted(t *testing.T) *accounted.Program {
	t.Helper()
	path := os.Getenv("PERFBUF_ACCOUNTED_BPF_OBJ")
	if path == "" {
		path = "../../build/accounted.bpf.o"
	}
	p, err := accounted.Open(path)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (needs root with BPF, and make accounted-lib)", err)
		}
		t.Skipf("%v (needs root with BPF, and make accounted-lib)", err)
	}
	t.Cleanup(p.Close)
	return p
}

// Every record the BPF program sent is delivered or in one loss bucket of
// Stats, and Health sizes the ring from what it held.
func TestLossIdentityAndHealth(t *testing.T) {
	p := openAccounted(t)
	rd, err := NewReaderFromMap(p.Events(), os.Getpagesize(), ReaderOptions{
		CPUs: []int{0}, CountLost: true, OutputCounts: p.EventsCounts(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if ret, err := p.Run(0, 64, 300); err != nil || ret != -28 {
		t.Fatalf("the burst: %d, %v (want -ENOSPC: one page cannot hold it)", ret, err)
	}
	var seqs []uint64
	rd.SetDeadline(time.Now().Add(200 * time.Millisecond))
	for {
		rec, err := rd.Read()
		if err != nil {
			break
		}
		if rec.LostSamples == 0 {
			seqs = append(seqs, binary.LittleEndian.Uint64(rec.RawSample[:8]))
		}
	}
	if err := rd.CountDropped(0, 2); err != nil {
		t.Fatal(err)
	}
	stats, err := rd.Stats()
	if err != nil {
		t.Fatal(err)
	}
	st := stats[0]
	if st.Produced == nil || *st.Produced != 300 {
		t.Fatalf("produced %v, want 300", st.Produced)
	}
	if st.Samples != uint64(len(seqs)) || st.Dropped != 2 || st.Delivered != st.Samples-2 {
		t.Fatalf("samples %d (read %d), dropped %d, delivered %d", st.Samples, len(seqs), st.Dropped, st.Delivered)
	}
	if *st.Produced != st.Delivered+st.LostTotal || st.LostTotal != st.Lost+st.OutputFailed+st.Dropped {
		t.Fatalf("the identity does not add up: %+v", st)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("record %d has seq %d: the first records are read, the rest lost", i, s)
		}
	}
	health, err := rd.Health()
	if err != nil {
		t.Fatal(err)
	}
	h := health[0]
	if h.CPU != 0 || !h.Online || h.DataSize != uint64(os.Getpagesize()) || h.PeakPendingBytes < 3000 {
		t.Fatalf("health %+v", h)
	}
	if h.NeededBytes < 300*80 || h.SuggestedPages < 8 || h.SinceLastRecord < 0 {
		t.Fatalf("sizing %+v", h)
	}
	if err := rd.CountDropped(-1, 1); err == nil {
		t.Fatal("a negative index is refused")
	}
}
