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
