package publish

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// cursor is where the upstream stream resumes: the id after which every event is stored, and the events
// stored beyond it that the upstream will replay (found in the events stream at start-up, or handed over
// since the last event with an id of its own).
type cursor struct {
	loaded    bool                // read from the events stream (loadCursor)
	resume    string              // the stream id up to which everything is stored
	resumeHdr string              // resume as it travels in headers (HeaderID)
	skip      map[string]struct{} // ids stored beyond the resume point: found at start-up, or tail at a reconnect
	skipTTL   int
	// tail holds the ids of the events stored since the last one that came with an SSE id of its own:
	// the events without one resume after the id before them, so a reconnect replays them.
	tail []string

	mu   sync.Mutex // guards last, read by LastResumeID from other goroutines
	last string
}

// setLast records the id LastResumeID returns.
func (c *cursor) setLast(id string) {
	c.mu.Lock()
	c.last = id
	c.mu.Unlock()
}

// stored reports whether the event with Nats-Msg-Id id ("": none) was found stored beyond the resume
// point (at start-up, or in the tail at a reconnect), and takes it off the skip list.
func (c *cursor) stored(id string) bool {
	if c.skip == nil {
		return false
	}
	if c.skipTTL--; c.skipTTL <= 0 || len(c.skip) == 0 {
		c.skip = nil
		return false
	}
	if _, ok := c.skip[id]; !ok || id == "" {
		return false
	}
	delete(c.skip, id)
	return true
}

// skipAll adds ids to the skip list, for as long as the upstream's replay of them may take: window is
// the publisher's window size.
func (c *cursor) skipAll(ids []string, window int) {
	if len(ids) == 0 {
		return
	}
	if c.skip == nil {
		c.skip = make(map[string]struct{}, len(ids))
	}
	for _, id := range ids {
		c.skip[id] = struct{}{}
	}
	c.skipTTL = 4*len(c.skip) + window
}

// loadCursor reads the resume cursor from the tail of the events stream: the newest message names, in
// HeaderResumeAfter, an id up to which everything was stored; the messages stored after that id are
// remembered so that the upstream's replay does not publish them twice, whatever the duplicate window.
// Messages another client published to P.events.> (see foreign) are passed over: the cursor comes from
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
	p.msgs.eventsMax = max(int64(info.Config.MaxMsgSize), 0)
	p.readDLQLimit(ctx)
	st := info.State
	// The newest message on P.events.>: the fence's markers after it are not read one by one.
	var last uint64
	err = awaitLeader(ctx, func() (err error) {
		last, err = lastSeqOf(ctx, s, p.msgs.events+">")
		return err
	})
	if err != nil {
		return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
	}
	if p.cfg.FenceSubject != "" {
		// A restart directive newer than every event applies (`bridge cursor restart`).
		d, err := s.GetLastMsgForSubject(ctx, restartSubject(p.cfg.FenceSubject))
		var subjectLast uint64 // the subject's last message, which takeDirective's condition names
		if err == nil {
			subjectLast = d.Sequence
			if d.Header.Get(HeaderRestart) == "" && d.Sequence > last {
				// Written by a client that is no bridge (see Writes no bridge made): the directive, or
				// its record as taken, is behind it.
				d, err = p.directiveBehind(ctx, s, st.FirstSeq, d.Sequence)
			}
		}
		switch {
		case err == nil && d.Sequence > last:
			a, ok := restartDirective(d.Header)
			if ok && p.fence.on() && d.Sequence > p.fence.oldest {
				// Stored after this leader began to claim the fence: an operator seized the lease since
				// (RestartCursor), and its markers end this term. The directive is the next leader's, whose
				// claim follows it: taken here, by a leader fenced out, it would be lost.
				p.log.Warn("a restart directive followed this leader's claim of the fence: another term takes it; stopping",
					"directive_seq", d.Sequence, "fence_first_seq", p.fence.oldest)
				return fmt.Errorf("%w: a restart directive (sequence %d) was stored after this leader's claim",
					ErrFenced, d.Sequence)
			}
			if ok && p.fence.on() {
				// Taken once, by a leader (a publisher that only looks, `bridge cursor show`, leaves it): a
				// replay the duplicate window absorbs entirely stores no event after the directive, which
				// would otherwise stay newer than every event for the next leader too.
				if ok, err = p.takeDirective(ctx, subjectLast); err != nil {
					return err
				}
			}
			if ok {
				if resume, good := ParseHeaderID(a); a == "" || good && upstream.Resumable(resume) {
					return p.restartAt(a)
				}
				p.log.Error("restart directive names an id the stream cannot resume after; ignored",
					"resume_after", a, "stream", p.cfg.EventsStream)
			}
		case err != nil && !errors.Is(err, jetstream.ErrMsgNotFound):
			return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
		}
	}
	if last == 0 {
		p.log.Info("events stream holds no event; starting from the upstream's beginning", "stream", p.cfg.EventsStream)
		return nil
	}
	limit := uint64(2*len(p.win.ring) + 1000)
	var after string
	skip := map[string]struct{}{}
	found, newest := false, false
	more := len(p.win.ring) // messages read past the resume point's own (see below)
	read := uint64(0)       // messages read (the fence's markers are not: the reader's filter leaves them out)
	tail := newTailReader(s, p.msgs.events+">", st.FirstSeq, last, uint64(2*len(p.win.ring)+FenceWidth))
	for read < limit && more > 0 {
		var m tailMsg
		var ok bool
		err := awaitLeader(ctx, func() (err error) {
			m, ok, err = tail.next(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("events stream %s: %w", p.cfg.EventsStream, err)
		}
		if !ok {
			break
		}
		read++
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
			"stream", p.cfg.EventsStream, "messages_read", read)
	}
	if !found && after != "" {
		p.log.Warn("resume point not found in the stream tail; relying on the duplicate window",
			"stream", p.cfg.EventsStream, "resume_after", after)
	}
	resume, ok := ParseHeaderID(after)
	if !ok || !upstream.Resumable(resume) {
		p.log.Warn("resume point not usable (not written by this version); relying on the duplicate window",
			"stream", p.cfg.EventsStream, "resume_after", after)
		resume, after = "", ""
	}
	c := &p.cursor
	c.resume, c.resumeHdr = resume, after
	p.pos.reset(resume)
	c.setLast(resume)
	if len(skip) > 0 {
		c.skip, c.skipTTL = skip, 4*len(skip)+len(p.win.ring)
	}
	c.tail = c.tail[:0]
	p.log.Info("resuming", "resume_after", after, "stored_beyond", len(skip), "stream", p.cfg.EventsStream)
	return nil
}

// maxBehind bounds how many foreign messages on P.leader.restart directiveBehind reads past.
const maxBehind = 10000

// directiveBehind returns the newest message on P.leader.restart before seq that a bridge or an operator
// wrote (it carries HeaderRestart), passing over messages other clients wrote there; ErrMsgNotFound when
// there is none within maxBehind messages.
func (p *Publisher) directiveBehind(ctx context.Context, s jetstream.Stream, first, seq uint64) (*jetstream.RawStreamMsg, error) {
	tail := newTailReader(s, restartSubject(p.cfg.FenceSubject), first, seq, 64)
	for read := 0; ; read++ {
		if read == maxBehind {
			p.log.Warn("the last messages on the restart subject were written by other clients, too many to look "+
				"behind; a restart directive among them is not applied (run `bridge cursor restart` again)",
				"subject", restartSubject(p.cfg.FenceSubject), "read", read)
			break
		}
		m, ok, err := tail.next(ctx)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", restartSubject(p.cfg.FenceSubject), err)
		}
		if !ok {
			break
		}
		if m.Header.Get(HeaderRestart) != "" {
			return &jetstream.RawStreamMsg{Subject: restartSubject(p.cfg.FenceSubject), Sequence: m.seq, Header: m.Header}, nil
		}
	}
	return nil, jetstream.ErrMsgNotFound
}

// restartAt sets the cursor to a restart directive's resume point (header form, "" for the beginning),
// with nothing to skip: the upstream's replay is stored again, beyond the duplicate window.
func (p *Publisher) restartAt(after string) error {
	resume, _ := ParseHeaderID(after)
	c := &p.cursor
	c.resume, c.resumeHdr = resume, after
	p.pos.reset(resume)
	c.setLast(resume)
	c.skip, c.tail = nil, c.tail[:0]
	if after == "" {
		p.log.Warn("restarting the upstream stream from its beginning, as requested", "stream", p.cfg.EventsStream)
	} else {
		p.log.Warn("restarting the upstream stream after the requested id", "resume_after", after,
			"stream", p.cfg.EventsStream)
	}
	return nil
}

// takeDirective records on P.leader.restart that the restart directive stored there was taken, so that no
// later leader takes it again; on condition that the subject's last message is still the one at seq (the
// directive, or a message another client wrote after it), so that two leaders cannot both take it. ok is false when another took it first. A leader
// that dies before storing an event of the replay loses the replay: the operator runs the command again.
func (p *Publisher) takeDirective(ctx context.Context, seq uint64) (ok bool, err error) {
	m := &nats.Msg{Subject: restartSubject(p.cfg.FenceSubject), Header: rollup(nats.Header{HeaderRestart: {restartTaken}})}
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithExpectStream(p.cfg.EventsStream),
		jetstream.WithExpectLastSequencePerSubject(seq))
	var api *jetstream.APIError
	switch {
	case err == nil:
		p.fence.known = max(p.fence.known, ack.Sequence)
		return true, nil
	case errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		p.log.Info("the restart directive was taken by another leader", "stream", p.cfg.EventsStream)
		return false, nil
	}
	return false, fmt.Errorf("recording the restart directive as taken: %w", err)
}
