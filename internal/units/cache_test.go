package units

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestViewCacheMemory: what the view remembers of a unit costs the same whatever the size of its event's
// headers. nats.go decodes a message's headers into one string and hands out parts of it; the cache keeps
// copies of the unit and the id, not those parts, which would keep each unit's whole header block alive.
// Measured through runtime.MemStats: the heap the cache frees when it is emptied, once it holds every unit
// (the map's share and the two strings, under 512 bytes a unit; the header blocks alone are over 2 KiB).
func TestViewCacheMemory(t *testing.T) {
	n := testutil.StartNATS(t, nil)
	h := newHarness(t, 1, n.Connect)
	// An event's headers may be this long: its type (cut at 1 KiB) in two of them, a long source.
	typ := strings.Repeat("T", 1000)
	h.header = nats.Header{"Tracking-Event-Type": {typ}, "Ce-Type": {typ}, "Ce-Source": {strings.Repeat("s", 200)}}
	rv := h.startView(func(c *Config) { c.MaxRate = -1 })

	const units = 4000
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range units {
		h.publish(h.nextID(), fmt.Sprintf("MSKU%07d", i), base.Add(time.Duration(i)*time.Second).Format(time.RFC3339), false)
	}
	cached := func() int {
		rv.v.cache.mu.Lock()
		defer rv.v.cache.mu.Unlock()
		return len(rv.v.cache.units)
	}
	testutil.EventuallyCount(t, 20*time.Second, "units in the view's cache", units, cached)
	testutil.Eventually(t, 20*time.Second, "every event applied", func() bool {
		st := rv.v.Status()
		return st.Events[OutcomeApplied] == units && st.LagEvents == 0
	})

	held := heapInUse()
	rv.v.cache.clear()
	freed := held - heapInUse()
	t.Logf("the cache of %d units held %d bytes, %d a unit", units, freed, freed/units)
	if per := freed / units; per > 512 {
		t.Errorf("the cache holds %d bytes a unit, want at most 512: it keeps more of each event than its unit and id", per)
	}
}

// heapInUse is the bytes of live heap objects after a collection.
func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
