package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// natsState mirrors the NATS connection's state from its event handlers, so that the health checks,
// /status and the metrics read it without the client's lock: a write to a server that stopped reading
// (frozen, or behind a network that drops packets) holds that lock until the write times out.
type natsState struct {
	status     atomic.Int32 // a nats.Status; unknownStatus until Connect returned or a handler ran
	reconnects atomic.Uint64
	lastErr    atomic.Pointer[string]
	// servers are the configured server URLs, without user information, for logs and /readyz.
	servers string
	// closed is closed by the last handler nats.go runs, the closed handler: after it no handler logs.
	closed     chan struct{}
	closedOnce sync.Once
	// logged holds the connection failures logged since the connection was last up, so that a failure
	// repeating on every attempt (on each of several servers in turn) is logged once. Only the handlers
	// touch it, and nats.go runs them one at a time.
	logged map[string]bool
}

// maxLoggedFailures bounds logged: past it, failures are no longer logged until a connection succeeds
// (they stay in /readyz's reason).
const maxLoggedFailures = 32

const unknownStatus = -1

func newNATSState(servers []string) *natsState {
	s := &natsState{servers: redactServers(servers), closed: make(chan struct{})}
	s.status.Store(unknownStatus)
	return s
}

// redactServers joins the server URLs with their user information (a user and password, or a token)
// replaced by "xxxxx".
func redactServers(servers []string) string {
	out := make([]string, len(servers))
	for i, s := range servers {
		u, err := url.Parse(s)
		switch {
		case err != nil && strings.Contains(s, "@"):
			out[i] = "[unparsable URL]" // it might hold credentials
		case err != nil || u.User == nil:
			out[i] = s
		default:
			u.User = url.User("xxxxx")
			out[i] = u.String()
		}
	}
	return strings.Join(out, ",")
}

// Status returns the connection's last known status.
func (s *natsState) Status() nats.Status {
	st := s.status.Load()
	if st == unknownStatus {
		return nats.CONNECTING
	}
	return nats.Status(st)
}

func (s *natsState) Connected() bool    { return s.Status() == nats.CONNECTED }
func (s *natsState) Closed() bool       { return s.Status() == nats.CLOSED }
func (s *natsState) Reconnects() uint64 { return s.reconnects.Load() }

// LastError returns the error the connection was last lost or refused with, "" when none.
func (s *natsState) LastError() string {
	if e := s.lastErr.Load(); e != nil {
		return *e
	}
	return ""
}

// NotConnected says why the connection is not up, naming the servers and the last error; "" while it
// is up.
func (s *natsState) NotConnected() string {
	st := s.Status()
	if st == nats.CONNECTED {
		return ""
	}
	why := fmt.Sprintf("connection %s to %s", st, s.servers)
	if err := s.LastError(); err != "" {
		why += ": " + err
	}
	return why
}

// failed records a failed connection attempt and reports whether it is worth a log line: the first
// attempt to fail for this reason since the connection was last up. nats.go reports the initial
// connection-refused failure as ErrNoServers, which names no cause; the next attempt's error does.
func (s *natsState) failed(err error) bool {
	if err == nil || errors.Is(err, nats.ErrNoServers) {
		return false
	}
	msg := err.Error()
	s.lastErr.Store(&msg)
	if s.logged[msg] || len(s.logged) >= maxLoggedFailures {
		return false
	}
	if s.logged == nil {
		s.logged = map[string]bool{}
	}
	s.logged[msg] = true
	return true
}

func (s *natsState) set(st nats.Status, err error) {
	s.status.Store(int32(st))
	if err != nil {
		msg := err.Error()
		s.lastErr.Store(&msg)
	}
}

// natsOptions turns the configuration into NATS connection options: authentication, TLS, and reconnects
// forever with backoff. Connection state changes are logged once each and mirrored in state; failed
// attempts, at start-up as after a disconnect, are logged once per distinct reason with the servers.
//
// A write that the server does not take within BRIDGE_PUBLISH_TIMEOUT counts as a lost connection: the
// client reconnects, and the publishes in flight are sent again. (nats.go waits a minute by default,
// holding the connection's lock all the while, which stalls the event path and the shutdown behind a
// server that stopped reading.)
func natsOptions(cfg *config.Config, name string, log *slog.Logger, state *natsState) ([]nats.Option, error) {
	errLimit := logging.NewLimiter(time.Minute, nil)
	opts := []nats.Option{
		nats.Name(name),
		// The bridge's own reply subjects; the API service refuses a caller's reply subject under them.
		nats.CustomInboxPrefix(cfg.NATSInboxPrefix),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second),
		nats.ReconnectJitter(500*time.Millisecond, 2*time.Second),
		nats.ReconnectBufSize(32 << 20),
		nats.FlusherTimeout(cfg.PublishTimeout),
		nats.ReconnectOnFlusherError(),
		// A server that stopped answering without closing the connection is noticed by a write that does
		// not go through (above) while events flow, and by two unanswered pings when little is written: a
		// standby, or a leader that stopped leading because its lease renewals went unanswered.
		nats.PingInterval(cfg.PublishTimeout),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			state.set(nats.RECONNECTING, err)
			if err != nil {
				log.Warn("NATS disconnected", "err", err)
			} else {
				log.Info("NATS disconnected")
			}
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if state.failed(err) {
				log.Warn("NATS connection failed; retrying", "server", state.servers, "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			state.reconnects.Add(1)
			state.set(nats.CONNECTED, nil)
			state.logged = nil
			log.Info("NATS reconnected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			state.set(nats.CONNECTED, nil)
			state.logged = nil
			log.Info("NATS connected", "server", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			state.set(nats.CLOSED, nc.LastError())
			state.closedOnce.Do(func() { close(state.closed) })
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			// Some of these any NATS client can cause at will: a discovery request ($SRV.*) whose reply
			// subject the bridge may not publish on is a permission violation, a flood of API requests
			// makes a slow consumer. One line a minute per kind, with the number held back.
			kind := "other"
			switch {
			case errors.Is(err, nats.ErrPermissionViolation):
				kind = "permission"
			case errors.Is(err, nats.ErrSlowConsumer):
				kind = "slow_consumer"
			}
			ok, suppressed := errLimit.Allow(kind)
			if !ok {
				return
			}
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("NATS error", "err", logging.Value(err.Error(), 512), "subject", subj, "suppressed", suppressed)
		}),
	}
	switch {
	case cfg.NATSCredsFile != "":
		opts = append(opts, nats.UserCredentials(cfg.NATSCredsFile))
	case cfg.NATSNKeySeedFile != "":
		o, err := nats.NkeyOptionFromSeed(cfg.NATSNKeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("BRIDGE_NATS_NKEY_SEED_FILE: %w", err)
		}
		opts = append(opts, o)
	case cfg.NATSUser != "":
		opts = append(opts, nats.UserInfo(cfg.NATSUser, cfg.NATSPassword.Reveal()))
	case cfg.NATSToken != "":
		opts = append(opts, nats.Token(cfg.NATSToken.Reveal()))
	}
	if cfg.NATSCAFile != "" {
		opts = append(opts, nats.RootCAs(cfg.NATSCAFile))
	}
	if cfg.NATSCertFile != "" {
		opts = append(opts, nats.ClientCert(cfg.NATSCertFile, cfg.NATSKeyFile))
	}
	return opts, nil
}

// Names of the bridge's NATS connections, as the server shows them (nats server report connections).
const (
	natsName      = "tracking-bridge"
	natsAPIName   = "tracking-bridge-api"
	natsUnitsName = "tracking-bridge-units"
)

// connectNATS connects to the configured servers as name. With RetryOnFailedConnect it returns at once
// even while no server is reachable; the connection then keeps trying in the background.
func connectNATS(cfg *config.Config, name string, log *slog.Logger) (*nats.Conn, *natsState, error) {
	state := newNATSState(cfg.NATSServers())
	opts, err := natsOptions(cfg, name, log, state)
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(strings.Join(cfg.NATSServers(), ","), opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("NATS: %w", err)
	}
	// Unless a handler has told the state since (they run asynchronously, and in order).
	state.status.CompareAndSwap(unknownStatus, int32(nc.Status()))
	return nc, state, nil
}

// closeNATS closes the bridge's NATS connections and waits, at most closeWait in all, for their handlers
// to have run: nats.go runs them asynchronously, so without the wait a "NATS disconnected" line could
// follow the process's last line, the reason it stopped.
func (d *Daemon) closeNATS() {
	states := []*natsState{d.natsSt}
	d.nc.Close()
	if d.apiNC != nil {
		d.apiNC.Close()
		states = append(states, d.apiSt)
	}
	if d.unitsNC != nil {
		d.unitsNC.Close()
		states = append(states, d.unitsSt)
	}
	t := time.NewTimer(closeWait)
	defer t.Stop()
	for _, st := range states {
		select {
		case <-st.closed:
		case <-t.C:
			return
		}
	}
}

// closeWait bounds closeNATS: it comes after the shutdown timeout, within the little time cmd/bridge
// allows past it.
const closeWait = 500 * time.Millisecond

// warnPlainCredentials logs, once at start-up, the servers to which NATS credentials would travel in
// clear text (plainCredentialServers).
func warnPlainCredentials(cfg *config.Config, log *slog.Logger) {
	if plain := plainCredentialServers(cfg); len(plain) > 0 {
		log.Warn("NATS credentials may travel unencrypted: these servers are reached over plain nats:// or ws:// "+
			"on a host other than loopback, and no TLS is configured; use tls:// (or wss://) URLs, or set "+
			"BRIDGE_NATS_CA_FILE (a server that requires TLS gets it anyway)", "servers", redactServers(plain))
	}
}

// plainCredentialServers returns the configured servers to which NATS credentials would travel in clear
// text: a NATS authentication method is set (or the URL carries user information), the URL is nats:// or
// ws://, its host is not loopback (127.0.0.0/8, ::1, localhost), and no TLS is configured. nats.go turns
// TLS on for every server when any URL is tls:// or wss://, or a CA or client certificate is set; a
// server that requires TLS also gets it, which the configuration cannot tell.
func plainCredentialServers(cfg *config.Config) []string {
	creds := cfg.NATSCredsFile != "" || cfg.NATSNKeySeedFile != "" || cfg.NATSUser != "" || cfg.NATSToken != ""
	servers := cfg.NATSServers()
	var plain []string
	for _, s := range servers {
		u, err := url.Parse(s)
		if err != nil {
			continue // Validate refuses it
		}
		switch strings.ToLower(u.Scheme) {
		case "tls", "wss":
			return nil
		case "nats", "ws":
			if (creds || u.User != nil) && !loopback(u.Hostname()) {
				plain = append(plain, s)
			}
		}
	}
	if cfg.NATSCAFile != "" || cfg.NATSCertFile != "" {
		return nil
	}
	return plain
}

// loopback reports whether host names this machine: localhost, or a loopback address.
func loopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// natsClosedError explains a NATS connection that closed for good. The client gives up when the server
// refused the credentials twice in a row (the error then names the variables to check), or when the
// server closed it with an error the client does not retry, such as a message over a max_payload
// lowered since the connection was made.
func natsClosedError(cfg *config.Config, nc *nats.Conn) error {
	return closedError(cfg, nc.LastError())
}

// closedError is natsClosedError for the connection's last error err.
func closedError(cfg *config.Config, err error) error {
	if err == nil {
		err = nats.ErrConnectionClosed
	}
	if strings.Contains(strings.ToLower(err.Error()), "maximum payload") {
		return fmt.Errorf("NATS connection closed: %w (the server's max_payload is below a message the bridge "+
			"sent, lowered since it connected; started again, the bridge reads the new limit and dead-letters "+
			"larger events)", err)
	}
	if !errors.Is(err, nats.ErrAuthorization) && !errors.Is(err, nats.ErrAuthExpired) &&
		!errors.Is(err, nats.ErrAuthRevoked) && !errors.Is(err, nats.ErrAccountAuthExpired) {
		return fmt.Errorf("NATS connection closed: %w", err)
	}
	var hint string
	switch {
	case cfg.NATSCredsFile != "":
		hint = "BRIDGE_NATS_CREDS_FILE"
	case cfg.NATSNKeySeedFile != "":
		hint = "BRIDGE_NATS_NKEY_SEED_FILE"
	case cfg.NATSUser != "":
		hint = "BRIDGE_NATS_USER and BRIDGE_NATS_PASSWORD"
	case cfg.NATSToken != "":
		hint = "BRIDGE_NATS_TOKEN"
	default:
		hint = "the NATS authentication variables (none is set)"
	}
	return fmt.Errorf("NATS connection closed: %w (check %s, and the user's permissions on the server)", err, hint)
}

// natsWatch is the bridge's NATS connection as a component. Its Run watches for the connection closing
// for good (the server refused the credentials on reconnecting): it cannot come back, so Run returns the
// reason and the bridge stops, for its supervisor to restart it. Ready says whether the connection is up.
type natsWatch struct {
	cfg *config.Config
	nc  *nats.Conn
	st  *natsState
}

func (w *natsWatch) Run(ctx context.Context) error {
	select {
	case <-w.st.closed: // closed by the connection's closed handler, also before Run began

		return natsClosedError(w.cfg, w.nc)
	case <-ctx.Done():
		return nil
	}
}

// Ready: the connection is up; else the servers and the last connection error.
func (w *natsWatch) Ready() error {
	if why := w.st.NotConnected(); why != "" {
		return errors.New(why)
	}
	return nil
}

// status is the connection's section of /status.
func (w *natsWatch) status(doc *statusDoc) {
	st := w.st.Status()
	doc.NATS.Connected, doc.NATS.Status, doc.NATS.Reconnects = st == nats.CONNECTED, st.String(), w.st.Reconnects()
}
