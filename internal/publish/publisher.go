package publish

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Publisher publishes tracking events to JetStream. It implements upstream.Sink: Handle publishes
// asynchronously with at most Window acknowledgements outstanding (blocking beyond that, which stops the
// stream reader while NATS is slow or away), and Resume waits until everything handed over is stored.
// A failed or ambiguous publish (an error, no acknowledgement within Timeout, or the connection lost
// while it was in flight) is sent again with the same Nats-Msg-Id until JetStream acknowledges it.
//
// Handle and Resume must be called from one goroutine; Run goes alongside them; LastResumeID may be
// called from any.
type Publisher struct {
	cfg  Config
	nc   *nats.Conn
	js   jetstream.JetStream // publishes sent again, the stream's tail and limits, the fence
	log  *slog.Logger
	dups *duplicateLog // cfg.Observer, for the events skipped as stored

	// mu serialises Handle and Resume with the upkeep of Run. It guards the state of each step, which
	// that step's file owns.
	mu      sync.Mutex
	pos     streamPos // event.go: where the last event sat in the stream
	msgs    messages  // message.go: subjects, the reused first-send message, the size limits
	win     window    // send.go: the entries in flight, in publish order
	acks    *acks     // acks.go: JetStream's answers, matched to the window's entries
	cursor  cursor    // cursor.go: the resume point, and the events stored beyond it
	fence   fence     // fence.go: the check every event carries once Claim stored this leader's markers
	failing bool      // recover.go: publishing failed and is being retried (logged once per run)
}

// New returns a Publisher over the connection nc.
func New(nc *nats.Conn, cfg Config) (*Publisher, error) {
	cfg = cfg.withDefaults()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	a, err := newAcks(nc, cfg.Window, cfg.Observer)
	if err != nil {
		return nil, fmt.Errorf("acknowledgement subscription: %w", err)
	}
	p := &Publisher{
		cfg:  cfg,
		nc:   nc,
		js:   js,
		log:  cfg.Logger,
		dups: cfg.Observer.(*duplicateLog),
		msgs: messages{events: layout.EventBase(cfg.Prefix), dlq: layout.DLQEvents(cfg.Prefix)},
		win:  newWindow(cfg.Window),
		acks: a,
	}
	p.msgs.hdr = newHeaderSet(cfg.Source, &p.fence)
	return p, nil
}

// Close releases the acknowledgement subscription. Publishes still in flight stay unsettled; their
// spans end, saying so. The Publisher must not be used afterwards.
func (p *Publisher) Close() {
	p.acks.close()
	for i := range p.win.n {
		if e := p.win.at(i); e.span != nil && p.acks.abandon(e.seq) {
			endAbandoned(e.span)
		}
	}
	p.js.CleanupPublisher() // the subscription of Claim's asynchronous publishes, one per term otherwise
}

// LastResumeID returns the stream id up to which every event is stored, as of the last Resume or settled
// acknowledgement. Safe for concurrent use.
func (p *Publisher) LastResumeID() string {
	p.cursor.mu.Lock()
	defer p.cursor.mu.Unlock()
	return p.cursor.last
}

// Handle implements upstream.Sink: it publishes one event, or dead-letters it when it cannot go to
// P.events.> (not a JSON object, or too large). Once the window has room, the event takes one step per
// file (see the package documentation): read (event.go), found stored beyond the resume point
// (cursor.go) or built into its message (message.go), sent (send.go), and the acknowledgements that came
// meanwhile settled (acks.go).
func (p *Publisher) Handle(ctx context.Context, ev upstream.Event) error {
	var span trace.Span // the event's (trace.go); it covers the wait for room in the window too
	var sc trace.SpanContext
	if p.cfg.Spans != nil {
		span, sc = p.startSpan(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.room(ctx); err != nil {
		if span != nil {
			endUnsent(span, err)
		}
		return err
	}
	in := p.read(&ev)
	e := &p.win.ring[p.win.next%uint64(len(p.win.ring))] // free: room made sure
	*e = pending{seq: p.win.next, resume: ev.ResumeID, resumeH: in.resumeH, noID: ev.ID == "",
		message: message{after: p.cursor.resumeHdr}}
	var m *nats.Msg // nil: nothing to send
	if p.cursor.stored(in.id) {
		e.id = in.id // stored already: nothing to send, but a later replay may repeat it (tail)
		p.dups.skipped(in.token, in.id)
		if span != nil {
			endUnsent(span, nil)
		}
	} else {
		if span != nil {
			traceEntry(e, span, sc)
		}
		m = p.build(e, &ev, &in)
		if e.span != nil {
			p.describeSpan(e)
		}
	}
	p.send(e, m)
	return p.settleReady(ctx)
}

// room waits until the window has room for one more event, settling its front: the acknowledgements of
// earlier events.
func (p *Publisher) room(ctx context.Context) error {
	for p.win.n >= p.win.limit {
		if err := p.settleFront(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Resume implements upstream.Sink: it waits until every event handed to Handle is stored (sending
// failed ones again) and returns the id to resume the stream after. The first call reads the cursor from
// the events stream.
func (p *Publisher) Resume(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.cursor.loaded {
		if err := p.loadCursor(ctx); err != nil {
			return "", err
		}
		p.cursor.loaded = true
	}
	for p.win.n > 0 {
		if err := p.settleFront(ctx); err != nil {
			return "", err
		}
	}
	p.pos.reset(p.cursor.resume)                     // the upstream replays from here
	p.cursor.skipAll(p.cursor.tail, len(p.win.ring)) // and repeats the events without an SSE id of their own after it
	return p.cursor.resume, nil
}

// Settle waits until every event handed to Handle is stored, as Resume does, but reads no cursor: a
// publisher that never read it has handed nothing over. For the end of a term or a stop.
func (p *Publisher) Settle(ctx context.Context) error {
	p.mu.Lock()
	loaded := p.cursor.loaded
	p.mu.Unlock()
	if !loaded {
		return nil
	}
	_, err := p.Resume(ctx)
	return err
}

// Run keeps the window moving while no event comes: every second it settles what was acknowledged
// meanwhile, and sends again what is overdue or was in flight when the connection was lost. Without it
// such events would wait for the next event or reconnect. Once the fence is claimed it also stores the
// markers again before the events stream's limits would remove them (keepFence), and removes what other
// clients wrote on the fence subjects (sweep). It returns nil when ctx is done.
func (p *Publisher) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// The events stream's state, for keepFence, is read before taking the lock: Handle must not wait
		// on a round trip to the server every second.
		info, infoErr := p.fenceStreamInfo(ctx)
		p.mu.Lock()
		p.checkConnection()
		err := p.settleReady(ctx) // fails when ctx is done, or the window does (Handle then says so)
		if err == nil {
			if err = p.keepFence(ctx, info, infoErr); err != nil && ctx.Err() == nil {
				p.log.Warn("cannot store the fence markers again; the events stream's limits may remove them, "+
					"which ends this term", "err", err)
			}
			if err = p.sweep(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("cannot remove what other clients wrote on the fence subjects", "err", err)
			}
		}
		p.mu.Unlock()
	}
}
