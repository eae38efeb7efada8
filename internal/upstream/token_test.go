package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

const secretPassword = "pa55-word-that-must-not-leak"

// tokenServer is a scripted token endpoint.
type tokenServer struct {
	*httptest.Server
	mu        sync.Mutex
	grants    []string // grant_type of each request
	refuseRef bool     // refuse refresh grants with invalid_grant
	badPass   bool     // refuse password grants
	fail5xx   bool
	delay     time.Duration
	expiresIn int
	n         atomic.Int64
}

func newTokenServer(t *testing.T) *tokenServer {
	ts := &tokenServer{expiresIn: 300}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		ts.mu.Lock()
		ts.grants = append(ts.grants, r.PostForm.Get("grant_type"))
		refuseRef, badPass, fail, delay, exp := ts.refuseRef, ts.badPass, ts.fail5xx, ts.delay, ts.expiresIn
		ts.mu.Unlock()
		time.Sleep(delay)
		w.Header().Set("Content-Type", "application/json")
		if r.PostForm.Get("client_id") != "bridge" || r.Header.Get("Authorization") != "" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"error":"invalid_client"}`)
			return
		}
		switch g := r.PostForm.Get("grant_type"); {
		case fail:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"error":"down","echo":%q}`, r.PostForm.Get("password"))
		case g == "password" && (badPass || r.PostForm.Get("password") != secretPassword || r.PostForm.Get("scope") != "openid"):
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":"invalid_grant","error_description":"Invalid user credentials","echo":%q}`, r.PostForm.Get("password"))
		case g == "refresh_token" && refuseRef:
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":"invalid_grant","error_description":"Token is not active"}`)
		default:
			n := ts.n.Add(1)
			fmt.Fprintf(w, `{"access_token":"at-%d","expires_in":%d,"refresh_expires_in":21600,"refresh_token":"rt-%d","token_type":"Bearer"}`, n, exp, n)
		}
	}))
	t.Cleanup(ts.Close)
	return ts
}

func (ts *tokenServer) grantsSeen() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.grants...)
}

func (ts *tokenServer) source(password string) *upstream.TokenSource {
	return upstream.NewTokenSource(upstream.TokenConfig{TokenURL: ts.URL, ClientID: "bridge", Username: "u",
		Password: func() string { return password }, RefreshMargin: 30 * time.Second, LoginRetry: time.Minute})
}

func TestTokenSharedAndCached(t *testing.T) {
	ts := newTokenServer(t)
	ts.delay = 100 * time.Millisecond
	src := ts.source(secretPassword)
	var wg sync.WaitGroup
	toks := make([]string, 20)
	for i := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, err := src.Token(context.Background())
			if err != nil {
				t.Error(err)
			}
			toks[i] = tok
		}()
	}
	wg.Wait()
	for _, tok := range toks {
		if tok != "at-1" {
			t.Fatalf("tokens %v: want all callers to share one", toks)
		}
	}
	if tok, _ := src.Token(context.Background()); tok != "at-1" || len(ts.grantsSeen()) != 1 {
		t.Fatalf("cached token %q after %d requests", tok, len(ts.grantsSeen()))
	}
}

func TestTokenRefreshAheadAndFallBackToLogin(t *testing.T) {
	ts := newTokenServer(t)
	ts.expiresIn = 2 // the margin is capped at half the lifetime: refresh after 1 s
	src := ts.source(secretPassword)
	ctx := context.Background()
	if tok, err := src.Token(ctx); err != nil || tok != "at-1" {
		t.Fatalf("Token = %q, %v", tok, err)
	}
	time.Sleep(1100 * time.Millisecond) // into the refresh margin: the point of the test
	if tok, err := src.Token(ctx); err != nil || tok != "at-2" {
		t.Fatalf("Token in the margin = %q, %v; want a refreshed one", tok, err)
	}
	ts.mu.Lock()
	ts.refuseRef = true
	ts.mu.Unlock()
	src.Invalidate("at-2") // as after a 401
	if tok, err := src.Token(ctx); err != nil || tok != "at-3" {
		t.Fatalf("Token after a refused refresh = %q, %v; want a new login", tok, err)
	}
	want := []string{"password", "refresh_token", "refresh_token", "password"}
	if got := ts.grantsSeen(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("grants %v, want %v", got, want)
	}
	src.Invalidate("at-1") // a stale token: ignored
	if tok, _ := src.Token(ctx); tok != "at-3" {
		t.Fatalf("Invalidate of an old token dropped the current one")
	}
}

func TestTokenErrorsAreSafeAndPaced(t *testing.T) {
	ts := newTokenServer(t)
	ctx := context.Background()

	src := ts.source("wrong-" + secretPassword)
	_, err := src.Token(ctx)
	if !errors.Is(err, upstream.ErrLoginRejected) || !strings.Contains(err.Error(), "BRIDGE_PASSWORD") {
		t.Fatalf("err = %v, want ErrLoginRejected naming the variables", err)
	}
	for range 5 {
		if _, err2 := src.Token(ctx); !errors.Is(err2, upstream.ErrLoginRejected) {
			t.Fatalf("repeat: %v", err2)
		}
	}
	if n := len(ts.grantsSeen()); n != 1 {
		t.Fatalf("%d logins within the login retry interval, want 1", n)
	}
	for _, e := range []error{err} {
		if s := fmt.Sprintf("%v %+v %#v", e, e, e); strings.Contains(s, secretPassword) || strings.Contains(s, "echo") {
			t.Fatalf("error leaks the password or the response body: %s", s)
		}
	}

	ts.mu.Lock()
	ts.fail5xx = true
	ts.mu.Unlock()
	_, err = ts.source(secretPassword).Token(ctx)
	if !errors.Is(err, upstream.ErrTokenEndpoint) || strings.Contains(err.Error(), "echo") {
		t.Fatalf("5xx: err = %v", err)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	src = upstream.NewTokenSource(upstream.TokenConfig{TokenURL: dead.URL, ClientID: "bridge", Username: "u",
		Password: func() string { return secretPassword }})
	if _, err := src.Token(ctx); !errors.Is(err, upstream.ErrTokenEndpoint) || strings.Contains(err.Error(), secretPassword) {
		t.Fatalf("unreachable: err = %v", err)
	}
}

// TestTokenURLSecretsNeverShow: a token URL may carry a client secret in its query and a user and
// password before its host. Against a token endpoint that refuses the login, answers 500, hangs up,
// cannot be reached, redirects elsewhere, or issues a token, neither shows in the token source's errors
// nor in its logs, though net/http puts the whole URL into its errors.
func TestTokenURLSecretsNeverShow(t *testing.T) {
	t.Parallel()
	const secret, password = "SEKRIT-c1i3nt", "PW-us3rinf0"
	var mode atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load() {
		case "refuse":
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":"invalid_grant","echo":%q}`, r.URL.RawQuery)
		case "fail":
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"error":"down","echo":%q}`, r.URL.RawQuery)
		case "hangup":
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
		case "redirect":
			http.Redirect(w, r, "http://elsewhere.invalid/token?"+r.URL.RawQuery, http.StatusTemporaryRedirect)
		default:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"access_token":"at-1","expires_in":300,"refresh_token":"rt-1","token_type":"Bearer"}`)
		}
	}))
	t.Cleanup(srv.Close)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	withSecrets := func(base string) string {
		return strings.Replace(base, "http://", "http://u:"+password+"@", 1) + "/token?client_secret=" + secret + "&realm=x"
	}
	client, err := upstream.NewHTTPClient(upstream.ClientOptions{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode, url string
		want      error
	}{
		{"refuse", withSecrets(srv.URL), upstream.ErrLoginRejected},
		{"fail", withSecrets(srv.URL), upstream.ErrTokenEndpoint},
		{"hangup", withSecrets(srv.URL), upstream.ErrTokenEndpoint},
		{"redirect", withSecrets(srv.URL), upstream.ErrTokenEndpoint},
		{"connection refused", withSecrets(dead.URL), upstream.ErrTokenEndpoint},
		{"ok", withSecrets(srv.URL), nil},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			mode.Store(tc.mode)
			logs := &testutil.Logs{}
			src := upstream.NewTokenSource(upstream.TokenConfig{TokenURL: tc.url, ClientID: "bridge", Username: "u",
				Password: func() string { return "p" }, Client: client, Logger: slog.New(logs)})
			_, err := src.Token(context.Background())
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			out := fmt.Sprintf("%v %+v %#v\n%s", err, err, err, logs)
			testutil.NoSecrets(t, out, secret, password)
			if tc.want == upstream.ErrTokenEndpoint && tc.mode != "fail" && !strings.Contains(out, "client_secret=REDACTED") {
				t.Errorf("the URL is not in the error at all: %v", err)
			}
			t.Logf("%v", err)
		})
	}
}
