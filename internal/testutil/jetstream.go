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
	ctx, cancel := context.WithTimeout(context.Background(), Scale(10*time.Second))
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
// P.leader.restart, docs/subjects.md#streams), whose markers StreamMsgs and StreamContents leave out: tests
// count events. P.events.leader.<UNIT> and P.events.leader (an event type) are not ones.
func IsFence(subject string) bool {
	tokens := strings.Split(subject, ".")
	n := len(tokens)
	return n >= 3 && tokens[n-2] == "leader" && (n < 4 || tokens[n-3] != "events")
}

// StreamContents returns every message a JetStream stream holds but fence markers, in sequence order.
// It reads them with an ordered consumer, a thousand a request, where asking for each message alone
// took thousands of requests (a minute and more for a few thousand events on a busy machine); a read
// that fails (an R3 stream's consumer may find no responders for a moment) starts over, until
// Scale(a minute) has passed. Messages deleted between the first and the last are skipped.
func StreamContents(tb testing.TB, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	tb.Helper()
	return readAll(tb, js, stream, false)
}

// StreamAll is StreamContents with the fence markers: every message the stream holds, in order.
func StreamAll(tb testing.TB, js jetstream.JetStream, stream string) []*jetstream.RawStreamMsg {
	tb.Helper()
	return readAll(tb, js, stream, true)
}

func readAll(tb testing.TB, js jetstream.JetStream, stream string, fence bool) []*jetstream.RawStreamMsg {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Scale(60*time.Second))
	defer cancel()
	for {
		out, err := readStream(ctx, js, stream, fence)
		if err == nil {
			return out
		}
		if ctx.Err() != nil {
			tb.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readStream is one attempt of StreamContents (StreamAll with fence).
func readStream(ctx context.Context, js jetstream.JetStream, stream string, fence bool) ([]*jetstream.RawStreamMsg, error) {
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	var out []*jetstream.RawStreamMsg
	// Up to the last message the stream held when asked: a request for more than are left would wait
	// out its expiry. Fewer arrive when some were deleted since.
	for read, last := uint64(0), uint64(0); read < info.State.Msgs && last < info.State.LastSeq; {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("stream %s: %w", stream, err)
		}
		batch, err := c.Fetch(int(min(1000, info.State.Msgs-read)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", stream, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			md, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("stream %s: %w", stream, err)
			}
			last = md.Sequence.Stream
			if fence || !IsFence(m.Subject()) {
				out = append(out, &jetstream.RawStreamMsg{Subject: m.Subject(), Sequence: last,
					Header: m.Headers(), Data: m.Data(), Time: md.Timestamp})
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("stream %s, after sequence %d: %w", stream, last, err)
		}
		if n == 0 {
			break
		}
		read += uint64(n)
	}
	return out, nil
}
