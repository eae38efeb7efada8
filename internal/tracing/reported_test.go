package tracing

import (
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

// TestReportedBounded: Reported keeps at most its size of entries, dropping the oldest first; Take
// returns an entry once; a nil or empty one finds nothing.
func TestReportedBounded(t *testing.T) {
	sc := func(i int) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{byte(i + 1)}})
	}
	key := func(i int) ReportedKey {
		return ReportedKey{Subject: fmt.Sprintf("tracking.events.GATE_IN.U%d", i), At: int64(i)}
	}
	var none *Reported
	none.Put(key(0), sc(0))
	if _, ok := none.Take(key(0)); ok {
		t.Fatal("a nil Reported found an entry")
	}
	r := NewReported(3)
	for i := range 5 {
		r.Put(key(i), sc(i))
	}
	if len(r.m) != 3 {
		t.Fatalf("%d entries held, want 3", len(r.m))
	}
	for i := range 2 {
		if _, ok := r.Take(key(i)); ok {
			t.Errorf("entry %d not dropped", i)
		}
	}
	for i := 2; i < 5; i++ {
		got, ok := r.Take(key(i))
		if !ok || !got.Equal(sc(i)) {
			t.Errorf("entry %d: %v %v", i, got, ok)
		}
		if _, ok := r.Take(key(i)); ok {
			t.Errorf("entry %d taken twice", i)
		}
	}
	if len(r.m) != 0 {
		t.Errorf("%d entries held after taking all", len(r.m))
	}
}

// TestReportedPutAgain: a key taken and put again is as new as its second Put: the ring slot of its first
// does not evict it when a later Put comes round to that slot.
func TestReportedPutAgain(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}})
	key := func(s string) ReportedKey { return ReportedKey{Subject: "tracking.events.GATE_IN." + s, At: 1} }
	r := NewReported(3)
	for _, k := range []string{"A", "B", "C"} {
		r.Put(key(k), sc)
	}
	if _, ok := r.Take(key("B")); !ok {
		t.Fatal("B not held")
	}
	r.Put(key("B"), sc) // evicts A, the oldest
	r.Put(key("D"), sc) // comes round to B's first slot: evicts nothing, three entries held
	for _, k := range []string{"B", "C", "D"} {
		if _, ok := r.Take(key(k)); !ok {
			t.Errorf("%s dropped", k)
		}
	}
	if _, ok := r.Take(key("A")); ok {
		t.Error("A, the oldest, kept")
	}
}
