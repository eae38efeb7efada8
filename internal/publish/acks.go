package publish

import (
	"bytes"
	"encoding/json"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

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
func (a *acks) start(seq uint64, token string, sent time.Time) {
	s := a.slot(seq)
	s.token, s.sent = token, sent
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
	dup, err := ackResult(m)
	if err != nil {
		a.fail(seq, err)
		return
	}
	s := a.slot(seq)
	if !s.state.CompareAndSwap(seq<<2|inFlight, seq<<2|acking) {
		return // a late answer: the entry was settled otherwise (and sent again)
	}
	// Tell the observer while holding the slot: once acked, the entry can leave the window, and whoever
	// waits for it (Resume) may rely on the event having been counted.
	if s.token != "" {
		a.obs.AckLatency(time.Since(s.sent))
		if dup {
			a.obs.Duplicate(s.token)
		} else {
			a.obs.Published(s.token)
		}
	}
	s.state.Store(seq<<2 | acked)
	a.notify()
}

// ackResult returns whether a PubAck reports a duplicate, or why the publish failed.
func ackResult(m *nats.Msg) (duplicate bool, err error) {
	d := m.Data
	if len(d) == 0 {
		if m.Header.Get("Status") == "503" {
			return false, jetstream.ErrNoStreamResponse
		}
		return false, errBadAck
	}
	if ok, dup := plainPubAck(d); ok {
		return dup, nil
	}
	var r struct {
		Error     *jetstream.APIError `json:"error"`
		Stream    string              `json:"stream"`
		Duplicate bool                `json:"duplicate"`
	}
	if err := json.Unmarshal(d, &r); err != nil {
		return false, errBadAck
	}
	if r.Error != nil {
		return false, r.Error
	}
	if r.Stream == "" {
		return false, errBadAck
	}
	return r.Duplicate, nil
}

// plainPubAck reports whether d is certainly a PubAck, without decoding it: a valid JSON object whose
// members are only the ones the server writes in a PubAck (stream, seq, domain, duplicate), spelled
// exactly so and without escapes, with a non-empty stream name. encoding/json would match member names
// case-insensitively and take the last of duplicates; anything of that kind, or any other member, goes to
// the full decode instead. The fast path decides no case differently from that decode (FuzzAckResult).
// dup is whether the PubAck says "duplicate":true.
func plainPubAck(d []byte) (ok, dup bool) {
	if len(d) < 2 || d[0] != '{' || !json.Valid(d) {
		return false, false
	}
	stream := false
	i := 1
	for {
		// A member name: no white space in what the server writes, and no escapes here.
		if i >= len(d) || d[i] != '"' {
			return false, false
		}
		end := bytes.IndexByte(d[i+1:], '"')
		if end < 0 {
			return false, false
		}
		name := d[i+1 : i+1+end]
		if bytes.IndexByte(name, '\\') >= 0 {
			return false, false
		}
		i += end + 2
		if i >= len(d) || d[i] != ':' {
			return false, false
		}
		i++
		switch string(name) {
		case "stream":
			if stream || i >= len(d) || d[i] != '"' {
				return false, false
			}
			n := bytes.IndexByte(d[i+1:], '"')
			if n <= 0 || bytes.IndexByte(d[i+1:i+1+n], '\\') >= 0 {
				return false, false
			}
			stream = true
			i += n + 2
		case "seq", "domain", "duplicate":
			j := skipScalar(d, i)
			if j < 0 {
				return false, false
			}
			if string(name) == "duplicate" {
				switch string(d[i:j]) {
				case "true":
					dup = true
				case "false":
					dup = false
				default:
					return false, false // the full decode decides
				}
			}
			i = j
		default:
			return false, false
		}
		if i >= len(d) {
			return false, false
		}
		switch d[i] {
		case ',':
			i++
		case '}':
			return stream && i == len(d)-1, dup
		default:
			return false, false
		}
	}
}

// skipScalar returns the index after the number, literal or escape-free string at d[i] of valid JSON, or
// -1 for anything else.
func skipScalar(d []byte, i int) int {
	if i >= len(d) {
		return -1
	}
	switch c := d[i]; {
	case c == '"':
		n := bytes.IndexByte(d[i+1:], '"')
		if n < 0 || bytes.IndexByte(d[i+1:i+1+n], '\\') >= 0 {
			return -1
		}
		return i + n + 2
	case c == '{' || c == '[':
		return -1
	}
	for i < len(d) && d[i] != ',' && d[i] != '}' && d[i] != ' ' && d[i] != '\t' && d[i] != '\n' && d[i] != '\r' {
		i++
	}
	return i
}
