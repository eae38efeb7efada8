package units

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

// TestViewCacheMemory: what the view remembers of a unit costs the same whatever the size of its event's
// headers. nats.go decodes a message's headers into one string and hands out parts of it (here through
// nats.DecodeHeadersMsg, as the client does for every message it receives); the cache keeps copies of the
// unit and the id, not those parts, which would keep each unit's whole header block alive. Measured
// through runtime.MemStats without a server in the process: the heap the cache frees when it is emptied,
// once it holds every unit (the map's share and the two strings, under 512 bytes a unit; the header blocks
// alone are over 2 KiB).
func TestViewCacheMemory(t *testing.T) {
	const units = 4000
	typ := strings.Repeat("T", 1000) // an event's type may be this long (cut at 1 KiB), in two headers
	var c cache
	gen := c.generation()
	for i := range units {
		id := fmt.Sprintf("ev-%07d", i)
		raw := "NATS/1.0\r\n" + layout.HeaderEventID + ": " + id + "\r\nTracking-Event-Type: " + typ +
			"\r\nCe-Type: " + typ + "\r\nCe-Source: " + strings.Repeat("s", 200) + "\r\n\r\n"
		hdr, err := nats.DecodeHeadersMsg([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		subject := fmt.Sprintf("tracking.events.%s.MSKU%07d", typ[:8], i)
		c.put(gen, subject[strings.LastIndexByte(subject, '.')+1:], value{present: true, rev: uint64(i + 1),
			stamp: stamp{id: hdr.Get(layout.HeaderEventID)}})
	}
	if len(c.units) != units {
		t.Fatalf("the cache holds %d units, want %d", len(c.units), units)
	}
	held := heapAlloc()
	c.clear()
	freed := held - heapAlloc()
	t.Logf("the cache of %d units held %d bytes, %d a unit", units, freed, freed/units)
	if per := freed / units; per > 512 {
		t.Errorf("the cache holds %d bytes a unit, want at most 512: it keeps more of each event than its unit and id", per)
	}
}

// heapAlloc is the bytes of live heap objects after a collection.
func heapAlloc() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
