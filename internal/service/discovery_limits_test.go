package service

import (
	"testing"

	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestDiscoveryPendingBounded: each discovery subscription holds at most discoveryPendingMsgs requests
// and discoveryPendingBytes of payload while its handler answers the ones before, so a flood of
// discovery requests (one-byte bodies, which nats.go's default of 64 MB of payload never stops) is dropped
// by the client rather than held in memory.
func TestDiscoveryPendingBounded(t *testing.T) {
	t.Parallel()
	nc := testutil.StartNATS(t, nil).Connect()
	d := &discovery{identity: micro.ServiceIdentity{Name: Name, ID: "instance"}}
	subs, err := d.subscribe(nc)
	if err != nil {
		t.Fatal(err)
	}
	if len(subs) != 9 {
		t.Fatalf("%d discovery subscriptions, want 9", len(subs))
	}
	for _, sub := range subs {
		msgs, bytes, err := sub.PendingLimits()
		if err != nil {
			t.Fatal(err)
		}
		if msgs != discoveryPendingMsgs || bytes != discoveryPendingBytes {
			t.Errorf("%s: pending limits %d messages, %d bytes; want %d, %d", sub.Subject, msgs, bytes,
				discoveryPendingMsgs, discoveryPendingBytes)
		}
	}
}
