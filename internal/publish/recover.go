package publish

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
)

// recover handles a failed publish: it lets every publish in the window settle, then sends the failed
// ones again, in their original order and with their Nats-Msg-Id, until JetStream stores each. A failed
// publish may have been stored (its answer lost with the connection, or late): JetStream's duplicate
// window drops the second copy only while it lasts, which a NATS outage can outlast, so the events
// stream is asked first (settleStored). The window is empty afterwards.
func (p *Publisher) recover(ctx context.Context) error {
	for i := 0; i < p.win.n; i++ {
		if err := p.await(ctx, p.win.at(i)); err != nil {
			return err
		}
	}
	looked := false
	for p.win.n > 0 {
		e := p.win.at(0)
		resent := e.err != nil
		var (
			ack   *jetstream.PubAck
			found bool
			tries int
		)
		for attempt := 0; e.err != nil; attempt++ {
			if e.err == errFoundStored {
				e.err, found = nil, true
				spanEvent(e, spanFoundStored)
				break
			}
			if p.fencedOut(e) {
				spanEvent(e, spanFenced)
				// Refused, so not stored: sent again at once once its subject is claimed again.
				if err := p.reclaim(ctx, e); err != nil {
					return err
				}
			} else if send, err := p.beforeResend(ctx, e, attempt, &looked); err != nil {
				return err
			} else if !send {
				continue
			}
			spanEvent(e, spanRetry)
			tries++
			pctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
			ack, e.err = p.js.PublishMsg(pctx, p.rebuild(e))
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
		// A resend JetStream calls a duplicate is the earlier send, stored but unanswered: published.
		if resent && e.token != "" {
			now := time.Now()
			p.cfg.Observer.AckLatency(now.Sub(e.sent), traceID(e.span))
			if !e.at.IsZero() {
				p.cfg.Observer.Freshness(now.Sub(e.at))
			}
			p.cfg.Observer.Published(e.token)
		}
		if resent && e.span != nil {
			var seq uint64
			dup := false
			if ack != nil && !found {
				seq, dup = ack.Sequence, ack.Duplicate
			}
			if e.span.IsRecording() {
				e.span.SetAttributes(tracing.KeyRetries.Int(tries))
			}
			endStored(e.span, seq, dup)
		}
		p.pop()
	}
	if p.failing {
		p.failing = false
		p.log.Info("publishing recovered", "resume_after", p.cursor.resume)
	}
	return nil
}

// beforeResend prepares the failed entry e for its next send: it counts the retry, refits a message
// refused as too large, waits the backoff of the attempt, and once per failure (looked) asks the events
// stream whether the failed publishes were stored after all. send is false when e need not or cannot be
// sent now: found stored, or the stream could not be asked (e.err says why; the loop tries again).
func (p *Publisher) beforeResend(ctx context.Context, e *pending, attempt int, looked *bool) (send bool, err error) {
	if !p.failing {
		p.failing = true
		p.log.Warn("publish failed; pausing the stream and sending again", "subject", e.subject,
			"event_id", e.id, "err", e.err)
	}
	p.cfg.Observer.PublishRetried(e.err)
	refitted := layout.TooLarge(e.err) && p.refit(ctx, e, e.err)
	if attempt > 0 && !refitted && !retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, 5*time.Second, attempt)) {
		return false, ctx.Err()
	}
	if *looked {
		return true, nil
	}
	err = p.settleStored(ctx)
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil && (!p.nc.IsConnected() || !answered(err)) {
		// NATS is away, or its answers are (a timeout): look again once they are back. Sending again
		// without looking may store the event a second time.
		e.err = err
		return false, nil
	}
	if err != nil {
		p.log.Warn("cannot look up the failed publishes in the events stream; sending them again",
			"stream", p.cfg.EventsStream, "err", err)
	}
	*looked = true
	return e.err != errFoundStored, nil // found stored: settled at the top of the loop
}

// answered reports whether err is JetStream's answer (a refusal), rather than a silence (a timeout, a
// lost connection) after which the request may still have been carried out.
func answered(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api)
}

// settleStored settles as stored the failed publishes of the window that the events stream holds, so
// that they are not sent again. It reads the stream back from its newest event to the cursor's own
// message (the window's events were sent after it was stored), for at most as many messages as
// loadCursor, with the same reader.
func (p *Publisher) settleStored(ctx context.Context) error {
	want := map[string]bool{}
	for i := 0; i < p.win.n; i++ {
		if e := p.win.at(i); e.err != nil && e.dead == nil && e.subject != "" {
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
	last, err := lastSeqOf(ctx, s, p.msgs.events+">")
	if err != nil {
		return err
	}
	limit := uint64(2*len(p.win.ring) + 1000)
	found := 0
	tail := newTailReader(s, p.msgs.events+">", s.CachedInfo().State.FirstSeq, last, uint64(len(p.win.ring)))
	for read := uint64(0); read < limit && found < len(want); read++ {
		m, ok, err := tail.next(ctx)
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		if seen, ok := want[m.Header.Get(HeaderMsgID)]; ok && !seen {
			want[m.Header.Get(HeaderMsgID)] = true
			found++
		}
		if p.cursor.resumeHdr != "" && !foreign(m.Header) && m.Header.Get(HeaderStreamID) == "" &&
			m.Header.Get(HeaderEventID) == p.cursor.resumeHdr {
			break
		}
	}
	if found == 0 {
		return nil
	}
	for i := 0; i < p.win.n; i++ {
		if e := p.win.at(i); e.err != nil && e.dead == nil && want[e.id] {
			e.err = errFoundStored
		}
	}
	p.log.Info("failed publishes found stored; not sending them again", "events", found)
	return nil
}

// refit answers JetStream's or the client's refusal of the entry's message as too large, which the
// limits known when it was built did not foresee (a stream's max_msg_size lowered since, a failover to a
// server with a smaller max_payload): it reads the limits again and turns an event into a dead letter
// that describes it, or a dead letter into one that fits. It reports whether the message changed; if
// not, it is sent again as it is, after a pause.
func (p *Publisher) refit(ctx context.Context, e *pending, refusal error) bool {
	p.readLimits(ctx)
	if e.dead == nil {
		if errors.Is(refusal, nats.ErrMaxPayload) {
			p.tooLarge(e, p.nc.MaxPayload(), false)
		} else {
			p.tooLarge(e, p.msgs.eventsMax, true) // refused by JetStream: the stream's limit (0 if unread)
		}
		return true
	}
	max := layout.MaxMessage(p.nc.MaxPayload(), p.msgs.dlqMax)
	return max > 0 && layout.Fit(e.dead, max, e.id)
}
