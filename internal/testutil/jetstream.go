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

// StreamContents returns every message a JetStream stream holds but fence markers, in sequence order,
// read one by one without a consumer. Messages deleted between the first and the last are skipped.
func StreamContents(tb testing.TB, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		tb.Fatalf("stream %s: %v", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		tb.Fatalf("stream %s: %v", stream, err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			tb.Fatalf("stream %s, sequence %d: %v", stream, seq, err)
		}
		if !IsFence(m.Subject) {
			out = append(out, m)
		}
	}
	return out
}
