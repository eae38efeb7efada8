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
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/deadletter"
	"github.com/tracking-bridge/tracking-bridge/internal/event"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
	"github.com/tracking-bridge/tracking-bridge/internal/streams"
)

// Observer receives the publisher's outcomes (for metrics). Methods are called under the publisher's lock
// from the goroutine that calls Handle and Resume or from Run's, except Published and AckLatency (see
// there); implementations must be cheap.
type Observer interface {
	// Published is told of an event JetStream acknowledged (stored, or recognised as a duplicate), with
	// its subject's type token, before the event leaves the window (so before a Resume waiting for it
	// returns). It is called from the acknowledgement subscription's goroutine as the acknowledgement
	// arrives, or from the Handle or Run goroutine for an event sent again after a failure: it must be
	// safe for concurrent use.
	Published(typeToken string)
	// AckLatency is told how long an event's acknowledgement took, just before Published and from the
	// same goroutine.
	AckLatency(d time.Duration)
	// DeadLettered is told of an event sent to P.dlq.events; reason is one of the Reason* constants.
	DeadLettered(reason string)
	PublishRetried(err error)
}

// Reasons for dead-lettering an event, as passed to Observer.DeadLettered. The set is closed (a metrics
// label).
const (
	ReasonNotJSON    = "not_json"     // the data is not a JSON object
	ReasonOversize   = "oversize"     // over the bounds of one SSE message (BRIDGE_STREAM_MAX_EVENT_BYTES, event.MaxLines)
	ReasonMaxPayload = "max_payload"  // larger than the NATS server's max_payload
	ReasonMaxMsgSize = "max_msg_size" // larger than the events stream's max_msg_size
)

// Config configures a Publisher.
type Config struct {
	// Prefix is the subject prefix P of the contract ("tracking").
	Prefix string
	// EventsStream is the name of the events stream (PFX_EVENTS), read at start-up for the resume cursor.
	EventsStream string
	// DLQStream is the name of the dead-letter stream (PFX_DLQ), whose max_msg_size bounds dead letters.
	DLQStream string
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
	events string // "P.events."
	dlq    string // "P.dlq.events"

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
	return &Publisher{
		cfg:    cfg,
		nc:     nc,
		js:     js,
		log:    cfg.Logger,
		events: cfg.Prefix + ".events.",
		dlq:    cfg.Prefix + ".dlq.events",
		acks:   a,
		ring:   make([]pending, cfg.Window),
		// Sequence numbers start at 1: a slot's initial state word, 0, then names no publish.
		next:  1,
		head:  1 % cfg.Window,
		timer: timer,
		hdr:   newHeaderSet(cfg.Source),
	}, nil
}

// Close releases the acknowledgement subscription. Publishes still in flight stay unsettled. The
// Publisher must not be used afterwards.
func (p *Publisher) Close() { p.acks.close() }

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

// Handle implements upstream.Sink: it publishes one event, or dead-letters it when it cannot go to
// P.events.* (not a JSON object, or too large).
func (p *Publisher) Handle(ctx context.Context, ev event.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.n == len(p.ring) {
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
	if key, skip := p.skipped(&ev); skip {
		e.id = key // stored already: nothing to send, but a later replay may repeat it (tail)
	} else {
		p.prepare(e, &ev)
	}
	p.next++
	p.n++
	p.send(e)
	return p.settleReady(ctx)
}

// Run keeps the window moving while no event comes: every second it settles what was acknowledged
// meanwhile, and sends again what is overdue or was in flight when the connection was lost. Without it
// such events would wait for the next event or reconnect. It returns nil when ctx is done.
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
		_ = p.settleReady(ctx) // fails only when ctx is done
		p.mu.Unlock()
	}
}

// settleReady pops the acknowledged entries off the front of the window, without waiting; an
// acknowledgement overdue is a failure, which starts recovery.
func (p *Publisher) settleReady(ctx context.Context) error {
	for p.n > 0 {
		if f := &p.ring[p.head]; !p.settled(f) {
			if time.Since(f.sent) < p.cfg.Timeout {
				break
			}
			p.acks.fail(f.seq, errAckTimeout)
		}
		if err := p.settleFront(ctx); err != nil {
			return err
		}
	}
	return nil
}

// skipped reports whether the event was found stored beyond the cursor (at start-up, or in the tail at a
// reconnect), and its Nats-Msg-Id then.
func (p *Publisher) skipped(ev *event.Event) (string, bool) {
	if p.skip == nil {
		return "", false
	}
	if p.skipTTL--; p.skipTTL <= 0 || len(p.skip) == 0 {
		p.skip = nil
		return "", false
	}
	id := eventKey(ev)
	if _, ok := p.skip[id]; !ok || id == "" {
		return "", false
	}
	delete(p.skip, id)
	return id, true
}

// skipAll adds ids to the skip list, for as long as the upstream's replay of them may take.
func (p *Publisher) skipAll(ids []string) {
	if len(ids) == 0 {
		return
	}
	if p.skip == nil {
		p.skip = make(map[string]struct{}, len(ids))
	}
	for _, id := range ids {
		p.skip[id] = struct{}{}
	}
	p.skipTTL = 4*len(p.skip) + len(p.ring)
}

// eventKey returns the Nats-Msg-Id an event will be stored under without building the message, when
// cheap.
func eventKey(ev *event.Event) string {
	if ev.ID != "" {
		return HeaderID(ev.ID)
	}
	if ev.Oversize > 0 {
		return ""
	}
	if f, err := ScanEvent(ev.Data); err == nil && f.ID != "" {
		return HeaderID(f.ID)
	}
	return digest(ev.Data)
}

// prepare fills the entry for an event: a message on P.events.<TYPE>, or a dead letter on P.dlq.events.
func (p *Publisher) prepare(e *pending, ev *event.Event) {
	if ev.Oversize > 0 {
		d := struct {
			Error string `json:"error"`
			ID    string `json:"id,omitempty"`
			Size  int    `json:"size"`
			// Where an event without an id sat in the stream, which tells apart such events of one size:
			// the resume id it followed and how many messages came after that id's own.
			After *position `json:"stream_position,omitempty"`
		}{Error: "event larger than BRIDGE_STREAM_MAX_EVENT_BYTES; its data was dropped", Size: ev.Oversize}
		reason := fmt.Sprintf("event of %d bytes exceeds the size bound", ev.Oversize)
		if ev.ManyLines {
			reason = fmt.Sprintf("event of more than %d lines exceeds the line bound", event.MaxLines)
			d.Error = reason + "; its data was dropped"
		}
		if ev.ID != "" {
			d.ID = HeaderID(ev.ID)
		} else {
			d.After = &position{ResumeID: e.resumeH, Index: p.posN}
		}
		desc, _ := json.Marshal(d)
		p.deadLetter(e, ev.Name, desc, d.ID, ReasonOversize, reason)
		return
	}
	f, err := ScanEvent(ev.Data)
	if err != nil {
		var hid string
		if ev.ID != "" {
			hid = HeaderID(ev.ID)
		}
		p.deadLetter(e, ev.Name, ev.Data, hid, ReasonNotJSON, "event data is not a JSON object: "+err.Error())
		return
	}
	id := ev.ID
	if id == "" {
		id = f.ID
	}
	if id == "" {
		id = digest(ev.Data)
	}
	e.id, e.name, e.data = HeaderID(id), ev.Name, ev.Data
	e.token = TypeToken(f.Type, f.TypeKind)
	e.subject = p.events + e.token
	if f.TypeKind == KindString {
		e.typ, e.hasType = deadletter.Clip(headerValue(f.Type), maxTypeHeader), true
	}
	if f.Timestamp != "" && len(f.Timestamp) <= maxTimeHeader && rfc3339.Valid(f.Timestamp) {
		// RFC 3339 allows "t" and "z"; not every CloudEvents SDK does (Go's time.Parse refuses them).
		// A valid timestamp is ASCII, so this only changes those two (and copies only when it does).
		e.time = strings.ToUpper(f.Timestamp)
	}
	if ev.ResumeID != id {
		e.ownID = e.resumeH // "" (no id seen on the stream yet) leaves the header out
	}
	// An upper bound of the header block's size: the fixed names and values take under 256 bytes.
	hsize := 256 + 3*len(e.id) + len(e.typ) + 2*len(e.subject) + len(p.cfg.Source) + len(e.time) +
		len(e.after) + len(e.ownID)
	if max := deadletter.MaxMessage(p.nc.MaxPayload(), p.eventsMax); max > 0 && int64(len(ev.Data)+hsize) > max {
		p.tooLarge(e, max, max == p.eventsMax && max != p.nc.MaxPayload())
	}
}

// tooLarge turns the prepared entry of an event larger than the events stream stores into a dead letter
// that describes it: larger than the stream's max_msg_size (fromStream) or the server's max_payload, of
// max bytes, headers included (0: not known).
func (p *Publisher) tooLarge(e *pending, max int64, fromStream bool) {
	code, what := ReasonMaxPayload, "the NATS server's max_payload"
	if fromStream {
		code, what = ReasonMaxMsgSize, "the max_msg_size of stream "+p.cfg.EventsStream
	}
	limit := ""
	if max > 0 {
		limit = fmt.Sprintf(" (%d bytes)", max)
	}
	desc, _ := json.Marshal(struct {
		Error string `json:"error"`
		ID    string `json:"id"`
		Type  string `json:"type,omitempty"`
		Size  int    `json:"size"`
	}{"event larger than " + what + "; its data was dropped", e.id, e.token, len(e.data)})
	p.deadLetter(e, e.name, desc, e.id, code, fmt.Sprintf("event of %d bytes exceeds %s%s", len(e.data), what, limit))
}

// refit answers JetStream's or the client's refusal of the entry's message as too large, which the
// limits known when it was prepared did not foresee (a stream's max_msg_size lowered since, a failover
// to a server with a smaller max_payload): it reads the limits again and turns an event into a dead
// letter that describes it, or a dead letter into one that fits. It reports whether the message changed;
// if not, it is sent again as it is, after a pause.
func (p *Publisher) refit(ctx context.Context, e *pending, refusal error) bool {
	if n, err := streams.MaxMsgSize(ctx, p.js, p.cfg.EventsStream); err == nil {
		p.eventsMax = n
	}
	p.readDLQLimit(ctx)
	if e.dead == nil {
		if errors.Is(refusal, nats.ErrMaxPayload) {
			p.tooLarge(e, p.nc.MaxPayload(), false)
		} else {
			p.tooLarge(e, p.eventsMax, true) // refused by JetStream: the stream's limit (0 if unread)
		}
		return true
	}
	max := deadletter.MaxMessage(p.nc.MaxPayload(), p.dlqMax)
	return max > 0 && deadletter.Fit(e.dead, max, e.id)
}

// readDLQLimit reads the max_msg_size of the stream that stores the events' dead letters, keeping the
// last known value when it cannot.
func (p *Publisher) readDLQLimit(ctx context.Context) {
	if p.cfg.DLQStream == "" {
		return
	}
	if n, err := streams.MaxMsgSize(ctx, p.js, p.cfg.DLQStream); err == nil {
		p.dlqMax = n
	} else {
		p.log.Debug("dead-letter stream's max_msg_size unknown", "stream", p.cfg.DLQStream, "err", err)
	}
}

// position is where an event sat in the stream (see Publisher.posID).
type position struct {
	ResumeID string `json:"resume_id"`
	Index    int    `json:"index"`
}

// Bounds of headers whose values come from the upstream's data, which keep every header block far below
// deadletter.MaxHeaderBlock.
const (
	maxNameHeader = 256  // Sse-Event of a dead letter
	maxTypeHeader = 1024 // Tracking-Event-Type
	maxTimeHeader = 64   // ce-time: an RFC 3339 time with nanoseconds takes 35 bytes
)

// deadLetter turns the entry into the P.dlq.events message for an event that cannot be published as
// such; name is its SSE event name, id its id in header form (HeaderID; "": none, the digest of body
// stands in), code one of the Reason* constants, reason the human-readable Bridge-Error. A dead letter
// larger than the dead-letter stream stores (the server's max_payload, the stream's max_msg_size) carries
// a description of the data instead of the data: otherwise it could never be stored, and the stream
// would stop behind it.
func (p *Publisher) deadLetter(e *pending, name string, body []byte, id, code, reason string) {
	if id == "" {
		id = digest(body)
	}
	h := nats.Header{
		HeaderMsgID:            {id},
		HeaderEventID:          {id},
		deadletter.HeaderError: {deadletter.Clip(headerValue(reason), deadletter.MaxErrorHeader)},
	}
	if e.after != "" {
		h[HeaderResumeAfter] = []string{e.after}
	}
	if name != "" {
		h["Sse-Event"] = []string{deadletter.Clip(headerValue(name), maxNameHeader)}
	}
	if e.resumeH != "" && e.resumeH != id {
		h[HeaderStreamID] = []string{e.resumeH}
	}
	m := &nats.Msg{Subject: p.dlq, Header: h, Data: body}
	if deadletter.Fit(m, deadletter.MaxMessage(p.nc.MaxPayload(), p.dlqMax), id) {
		reason = m.Header.Get(deadletter.HeaderError)
	}
	p.log.Warn("event dead-lettered", "event_id", id, "subject", p.dlq, "err", reason)
	p.cfg.Observer.DeadLettered(code)
	*e = pending{seq: e.seq, resume: e.resume, resumeH: e.resumeH, after: e.after, subject: p.dlq, id: id,
		dead: m, noID: e.noID}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// send publishes the entry asynchronously; an entry with nothing to send is settled at once.
func (p *Publisher) send(e *pending) {
	if e.subject == "" {
		e.done = true
		return
	}
	m := e.dead
	if m == nil {
		p.hdr.fill(e)
		p.msg = nats.Msg{Subject: e.subject, Header: p.hdr.h, Data: e.data}
		m = &p.msg
	}
	m.Reply = p.acks.reply(e.seq)
	e.sent = time.Now()
	p.acks.start(e.seq, e.token, e.sent)
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
	for i := 0; i < p.n; i++ {
		if e := &p.ring[(p.head+i)%len(p.ring)]; !e.done {
			p.acks.fail(e.seq, nats.ErrDisconnected)
		}
	}
}

// settled reports, without waiting, whether the entry's outcome is known.
func (p *Publisher) settled(e *pending) bool {
	if !e.done {
		e.done, e.err = p.acks.outcome(e.seq)
	}
	return e.done
}

// await waits until the entry's outcome is known: its acknowledgement, a failure, or Timeout elapsed
// since it was sent.
func (p *Publisher) await(ctx context.Context, e *pending) error {
	for !p.settled(e) {
		left := p.cfg.Timeout - time.Since(e.sent)
		if left <= 0 {
			p.acks.fail(e.seq, errAckTimeout)
			if p.settled(e) {
				break
			}
			left = time.Millisecond // the reply handler holds the slot: its outcome is imminent
		}
		p.acks.waiting.Store(true)
		if p.settled(e) { // an acknowledgement that came before waiting was announced
			p.acks.waiting.Store(false)
			return nil
		}
		p.timer.Reset(left)
		select {
		case <-p.acks.wake:
		case <-p.timer.C:
		case <-p.acks.status:
			p.connectionLost()
		case <-ctx.Done():
		}
		p.timer.Stop()
		p.acks.waiting.Store(false)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// settleFront waits for the front entry of the window and pops it. A failure there starts recovery.
func (p *Publisher) settleFront(ctx context.Context) error {
	e := &p.ring[p.head]
	if err := p.await(ctx, e); err != nil {
		return err
	}
	if e.err != nil {
		return p.recover(ctx)
	}
	p.pop()
	return nil
}

func (p *Publisher) pop() {
	e := &p.ring[p.head]
	// An id HTTP cannot carry as Last-Event-ID never becomes the resume point: the stream could not
	// reconnect after it. The upstream replays from the last id it can carry instead, and the duplicate
	// window (and after a restart, the skip list) recognises what is stored.
	resumable := event.Resumable(e.resume)
	if resumable {
		p.resume = e.resume
		if _, ok := ParseHeaderID(e.resumeH); ok {
			// A digest (an id too long to keep) never becomes Bridge-Resume-After: the next message
			// names the last id a restart can resume from, and the skip list covers the rest.
			p.resumeHdr = e.resumeH
		}
		p.setLastResume(e.resume)
	}
	switch {
	case !e.noID && resumable:
		p.tail = p.tail[:0] // the resume point moved to this event's own id
	case e.dead == nil && e.id != "":
		if len(p.tail) >= 2*len(p.ring) { // bounded: beyond it, the duplicate window has to do
			p.tail = append(p.tail[:0], p.tail[len(p.ring):]...)
		}
		p.tail = append(p.tail, e.id)
	}
	*e = pending{}
	p.head = (p.head + 1) % len(p.ring)
	p.n--
}

// message builds a new message for the entry, for sending it again.
func (p *Publisher) message(e *pending) *nats.Msg {
	if e.dead != nil {
		return e.dead
	}
	h := newHeaderSet(p.cfg.Source)
	h.fill(e)
	return &nats.Msg{Subject: e.subject, Header: h.h, Data: e.data}
}

// recover handles a failed publish: it lets every publish in the window settle, then sends the failed
// ones again, in their original order and with their Nats-Msg-Id, until JetStream stores each. A failed
// publish may have been stored (its answer lost with the connection, or late): JetStream's duplicate
// window drops the second copy only while it lasts, which a NATS outage can outlast, so the events
// stream is asked first (settleStored). The window is empty afterwards.
func (p *Publisher) recover(ctx context.Context) error {
	for i := 0; i < p.n; i++ {
		if err := p.await(ctx, &p.ring[(p.head+i)%len(p.ring)]); err != nil {
			return err
		}
	}
	looked := false
	for p.n > 0 {
		e := &p.ring[p.head]
		resent := e.err != nil
		for attempt := 0; e.err != nil; attempt++ {
			if e.err == errFoundStored {
				e.err = nil
				break
			}
			if !p.failing {
				p.failing = true
				p.log.Warn("publish failed; pausing the stream and sending again", "subject", e.subject,
					"event_id", e.id, "err", e.err)
			}
			p.cfg.Observer.PublishRetried(e.err)
			refitted := deadletter.TooLarge(e.err) && p.refit(ctx, e, e.err)
			if attempt > 0 && !refitted && !retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, 5*time.Second, attempt)) {
				return ctx.Err()
			}
			if !looked {
				err := p.settleStored(ctx)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil && (!p.nc.IsConnected() || !answered(err)) {
					// NATS is away, or its answers are (a timeout): look again once they are back.
					// Sending again without looking may store the event a second time.
					e.err = err
					continue
				}
				if err != nil {
					p.log.Warn("cannot look up the failed publishes in the events stream; sending them again",
						"stream", p.cfg.EventsStream, "err", err)
				}
				looked = true
				if e.err == errFoundStored {
					continue // settled at the top of the loop
				}
			}
			pctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
			_, e.err = p.js.PublishMsg(pctx, p.message(e))
			cancel()
			if e.err != nil && ctx.Err() != nil {
				return ctx.Err()
			}
			if e.err != nil && !answered(e.err) && !errors.Is(e.err, nats.ErrMaxPayload) {
				// Unanswered, not refused: this send may have been stored. Look it up again before the
				// next one, which may come after the duplicate window.
				looked = false
			}
		}
		if resent && e.token != "" {
			p.cfg.Observer.AckLatency(time.Since(e.sent))
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

// answered reports whether err is JetStream's answer (a refusal), rather than a silence (a timeout, a
// lost connection) after which the request may still have been carried out.
func answered(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api)
}

// errFoundStored marks a failed publish that settleStored found in the events stream.
var errFoundStored = errors.New("found stored")

// settleStored settles as stored the failed publishes of the window that the events stream holds, so
// that they are not sent again. It reads the stream back from its end to the cursor's own message (the
// window's events were sent after it was stored), for at most as many messages as loadCursor.
func (p *Publisher) settleStored(ctx context.Context) error {
	want := map[string]bool{}
	for i := 0; i < p.n; i++ {
		if e := &p.ring[(p.head+i)%len(p.ring)]; e.err != nil && e.dead == nil && e.subject != "" {
			want[e.id] = false
		}
	}
	if len(want) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	defer cancel()
	s, err := p.js.Stream(ctx, p.cfg.EventsStream)
	if err != nil {
		return err
	}
	st := s.CachedInfo().State
	limit := uint64(2*len(p.ring) + 1000)
	found := 0
	for seq := st.LastSeq; seq >= st.FirstSeq && seq > 0 && st.LastSeq-seq < limit && found < len(want); seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if seen, ok := want[m.Header.Get(HeaderMsgID)]; ok && !seen {
			want[m.Header.Get(HeaderMsgID)] = true
			found++
		}
		if p.resumeHdr != "" && !foreign(m.Header) && m.Header.Get(HeaderStreamID) == "" &&
			m.Header.Get(HeaderEventID) == p.resumeHdr {
			break
		}
	}
	if found == 0 {
		return nil
	}
	for i := 0; i < p.n; i++ {
		if e := &p.ring[(p.head+i)%len(p.ring)]; e.err != nil && e.dead == nil && want[e.id] {
			e.err = errFoundStored
		}
	}
	p.log.Info("failed publishes found stored; not sending them again", "events", found)
	return nil
}

// loadCursor reads the resume cursor from the tail of the events stream: the newest message names, in
// HeaderResumeAfter, an id up to which everything was stored; the messages stored after that id are
// remembered so that the upstream's replay does not publish them twice, whatever the duplicate window.
// Messages another client published to P.events.* (see foreign) are passed over: the cursor comes from
// the newest message that is not.
func (p *Publisher) loadCursor(ctx context.Context) error {
	s, err := p.js.Stream(ctx, p.cfg.EventsStream)
	if err != nil {
		return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
	}
	p.eventsMax = max(int64(info.Config.MaxMsgSize), 0)
	p.readDLQLimit(ctx)
	st := info.State
	if st.Msgs == 0 {
		p.log.Info("events stream empty; starting from the upstream's beginning", "stream", p.cfg.EventsStream)
		return nil
	}
	limit := uint64(2*len(p.ring) + 1000)
	var after string
	skip := map[string]struct{}{}
	found, newest := false, false
	more := len(p.ring) // messages read past the resume point's own (see below)
	for seq := st.LastSeq; seq >= st.FirstSeq && seq > 0 && st.LastSeq-seq < limit && more > 0; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("events stream %s: reading seq %d: %w", p.cfg.EventsStream, seq, err)
		}
		if !newest {
			if foreign(m.Header) {
				continue
			}
			newest = true
			after = m.Header.Get(HeaderResumeAfter)
			if after == "" && m.Header.Get(HeaderMsgID) == "" {
				// Written by another tool that names its event: resume after it as it stands.
				after = m.Header.Get(HeaderEventID)
			}
		}
		if found {
			more--
		} else if after != "" && m.Header.Get(HeaderStreamID) == "" && m.Header.Get(HeaderEventID) == after {
			// The resume point's own message: a message without an SSE id carries the id before it in
			// Bridge-Stream-Id, and the upstream replays it after that id, so it goes on the skip list
			// even when its stream id is `after`. Messages handed after the resume point may still be
			// stored before it, when its first publish failed and it was sent again once the window had
			// settled: the window's length of messages before it is read too (remembering a message the
			// upstream will not replay does no harm).
			found = true
			continue
		}
		skip[m.Header.Get(HeaderMsgID)] = struct{}{}
	}
	if !newest {
		p.log.Warn("no event written by the bridge in the stream tail; starting from the upstream's beginning",
			"stream", p.cfg.EventsStream, "messages_read", min(limit, st.LastSeq-st.FirstSeq+1))
	}
	if !found && after != "" {
		p.log.Warn("resume point not found in the stream tail; relying on the duplicate window",
			"stream", p.cfg.EventsStream, "resume_after", after)
	}
	resume, ok := ParseHeaderID(after)
	if !ok || !event.Resumable(resume) {
		p.log.Warn("resume point not usable (not written by this version); relying on the duplicate window",
			"stream", p.cfg.EventsStream, "resume_after", after)
		resume, after = "", ""
	}
	p.resume, p.resumeHdr = resume, after
	p.posID, p.posN = resume, 0
	p.setLastResume(resume)
	if len(skip) > 0 {
		p.skip, p.skipTTL = skip, 4*len(skip)+len(p.ring)
	}
	p.tail = p.tail[:0]
	p.log.Info("resuming", "resume_after", after, "stored_beyond", len(skip), "stream", p.cfg.EventsStream)
	return nil
}

// foreign reports whether a message in the events stream was published by another client than the
// bridge: the bridge's carry the event id as both Nats-Msg-Id and Tracking-Event-Id. A message with a
// Tracking-Event-Id and no Nats-Msg-Id counts as the bridge's: resuming after it as it stands is the best
// guess.
func foreign(h nats.Header) bool {
	id := h.Get(HeaderEventID)
	if id == "" {
		return true
	}
	msgID := h.Get(HeaderMsgID)
	return msgID != "" && msgID != id
}

type nopObserver struct{}

func (nopObserver) Published(string)         {}
func (nopObserver) AckLatency(time.Duration) {}
func (nopObserver) DeadLettered(string)      {}
func (nopObserver) PublishRetried(error)     {}
