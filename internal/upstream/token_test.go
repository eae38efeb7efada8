package upstream_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
