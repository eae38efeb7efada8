package testutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func TestStreamMsgsAndContents(t *testing.T) {
	ns := testutil.StartNATS(t, nil)
	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.StreamMsgs(t, js, "S"); n != 0 {
		t.Errorf("StreamMsgs of a missing stream = %d, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range []string{"a", "b", "c"} {
		if _, err := js.Publish(ctx, "s."+data, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteMsg(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if n := testutil.StreamMsgs(t, js, "S"); n != 2 {
		t.Errorf("StreamMsgs = %d, want 2", n)
	}
	var got []string
	for _, m := range testutil.StreamContents(t, js, "S") {
		got = append(got, string(m.Data))
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Errorf("StreamContents = %q, want [a c]", got)
	}
}

// TestIsFence: the fence's subjects are told from events, an event of the type "leader" among them.
func TestIsFence(t *testing.T) {
	for subject, want := range map[string]bool{
		"tracking.leader.7":                  true,
		"tracking.leader.restart":            true,
		"acme.t.leader.12":                   true,
		"tracking.events.leader":             false,
		"tracking.events.leader.MSKU1234565": false,
		"tracking.events.leader._":           false,
		"tracking.events.GATE_IN.MSKU1":      false,
	} {
		if got := testutil.IsFence(subject); got != want {
			t.Errorf("IsFence(%q) = %v, want %v", subject, got, want)
		}
	}
}
