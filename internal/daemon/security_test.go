package daemon

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// The helpers of the security tests carry a "sec" prefix.

// Secrets the tests use; each must never appear in any output of the bridge.
const (
	secUpstreamPassword = "upstream-Pa55-7f3b9c1e"
	secWrongPassword    = "wrong-Pa55-a8d2e4f6"
	secNATSPassword     = "nats-Pa55-5c7e9a1b"
	secNATSToken        = "nats-Tok3n-2b4d6f8h"
)

// TestSecretsNeverLeak runs the flows that handle secrets — login, token refresh after a 401, login
// again after the refresh token expired, a rejected password, NATS user/password and token
// authentication — and searches every log line (debug level), /metrics, /readyz, /healthz and Run's
// errors for the passwords and for every access and refresh token the upstream issued. (The output of
// the command itself, 'bridge run', 'bridge -h' and a failing 'bridge run', is searched by cmd/bridge's
// TestSecretsNeverLeakFromCommand.)
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()
	users := map[string]string{"alice": secUpstreamPassword}
	var outputs []string

	// A: good credentials, NATS user/password; the tokens are refreshed and renewed by login.
	natsA := testutil.StartNATS(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "bridge", Password: secNATSPassword}}
	})
	up := simtest.Start(t, false, sim.Options{Users: users, EventRate: 50})
	a := opsStartBridge(t, up.Config(natsA.URL(), func(c *config.Config) {
		c.Username = "alice"
		c.Password = config.Secret(secUpstreamPassword)
		c.NATSUser = "bridge"
		c.NATSPassword = config.Secret(secNATSPassword)
	}))
	a.waitReady(t, 15*time.Second, http.StatusOK, allReady...)

	// The access token expires: the next stream connection is answered 401; the bridge refreshes.
	up.Sim().ExpireTokens()
	up.Sim().SetFaults(sim.Faults{DropEvery: 1})
	testutil.EventuallyState(t, 10*time.Second, "a token refresh", func() (bool, string) {
		n := a.counter(t, "bridge_token_requests_total", map[string]string{"kind": "refresh", "result": "ok"})
		return n >= 1, fmt.Sprint(n)
	})
	// Both tokens expire: the refresh is refused and the bridge logs in again.
	up.Sim().SetFaults(sim.Faults{})
	up.Sim().ExpireRefreshTokens()
	up.Sim().ExpireTokens()
	up.Sim().SetFaults(sim.Faults{DropEvery: 1})
	testutil.EventuallyState(t, 10*time.Second, "a second login", func() (bool, string) {
		n := a.counter(t, "bridge_token_requests_total", map[string]string{"kind": "login", "result": "ok"})
		r := a.counter(t, "bridge_token_requests_total", map[string]string{"kind": "refresh", "result": "rejected"})
		return n >= 2 && r >= 1, fmt.Sprintf("logins %v, refreshes rejected %v", n, r)
	})
	up.Sim().SetFaults(sim.Faults{})
	a.waitReady(t, 10*time.Second, http.StatusOK, allReady...)
	for _, p := range []string{"/metrics", "/readyz", "/healthz"} {
		_, body := a.get(t, p)
		outputs = append(outputs, p+":\n"+body)
	}
	outputs = append(outputs, fmt.Sprint(a.stop(t)), a.logs.String())

	// B: a wrong password, NATS token authentication.
	natsB := testutil.StartNATS(t, func(o *server.Options) { o.Authorization = secNATSToken })
	b := opsStartBridge(t, up.Config(natsB.URL(), func(c *config.Config) {
		c.Username = "alice"
		c.Password = config.Secret(secWrongPassword)
		c.NATSToken = config.Secret(secNATSToken)
	}))
	body := b.waitReady(t, 10*time.Second, http.StatusServiceUnavailable, "upstream_token: not ready: no valid access token: login rejected")
	outputs = append(outputs, body)
	_, m := b.get(t, "/metrics")
	outputs = append(outputs, m, fmt.Sprint(b.stop(t)), b.logs.String())

	secrets := append([]string{secUpstreamPassword, secWrongPassword, secNATSPassword, secNATSToken},
		up.IssuedTokens()...)
	if len(secrets) < 4+4 {
		t.Fatalf("the upstream issued %d tokens, want at least 2 logins and a refresh", len(secrets)-4)
	}
	all := strings.Join(outputs, "\n")
	testutil.NoSecrets(t, all, secrets...)
	// The flows did run and log.
	for _, want := range []string{"stream connected", "login rejected"} {
		if !strings.Contains(all, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestTokenURLSecretNeverShows: a token URL whose query carries a client secret, against a token
// endpoint that cannot be reached, hangs up, refuses the login, answers 500, and at last issues tokens:
// the secret appears in no log line (debug level), nor in /status, /readyz or /metrics at any step,
// though net/http puts the whole URL into its errors. (The user information a URL may hold is refused by
// the configuration; internal/upstream's TestTokenURLSecretsNeverShow covers it below that.)
func TestTokenURLSecretNeverShows(t *testing.T) {
	t.Parallel()
	const secret = "SEKRIT-7d1e3a9c"
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{EventRate: 20})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there at first: connection refused
	var mode atomic.Value
	mode.Store("hangup")
	target, _ := url.Parse(up.Srv.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "hangup":
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		case "refuse":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"bad %s"}`, r.URL.RawQuery)
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, "<html>%s</html>", r.URL.RawQuery)
		default:
			proxy.ServeHTTP(w, r)
		}
	}), ReadHeaderTimeout: 5 * time.Second}
	t.Cleanup(func() { front.Close() })

	ob := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) { c.TokenURL = "http://" + addr + sim.TokenPath + "?client_secret=" + secret }))
	var outputs []string
	snapshot := func() {
		for _, p := range []string{"/status", "/readyz", "/metrics"} {
			_, body := ob.get(t, p)
			outputs = append(outputs, p+":\n"+body)
		}
	}
	unavailable := func() float64 {
		return ob.counter(t, "bridge_token_requests_total", map[string]string{"kind": "login", "result": "unavailable"})
	}
	step := func(what string, done func() bool) {
		t.Helper()
		testutil.Eventually(t, 20*time.Second, what, done)
		snapshot()
	}
	step("a login the connection refused", func() bool { return unavailable() >= 1 })
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the token endpoint's address again: %v", err)
	}
	go front.Serve(ln)
	// The hang-up's own error, not any failure counted: a login the refused connection failed may still
	// be counted after the listener is back.
	step("a login hung up on", func() bool { return strings.Contains(ob.logs.String(), "EOF") })
	mode.Store("refuse")
	step("a login refused", func() bool {
		return ob.counter(t, "bridge_token_requests_total", map[string]string{"kind": "login", "result": "rejected"}) >= 1
	})
	mode.Store("fail")
	n := unavailable()
	step("a login answered 500", func() bool { return unavailable() > n })
	mode.Store("ok")
	ob.waitReady(t, 30*time.Second, http.StatusOK, allReady...)
	snapshot()
	outputs = append(outputs, fmt.Sprint(ob.stop(t)), ob.logs.String())

	all := strings.Join(outputs, "\n")
	testutil.NoSecrets(t, all, secret)
	for _, want := range []string{"client_secret=REDACTED", "connection refused", "EOF", "HTTP 500", "login rejected"} {
		if !strings.Contains(all, want) {
			t.Errorf("the output lacks %q: the step did not run as meant", want)
		}
	}
}

// secWritePEM writes certificates as a PEM file and returns its path.
func secWritePEM(t *testing.T, name string, certs ...*x509.Certificate) string {
	t.Helper()
	var buf bytes.Buffer
	for _, c := range certs {
		_ = pem.Encode(&buf, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestUpstreamTLSPrivateCA: against an upstream whose certificate a private CA signed, the bridge works
// with BRIDGE_UPSTREAM_CA_FILE naming that CA (token endpoint and stream alike) and fails, clearly and
// without stopping, without it.
func TestUpstreamTLSPrivateCA(t *testing.T) {
	t.Parallel()
	up := simtest.Start(t, true, sim.Options{EventRate: 50})
	caFile := secWritePEM(t, "upstream-ca.pem", up.Srv.Certificate())
	tlsConfig := func(natsURL, ca string) *config.Config {
		return up.Config(natsURL, func(c *config.Config) { c.InsecureHTTP = false; c.UpstreamCAFile = ca })
	}

	t.Run("with the CA file", func(t *testing.T) {
		ns := testutil.StartNATS(t, nil)
		ob := opsStartBridge(t, tlsConfig(ns.URL(), caFile))
		ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
		testutil.EventuallyState(t, 10*time.Second, "events stored", func() (bool, string) {
			n := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
			return n > 0, fmt.Sprint(n)
		})
	})
	t.Run("without it", func(t *testing.T) {
		ns := testutil.StartNATS(t, nil)
		ob := opsStartBridge(t, tlsConfig(ns.URL(), ""))
		body := ob.waitReady(t, 10*time.Second, http.StatusServiceUnavailable,
			"upstream_token: not ready: no valid access token: token endpoint unavailable",
			"certificate signed by unknown authority")
		t.Logf("/readyz:\n%s", body)
		ob.requireAlive(t)
		if n := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS"); n != 0 {
			t.Errorf("%d events stored without a trusted upstream", n)
		}
	})
}

// TestUpstreamClientPolicy checks the HTTP clients towards the upstream: TLS 1.2 at least, verification
// always on (and no configuration to turn it off), and no redirect to another host, so that the bearer
// token never leaves the upstream.
func TestUpstreamClientPolicy(t *testing.T) {
	t.Parallel()
	c, err := upstream.NewHTTPClient(upstream.ClientOptions{Timeout: testutil.Scale(5 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	tr := c.Transport.(*http.Transport)
	if tr.TLSClientConfig.InsecureSkipVerify || tr.TLSClientConfig.MinVersion < tls.VersionTLS12 {
		t.Errorf("TLS config: InsecureSkipVerify %v, MinVersion %x", tr.TLSClientConfig.InsecureSkipVerify, tr.TLSClientConfig.MinVersion)
	}
	var usage bytes.Buffer
	config.Usage(&usage)
	for _, bad := range []string{"SKIP_VERIFY", "INSECURE_SKIP", "INSECURE_TLS"} {
		if strings.Contains(usage.String(), bad) {
			t.Errorf("the configuration offers %s", bad)
		}
	}

	t.Run("TLS 1.1 refused", func(t *testing.T) {
		old := httptest.NewUnstartedServer(http.NotFoundHandler())
		old.TLS = &tls.Config{MaxVersion: tls.VersionTLS11}
		old.StartTLS()
		defer old.Close()
		ca := secWritePEM(t, "ca.pem", old.Certificate())
		c, err := upstream.NewHTTPClient(upstream.ClientOptions{CAFile: ca, Timeout: testutil.Scale(5 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get(old.URL)
		if err == nil {
			resp.Body.Close()
			t.Fatal("a TLS 1.1 server was accepted")
		}
		t.Logf("TLS 1.1: %v", err)
	})

	t.Run("redirects", func(t *testing.T) {
		var elsewhere atomic.Int32
		other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			elsewhere.Add(1)
		}))
		defer other.Close()
		var sameHostAuth atomic.Value
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/away":
				http.Redirect(w, r, other.URL+"/steal", http.StatusFound)
			case "/moved":
				http.Redirect(w, r, "/here", http.StatusTemporaryRedirect)
			case "/here":
				sameHostAuth.Store(r.Header.Get("Authorization"))
			}
		}))
		defer up.Close()

		get := func(path string) error {
			req, _ := http.NewRequest(http.MethodGet, up.URL+path, nil)
			req.Header.Set("Authorization", "Bearer test-token")
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		if err := get("/away"); err == nil || !strings.Contains(err.Error(), "refusing redirect to another host") {
			t.Errorf("redirect to another host: err = %v, want a refusal", err)
		}
		if n := elsewhere.Load(); n != 0 {
			t.Errorf("the other host was contacted %d times", n)
		}
		if err := get("/moved"); err != nil {
			t.Errorf("redirect on the same host: %v", err)
		}
		if got, _ := sameHostAuth.Load().(string); got != "Bearer test-token" {
			t.Errorf("same-host redirect carried Authorization %q", got)
		}
	})
}

// TestNATSAuthentication: the bridge connects with each NATS authentication method the server requires,
// and wrong credentials stop it with an error naming the variables to check.
func TestNATSAuthentication(t *testing.T) {
	t.Parallel()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ := kp.PublicKey()
	seedFile := filepath.Join(t.TempDir(), "bridge.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	otherSeedFile := filepath.Join(t.TempDir(), "other.nk")
	if err := os.WriteFile(otherSeedFile, otherSeed, 0o600); err != nil {
		t.Fatal(err)
	}
	userPass := func(o *server.Options) {
		o.Users = []*server.User{{Username: "bridge", Password: secNATSPassword}}
	}
	nkey := func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: pub}} }

	for _, tc := range []struct {
		name      string
		configure func(*server.Options)
		set       func(*config.Config)
		wantErr   []string // empty: the bridge becomes ready
	}{
		{"user and password", userPass,
			func(c *config.Config) { c.NATSUser, c.NATSPassword = "bridge", secNATSPassword }, nil},
		{"nkey", nkey, func(c *config.Config) { c.NATSNKeySeedFile = seedFile }, nil},
		{"token", func(o *server.Options) { o.Authorization = secNATSToken },
			func(c *config.Config) { c.NATSToken = secNATSToken }, nil},
		{"wrong password", userPass,
			func(c *config.Config) { c.NATSUser, c.NATSPassword = "bridge", "not-"+secNATSPassword },
			[]string{"authorization violation", "BRIDGE_NATS_USER and BRIDGE_NATS_PASSWORD"}},
		{"unknown nkey", nkey, func(c *config.Config) { c.NATSNKeySeedFile = otherSeedFile },
			[]string{"authorization violation", "BRIDGE_NATS_NKEY_SEED_FILE"}},
		{"no credentials", userPass, nil,
			[]string{"authorization violation", "none is set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := testutil.StartNATS(t, tc.configure)
			up := simtest.Start(t, false, sim.Options{})
			ob := opsStartBridge(t, up.Config(ns.URL(), tc.set))
			if len(tc.wantErr) == 0 {
				ob.waitReady(t, 15*time.Second, http.StatusOK, "nats: ok", "jetstream_streams: ok")
				return
			}
			runErr := ob.exited(t, 20*time.Second, "with wrong credentials")
			if runErr == nil {
				t.Fatal("Run returned nil")
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(strings.ToLower(runErr.Error()), strings.ToLower(w)) {
					t.Errorf("Run error %q lacks %q", runErr, w)
				}
			}
			if !errors.Is(runErr, nats.ErrAuthorization) {
				t.Errorf("Run error %v does not wrap nats.ErrAuthorization", runErr)
			}
		})
	}
}

// TestNATSCredentialsRevoked: the server comes back with the bridge's password changed. nats.go gives up
// after two refusals in a row; the bridge then stops with the reason instead of running on without NATS.
func TestNATSCredentialsRevoked(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "bridge", Password: secNATSPassword}}
	})
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) { c.NATSUser = "bridge"; c.NATSPassword = config.Secret(secNATSPassword) }))
	ob.waitReady(t, 15*time.Second, http.StatusOK, "nats: ok")

	ns.Stop()
	ns.Configure = func(o *server.Options) {
		o.Users = []*server.User{{Username: "bridge", Password: "changed-" + secNATSPassword}}
	}
	ns.Start()
	runErr := ob.exited(t, 30*time.Second, "after NATS refused its credentials")
	if runErr == nil || !errors.Is(runErr, nats.ErrAuthorization) ||
		!strings.Contains(runErr.Error(), "BRIDGE_NATS_USER and BRIDGE_NATS_PASSWORD") {
		t.Fatalf("Run returned %v; want the authorization error naming the variables", runErr)
	}
	if strings.Contains(ob.logs.String(), secNATSPassword) {
		t.Error("the NATS password appears in the logs")
	}
}

// secCert is a certificate and key written to files.
type secCert struct {
	cert              *x509.Certificate
	key               *ecdsa.PrivateKey
	certFile, keyFile string
}

// secIssue makes a certificate signed by ca (self-signed when ca is nil).
func secIssue(t *testing.T, ca *secCert, name string, isCA bool, usage x509.ExtKeyUsage) *secCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		BasicConstraintsValid: true,
		IsCA:                  isCA,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	if isCA {
		tmpl.KeyUsage = x509.KeyUsageCertSign
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{usage}
	}
	parent, signer := tmpl, key
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	c := &secCert{cert: cert, key: key}
	c.certFile = secWritePEM(t, name+".pem", cert)
	kb, _ := x509.MarshalECPrivateKey(key)
	c.keyFile = filepath.Join(t.TempDir(), name+"-key.pem")
	if err := os.WriteFile(c.keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestNATSTLSClientCertificate: NATS over TLS with a private CA and a client certificate the server
// requires.
func TestNATSTLSClientCertificate(t *testing.T) {
	t.Parallel()
	ca := secIssue(t, nil, "ca", true, 0)
	srvCert := secIssue(t, ca, "nats-server", false, x509.ExtKeyUsageServerAuth)
	client := secIssue(t, ca, "tracking-bridge", false, x509.ExtKeyUsageClientAuth)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	ns := testutil.StartNATS(t, func(o *server.Options) {
		o.TLS, o.TLSVerify = true, true
		o.TLSConfig = &tls.Config{
			Certificates: []tls.Certificate{{Certificate: [][]byte{srvCert.cert.Raw}, PrivateKey: srvCert.key}},
			ClientCAs:    pool,
			ClientAuth:   tls.RequireAndVerifyClientCert,
			MinVersion:   tls.VersionTLS12,
		}
	})
	up := simtest.Start(t, false, sim.Options{})
	url := strings.Replace(ns.URL(), "nats://", "tls://", 1)

	t.Run("with the client certificate", func(t *testing.T) {
		ob := opsStartBridge(t, up.Config(url, func(c *config.Config) {
			c.NATSCAFile = ca.certFile
			c.NATSCertFile = client.certFile
			c.NATSKeyFile = client.keyFile
		}))
		ob.waitReady(t, 15*time.Second, http.StatusOK, "nats: ok", "jetstream_streams: ok")
	})
	t.Run("without it", func(t *testing.T) {
		ob := opsStartBridge(t, up.Config(url, func(c *config.Config) { c.NATSCAFile = ca.certFile }))
		body := ob.waitReady(t, 10*time.Second, http.StatusServiceUnavailable, "nats: not ready:")
		t.Logf("/readyz:\n%s", body)
		ob.requireAlive(t)
	})
}

// secUserPasswords are the example users of deploy/nats/nats-accounts.conf with the passwords the tests
// give them through the variables that file reads.
var secUserPasswords = map[string]string{
	"NATS_BRIDGE_PASSWORD":        secNATSPassword,
	"NATS_EVENTS_READER_PASSWORD": "events-reader-" + secNATSPassword,
	"NATS_PRODUCER_PASSWORD":      "report-producer-" + secNATSPassword,
	"NATS_API_READER_PASSWORD":    "api-reader-" + secNATSPassword,
	"NATS_API_WRITER_PASSWORD":    "api-writer-" + secNATSPassword,
}

// secBridgeUser sets what a bridge needs to connect as deploy/nats/nats-accounts.conf's tracking-bridge
// user.
func secBridgeUser(c *config.Config) {
	c.NATSUser, c.NATSPassword = "tracking-bridge", secNATSPassword
	c.NATSInboxPrefix = "_INBOX_bridge"
}

// secClient returns the options of a client connecting as the example user name (events-reader,
// report-producer, api-reader, api-writer), each in an account of its own.
func secClient(name string) []nats.Option {
	return []nats.Option{nats.UserInfo(name, name+"-"+secNATSPassword), nats.Name(name)}
}

// secAdmin is a user the tests add to the bridge's account for their own checks (streams, consumers,
// subscriptions where a hostile client aims); it may do anything there.
var secAdmin = nats.UserInfo("admin", "admin")

// secBridgeAccount is the account of the bridge in deploy/nats/nats-accounts.conf.
const secBridgeAccount = "TRACKING"

// secEnvOnce sets the variables of secUserPasswords in the process's environment, where nats-server reads
// the file's $NAME references, once for every test: the values never change, and t.Setenv would keep the
// tests that use them from running in parallel.
var secEnvOnce sync.Once

// secShippedAuth reads the accounts and users of deploy/nats/nats-server.conf (which includes
// nats-accounts.conf) with the server's own parser, and adds secAdmin to the bridge's account.
func secShippedAuth(t testing.TB) func(*server.Options) {
	t.Helper()
	secEnvOnce.Do(func() {
		for k, v := range secUserPasswords {
			if err := os.Setenv(k, v); err != nil {
				panic(err)
			}
		}
	})
	conf := filepath.Join("..", "..", "deploy", "nats", "nats-server.conf")
	return func(o *server.Options) {
		parsed, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatalf("deploy/nats/nats-server.conf does not parse: %v", err)
		}
		if len(parsed.Users) != len(secUserPasswords) {
			t.Fatalf("deploy/nats/nats-server.conf has %d users, want %d", len(parsed.Users), len(secUserPasswords))
		}
		var bridge *server.Account
		for _, a := range parsed.Accounts {
			if a.Name == secBridgeAccount {
				bridge = a
			}
		}
		if bridge == nil {
			t.Fatalf("deploy/nats/nats-server.conf has no account %s", secBridgeAccount)
		}
		o.Accounts = parsed.Accounts
		o.Users = append(parsed.Users, &server.User{Username: "admin", Password: "admin", Account: bridge})
		o.MaxPayload = parsed.MaxPayload
	}
}

// secPermissionedNATS starts a server with the accounts and users of the shipped configuration (the
// bridge's "tracking-bridge" with password secNATSPassword, the clients of secClient), plus secAdmin.
func secPermissionedNATS(t *testing.T) *testutil.NATS {
	t.Helper()
	return testutil.StartNATS(t, secShippedAuth(t))
}

// TestLeastPrivilegePermissions runs the bridge as the tracking-bridge user of
// deploy/nats/nats-accounts.conf, with exactly its permissions: it creates the streams, publishes events and
// dead letters, consumes reports from its durable (acknowledging and dead-lettering them), resumes after
// a restart, and never hits a permission violation; and it cannot do what it does not need (publish a
// report). The example's producer user publishes the reports.
func TestLeastPrivilegePermissions(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	admin := secAdmin

	up := simtest.Start(t, false, sim.Options{EventRate: 50})
	cfg := up.Config(ns.URL(), secBridgeUser)
	wire := func(ob *opsBridge) { opsWireConsumer(t, ob) }
	ob := opsStartBridgeWith(t, cfg, wire)
	ob.waitReady(t, 15*time.Second, http.StatusOK, append(allReady, "report_consumer: ok")...)
	up.Sim().Inject("demo", "not-json-1", "", []byte("not json"))
	opsPublishReports(t, ns.URL(), [][]byte{opsReport(up, 1), opsReport(up, 2), []byte(`{"not":"a report"}`)},
		secClient("report-producer")...)
	testutil.EventuallyState(t, 10*time.Second, "reports delivered and dead-lettered", func() (bool, string) {
		a := ob.counter(t, "bridge_reports_outcomes_total", map[string]string{"outcome": "accepted", "status_class": "2xx"})
		i := ob.counter(t, "bridge_reports_outcomes_total", map[string]string{"outcome": "invalid", "status_class": "none"})
		return a == 2 && i == 1, fmt.Sprintf("accepted %v, invalid %v", a, i)
	})
	testutil.EventuallyState(t, 10*time.Second, "events and a dead letter stored", func() (bool, string) {
		e := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", admin)
		d := opsStreamMsgs(t, ns.URL(), "TRACKING_DLQ", admin)
		return e > 10 && d == 2, fmt.Sprintf("events %d, dead letters %d (want an event and a report)", e, d)
	})
	// The units view works with the same user: it creates its bucket, writes to it, acknowledges its
	// events (the lag falls to 0) and reads its consumer's state.
	testutil.EventuallyState(t, 20*time.Second, "the units view applies events and catches up", func() (bool, string) {
		u := ob.status(t).Units
		applied := ob.counter(t, "bridge_units_events_total", map[string]string{"outcome": "applied"})
		return u != nil && u.Ready && applied > 0 && u.LagEvents == 0 && u.LagSeconds == 0,
			fmt.Sprintf("applied %v, %+v", applied, u)
	})
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}

	// A restart reads the resume cursor from the stream's tail.
	ob2 := opsStartBridgeWith(t, cfg, wire)
	ob2.waitReady(t, 15*time.Second, http.StatusOK, append(allReady, "report_consumer: ok")...)
	before := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", admin)
	testutil.EventuallyState(t, 10*time.Second, "events after the restart", func() (bool, string) {
		n := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", admin)
		return n > before, fmt.Sprint(n)
	})
	if err := ob2.stop(t); err != nil {
		t.Fatal(err)
	}
	for _, logs := range []string{ob.logs.String(), ob2.logs.String()} {
		if strings.Contains(strings.ToLower(logs), "permission") {
			t.Errorf("permission trouble in the bridge's log:\n%s", logs)
		}
	}
	if !strings.Contains(ob2.logs.String(), `"msg":"resuming"`) {
		t.Errorf("the restarted bridge did not resume from the stream:\n%s", ob2.logs)
	}

	// The producer may publish reports; the bridge's user may not.
	for _, tc := range []struct {
		user   string
		opts   []nats.Option
		wantOK bool
	}{
		{"report-producer", secClient("report-producer"), true},
		{"tracking-bridge", []nats.Option{nats.UserInfo("tracking-bridge", secNATSPassword), nats.CustomInboxPrefix("_INBOX_bridge")}, false},
		{"api-writer", secClient("api-writer"), false},
	} {
		nc, err := nats.Connect(ns.URL(), append(tc.opts, nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
		if err != nil {
			t.Fatal(err)
		}
		js, _ := jetstream.New(nc)
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(2*time.Second))
		_, err = js.Publish(ctx, "tracking.reports", []byte(`{}`))
		cancel()
		nc.Close()
		if (err == nil) != tc.wantOK {
			t.Errorf("%s publishing a report: err = %v, want success %v", tc.user, err, tc.wantOK)
		}
	}
}
