package difftest

import (
	"os"
	"testing"
	"time"
)

type reuseObs struct {
	SameBuffer []bool // ReadInto kept the Record's buffer
	Lens       []int
}

// ReadInto reuses RawSample when it is large enough, in both packages,
// and grows it when it is not.
func TestReadIntoReusesTheBuffer(t *testing.T) {
	sizes := []int{16, 64, 200, 32}
	var seen []reuseObs
	for _, im := range impls {
		p := openProducer(t)
		var o reuseObs
		m := producerMap(t, p)
		type readInto func() ([]byte, error)
		var next readInto
		buf := make([]byte, 0, 100)
		switch im.name {
		case "cilium":
			rd, err := ciliumNew(m, os.Getpagesize())
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			rec := ciliumRecord(buf)
			next = func() ([]byte, error) { err := rd.ReadInto(rec); return rec.RawSample, err }
		default:
			rd, err := perfbufNew(m, os.Getpagesize())
			if err != nil {
				t.Fatal(err)
			}
			defer rd.Close()
			rec := perfbufRecord(buf)
			next = func() ([]byte, error) { err := rd.ReadInto(rec); return rec.RawSample, err }
		}
		for i, n := range sizes {
			if ret := emit(t, p, 0, n, byte(i), 1); ret != 0 {
				t.Fatalf("emit: %d", ret)
			}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range sizes {
				raw, err := next()
				if err != nil {
					t.Error(err)
					return
				}
				o.SameBuffer = append(o.SameBuffer, cap(raw) == cap(buf) && &raw[:1][0] == &buf[:1][0])
				o.Lens = append(o.Lens, len(raw))
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: ReadInto hangs", im.name)
		}
		seen = append(seen, o)
	}
	if len(seen[0].Lens) != len(sizes) || seen[0].SameBuffer[0] != true || seen[0].SameBuffer[2] != false {
		t.Fatalf("cilium: %+v", seen[0])
	}
	for i := range seen[0].Lens {
		if seen[0].Lens[i] != seen[1].Lens[i] || seen[0].SameBuffer[i] != seen[1].SameBuffer[i] {
			t.Fatalf("the packages differ: cilium %+v, perfbuf %+v", seen[0], seen[1])
		}
	}
}
