package perfbuf

import (
	"bytes"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

// TestReaderReadsARingBufferToo: the same Reader code reads either map
// kind (perfbuf_new recognises the map's type): a BPF ring buffer's
// records come whole, in order, with CPU -1 (a ring buffer does not say
// which CPU wrote a record).
func TestReaderReadsARingBufferToo(t *testing.T) {
	rp, err := producer.OpenRing(16384)
	if err != nil {
		needRoot(t, err)
	}
	defer rp.Close()
	rd, err := NewReader(rp.MapFD(), 4096, ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	sizes := []int{8, 13, 64}
	for i, n := range sizes {
		if ret, err := rp.Emit(0, n, byte(i), 1); err != nil || ret != 0 {
			t.Fatalf("emit: %d %v", ret, err)
		}
	}
	rd.SetDeadline(time.Now().Add(5 * time.Second))
	for i, n := range sizes {
		rec, err := rd.Read()
		if err != nil || rec.CPU != -1 || rec.LostSamples != 0 || !bytes.Equal(rec.RawSample, producer.Expected(n, byte(i))) {
			t.Fatalf("record %d: %+v %v", i, rec, err)
		}
	}
}
