package publish

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/retry"
)

// tailReader reads the headers of the events stream's messages on one filter (P.events.>) from a
// sequence backwards, newest first, for the resume cursor. It fetches them in chunks through an ordered
// consumer that delivers headers only, rather than one request per message: a new leader reads a
// window's length or two of the tail at every takeover, and on a replicated stream a request per message
// took seconds. The fence's markers are left out by the filter. Reading through a consumer does not see
// less than the stream's leader: each chunk waits for its last message. An operator's restart reads the
// fence subjects (P.leader.>) with read, oldest first (leaderCrossed).
type tailReader struct {
	s      jetstream.Stream
	filter string
	first  uint64 // the stream's first sequence
	end    uint64 // the next chunk ends here (inclusive); 0 when the start of the stream was reached
	span   uint64 // the next chunk's length in sequences
	buf    []tailMsg
}

// tailMsg is one message's headers as the tail reader returns them.
type tailMsg struct {
	seq    uint64
	Header nats.Header
}

// newTailReader returns a reader from last (inclusive) backwards; span is the first chunk's length.
func newTailReader(s jetstream.Stream, filter string, first, last, span uint64) *tailReader {
	return &tailReader{s: s, filter: filter, first: first, end: last, span: max(span, 64)}
}

// next returns the next older message; ok is false once the stream's start was passed.
func (t *tailReader) next(ctx context.Context) (m tailMsg, ok bool, err error) {
	for len(t.buf) == 0 {
		if t.end == 0 || t.end < t.first {
			return tailMsg{}, false, nil
		}
		if err := ctx.Err(); err != nil { // a term that stops mid-read does not finish it
			return tailMsg{}, false, err
		}
		start := t.first
		if t.end-t.first+1 > t.span {
			start = t.end - t.span + 1
		}
		chunk, err := t.read(ctx, start, t.end)
		if err != nil {
			return tailMsg{}, false, err
		}
		for i := len(chunk) - 1; i >= 0; i-- { // newest first
			t.buf = append(t.buf, chunk[i])
		}
		t.end = start - 1 // 0 past the stream's first sequence 1
		t.span *= 2
	}
	m, t.buf = t.buf[0], t.buf[1:]
	return m, true, nil
}

// read returns the headers of the messages on the filter from start to end, oldest first.
func (t *tailReader) read(ctx context.Context, start, end uint64) ([]tailMsg, error) {
	c, err := t.s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{t.filter},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
		HeadersOnly:    true,
		// A backstop for the deletion below, which a process killed mid-read never makes.
		InactiveThreshold: consumerIdle,
	})
	if err != nil {
		return nil, fmt.Errorf("reading the stream's tail: %w", err)
	}
	defer t.release(c)
	var out []tailMsg
	// No-wait fetches: a fetch that waits for a full batch would wait out its expiry at the chunk's end.
	// An empty one means the consumer's replica has not caught up yet: look again, for a while.
	idleUntil := time.Now().Add(2 * time.Second)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		batch, err := c.FetchNoWait(500)
		if err != nil {
			return nil, fmt.Errorf("reading the stream's tail: %w", err)
		}
		n, done := 0, false
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("reading the stream's tail: %w", err)
			}
			if md.Sequence.Stream > end {
				done = true
				continue // drained, so that the consumer's next fetch is not confused
			}
			out = append(out, tailMsg{seq: md.Sequence.Stream, Header: m.Headers()})
			// Not NumPending: the consumer may live on a replica a little behind the stream's leader, from
			// which `last` was read. A matching message at or past end always comes: the first chunk ends
			// at the newest event, and every later one where the chunk before it began.
			if md.Sequence.Stream == end {
				done = true
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("reading the stream's tail: %w", err)
		}
		switch {
		case done:
			return out, nil
		case n > 0:
			idleUntil = time.Now().Add(2 * time.Second)
		case time.Now().After(idleUntil):
			return out, nil
		default:
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// consumerIdle is how long the server keeps a tail reader's consumer that nobody uses.
const consumerIdle = 30 * time.Second

// release deletes the consumer a chunk was read through, so that no term, however it ends, leaves one
// behind on the events stream (each would otherwise stay until its inactivity threshold).
func (t *tailReader) release(c jetstream.Consumer) {
	info := c.CachedInfo()
	if info == nil {
		return // never created on the server
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = t.s.DeleteConsumer(ctx, info.Name) // the inactivity threshold removes it otherwise
}

// lastSeqOf returns the sequence of the stream's newest message on subject (a filter), 0 when none.
func lastSeqOf(ctx context.Context, s jetstream.Stream, subject string) (uint64, error) {
	m, err := s.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// electionRetries bounds how often awaitLeader tries a read again: with its backoff, about two seconds.
const electionRetries = 5

// awaitLeader calls read again, a few times with a short backoff within ctx, while it fails with "no
// responders". JetStream on a cluster answers so for a moment while a stream's or consumer's leader is
// elected or moves, and when a pull reaches a server before the interest of the consumer just created
// there (the tail reader's ordered consumer is created anew for every fetch). It is the only retry of
// loadCursor's reads; settleStored has none of its own, as recover tries it again.
func awaitLeader(ctx context.Context, read func() error) error {
	for attempt := 0; ; attempt++ {
		err := read()
		if !errors.Is(err, nats.ErrNoResponders) || attempt == electionRetries {
			return err
		}
		if !retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, time.Second, attempt)) {
			return err
		}
	}
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
