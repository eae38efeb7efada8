package layout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The units view (docs/subjects.md#units-the-latest-event-per-loading-unit): the key-value bucket PFX_UNITS
// holds, under each unit token, the data of that unit's latest event, verbatim. Every value is written
// with the headers below, so that a reader of the raw message ($KV.PFX_UNITS.<UNIT>) sees which event it is.
const (
	// HeaderUnit is the unit token of a value in the units bucket, and of a units.get reply.
	HeaderUnit = "Tracking-Unit"
	// HeaderEventID is the id of the event a value in the units bucket holds (its Nats-Msg-Id in the
	// events stream); the events on P.events.> carry it too.
	HeaderEventID = "Tracking-Event-Id"
)

// UnitsStream is the name of the stream behind the units bucket, KV_PFX_UNITS.
func (l Streams) UnitsStream() string { return "KV_" + l.Units() }

// UnitSubject is $KV.PFX_UNITS.<UNIT>, the subject of one unit's value in the units bucket.
func (l Streams) UnitSubject(unit string) string { return "$KV." + l.Units() + "." + unit }

// UnitsConfig is the units bucket the bridge creates: one value per unit (history 1), file storage, the
// streams' replicas, and values as large as the events stream's. A value is kept until it is replaced or,
// when the events stream has a maximum age, until it is that old (the bucket's TTL): a value is one of
// the stream's events, written a moment after the stream stored it, so it leaves the bucket soon after
// its event left the stream, and the bucket holds no more units than the stream holds events of.
func (l Streams) UnitsConfig() jetstream.KeyValueConfig {
	events, _, _ := l.MsgSizes()
	size := int32(-1)
	if events > 0 {
		size = events
	}
	return jetstream.KeyValueConfig{Bucket: l.Units(), History: 1, Storage: jetstream.FileStorage,
		Replicas: max(l.Replicas, 1), MaxValueSize: size, TTL: max(l.EventsLimits.MaxAge, 0),
		Description: "tracking-bridge: the latest event per loading unit, built from " + l.Events()}
}

// ttl writes a bucket's TTL, 0 as "none".
func ttl(d time.Duration) string {
	if d <= 0 {
		return "none"
	}
	return d.String()
}

// EnsureUnits makes sure the units bucket exists, as Ensure does for the streams: with create it creates it
// when missing; one that exists with another history, TTL or storage is used as it is and the differences
// are logged. Without create, a missing bucket is an error wrapping jetstream.ErrBucketNotFound.
func (l Streams) EnsureUnits(ctx context.Context, js jetstream.JetStream, create bool, log *slog.Logger) error {
	want := l.UnitsConfig()
	kv, err := js.KeyValue(ctx, want.Bucket)
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound) && create:
		if _, err := js.CreateKeyValue(ctx, want); err != nil {
			if errors.Is(err, jetstream.ErrBucketExists) { // another bridge was quicker
				return nil
			}
			return fmt.Errorf("creating bucket %s: %w", want.Bucket, err)
		}
		log.Info("bucket created", "bucket", want.Bucket, "replicas", want.Replicas, "max_value_size", want.MaxValueSize,
			"ttl", ttl(want.TTL))
		return nil
	case errors.Is(err, jetstream.ErrBucketNotFound):
		return fmt.Errorf("%w: %s, and BRIDGE_CREATE_STREAMS is false", jetstream.ErrBucketNotFound, want.Bucket)
	case err != nil:
		return fmt.Errorf("looking up bucket %s: %w", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("looking up bucket %s: %w", want.Bucket, err)
	}
	var diff []string
	if st.History() != int64(want.History) {
		diff = append(diff, fmt.Sprintf("history %d (want %d)", st.History(), want.History))
	}
	if st.TTL() != want.TTL {
		diff = append(diff, fmt.Sprintf("ttl %s (want %s)", ttl(st.TTL()), ttl(want.TTL)))
	}
	if info, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		have := info.StreamInfo().Config
		if have.Storage != want.Storage {
			diff = append(diff, fmt.Sprintf("storage %v (want %v)", have.Storage, want.Storage))
		}
		if have.Replicas != want.Replicas {
			diff = append(diff, fmt.Sprintf("replicas %d (want %d)", have.Replicas, want.Replicas))
		}
	}
	if len(diff) > 0 {
		log.Warn("bucket exists with another configuration; using it as it is", "bucket", want.Bucket,
			"differences", fmt.Sprint(diff))
	}
	return nil
}
