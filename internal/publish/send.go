package publish

import (
	"time"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

// The third step of Handle: the event's entry joins the window, and its message is published
// asynchronously.

// window is the publisher's events in flight: a ring of entries in publish order. Entries leave it in that
// order, each only once stored (acks.go), which is what makes the resume header of every message exact.
type window struct {
	ring    []pending // entry seq sits at ring[seq % len(ring)]
	head, n int
	next    uint64 // the next entry's sequence number
	// limit is the most entries in flight at once: len(ring), or FenceWidth once the fence is claimed.
	limit int
	timer *time.Timer // await's
}

func newWindow(size int) window {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	// Sequence numbers start at 1: a slot's initial state word, 0, then names no publish.
	return window{ring: make([]pending, size), next: 1, head: 1 % size, limit: size, timer: timer}
}

// pending is one window entry: what is needed to send the event (again) and to account for it.
type pending struct {
	message
	seq     uint64
	resume  string // the stream id after this entry
	resumeH string // resume in header form
	noID    bool   // the SSE message had no id of its own: a replay after resume repeats it
	sent    time.Time
	done    bool  // the outcome is known
	err     error // the publish failed
	// span is the event's span (trace.go), nil with tracing off: ended by the acknowledgement's handler
	// (acks.go), or by recover once a failed publish is stored.
	span trace.Span
}

// send adds e, filled in the window's next slot, to the window and publishes m, its message,
// asynchronously; with m nil (the event was found stored) the entry is settled at once. Publishes in
// flight are failed first if the connection was lost since the last look.
func (p *Publisher) send(e *pending, m *nats.Msg) {
	p.checkConnection()
	p.win.next++
	p.win.n++
	if m == nil {
		e.done = true
		return
	}
	m.Reply = p.acks.reply(e.seq)
	e.sent = time.Now()
	p.acks.start(e.seq, e.token, e.sent, e.at, e.span)
	err := p.nc.PublishMsg(m)
	m.Reply = ""
	if err != nil {
		p.acks.fail(e.seq, err)
	}
}

// checkConnection fails the publishes in flight if the connection was lost since the last check.
func (p *Publisher) checkConnection() {
	select {
	case <-p.acks.status:
		p.connectionLost()
	default:
	}
}

// connectionLost settles as failed every publish in the window still awaiting its acknowledgement: the
// connection was lost, and such publishes may never be answered. It takes further notifications along.
func (p *Publisher) connectionLost() {
	for len(p.acks.status) > 0 {
		<-p.acks.status
	}
	for i := 0; i < p.win.n; i++ {
		if e := p.win.at(i); !e.done {
			p.acks.fail(e.seq, nats.ErrDisconnected)
		}
	}
}
