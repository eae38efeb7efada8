package layout_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestEnsureUnitsTTL: the units bucket ages out with the events stream: created with the events' maximum
// age as its TTL (the age of its stream), and with none when the events have none. A bucket that exists
// with another TTL is used as it is, the difference logged.
func TestEnsureUnitsTTL(t *testing.T) {
	js := jsFor(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	const age = 72 * time.Hour
	aged := limitedLayout()
	aged.EventsLimits.MaxAge = age

	bucketTTL := func() (ttl, maxAge time.Duration) {
		t.Helper()
		kv, err := js.KeyValue(ctx, aged.Units())
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.TTL(), st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.MaxAge
	}
	logs := &testutil.Logs{}
	if err := aged.EnsureUnits(ctx, js, true, slog.New(logs)); err != nil {
		t.Fatal(err)
	}
	if ttl, maxAge := bucketTTL(); ttl != age || maxAge != age {
		t.Errorf("created: ttl %v, its stream's max_age %v; want %v", ttl, maxAge, age)
	}
	if v, ok := logs.Attr("bucket created", "ttl"); !ok || v.String() != age.String() {
		t.Errorf("the creation's log line: ttl %v %v", v, ok)
	}
	// Made again by the same layout: nothing to say.
	logs = &testutil.Logs{}
	if err := aged.EnsureUnits(ctx, js, true, slog.New(logs)); err != nil {
		t.Fatal(err)
	}
	if n := logs.Count(slog.LevelWarn, "bucket exists with another configuration; using it as it is"); n != 0 {
		t.Errorf("the same bucket again: %d differences logged: %s", n, logs)
	}

	// A bucket from before: no TTL. Used as it is; the difference is logged.
	if err := js.DeleteKeyValue(ctx, aged.Units()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: aged.Units(), History: 1, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	logs = &testutil.Logs{}
	if err := aged.EnsureUnits(ctx, js, true, slog.New(logs)); err != nil {
		t.Fatal(err)
	}
	diff, _ := logs.Attr("bucket exists with another configuration; using it as it is", "differences")
	if d := diff.String(); !strings.Contains(d, "ttl none (want 72h0m0s)") {
		t.Errorf("differences logged: %q; want the TTL", d)
	}
	if ttl, _ := bucketTTL(); ttl != 0 {
		t.Errorf("the bucket from before was changed: ttl %v", ttl)
	}

	// Events without a maximum age: a bucket without a TTL, and one with a TTL is a difference.
	plain := limitedLayout()
	if got := plain.UnitsConfig().TTL; got != 0 {
		t.Errorf("without the events' maximum age: ttl %v, want none", got)
	}
	logs = &testutil.Logs{}
	if err := plain.EnsureUnits(ctx, js, true, slog.New(logs)); err != nil {
		t.Fatal(err)
	}
	if n := logs.Count(slog.LevelWarn, "bucket exists with another configuration; using it as it is"); n != 0 {
		t.Errorf("a bucket without a TTL for events without an age: %d differences logged: %s", n, logs)
	}
	if err := js.DeleteKeyValue(ctx, aged.Units()); err != nil {
		t.Fatal(err)
	}
	if err := aged.EnsureUnits(ctx, js, true, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	logs = &testutil.Logs{}
	if err := plain.EnsureUnits(ctx, js, true, slog.New(logs)); err != nil {
		t.Fatal(err)
	}
	diff, _ = logs.Attr("bucket exists with another configuration; using it as it is", "differences")
	if d := diff.String(); !strings.Contains(d, "ttl 72h0m0s (want none)") {
		t.Errorf("differences logged: %q; want the TTL", d)
	}
}
