package units

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

// Rebuilt is what Rebuild did.
type Rebuilt struct {
	Bucket string `json:"bucket"`
	Stream string `json:"stream"`
	// From is the events stream's sequence the view starts again from (its first event); Last its newest.
	From uint64 `json:"from"`
	Last uint64 `json:"last"`
	// Purged is how many values were removed from the bucket first (with purge).
	Purged uint64 `json:"purged"`
	// Created is true when the shared consumer did not exist and was made (no bridge ran the view yet).
	Created bool `json:"created"`
}

// Rebuild makes the units view start again from the events stream's first event, while bridges run:
// it resets the shared consumer (durable; DefaultDurable when empty) to that event, and every bridge with
// the view on takes the events from there, applying them as they apply new ones. Events keep flowing
// meanwhile; new ones wait behind the replay.
//
// Without purge, readers keep every value during the rebuild: a value only ever moves to a later event,
// so the replay fills what is missing (a value lost with the bucket, a unit of an event applied while
// the view was off) and changes nothing else. With purge, the bucket is emptied first: a reader finds no
// value for a unit (units.get answers 404) until the replay has reached its latest event, and a watcher
// sees each unit again as it is written; use it to drop units whose events are no longer in the stream.
// The bucket must exist (a bridge made it); the consumer is made when missing.
func Rebuild(ctx context.Context, js jetstream.JetStream, streams layout.Streams, durable string, purge bool) (Rebuilt, error) {
	if durable == "" {
		durable = DefaultDurable
	}
	out := Rebuilt{Bucket: streams.Units(), Stream: streams.Events()}
	events, err := js.Stream(ctx, streams.Events())
	if err != nil {
		return out, fmt.Errorf("looking up stream %s: %w", streams.Events(), err)
	}
	kv, err := js.Stream(ctx, streams.UnitsStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, fmt.Errorf("bucket %s does not exist: start a bridge with BRIDGE_UNITS_VIEW=true first", out.Bucket)
	}
	if err != nil {
		return out, fmt.Errorf("looking up bucket %s: %w", out.Bucket, err)
	}
	if purge {
		before := kv.CachedInfo().State.Msgs
		if err := kv.Purge(ctx); err != nil {
			return out, fmt.Errorf("purging bucket %s: %w", out.Bucket, err)
		}
		out.Purged = before
	}
	info, err := events.Info(ctx)
	if err != nil {
		return out, fmt.Errorf("looking up stream %s: %w", streams.Events(), err)
	}
	out.From, out.Last = max(info.State.FirstSeq, 1), info.State.LastSeq
	_, err = js.ResetConsumerToSequence(ctx, streams.Events(), durable, out.From)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		// No bridge made it yet: made now, it starts at the stream's first event anyway.
		if _, err = js.CreateOrUpdateConsumer(ctx, streams.Events(), ConsumerConfig(streams, durable)); err != nil {
			return out, fmt.Errorf("creating consumer %s on stream %s: %w", durable, streams.Events(), err)
		}
		out.Created = true
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("resetting consumer %s on stream %s to sequence %d: %w", durable, streams.Events(), out.From, err)
	}
	return out, nil
}
