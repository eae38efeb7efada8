package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/config"
)

// TestClosedErrorHints: the error of a NATS connection closed for good points at the credentials only
// when the server refused them, and names max_payload when a message exceeded it.
func TestClosedErrorHints(t *testing.T) {
	cfg := &config.Config{NATSUser: "tracking-bridge"}
	for _, tc := range []struct {
		err       error
		want, not string
	}{
		{nats.ErrAuthorization, "BRIDGE_NATS_USER and BRIDGE_NATS_PASSWORD", "max_payload"},
		{nats.ErrAuthExpired, "BRIDGE_NATS_USER", "max_payload"},
		{errors.New("nats: maximum payload violation"), "max_payload", "BRIDGE_NATS_USER"},
		{errors.New("nats: some other server error"), "some other server error", "BRIDGE_NATS_USER"},
		{nil, nats.ErrConnectionClosed.Error(), "BRIDGE_NATS_USER"},
	} {
		got := closedError(cfg, tc.err).Error()
		if !strings.Contains(got, tc.want) || strings.Contains(got, tc.not) {
			t.Errorf("closedError(%v) = %q; want it to name %q and not %q", tc.err, got, tc.want, tc.not)
		}
	}
}

// TestNATSFailuresLoggedOncePerReason: failures alternating between servers are logged once each until
// a connection succeeds; ErrNoServers, which names no cause, is not logged; every failure is the last
// error for /readyz; user information never appears in the servers shown.
func TestNATSFailuresLoggedOncePerReason(t *testing.T) {
	s := newNATSState([]string{"nats://user:pw@a:4222", "nats://tok3n@b:4222", "nats://c:4222"})
	if want := "nats://xxxxx@a:4222,nats://xxxxx@b:4222,nats://c:4222"; s.servers != want {
		t.Errorf("servers %q, want %q", s.servers, want)
	}
	errA := errors.New("dial tcp 10.0.0.1:4222: connect: connection refused")
	errB := errors.New("dial tcp 10.0.0.2:4222: i/o timeout")
	for i, tc := range []struct {
		err error
		log bool
	}{{nats.ErrNoServers, false}, {errA, true}, {errB, true}, {errA, false}, {errB, false}} {
		if got := s.failed(tc.err); got != tc.log {
			t.Errorf("failure %d (%v): logged %v, want %v", i, tc.err, got, tc.log)
		}
	}
	if s.LastError() != errB.Error() {
		t.Errorf("last error %q, want %q", s.LastError(), errB)
	}
	s.logged = nil // connected again
	if !s.failed(errA) {
		t.Error("a failure after a connection succeeded was not logged")
	}
}
