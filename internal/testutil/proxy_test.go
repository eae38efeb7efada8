package testutil

import (
	"strings"
	"sync"
	"testing"
)

// TestFreezeIn: FreezeAt's rule counts every occurrence of its prefix in a client's bytes, those split
// between two reads too, and freezes before the n-th: in the read it begins in, or at the start of the
// next read when it began in the one before.
func TestFreezeIn(t *testing.T) {
	reads := []string{"HPUB a", "HPUB b HP", "UB c HPU", "B d HPUB e"}
	for n, want := range map[int][2]int{ // the n-th occurrence: the read it freezes in, and where
		1: {0, 0}, 2: {1, 0}, 3: {2, 0}, 4: {3, 0}, 5: {3, 4},
	} {
		px := &Proxy{}
		px.thawed = sync.NewCond(&px.mu)
		fired := px.FreezeAt("HPUB", n)
		var carry []byte
		got := [2]int{-1, -1}
		for r, chunk := range reads {
			if i := px.freezeIn(&carry, []byte(chunk)); i >= 0 {
				got = [2]int{r, i}
				break
			}
		}
		select {
		case <-fired:
		default:
			t.Errorf("occurrence %d: not fired", n)
		}
		if got != want || !px.frozen {
			t.Errorf("occurrence %d of %q: froze in read %d at %d (frozen %v), want read %d at %d", n,
				strings.Join(reads, "|"), got[0], got[1], px.frozen, want[0], want[1])
		}
	}
}
