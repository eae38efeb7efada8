//go:build libacks

package publish

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/event"
)

// This file is the publisher's third and fourth steps built on nats.go's own asynchronous publishing
// (jetstream.PublishMsgAsync and its futures), instead of the hand-built protocol of send.go and acks.go;
// a build with the tag libacks uses it. It keeps everything else: the same window of entries in publish
// order, the same messages (the fence's expected last subject sequence, Nats-Msg-Id), the same recovery.
// JetStream's answers, their timeout (Config.Timeout) and the failure of every publish in flight when the
// connection is lost (nats.ErrDisconnected) come from the library.

// window is the publisher's events in flight: a ring of entries in publish order. Entries leave it in that
// order, each only once stored, which is what makes the resume header of every message exact.
type window struct {
	ring    []pending // entry seq sits at ring[seq % len(ring)]
	head, n int
	next    uint64 // the next entry's sequence number
	// limit is the most entries in flight at once: len(ring), or FenceWidth once the fence is claimed.
	limit int
}

func newWindow(size int) window {
	return window{ring: make([]pending, size), next: 1, head: 1 % size, limit: size}
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
	// The publish's future, as its two channels: JetStream's PubAck, or the failure (JetStream's refusal,
	// the library's timeout, the connection lost).
	ok   <-chan *jetstream.PubAck
	errc <-chan error
}

// acks is the library's asynchronous publisher for the events: a JetStream context of its own, so that
// its acknowledgement timeout applies to events only.
type acks struct {
	js   jetstream.JetStream
	obs  Observer
	opts []jetstream.PublishOpt
}

func newAcks(nc *nats.Conn, _ int, obs Observer, timeout time.Duration) (*acks, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(timeout))
	if err != nil {
		return nil, err
	}
	// No retry of a publish nobody answered (no stream): it fails at once, as any failure does, and
	// recovery sends it again.
	return &acks{js: js, obs: obs, opts: []jetstream.PublishOpt{jetstream.WithRetryAttempts(0)}}, nil
}

// close drops the library's reply subscription and its futures.
func (a *acks) close() { a.js.CleanupPublisher() }

// send adds e, filled in the window's next slot, to the window and publishes m, its message,
// asynchronously; with m nil (the event was found stored) the entry is settled at once.
func (p *Publisher) send(e *pending, m *nats.Msg) {
	p.win.next++
	p.win.n++
	if m == nil {
		e.done = true
		return
	}
	e.sent = time.Now()
	f, err := p.acks.js.PublishMsgAsync(m, p.acks.opts...)
	if err != nil {
		e.done, e.err = true, err
		return
	}
	e.ok, e.errc = f.Ok(), f.Err()
}

// checkConnection is the library's: it fails the publishes in flight when the connection is lost.
func (p *Publisher) checkConnection() {}

// settleReady pops the acknowledged entries off the front of the window, without waiting; a failure
// there starts recovery.
func (p *Publisher) settleReady(ctx context.Context) error {
	for p.win.n > 0 {
		if !p.settled(p.win.at(0)) {
			break
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
	if e.done {
		return true
	}
	select {
	case ack := <-e.ok:
		p.acked(e, ack)
	case err := <-e.errc:
		e.done, e.err = true, err
	default:
	}
	return e.done
}

// acked settles the entry as stored and tells the observer.
func (p *Publisher) acked(e *pending, ack *jetstream.PubAck) {
	e.done = true
	if e.token != "" {
		p.acks.obs.AckLatency(time.Since(e.sent))
		if ack.Duplicate {
			p.acks.obs.Duplicate(e.token)
		} else {
			p.acks.obs.Published(e.token)
		}
	}
}

// await waits until the entry's outcome is known: its acknowledgement or a failure (the library times
// out a publish after Config.Timeout).
func (p *Publisher) await(ctx context.Context, e *pending) error {
	if p.settled(e) {
		return nil
	}
	select {
	case ack := <-e.ok:
		p.acked(e, ack)
	case err := <-e.errc:
		e.done, e.err = true, err
	case <-ctx.Done():
		return ctx.Err()
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
	resumable := event.Resumable(e.resume)
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
	*e = pending{}
	p.win.head = (p.win.head + 1) % len(p.win.ring)
	p.win.n--
}
