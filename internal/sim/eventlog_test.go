package sim

import (
	"testing"
	"time"
)

func newLog(rate float64, limit, retention int) *eventLog {
	l := &eventLog{}
	l.init(&Options{EventRate: rate, EventLimit: limit, Retention: retention})
	return l
}

func TestEventLogRateSchedule(t *testing.T) {
	l := newLog(2000, 0, 10_000_000)
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l.startGeneration(start)
	tests := []struct {
		at      time.Duration
		wantGen int64
	}{
		{0, 1}, // event 0 is due at the start
		{499 * time.Microsecond, 1},
		{500 * time.Microsecond, 2},
		{time.Second, 2001},
		{time.Hour, 7_200_001}, // a long catch-up costs one run, not memory
	}
	for _, tt := range tests {
		l.catchUp(start.Add(tt.at))
		if l.gen != tt.wantGen || l.next != tt.wantGen+1 {
			t.Errorf("at %v: %d generated (next %d), want %d", tt.at, l.gen, l.next, tt.wantGen)
		}
	}
	if len(l.segs) != 1 {
		t.Errorf("%d segments, want 1", len(l.segs))
	}
	if due, ok := l.nextDue(); !ok || !due.Equal(start.Add(time.Hour+500*time.Microsecond)) {
		t.Errorf("next due %v", due)
	}
	e, ok := l.at(2001)
	if !ok || e.k != 2000 || !e.ts.Equal(start.Add(time.Second)) {
		t.Errorf("entry 2001: %+v", e)
	}
}

func TestEventLogInterleavingAndLimit(t *testing.T) {
	l := newLog(1000, 5, 100)
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	l.startGeneration(start)
	l.catchUp(start.Add(1500 * time.Microsecond)) // k = 0, 1
	l.appendExplicit(&explicitEvent{id: "x", data: []byte("x")})
	l.catchUp(start.Add(time.Hour)) // k = 2..4, then the limit
	l.appendExplicit(&explicitEvent{data: []byte("y")})
	var kinds []string
	for _, e := range l.read(1, 100, nil) {
		if e.ex != nil {
			kinds = append(kinds, string(e.ex.data))
		} else {
			kinds = append(kinds, string(rune('0'+e.k)))
		}
	}
	if got := string(joinStrings(kinds)); got != "01x234y" {
		t.Errorf("log %s, want 01x234y", got)
	}
	if _, ok := l.nextDue(); ok {
		t.Error("a due event beyond the limit")
	}
	if from, ok := l.resolve("x"); !ok || from != 4 {
		t.Errorf("resolve(x) = %d, %v", from, ok)
	}
	// Reading from the middle of a run.
	if e := l.read(5, 2, nil); len(e) != 2 || e[0].k != 3 || e[1].k != 4 {
		t.Errorf("read(5, 2) = %+v", e)
	}
}

func joinStrings(s []string) []byte {
	var b []byte
	for _, x := range s {
		b = append(b, x...)
	}
	return b
}

func TestEventLogFloodMemory(t *testing.T) {
	const retention = 1_000_000
	l := newLog(-1, 0, retention)
	now := time.Now()
	l.startGeneration(now)
	l.appendExplicit(&explicitEvent{id: "early", data: []byte("e")})
	for l.gen < 10_000_000 {
		l.flood(streamBurst, now)
	}
	if l.next-l.first != retention || l.next != l.gen+2 {
		t.Errorf("retained %d from %d", l.next-l.first, l.first)
	}
	if n := len(l.segs); n > retention/streamBurst+2 {
		t.Errorf("%d segments for %d retained entries", n, retention)
	}
	if _, ok := l.ids["early"]; ok {
		t.Error("the id of a dropped explicit entry is still known")
	}
	if from, ok := l.resolve("early"); ok || from != l.first {
		t.Errorf("resolve(dropped) = %d, %v", from, ok)
	}
	if from, ok := l.resolve(EventID(int(l.first - 1))); !ok || from != l.first {
		t.Errorf("resolve(just before the first) = %d, %v", from, ok)
	}
	if e := l.recent(maxTrackedEvents, 3, now, func(*explicitEvent) bool { return false }); len(e) != maxTrackedEvents || e[0].k%numShipments != 3 {
		t.Errorf("recent: %d entries", len(e))
	}
}

func TestEventLogRetentionTrimsRuns(t *testing.T) {
	l := newLog(-1, 0, 5)
	now := time.Now()
	l.startGeneration(now)
	l.flood(3, now)
	l.appendExplicit(&explicitEvent{id: "a"})
	l.flood(4, now.Add(time.Millisecond))
	// 8 entries, 5 retained: seq 4 (a) .. 8.
	if l.first != 4 || l.segs[0].ex == nil {
		t.Fatalf("first %d, segs %+v", l.first, l.segs)
	}
	l.flood(2, now.Add(2*time.Millisecond))
	if l.first != 6 || l.segs[0].seq != 6 || l.segs[0].k != 4 || l.segs[0].n != 3 {
		t.Errorf("after trimming into a run: first %d, segs %+v", l.first, l.segs)
	}
	if _, ok := l.ids["a"]; ok {
		t.Error("dropped id still known")
	}
}

// recent leaves out generated events stamped after until: a flood burst appended by a stream while a
// tracking query was taking its time.
func TestEventLogRecentUntil(t *testing.T) {
	l := newLog(-1, 0, 1000)
	now := time.Now()
	l.startGeneration(now)
	l.flood(numShipments*3, now)
	l.flood(numShipments*2, now.Add(time.Millisecond))
	all := func(*explicitEvent) bool { return true }
	if e := l.recent(maxTrackedEvents, 0, now, all); len(e) != 3 {
		t.Errorf("%d entries until now, want the 3 stamped now", len(e))
	}
	if e := l.recent(maxTrackedEvents, 0, now.Add(time.Millisecond), all); len(e) != 5 {
		t.Errorf("%d entries until a millisecond later, want 5", len(e))
	}
}
