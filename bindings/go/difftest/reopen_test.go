package difftest

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"perfbuf.dev/perfbuf/internal/producer"
)

type reopenObs struct {
	// OldClosedAfterNew: the older reader closed after a newer one opened
	// on the map: what BPF's output returned, and what the newer read.
	OldClosedAfterNew reopenRound
	// Rounds of the program from issue 36: a new reader opened as soon as
	// Read returns ErrClosed, before the old Close has returned.
	Rounds []reopenRound
}

type reopenRound struct {
	EmitRet int
	Got     bool // the newer reader returned the record
}

// A reader opened on the map while an older one closes keeps its slots:
// cilium's Close never deletes them. Without that, the older Close deleted
// the newer reader's slots: BPF got -ENOENT and the new reader waited
// forever (issue 36, 1 run in 4 of the ErrClosed program).
func TestReopenWhileClosing(t *testing.T) {
	compare(t, func(t *testing.T, p *producer.Producer, im impl) interface{} {
		var o reopenObs
		// Deterministic: the older reader's Close comes after the newer
		// reader's NewReader.
		old, err := im.open(t, p, os.Getpagesize(), 0)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := im.open(t, p, os.Getpagesize(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		o.OldClosedAfterNew = readAfterEmit(t, p, fresh, 1)
		fresh.Close()

		// The program: Read in a goroutine; on ErrClosed it opens the next
		// reader at once, while the main goroutine's Close may still run.
		rd, err := im.open(t, p, os.Getpagesize(), 0)
		if err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 8; round++ {
			next := make(chan reader, 1)
			go func(rd reader) {
				for {
					if _, err := rd.Read(); errors.Is(err, os.ErrClosed) {
						nr, err := im.open(t, p, os.Getpagesize(), 0)
						if err != nil {
							t.Error(err)
						}
						next <- nr
						return
					}
				}
			}(rd)
			// Time for Read to block; either order is the program's.
			time.Sleep(5 * time.Millisecond)
			if err := rd.Close(); err != nil {
				t.Fatal(err)
			}
			if rd = <-next; rd == nil {
				t.FailNow()
			}
			o.Rounds = append(o.Rounds, readAfterEmit(t, p, rd, byte(round+2)))
		}
		rd.Close()
		return o
	}, func(v interface{}) error {
		o := v.(reopenObs)
		want := reopenRound{0, true}
		if o.OldClosedAfterNew != want {
			return fmt.Errorf("the older reader's Close took the newer one's slots")
		}
		for i, r := range o.Rounds {
			if r != want {
				return fmt.Errorf("round %d: the old Close took the new reader's slots", i)
			}
		}
		return nil
	})
}

// readAfterEmit emits one record on CPU 0 and reports whether rd returns
// it within a bound that only catches a reader that never gets it.
func readAfterEmit(t *testing.T, p *producer.Producer, rd reader, seed byte) reopenRound {
	t.Helper()
	r := reopenRound{EmitRet: emit(t, p, 0, 16, seed, 1)}
	got := make(chan record, 1)
	go func() {
		rec, err := rd.Read()
		if err == nil {
			got <- rec
		}
		close(got)
	}()
	select {
	case rec, ok := <-got:
		r.Got = ok && hasPrefix(rec, 16, seed)
	case <-time.After(2 * time.Second):
	}
	if !r.Got {
		// Unblock the Read left waiting (Close interrupts it).
		rd.Close()
		<-got
	}
	return r
}
