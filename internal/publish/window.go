package publish

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/event"
)

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
		if p.fencedOut(e) {
			return p.errFenced(e)
		}
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
