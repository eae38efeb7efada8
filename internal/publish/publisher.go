package publish

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/event"
	"github.com/tracking-bridge/tracking-bridge/internal/subjects"
)

// Publisher publishes tracking events to JetStream. It implements upstream.Sink: Handle publishes
// asynchronously with at most Window acknowledgements outstanding (blocking beyond that, which stops the
// stream reader while NATS is slow or away), and Resume waits until everything handed over is stored.
// A failed or ambiguous publish (an error, no acknowledgement within Timeout, or the connection lost
// while it was in flight) is sent again with the same Nats-Msg-Id until JetStream acknowledges it.
//
// The window is a ring of entries in publish order; entries leave it in that order, each only once
// stored, which is what makes the resume header of every message exact.
//
// Handle and Resume must be called from one goroutine; Run goes alongside them; LastResumeID may be
// called from any.
type Publisher struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream // publishes sent again, and the stream's tail at start-up
	log    *slog.Logger
	dups   *duplicateLog // cfg.Observer, for the events skipped as stored
	events string        // "P.events."
	dlq    string        // "P.dlq.events"

	mu      sync.Mutex // serialises Handle and Resume with the upkeep of Run
	acks    *acks
	ring    []pending // entry seq sits at ring[seq % len(ring)]
	head, n int
	next    uint64 // the next entry's sequence number
	timer   *time.Timer
	hdr     *headerSet // the header map of every first send, reused
	msg     nats.Msg

	resume    string // the stream id up to which everything is stored
	resumeHdr string // resume as it travels in headers (HeaderID)
	loaded    bool
	// The position of the last event in the stream: the resume id it came after and how many messages
	// came since the message that set that id. It tells apart oversize events without an id.
	posID   string
	posN    int
	skip    map[string]struct{} // ids stored beyond the cursor: found at start-up, or tail at a reconnect
	skipTTL int
	// tail holds the ids of the events stored since the last one that came with an SSE id of its own:
	// the events without one resume after the id before them, so a reconnect replays them.
	tail    []string
	failing bool
	// The max_msg_size of the events and dead-letter streams (0: none), read at start-up and again when
	// JetStream refuses a message as too large.
	eventsMax, dlqMax int64

	// fence is the check every event carries once Claim stored this leader's markers; then at most
	// FenceWidth events are in flight (see FenceWidth).
	fence fence

	resumeMu   sync.Mutex // guards lastResume, read by LastResumeID from other goroutines
	lastResume string
}

// pending is one window entry: what is needed to send the event (again) and to account for it.
type pending struct {
	seq     uint64
	subject string // "" for an entry with nothing to send (found already stored)
	token   string // type token, "" for dead letters
	id      string
	name    string // the SSE event name
	typ     string // Tracking-Event-Type, when hasType
	hasType bool
	time    string // ce-time, "" if none
	after   string // Bridge-Resume-After (header form)
	ownID   string // Bridge-Stream-Id (header form), "" if none
	data    []byte
	dead    *nats.Msg // a dead letter, built once
	resume  string    // the stream id after this entry
	resumeH string    // resume in header form
	noID    bool      // the SSE message had no id of its own: a replay after resume repeats it
	sent    time.Time
	done    bool  // the outcome is known
	err     error // the publish failed
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
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	p := &Publisher{
		cfg:    cfg,
		nc:     nc,
		js:     js,
		log:    cfg.Logger,
		events: subjects.EventBase(cfg.Prefix),
		dlq:    subjects.DLQEvents(cfg.Prefix),
		acks:   a,
		ring:   make([]pending, cfg.Window),
		// Sequence numbers start at 1: a slot's initial state word, 0, then names no publish.
		next:  1,
		head:  1 % cfg.Window,
		timer: timer,
	}
	p.hdr = newHeaderSet(cfg.Source, &p.fence)
	p.dups = cfg.Observer.(*duplicateLog)
	return p, nil
}

// Close releases the acknowledgement subscription. Publishes still in flight stay unsettled. The
// Publisher must not be used afterwards.
func (p *Publisher) Close() {
	p.acks.close()
	p.js.CleanupPublisher() // the subscription of Claim's asynchronous publishes, one per term otherwise
}

// LastResumeID returns the stream id up to which every event is stored, as of the last Resume or settled
// acknowledgement. Safe for concurrent use.
func (p *Publisher) LastResumeID() string {
	p.resumeMu.Lock()
	defer p.resumeMu.Unlock()
	return p.lastResume
}

// setLastResume records the id LastResumeID returns.
func (p *Publisher) setLastResume(id string) {
	p.resumeMu.Lock()
	p.lastResume = id
	p.resumeMu.Unlock()
}

// Resume implements upstream.Sink: it waits until every event handed to Handle is stored (sending
// failed ones again) and returns the id to resume the stream after. The first call reads the cursor from
// the events stream.
func (p *Publisher) Resume(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.loaded {
		if err := p.loadCursor(ctx); err != nil {
			return "", err
		}
		p.loaded = true
	}
	for p.n > 0 {
		if err := p.settleFront(ctx); err != nil {
			return "", err
		}
	}
	p.posID, p.posN = p.resume, 0 // the upstream replays from here
	p.skipAll(p.tail)             // and repeats the events without an SSE id of their own after it
	return p.resume, nil
}

// Settle waits until every event handed to Handle is stored, as Resume does, but reads no cursor: a
// publisher that never read it has handed nothing over. For the end of a term or a stop.
func (p *Publisher) Settle(ctx context.Context) error {
	p.mu.Lock()
	loaded := p.loaded
	p.mu.Unlock()
	if !loaded {
		return nil
	}
	_, err := p.Resume(ctx)
	return err
}

// Handle implements upstream.Sink: it publishes one event, or dead-letters it when it cannot go to
// P.events.* (not a JSON object, or too large).
func (p *Publisher) Handle(ctx context.Context, ev event.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n == len(p.ring) || p.fence.on() && p.n >= FenceWidth {
		if err := p.settleFront(ctx); err != nil {
			return err
		}
	}
	p.checkConnection()
	e := &p.ring[p.next%uint64(len(p.ring))]
	*e = pending{seq: p.next, resume: ev.ResumeID, after: p.resumeHdr, noID: ev.ID == ""}
	if ev.ResumeID != "" {
		e.resumeH = HeaderID(ev.ResumeID)
	}
	if ev.ResumeID != p.posID {
		// Position 0 is the message that set the id: this one, or a block without data before it (never
		// handed over), which a reconnect after that id would not replay either.
		p.posID, p.posN = ev.ResumeID, 0
		if ev.ID != ev.ResumeID {
			p.posN = 1
		}
	} else {
		p.posN++
	}
	sc := eventScan{data: ev.Data} // scanned once, by the skip check or by prepare
	if key, skip := p.skipped(&ev, &sc); skip {
		e.id = key // stored already: nothing to send, but a later replay may repeat it (tail)
		p.dups.skipped(skippedType(&sc), key)
	} else {
		p.prepare(e, &ev, &sc)
	}
	p.next++
	p.n++
	p.send(e)
	return p.settleReady(ctx)
}

// Run keeps the window moving while no event comes: every second it settles what was acknowledged
// meanwhile, and sends again what is overdue or was in flight when the connection was lost. Without it
// such events would wait for the next event or reconnect. Once the fence is claimed it also stores the
// markers again before the events stream's limits would remove them (keepFence). It returns nil when ctx
// is done.
func (p *Publisher) Run(ctx context.Context) error {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p.mu.Lock()
		p.checkConnection()
		err := p.settleReady(ctx) // fails when ctx is done, or the window does (Handle then says so)
		if err == nil {
			if err = p.keepFence(ctx); err != nil && ctx.Err() == nil {
				p.log.Warn("cannot store the fence markers again; the events stream's limits may remove them, "+
					"which ends this term", "err", err)
			}
		}
		p.mu.Unlock()
	}
}
