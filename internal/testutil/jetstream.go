package testutil

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamMsgs returns how many messages a JetStream stream holds, fence markers left out, 0 when the
// stream does not exist; any other failure fails the test.
func StreamMsgs(tb testing.TB, js jetstream.JetStream, stream string) uint64 {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := CountMsgs(ctx, js, stream)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// CountMsgs is StreamMsgs for callers that poll and take a failure as "not yet".
func CountMsgs(ctx context.Context, js jetstream.JetStream, stream string) (uint64, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	// The sum over the subjects, not State.Msgs less the fence subjects': the server takes the two
	// apart, so a marker written between them would make the difference wrong (below zero, even).
	var n uint64
	for subject, count := range info.State.Subjects {
		if !IsFence(subject) {
			n += count
		}
	}
	return n, nil
}

// IsFence reports whether subject is one of an events stream's fence subjects (P.leader.<n> and
// P.leader.restart, contract §6), whose markers StreamMsgs and StreamContents leave out: tests count
// events. P.events.leader (an event type) is not one.
func IsFence(subject string) bool {
	tokens := strings.Split(subject, ".")
	return len(tokens) >= 3 && tokens[len(tokens)-2] == "leader"
}

// StreamContents returns every message a JetStream stream holds but fence markers, in sequence order.
// It reads them through an ordered consumer, one round trip for many; a work-queue stream, which takes
// no consumer beside its own, it reads one message at a time. Messages deleted between the first and
// the last are skipped.
func StreamContents(tb testing.TB, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		tb.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		tb.Fatalf("stream %s: %v", stream, err)
	}
	if info.State.Msgs == 0 {
		return nil
	}
	var out []*jetstream.RawStreamMsg
	keep := func(m *jetstream.RawStreamMsg) {
		if !IsFence(m.Subject) {
			out = append(out, m)
		}
	}
	if info.Config.Retention == jetstream.WorkQueuePolicy {
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				tb.Fatalf("stream %s, sequence %d: %v", stream, seq, err)
			}
			keep(m)
		}
		return out
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		tb.Fatalf("stream %s: %v", stream, err)
	}
	for {
		batch, err := c.FetchNoWait(1000)
		if err != nil {
			tb.Fatalf("stream %s: %v", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				tb.Fatalf("stream %s: %v", stream, err)
			}
			keep(&jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: md.Sequence.Stream, Header: m.Headers(),
				Data: m.Data(), Time: md.Timestamp})
			if md.Sequence.Stream >= info.State.LastSeq {
				return out
			}
		}
		if err := batch.Error(); err != nil {
			tb.Fatalf("stream %s: %v", stream, err)
		}
		if n == 0 && ctx.Err() != nil {
			tb.Fatalf("stream %s: read up to sequence %d of %d: %v", stream, lastSeq(out), info.State.LastSeq, ctx.Err())
		}
	}
}

func lastSeq(msgs []*jetstream.RawStreamMsg) uint64 {
	if len(msgs) == 0 {
		return 0
	}
	return msgs[len(msgs)-1].Sequence
}
