package daemon

import (
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestClosedErrorHints: the error of a NATS connection closed for good points at the credentials only
// when the server refused them, and names max_payload when a message exceeded it.
func TestClosedErrorHints(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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

// TestPlainCredentialServers: the servers to which credentials would travel in clear text are the
// nats:// and ws:// ones off loopback, when credentials are set and no TLS is.
func TestPlainCredentialServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  config.Config
		want []string
	}{
		{"password to a remote host", config.Config{NATSURL: "nats://nats.example.com:4222", NATSUser: "u", NATSPassword: "p"},
			[]string{"nats://nats.example.com:4222"}},
		{"token to remote hosts, loopback left out", config.Config{NATSURL: "nats://10.0.0.1:4222, nats://127.0.0.2:4222," +
			"nats://[::1]:4222,nats://localhost:4222,NATS://LocalHost.:4222,ws://nats:8080", NATSToken: "t"},
			[]string{"nats://10.0.0.1:4222", "ws://nats:8080"}},
		{"nkey seed", config.Config{NATSURL: "nats://nats:4222", NATSNKeySeedFile: "seed.nk"}, []string{"nats://nats:4222"}},
		{"creds file", config.Config{NATSURL: "nats://nats:4222", NATSCredsFile: "user.creds"}, []string{"nats://nats:4222"}},
		{"user information in the URL", config.Config{NATSURL: "nats://u:p@nats:4222,nats://other:4222"},
			[]string{"nats://u:p@nats:4222"}},
		{"no credentials", config.Config{NATSURL: "nats://nats:4222"}, nil},
		{"loopback only", config.Config{NATSURL: "nats://127.0.0.1:4222", NATSToken: "t"}, nil},
		{"a tls:// URL makes every connection TLS", config.Config{NATSURL: "nats://a:4222,tls://b:4222", NATSToken: "t"}, nil},
		{"wss", config.Config{NATSURL: "wss://a:443", NATSToken: "t"}, nil},
		{"CA file", config.Config{NATSURL: "nats://a:4222", NATSToken: "t", NATSCAFile: "ca.pem"}, nil},
		{"client certificate", config.Config{NATSURL: "nats://a:4222", NATSToken: "t", NATSCertFile: "c.pem", NATSKeyFile: "k.pem"}, nil},
	} {
		if got := plainCredentialServers(&tc.cfg); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestPlainCredentialsWarning: connecting with credentials over plain nats:// to another host logs one
// warning naming the servers without their credentials.
func TestPlainCredentialsWarning(t *testing.T) {
	t.Parallel()
	logs := &testutil.Logs{}
	cfg := config.Default()
	cfg.NATSURL = "nats://bridge:s3cret@nats.invalid:4222,nats://127.0.0.1:1"
	warnPlainCredentials(cfg, slog.New(logs))
	var warnings []slog.Record
	for _, r := range logs.Records() {
		if r.Level == slog.LevelWarn && strings.Contains(r.Message, "credentials may travel unencrypted") {
			warnings = append(warnings, r)
		}
	}
	if len(warnings) != 1 {
		t.Fatalf("%d warnings about plain-text credentials, want 1:\n%s", len(warnings), logs)
	}
	servers, _ := logs.Attr(warnings[0].Message, "servers")
	if got := servers.String(); got != "nats://xxxxx@nats.invalid:4222" || strings.Contains(logs.String(), "s3cret") {
		t.Errorf("servers %q, want nats://xxxxx@nats.invalid:4222, and no password in the log:\n%s", got, logs)
	}
}

// TestAPIPartReadyFollowsItsConnection: the api_service check fails while the API service's own NATS
// connection is down (a caller's flood can get it cut as a slow consumer), whatever the service says.
func TestAPIPartReadyFollowsItsConnection(t *testing.T) {
	t.Parallel()
	st := newNATSState([]string{"nats://u:secret@127.0.0.1:4222"})
	st.set(nats.RECONNECTING, errors.New("slow consumer"))
	err := (&apiPart{conn: st}).Ready() // the service is not asked
	if err == nil || !strings.Contains(err.Error(), "API service's NATS connection") ||
		!strings.Contains(err.Error(), "slow consumer") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Ready = %v, want the API connection's state, without its password", err)
	}
}
