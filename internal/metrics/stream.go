package metrics

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/event"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Stream is the event stream's metrics, its upstream.StreamObserver, and what it saw last for /status
// (Activity). Its methods are safe for concurrent use.
type Stream struct {
	start         time.Time
	received      *Counter
	connects      *Counter
	disconnects   map[string]*Counter
	disconnectVec *Vec[Counter]
	lastEvent     atomic.Int64 // unix nanoseconds
	lastBytes     atomic.Int64 // unix nanoseconds
	idMu          sync.Mutex
	lastID        string // of the last event read; "" while none had an id
}

var _ upstream.StreamObserver = (*Stream)(nil)

// NewStream returns the event stream's metrics, registered on reg.
func NewStream(reg *Registry) *Stream {
	m := &Stream{start: time.Now(), disconnects: map[string]*Counter{}}
	m.lastEvent.Store(m.start.UnixNano())
	m.lastBytes.Store(m.start.UnixNano())
	m.received = reg.NewCounter(Namespace+"_events_received_total",
		"Messages with data read from the upstream event stream, before publishing.")
	m.connects = reg.NewCounter(Namespace+"_stream_connects_total",
		"Successful connections to the upstream event stream.")
	m.disconnectVec = reg.NewCounterVec(Namespace+"_stream_disconnects_total",
		"Ends of established event stream connections, by reason: eof (closed by the upstream), "+
			"idle (no byte within the idle timeout), status, error.", []string{"reason"})
	for _, r := range DisconnectReasons {
		m.disconnects[r] = m.disconnectVec.With(r)
	}
	// The ages of the stream's last event and last bytes, at scrape time.
	age := func(ns *atomic.Int64) func() float64 {
		return func() float64 { return max(0, time.Since(time.Unix(0, ns.Load())).Seconds()) }
	}
	reg.GaugeFunc(Namespace+"_stream_last_event_age_seconds",
		"Seconds since the last event was read from the upstream stream (since start-up when none was).",
		age(&m.lastEvent))
	reg.GaugeFunc(Namespace+"_stream_last_heartbeat_age_seconds",
		"Seconds since the last bytes (event or keep-alive comment) arrived on the upstream stream, or since the connection was made.",
		age(&m.lastBytes))
	return m
}

// Connected implements upstream.StreamObserver.
func (m *Stream) Connected() {
	m.connects.Inc()
	m.lastBytes.Store(time.Now().UnixNano())
}

// Disconnected implements upstream.StreamObserver.
func (m *Stream) Disconnected(reason string) {
	c, ok := m.disconnects[reason]
	if !ok {
		c = m.disconnects[upstream.DisconnectError]
	}
	c.Inc()
}

// Received implements upstream.StreamObserver: one message with data was read. Its time is that of the
// read that brought its last bytes (Heartbeat), which spares a clock reading per event.
func (m *Stream) Received(ev *event.Event) {
	m.received.Inc()
	m.lastEvent.Store(m.lastBytes.Load())
	if ev.ID != "" {
		m.idMu.Lock()
		m.lastID = ev.ID
		m.idMu.Unlock()
	}
}

// Heartbeat implements upstream.StreamObserver: bytes arrived on the stream.
func (m *Stream) Heartbeat() { m.lastBytes.Store(time.Now().UnixNano()) }

// StreamActivity is what the stream observer saw last, for the status page.
type StreamActivity struct {
	LastID    string    // id of the last event read; "" while none had one
	LastEvent time.Time // when the last event was read; zero while none was
	LastBytes time.Time // when bytes (event or keep-alive) last arrived; zero while none did
}

// Activity returns the stream's last activity.
func (m *Stream) Activity() StreamActivity {
	at := func(ns int64) time.Time {
		if ns == m.start.UnixNano() {
			return time.Time{}
		}
		return time.Unix(0, ns)
	}
	m.idMu.Lock()
	id := m.lastID
	m.idMu.Unlock()
	return StreamActivity{LastID: id, LastEvent: at(m.lastEvent.Load()), LastBytes: at(m.lastBytes.Load())}
}
