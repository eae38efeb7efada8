// Package simtest serves the upstream simulator to tests that drive the bridge from outside (the daemon's
// and the commands' tests). It is apart from testutil because the simulator's own tests use testutil.
package simtest

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
)

// Upstream serves a simulator that can be replaced (a new instance after Close), over HTTP or TLS. It
// records the access and refresh tokens the token endpoint hands out, for tests that check none leaks.
type Upstream struct {
	Srv    *httptest.Server
	cur    atomic.Pointer[sim.Server]
	mu     sync.Mutex
	tokens []string
	// calls counts the requests other than the token endpoint's and the event stream's: the API calls.
	calls atomic.Int64
	// headers holds the traceparent header of every API call, by the request's path.
	headers map[string][]string
}

// Start serves a simulator with options o until the test ends.
func Start(t testing.TB, tlsServer bool, o sim.Options) *Upstream {
	t.Helper()
	u := &Upstream{}
	u.cur.Store(sim.New(o))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := u.cur.Load()
		if r.URL.Path != sim.TokenPath && !strings.HasSuffix(r.URL.Path, "/stream") {
			u.calls.Add(1)
			u.mu.Lock()
			if u.headers == nil {
				u.headers = map[string][]string{}
			}
			u.headers[r.URL.Path] = append(u.headers[r.URL.Path], r.Header.Get("Traceparent"))
			u.mu.Unlock()
		}
		if r.URL.Path != sim.TokenPath {
			s.Handler().ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		s.Handler().ServeHTTP(rec, r)
		u.recordTokens(rec.Body.Bytes())
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
	if tlsServer {
		u.Srv = httptest.NewTLSServer(h)
	} else {
		u.Srv = httptest.NewServer(h)
	}
	t.Cleanup(func() {
		u.cur.Load().Close()
		u.Srv.CloseClientConnections()
		u.Srv.Close()
	})
	return u
}

// recordTokens keeps the access_token and refresh_token values of a token response.
func (u *Upstream) recordTokens(body []byte) {
	for _, key := range []string{`"access_token":"`, `"refresh_token":"`} {
		if _, rest, ok := bytes.Cut(body, []byte(key)); ok {
			if v, _, ok := bytes.Cut(rest, []byte(`"`)); ok && len(v) > 0 {
				u.mu.Lock()
				u.tokens = append(u.tokens, string(v))
				u.mu.Unlock()
			}
		}
	}
}

// IssuedTokens returns every access and refresh token the token endpoint handed out.
func (u *Upstream) IssuedTokens() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.tokens...)
}

// Traceparents returns the traceparent header of every API call so far by the request's path, in their
// order ("" for a call without one).
func (u *Upstream) Traceparents() map[string][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string][]string, len(u.headers))
	for p, v := range u.headers {
		out[p] = append([]string(nil), v...)
	}
	return out
}

// APICalls returns the number of requests made to the upstream other than logins, token refreshes and
// event-stream connections.
func (u *Upstream) APICalls() int64 { return u.calls.Load() }

// Sim returns the simulator serving now.
func (u *Upstream) Sim() *sim.Server { return u.cur.Load() }

// Replace serves s from now on.
func (u *Upstream) Replace(s *sim.Server) { u.cur.Store(s) }

// Config returns the configuration of a bridge against this upstream and NATS at natsURL, with short
// reconnect delays, for a bridge run in-process: config.Default with the settings of Env, then each of
// set (but nil) applied. It is not validated.
func (u *Upstream) Config(natsURL string, set ...func(*config.Config)) *config.Config {
	c := config.Default()
	c.UpstreamURL = u.Srv.URL + sim.DefaultBasePath
	c.TokenURL = u.Srv.URL + sim.TokenPath
	c.ClientID = sim.DefaultClientID
	c.Username, c.Password = "demo", "demo"
	c.InsecureHTTP = true
	c.NATSURL = natsURL
	c.HTTPAddr = "127.0.0.1:0"
	c.LogLevel = "debug"
	c.ReconnectMin, c.ReconnectMax = 100*time.Millisecond, 500*time.Millisecond
	c.ShutdownTimeout = 5 * time.Second
	for _, f := range set {
		if f != nil {
			f(c)
		}
	}
	return c
}

// Env returns the BRIDGE_* variables of a bridge against this upstream and NATS at natsURL, with short
// reconnect delays, for a bridge run as a child process (Config's settings); extra overrides them (""
// removes one).
func (u *Upstream) Env(natsURL string, extra map[string]string) map[string]string {
	env := map[string]string{
		"BRIDGE_UPSTREAM_URL":     u.Srv.URL + sim.DefaultBasePath,
		"BRIDGE_TOKEN_URL":        u.Srv.URL + sim.TokenPath,
		"BRIDGE_CLIENT_ID":        sim.DefaultClientID,
		"BRIDGE_USERNAME":         "demo",
		"BRIDGE_PASSWORD":         "demo",
		"BRIDGE_INSECURE_HTTP":    "true",
		"BRIDGE_NATS_URL":         natsURL,
		"BRIDGE_HTTP_ADDR":        "127.0.0.1:0",
		"BRIDGE_LOG_LEVEL":        "debug",
		"BRIDGE_RECONNECT_MIN":    "100ms",
		"BRIDGE_RECONNECT_MAX":    "500ms",
		"BRIDGE_SHUTDOWN_TIMEOUT": "5s",
	}
	for k, v := range extra {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	return env
}
