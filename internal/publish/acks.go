package publish

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/jsonscan"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// The last step of Handle: the acknowledgements. Entries leave the window's front in publish order once
// JetStream acknowledged them; a failure there starts recovery (recover.go).

// settleReady pops the acknowledged entries off the front of the window, without waiting; an
// acknowledgement overdue is a failure, which starts recovery.
func (p *Publisher) settleReady(ctx context.Context) error {
	for p.win.n > 0 {
		if f := p.win.at(0); !p.settled(f) {
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

// settleFront waits for the front entry of the window and pops it. A failure there starts recovery.
func (p *Publisher) settleFront(ctx context.Context) error {
	e := p.win.at(0)
	if err := p.await(ctx, e); err != nil {
		return err
	}
	if e.err != nil {
		return p.recover(ctx)
	}
	p.pop()
	return nil
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
		p.win.timer.Reset(left)
		select {
		case <-p.acks.wake:
		case <-p.win.timer.C:
		case <-p.acks.status:
			p.connectionLost()
		case <-ctx.Done():
		}
		p.win.timer.Stop()
		p.acks.waiting.Store(false)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// at returns the window's i-th entry from its front.
func (w *window) at(i int) *pending { return &w.ring[(w.head+i)%len(w.ring)] }

// pop removes the front entry, stored, from the window, and moves the resume point to it.
func (p *Publisher) pop() {
	e := p.win.at(0)
	c := &p.cursor
	// An id HTTP cannot carry as Last-Event-ID never becomes the resume point: the stream could not
	// reconnect after it. The upstream replays from the last id it can carry instead, and the duplicate
	// window (and after a restart, the skip list) recognises what is stored.
	resumable := upstream.Resumable(e.resume)
	if resumable {
		c.resume = e.resume
		if _, ok := ParseHeaderID(e.resumeH); ok {
			// A digest (an id too long to keep) never becomes Bridge-Resume-After: the next message
			// names the last id a restart can resume from, and the skip list covers the rest.
			c.resumeHdr = e.resumeH
		}
		c.setLast(e.resume)
	}
	switch {
	case !e.noID && resumable:
		c.tail = c.tail[:0] // the resume point moved to this event's own id
	case e.dead == nil && e.id != "":
		if len(c.tail) >= 2*len(p.win.ring) { // bounded: beyond it, the duplicate window has to do
			c.tail = append(c.tail[:0], c.tail[len(p.win.ring):]...)
		}
		c.tail = append(c.tail, e.id)
	}
	p.acks.slot(e.seq).span = nil // a failed publish's: the slot is settled, and recover ended the span
	*e = pending{}
	p.win.head = (p.win.head + 1) % len(p.win.ring)
	p.win.n--
}

// Outcomes of a publish, in the low bits of a slot's state word. acking is the reply handler's hold on a
// slot while it reads the slot's token (the publisher reuses a slot only once it is acked or failed).
const (
	inFlight = 0
	acked    = 1
	failed   = 2
	acking   = 3
)

// acks tracks the acknowledgements of the publisher's asynchronous publishes: the JetStream publish
// protocol over core NATS, with the window's slots as its only bookkeeping. Each publish carries the
// reply subject <inbox>.<seq>, seq being its window entry's sequence number; JetStream answers there
// with a PubAck or an error, and the reply handler records the outcome in the entry's slot. A slot's
// state word is seq<<2 | outcome, so a late answer for an entry that has since left the window (it timed
// out and was sent again) cannot touch the entry now in its slot.
//
// The publisher owns the window; the reply handler, on the connection's delivery goroutine, only moves a
// slot from inFlight to acked or failed, tells the observer of the event stored, and wakes the publisher
// when it waits.
//
// Why not jetstream.PublishMsgAsync: the same publisher built on its futures (same window, messages,
// fence, timeout and recovery; every test of this package passed with it) was measured against this one
// with cmd/bench -refpipe DIR -bridge-bin own=BIN,lib=BIN -runs 5, two sets in opposite orders, 200,000
// events of ~1 KB, on 2 vCPUs shared with other work. It spent 19.3 µs of CPU per event against 15.5
// (medians of 10 runs; +25 % run by run, never under +17 %), 1.40× the yardstick's 13.8 against 1.12×,
// with no gain in events/s. Its profile shows where: every PubAck decoded with encoding/json, and a future,
// two channels, a map entry and a timer per publish.
type acks struct {
	prefix string // the reply subjects' prefix, "<inbox>."
	sub    *nats.Subscription
	nc     *nats.Conn
	obs    Observer
	slots  []slot

	mu   sync.Mutex       // guards errs
	errs map[uint64]error // a failed publish's error, until the publisher takes it

	waiting atomic.Bool   // the publisher waits on wake
	wake    chan struct{} // capacity 1
	// status reports the connection's losses: publishes in flight then may never be answered.
	status chan nats.Status
}

// slot is the acknowledgement state of one window entry.
type slot struct {
	state atomic.Uint64 // seq<<2 | outcome
	// Written by the publisher before the publish, read by the reply handler while it holds the slot.
	token string // the event's type token, "" for dead letters
	sent  time.Time
	at    time.Time  // the event's own timestamp, zero when it has none
	span  trace.Span // the event's span, nil with tracing off
}

func newAcks(nc *nats.Conn, slots int, obs Observer) (*acks, error) {
	a := &acks{
		prefix: nc.NewInbox() + ".",
		nc:     nc,
		obs:    obs,
		slots:  make([]slot, slots),
		errs:   map[uint64]error{},
		wake:   make(chan struct{}, 1),
	}
	sub, err := nc.Subscribe(a.prefix+"*", a.handle)
	if err != nil {
		return nil, err
	}
	// Acknowledgements must not be dropped as a slow consumer's: the window bounds them anyway.
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	a.sub = sub
	a.status = nc.StatusChanged(nats.RECONNECTING, nats.CLOSED)
	return a, nil
}

// close stops the reply handler and the status notifications.
func (a *acks) close() {
	_ = a.sub.Unsubscribe()
	a.nc.RemoveStatusListener(a.status)
}

// reply returns the reply subject of the publish with sequence number seq.
func (a *acks) reply(seq uint64) string {
	var b [64]byte
	return string(strconv.AppendUint(append(b[:0], a.prefix...), seq, 36))
}

// start marks seq in flight; it must precede the publish.
func (a *acks) start(seq uint64, token string, sent, at time.Time, span trace.Span) {
	s := a.slot(seq)
	s.token, s.sent, s.at, s.span = token, sent, at, span
	s.state.Store(seq << 2)
}

func (a *acks) slot(seq uint64) *slot { return &a.slots[seq%uint64(len(a.slots))] }

// outcome returns whether the publish seq is settled, and its error if it failed.
func (a *acks) outcome(seq uint64) (bool, error) {
	switch a.slot(seq).state.Load() & 3 {
	case acked:
		return true, nil
	case failed:
		a.mu.Lock()
		err := a.errs[seq]
		delete(a.errs, seq)
		a.mu.Unlock()
		return true, err
	}
	return false, nil
}

// fail settles the publish seq as failed with err, unless it is settled already.
func (a *acks) fail(seq uint64, err error) {
	a.mu.Lock()
	if a.slot(seq).state.CompareAndSwap(seq<<2|inFlight, seq<<2|failed) {
		a.errs[seq] = err
	}
	a.mu.Unlock()
	a.notify()
}

// abandon settles the publish seq as failed for good, the publisher closing, unless its acknowledgement
// was taken first; it reports whether the publish ends unacknowledged (its span is the caller's to end).
func (a *acks) abandon(seq uint64) bool {
	s := a.slot(seq)
	return s.state.CompareAndSwap(seq<<2|inFlight, seq<<2|failed) || s.state.Load() == seq<<2|failed
}

// notify wakes the publisher if it waits.
func (a *acks) notify() {
	if a.waiting.Load() {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// handle records one reply from JetStream.
func (a *acks) handle(m *nats.Msg) {
	seq, err := strconv.ParseUint(m.Subject[len(a.prefix):], 36, 64)
	if err != nil {
		return
	}
	stored, dup, err := ackResult(m)
	if err != nil {
		a.fail(seq, err)
		return
	}
	s := a.slot(seq)
	if !s.state.CompareAndSwap(seq<<2|inFlight, seq<<2|acking) {
		return // a late answer: the entry was settled otherwise (and sent again)
	}
	// Tell the observer while holding the slot: once acked, the entry can leave the window, and whoever
	// waits for it (Resume) may rely on the event having been counted. The slot lets go of the span it
	// ends, which would otherwise stay reachable until the slot is used again.
	span := s.span
	if span != nil {
		s.span = nil
		var at uint64 // the event's stream sequence, decoded only for a span that records it
		if span.IsRecording() {
			at = stored.decode()
		}
		endStored(span, at, dup)
	}
	if s.token != "" {
		now := time.Now()
		a.obs.AckLatency(now.Sub(s.sent), traceID(span))
		if dup {
			a.obs.Duplicate(s.token)
		} else {
			// A duplicate's freshness is not observed: its copy was stored before, and a replay would
			// report its whole age.
			a.obs.Published(s.token)
			if !s.at.IsZero() {
				a.obs.Freshness(now.Sub(s.at))
			}
		}
	}
	s.state.Store(seq<<2 | acked)
	a.notify()
}

// ackResult returns a PubAck's stream sequence, as it is written, and whether it reports a duplicate, or
// why the publish failed. It reads the reply as encoding/json decodes it into the
// struct of decodeAck (member names matched case-insensitively, the last of duplicates counting, null
// leaving a field as it is), in one pass without decoding; a reply with an "error" member, JetStream's
// refusal, is decoded in full (FuzzAckResult compares the two). The sequence is for the event's span
// only, decoded when the span is recorded (ackSeq): a "seq" that is not one does not make the reply any
// less an acknowledgement.
func ackResult(m *nats.Msg) (seq ackSeq, duplicate bool, err error) {
	d := m.Data
	if len(d) == 0 {
		if m.Header.Get("Status") == "503" {
			return nil, false, jetstream.ErrNoStreamResponse
		}
		return nil, false, errBadAck
	}
	var s jsonscan.Scanner
	s.Reset(d)
	if !s.Object() {
		return nil, false, errBadAck // not JSON, or not an object: no PubAck either way
	}
	stream := false
	for key, esc, ok := s.Member(); ok; key, esc, ok = s.Member() {
		switch {
		case jsonscan.EqualFold(key, esc, "stream"):
			switch s.Kind() {
			case jsonscan.String:
				name, _ := s.String()
				stream = len(name) > 0 // a non-empty body decodes to a non-empty name
			case jsonscan.Null:
				s.Skip()
			default:
				return nil, false, errBadAck // not a string: encoding/json fails too
			}
		case jsonscan.EqualFold(key, esc, "duplicate"):
			switch s.Kind() {
			case jsonscan.True:
				duplicate = true
			case jsonscan.False:
				duplicate = false
			case jsonscan.Null:
			default:
				return nil, false, errBadAck
			}
			s.Skip()
		case jsonscan.EqualFold(key, esc, "seq"):
			if s.Kind() == jsonscan.Null {
				s.Skip() // null leaves the field as it is
			} else {
				seq = s.Skip()
			}
		case jsonscan.EqualFold(key, esc, "error"):
			return decodeAck(d)
		default:
			s.Skip()
		}
	}
	if s.End() != nil || !stream {
		return nil, false, errBadAck
	}
	return seq, duplicate, nil
}

// decodeAck decodes a reply in full: JetStream's error, or a PubAck.
func decodeAck(d []byte) (seq ackSeq, duplicate bool, err error) {
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Duplicate bool                `json:"duplicate"`
		Seq       json.RawMessage     `json:"seq"`
	}
	if err := json.Unmarshal(d, &r); err != nil {
		return nil, false, errBadAck
	}
	if r.Error != nil {
		return nil, false, r.Error
	}
	if r.Stream == "" {
		return nil, false, errBadAck
	}
	return ackSeq(r.Seq), r.Duplicate, nil
}

// ackSeq is the "seq" member of a PubAck as written: decoded only for a span that records it, since
// every event's acknowledgement passes here.
type ackSeq []byte

// decode returns the sequence as encoding/json decodes it into a uint64; 0 when there is none, or when it
// is not one (a fraction, a sign, a string, beyond a uint64).
func (a ackSeq) decode() uint64 {
	var n uint64
	if len(a) == 0 || json.Unmarshal(a, &n) != nil {
		return 0
	}
	return n
}
