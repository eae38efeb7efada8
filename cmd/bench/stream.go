package main

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// StreamState returns the current state of the named stream. A stream that does not exist yet gives a
// zero state and no error.
func StreamState(ctx context.Context, js jetstream.JetStream, name string) (jetstream.StreamState, error) {
	s, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return jetstream.StreamState{}, nil
	}
	if err != nil {
		return jetstream.StreamState{}, err
	}
	return s.CachedInfo().State, nil
}

// WaitStream polls the named stream every interval until it holds at least n messages and returns its
// state then. Each poll's state is passed to progress, when set (for sampling a process at the first
// stored message, say); progress returning an error stops the wait with that error. A stream that does
// not exist yet counts as empty. It fails when ctx is done.
func WaitStream(ctx context.Context, js jetstream.JetStream, name string, n uint64, interval time.Duration,
	progress func(jetstream.StreamState) error) (jetstream.StreamState, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := StreamState(qctx, js, name)
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
			return st, err
		}
		if err == nil {
			if progress != nil {
				if perr := progress(st); perr != nil {
					return st, perr
				}
			}
			if st.Msgs >= n {
				return st, nil
			}
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-t.C:
		}
	}
}

// Rate returns the store rate of a stream's messages: the intervals between its first and last message
// (Msgs-1 of them) per second of the time between their storage timestamps. It is 0 for fewer than two
// messages.
func Rate(st jetstream.StreamState) float64 {
	d := st.LastTime.Sub(st.FirstTime)
	if st.Msgs < 2 || d <= 0 {
		return 0
	}
	return float64(st.Msgs-1) / d.Seconds()
}
