package publish

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/event"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
)

// Message headers set on every event (contract §3), plus the bridge's own resume header.
const (
	HeaderMsgID     = "Nats-Msg-Id"
	HeaderEventID   = "Tracking-Event-Id"
	HeaderEventType = "Tracking-Event-Type"
	HeaderError     = "Bridge-Error"
	// HeaderResumeAfter names the stream id after which resuming loses nothing: when the message was sent,
	// every event up to that id was acknowledged by JetStream. The resume cursor is built from it.
	HeaderResumeAfter = "Bridge-Resume-After"
	// HeaderStreamID carries the message's own SSE resume id when it differs from its event id (an SSE
	// message without an id: line).
	HeaderStreamID = "Bridge-Stream-Id"
)

// Observer receives the publisher's outcomes (for metrics). Methods are called from the goroutine that
// calls Handle and Resume, except Published (see there); implementations must be cheap.
type Observer interface {
	// Published is told of an event JetStream acknowledged (stored, or recognised as a duplicate), with
	// its subject's type token. It is called from the NATS connection's goroutine as the acknowledgement
	// arrives, or from the Handle goroutine for an event sent again after a failure: it must be safe for
	// concurrent use.
	Published(typeToken string)
	// AckLatency is told how long an event's acknowledgement took, when the event is settled (an upper
	// bound: within the time between two acknowledgements).
	AckLatency(d time.Duration)
	// DeadLettered is told of an event sent to P.dlq.events; reason is one of the Reason* constants.
	DeadLettered(reason string)
	PublishRetried(err error)
}

// Reasons for dead-lettering an event, as passed to Observer.DeadLettered. The set is closed (a metrics
// label).
const (
	ReasonNotJSON    = "not_json"    // the data is not a JSON object
	ReasonOversize   = "oversize"    // larger than the stream's size bound (BRIDGE_STREAM_MAX_EVENT_BYTES)
	ReasonMaxPayload = "max_payload" // larger than the NATS server's max_payload
)

// Config configures a Publisher.
type Config struct {
	// Prefix is the subject prefix P of the contract ("tracking").
	Prefix string
	// EventsStream is the name of the events stream (PFX_EVENTS), read at start-up for the resume cursor.
	EventsStream string
	// Window is the number of publishes awaiting their acknowledgement at once.
	Window int
	// Timeout bounds the wait for one acknowledgement; a publish that times out is sent again.
	Timeout time.Duration
	// Source is the CloudEvents source attribute.
	Source   string
	Logger   *slog.Logger
	Observer Observer
}

// Publisher publishes tracking events to JetStream. It implements upstream.Sink: Handle publishes
// asynchronously with at most Window acknowledgements outstanding (blocking beyond that, which stops the
// stream reader while NATS is slow or away), and Resume waits until everything handed over is stored.
// A failed or ambiguous publish is sent again with the same Nats-Msg-Id until JetStream acknowledges it.
//
// Handle and Resume must be called from one goroutine; LastResumeID may be called from any.
type Publisher struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	log    *slog.Logger
	events string // "P.events."
	dlq    string // "P.dlq.events"

	ring    []pending
	head, n int
	resume  string
	loaded  bool
	skip    map[string]struct{} // ids found stored beyond the cursor at start-up
	skipTTL int
	failing bool

	resumeMu   sync.Mutex // guards lastResume, read by LastResumeID from other goroutines
	lastResume string
	lastAck    atomic.Int64 // unix ns of the latest acknowledgement received, for the ack latency
}

type pending struct {
	msg    *nats.Msg
	fut    jetstream.PubAckFuture
	err    error // the publish (or its acknowledgement) failed
	acked  bool  // the acknowledgement was received
	resume string
	token  string // type token, "" for dead letters
	sent   time.Time
}

// New returns a Publisher over the connection nc.
func New(nc *nats.Conn, cfg Config) (*Publisher, error) {
	if cfg.Window <= 0 {
		cfg.Window = 1024
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	p := &Publisher{
		cfg:    cfg,
		nc:     nc,
		log:    cfg.Logger,
		events: cfg.Prefix + ".events.",
		dlq:    cfg.Prefix + ".dlq.events",
		ring:   make([]pending, cfg.Window),
	}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(cfg.Window+1),
		jetstream.WithPublishAsyncTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, m *nats.Msg, _ *jetstream.PubAck) {
			p.lastAck.Store(time.Now().UnixNano())
			if token, ok := strings.CutPrefix(m.Subject, p.events); ok {
				p.cfg.Observer.Published(token)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	p.js = js
	return p, nil
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
	if !p.loaded {
		if err := p.loadCursor(ctx); err != nil {
			return "", err
		}
		p.loaded = true
	}
	if err := p.settle(ctx, true); err != nil {
		return "", err
	}
	return p.resume, nil
}

// Handle implements upstream.Sink: it publishes one event, or dead-letters it when it cannot go to
// P.events.* (not a JSON object, or too large).
func (p *Publisher) Handle(ctx context.Context, ev event.Event) error {
	if p.skip != nil {
		if p.skipTTL--; p.skipTTL <= 0 || len(p.skip) == 0 {
			p.skip = nil
		} else if id := eventKey(&ev); id != "" {
			if _, ok := p.skip[id]; ok {
				delete(p.skip, id)
				return p.enqueue(ctx, pending{resume: ev.ResumeID})
			}
		}
	}
	msg, token := p.build(&ev)
	return p.enqueue(ctx, pending{msg: msg, resume: ev.ResumeID, token: token})
}

// eventKey returns the id an event will be stored under without building the message, when cheap.
func eventKey(ev *event.Event) string {
	if ev.ID != "" {
		return ev.ID
	}
	if ev.Oversize > 0 {
		return ""
	}
	if f, err := ScanEvent(ev.Data); err == nil && f.ID != "" {
		return f.ID
	}
	return digest(ev.Data)
}

// build makes the NATS message for an event: on P.events.<TYPE>, or a dead letter on P.dlq.events.
func (p *Publisher) build(ev *event.Event) (*nats.Msg, string) {
	if ev.Oversize > 0 {
		desc, _ := json.Marshal(struct {
			Error string `json:"error"`
			ID    string `json:"id,omitempty"`
			Size  int    `json:"size"`
		}{"event larger than BRIDGE_STREAM_MAX_EVENT_BYTES; its data was dropped", ev.ID, ev.Oversize})
		return p.deadLetter(ev, desc, ev.ID, ReasonOversize, fmt.Sprintf("event of %d bytes exceeds the size bound", ev.Oversize)), ""
	}
	f, err := ScanEvent(ev.Data)
	if err != nil {
		return p.deadLetter(ev, ev.Data, ev.ID, ReasonNotJSON, "event data is not a JSON object: "+err.Error()), ""
	}
	id := ev.ID
	if id == "" {
		id = f.ID
	}
	if id == "" {
		id = digest(ev.Data)
	}
	token := TypeToken(f.Type, f.TypeKind)
	subject := p.events + token

	// One backing array for all header values: a single allocation.
	vals := make([]string, 10)
	h := make(nats.Header, 11)
	set := func(i int, k, v string) { vals[i] = v; h[k] = vals[i : i+1 : i+1] }
	set(0, HeaderMsgID, id)
	set(1, HeaderEventID, id)
	if f.TypeKind == KindString {
		set(2, HeaderEventType, headerValue(f.Type))
	}
	set(3, "Content-Type", "application/json")
	set(4, "ce-specversion", "1.0")
	set(5, "ce-id", id)
	set(6, "ce-source", p.cfg.Source)
	set(7, "ce-type", subject)
	if f.Timestamp != "" {
		if _, err := time.Parse(time.RFC3339Nano, f.Timestamp); err == nil {
			set(8, "ce-time", f.Timestamp)
		}
	}
	if p.resume != "" {
		set(9, HeaderResumeAfter, p.resume)
	}
	if ev.ResumeID != id {
		h[HeaderStreamID] = []string{ev.ResumeID}
	}
	msg := &nats.Msg{Subject: subject, Header: h, Data: ev.Data}
	// An upper bound of the header block's size: the fixed names and values take under 256 bytes.
	hsize := 256 + 3*len(id) + len(f.Type) + 2*len(subject) + len(p.cfg.Source) + len(f.Timestamp) +
		len(p.resume) + len(ev.ResumeID)
	if max := p.nc.MaxPayload(); max > 0 && int64(len(ev.Data)+hsize) > max {
		desc, _ := json.Marshal(struct {
			Error string `json:"error"`
			ID    string `json:"id"`
			Type  string `json:"type,omitempty"`
			Size  int    `json:"size"`
		}{"event larger than the NATS server's max_payload; its data was dropped", id, token, len(ev.Data)})
		return p.deadLetter(ev, desc, id, ReasonMaxPayload, fmt.Sprintf("event of %d bytes exceeds NATS max_payload %d", len(ev.Data), max)), ""
	}
	return msg, token
}

// deadLetter makes the P.dlq.events message for an event that cannot be published as such; code is one
// of the Reason* constants, reason the human-readable Bridge-Error.
func (p *Publisher) deadLetter(ev *event.Event, body []byte, id, code, reason string) *nats.Msg {
	if id == "" {
		id = digest(body)
	}
	h := nats.Header{
		HeaderMsgID:   {id},
		HeaderEventID: {id},
		HeaderError:   {headerValue(reason)},
	}
	if p.resume != "" {
		h[HeaderResumeAfter] = []string{p.resume}
	}
	if ev.Name != "" {
		h["Sse-Event"] = []string{headerValue(ev.Name)}
	}
	if ev.ResumeID != id {
		h[HeaderStreamID] = []string{ev.ResumeID}
	}
	p.log.Warn("event dead-lettered", "event_id", id, "subject", p.dlq, "err", reason)
	p.cfg.Observer.DeadLettered(code)
	return &nats.Msg{Subject: p.dlq, Header: h, Data: body}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// enqueue sends one message asynchronously (or records an already stored one) in the window.
func (p *Publisher) enqueue(ctx context.Context, e pending) error {
	for p.n == len(p.ring) {
		if err := p.settleOne(ctx); err != nil {
			return err
		}
	}
	if e.msg != nil {
		e.sent = time.Now()
		e.fut, e.err = p.js.PublishMsgAsync(e.msg)
	}
	p.ring[(p.head+p.n)%len(p.ring)] = e
	p.n++
	return p.settle(ctx, false)
}

// settle pops acknowledged entries off the front of the window. With wait it waits until the window is
// empty; without, it stops at the first entry still in flight.
func (p *Publisher) settle(ctx context.Context, wait bool) error {
	for p.n > 0 {
		e := &p.ring[p.head]
		if !wait && !e.settled() {
			select {
			case <-e.fut.Ok():
				e.acked = true
			case e.err = <-e.fut.Err():
			default:
				return nil
			}
		}
		if err := p.settleOne(ctx); err != nil {
			return err
		}
	}
	return nil
}

// settleOne waits for the front entry of the window and pops it. A failure there starts recovery.
func (p *Publisher) settleOne(ctx context.Context) error {
	e := &p.ring[p.head]
	if err := e.wait(ctx); err != nil {
		return err
	}
	if e.err != nil {
		return p.recover(ctx)
	}
	p.pop()
	return nil
}

// settled reports whether the entry's outcome is known (or it needs none: an already stored event).
func (e *pending) settled() bool { return e.fut == nil || e.acked || e.err != nil }

// wait waits for the entry's acknowledgement or failure. Each future delivers its outcome once, so the
// outcome is recorded in the entry.
func (e *pending) wait(ctx context.Context) error {
	if e.settled() {
		return nil
	}
	select {
	case <-e.fut.Ok():
		e.acked = true
	case e.err = <-e.fut.Err():
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

func (p *Publisher) pop() {
	e := &p.ring[p.head]
	if e.msg != nil && e.token != "" {
		// The entry may be popped well after its acknowledgement arrived (the window is checked when the
		// next event comes): the latest acknowledgement's arrival bounds the latency more tightly.
		lat := time.Since(e.sent)
		if d := time.Unix(0, p.lastAck.Load()).Sub(e.sent); d >= 0 && d < lat {
			lat = d
		}
		p.cfg.Observer.AckLatency(lat)
	}
	p.resume = e.resume
	p.setLastResume(e.resume)
	*e = pending{}
	p.head = (p.head + 1) % len(p.ring)
	p.n--
}

// recover handles a failed publish: it lets every publish in the window settle, then sends the failed
// ones again, in their original order and with their Nats-Msg-Id, until JetStream stores each (its
// duplicate window drops one that was in fact stored before). The window is empty afterwards.
func (p *Publisher) recover(ctx context.Context) error {
	for i := 0; i < p.n; i++ {
		if err := p.ring[(p.head+i)%len(p.ring)].wait(ctx); err != nil {
			return err
		}
	}
	for p.n > 0 {
		e := &p.ring[p.head]
		resent := e.err != nil
		for attempt := 0; e.err != nil; attempt++ {
			if !p.failing {
				p.failing = true
				p.log.Warn("publish failed; pausing the stream and sending again", "subject", e.msg.Subject,
					"event_id", e.msg.Header.Get(HeaderMsgID), "err", e.err)
			}
			p.cfg.Observer.PublishRetried(e.err)
			if attempt > 0 && !retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, 5*time.Second, attempt)) {
				return ctx.Err()
			}
			pctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
			_, e.err = p.js.PublishMsg(pctx, e.msg)
			cancel()
			if e.err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
		}
		if resent && e.token != "" {
			p.cfg.Observer.Published(e.token)
		}
		p.pop()
	}
	if p.failing {
		p.failing = false
		p.log.Info("publishing recovered", "resume_after", p.resume)
	}
	return nil
}

// loadCursor reads the resume cursor from the tail of the events stream: the newest message names, in
// HeaderResumeAfter, an id up to which everything was stored; the messages stored after that id are
// remembered so that the upstream's replay does not publish them twice, whatever the duplicate window.
func (p *Publisher) loadCursor(ctx context.Context) error {
	s, err := p.js.Stream(ctx, p.cfg.EventsStream)
	if err != nil {
		return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
	}
	st := info.State
	if st.Msgs == 0 {
		p.log.Info("events stream empty; starting from the upstream's beginning", "stream", p.cfg.EventsStream)
		return nil
	}
	limit := uint64(2*len(p.ring) + 1000)
	var after string
	skip := map[string]struct{}{}
	found := false
	for seq := st.LastSeq; seq >= st.FirstSeq && seq > 0 && st.LastSeq-seq < limit; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("events stream %s: reading seq %d: %w", p.cfg.EventsStream, seq, err)
		}
		if seq == st.LastSeq {
			after = m.Header.Get(HeaderResumeAfter)
			if after == "" && m.Header.Get(HeaderMsgID) == "" {
				// Not written by the bridge: resume after it as it stands.
				after = m.Header.Get(HeaderEventID)
			}
		}
		own := m.Header.Get(HeaderStreamID)
		if own == "" {
			own = m.Header.Get(HeaderEventID)
		}
		if after != "" && own == after {
			found = true
			break
		}
		skip[m.Header.Get(HeaderMsgID)] = struct{}{}
	}
	if !found && after != "" {
		p.log.Warn("resume point not found in the stream tail; relying on the duplicate window",
			"stream", p.cfg.EventsStream, "resume_after", after)
	}
	p.resume = after
	p.setLastResume(after)
	if len(skip) > 0 {
		p.skip, p.skipTTL = skip, 4*len(skip)+len(p.ring)
	}
	p.log.Info("resuming", "resume_after", after, "stored_beyond", len(skip), "stream", p.cfg.EventsStream)
	return nil
}

type nopObserver struct{}

func (nopObserver) Published(string)         {}
func (nopObserver) AckLatency(time.Duration) {}
func (nopObserver) DeadLettered(string)      {}
func (nopObserver) PublishRetried(error)     {}
