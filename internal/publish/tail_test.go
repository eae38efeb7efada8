package publish

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestResumeWhileNoResponders: the reads of the resume cursor (the newest event's sequence, a chunk of the
// tail) that JetStream answers with "no responders", as a cluster does while a leader is elected, are
// tried again a few times within the context; other errors, and no responders that outlast the retries,
// fail Resume at once.
func TestResumeWhileNoResponders(t *testing.T) {
	e := newEnv(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	p1 := e.publisher(16, nil)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	handleRange(ctx, t, p1, 0, 100)
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	want, err := e.publisher(16, nil).Resume(ctx) // as a new leader reads it
	if err != nil {
		t.Fatal(err)
	}
	other := errors.New("nats: permissions violation")
	tests := []struct {
		name          string
		last, tail    int   // the look-ups of the newest event and the chunk reads that fail
		err           error // how they fail
		wantErr       error
		wantAttempted int // failed calls made
	}{
		{"newest event", 2, 0, nats.ErrNoResponders, nil, 2},
		{"tail chunk", 0, 3, nats.ErrNoResponders, nil, 3},
		{"both", 1, 1, nats.ErrNoResponders, nil, 2},
		{"outlasting the retries", 0, 100, nats.ErrNoResponders, nats.ErrNoResponders, electionRetries + 1},
		{"another error", 100, 0, other, other, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := e.publisher(16, nil)
			fs := &flakyStream{events: e.layout.Events(), last: tt.last, tail: tt.tail, err: tt.err}
			p.js = flakyJS{JetStream: p.js, s: fs}
			got, err := p.Resume(ctx)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("Resume: %v, want %v", err, tt.wantErr)
			}
			if err == nil && got != want {
				t.Errorf("resume after %q, want %q", got, want)
			}
			if fs.failed != tt.wantAttempted {
				t.Errorf("%d failed calls, want %d", fs.failed, tt.wantAttempted)
			}
		})
	}
}

// flakyJS hands out flakyStream for the events stream.
type flakyJS struct {
	jetstream.JetStream
	s *flakyStream
}

func (j flakyJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := j.JetStream.Stream(ctx, name)
	if err != nil || name != j.s.events {
		return s, err
	}
	j.s.Stream = s
	return j.s, nil
}

// flakyStream fails the first last look-ups of the newest event and the first tail consumers with err.
type flakyStream struct {
	jetstream.Stream
	events     string
	last, tail int
	err        error
	failed     int
}

func (s *flakyStream) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	if strings.HasSuffix(subject, ".events.>") && s.last > 0 {
		s.last--
		s.failed++
		return nil, s.err
	}
	return s.Stream.GetLastMsgForSubject(ctx, subject)
}

func (s *flakyStream) OrderedConsumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	if s.tail > 0 {
		s.tail--
		s.failed++
		return nil, s.err
	}
	return s.Stream.OrderedConsumer(ctx, cfg)
}
