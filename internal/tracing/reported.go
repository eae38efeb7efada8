package tracing

import (
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// ReportedKey names an event the bridge reported upstream, as the upstream will stream it back: its
// subject (P.events.<TYPE>.<UNIT>) and its timestamp in Unix nanoseconds. The upstream gives a reported
// event an id of its own and answers the report without it, so the event's subject and timestamp are what
// the report and the streamed event share.
type ReportedKey struct {
	Subject string
	At      int64
}

// DefaultReported is the number of reports a Reported remembers.
const DefaultReported = 4096

// Reported remembers the span of each report recently accepted upstream, by the event it reported, so
// that the span of that event, when the upstream streams it back, links to the report's. It holds at most
// its size of entries: a new one replaces the oldest. Safe for concurrent use.
type Reported struct {
	mu   sync.Mutex
	m    map[ReportedKey]reported
	ring []ReportedKey // the keys in the order they were put, ring[next] the oldest once full
	next int
}

// reported is an entry of Reported: the report's span, and the ring slot that holds its key. A key taken
// and put again has a second slot; the first, stale, must not evict it.
type reported struct {
	sc   trace.SpanContext
	slot int
}

// NewReported returns a Reported of size entries (DefaultReported when size <= 0).
func NewReported(size int) *Reported {
	if size <= 0 {
		size = DefaultReported
	}
	return &Reported{m: make(map[ReportedKey]reported, size), ring: make([]ReportedKey, 0, size)}
}

// Put remembers sc as the span of the report of the event k; a nil Reported ignores it.
func (r *Reported) Put(k ReportedKey, sc trace.SpanContext) {
	if r == nil || !sc.IsValid() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[k]
	if !ok {
		if len(r.ring) < cap(r.ring) {
			e.slot = len(r.ring)
			r.ring = append(r.ring, k)
		} else {
			if old, ok := r.m[r.ring[r.next]]; ok && old.slot == r.next {
				delete(r.m, r.ring[r.next]) // the oldest entry, unless taken since (its slot stale)
			}
			e.slot = r.next
			r.ring[r.next] = k
			r.next = (r.next + 1) % len(r.ring)
		}
	}
	e.sc = sc
	r.m[k] = e
}

// Take returns the span of the report of the event k and forgets it; false when there is none.
func (r *Reported) Take(k ReportedKey) (trace.SpanContext, bool) {
	if r == nil {
		return trace.SpanContext{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[k]
	if ok {
		delete(r.m, k) // its ring slot stays until overwritten, and then evicts nothing
	}
	return e.sc, ok
}
