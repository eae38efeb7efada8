package sim

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestTokenEndpoint(t *testing.T) {
	e := newEnv(t, Options{})
	login := e.token(passwordForm("demo", "demo"))
	refresh, _ := login.Body["refresh_token"].(string)

	tests := []struct {
		name      string
		form      url.Values
		setup     func()
		wantCode  int
		wantError string // OAuth error code; "" = success
		wantDesc  string
	}{
		{name: "password", form: passwordForm("demo", "demo"), wantCode: 200},
		{name: "no scope: openid by default", form: with(passwordForm("demo", "demo"), "scope", ""), wantCode: 200},
		{name: "scope with more than openid", form: with(passwordForm("demo", "demo"), "scope", "openid profile"), wantCode: 200},
		{name: "refresh", form: refreshForm(refresh), wantCode: 200},
		{name: "wrong password", form: passwordForm("demo", "nope"), wantCode: 401, wantError: "invalid_grant", wantDesc: "Invalid user credentials"},
		{name: "unknown user", form: passwordForm("nobody", "demo"), wantCode: 401, wantError: "invalid_grant", wantDesc: "Invalid user credentials"},
		{name: "wrong client", form: with(passwordForm("demo", "demo"), "client_id", "other-client"), wantCode: 401, wantError: "invalid_client"},
		{name: "missing client", form: with(passwordForm("demo", "demo"), "client_id", ""), wantCode: 401, wantError: "invalid_client"},
		{name: "no openid scope", form: with(passwordForm("demo", "demo"), "scope", "profile"), wantCode: 400, wantError: "invalid_scope"},
		{name: "missing grant type", form: with(passwordForm("demo", "demo"), "grant_type", ""), wantCode: 400, wantError: "invalid_request"},
		{name: "unsupported grant", form: with(passwordForm("demo", "demo"), "grant_type", "client_credentials"), wantCode: 400, wantError: "unsupported_grant_type"},
		{name: "unknown refresh token", form: refreshForm("not-a-token"), wantCode: 400, wantError: "invalid_grant", wantDesc: "Token is not active"},
		{name: "expired refresh token", form: refreshForm(refresh), setup: e.sim.ExpireRefreshTokens, wantCode: 400, wantError: "invalid_grant", wantDesc: "Token is not active"},
		{name: "injected 503", form: passwordForm("demo", "demo"),
			setup:    func() { e.sim.SetFaults(Faults{TokenErrorRate: 1}) },
			wantCode: 503, wantError: "temporarily_unavailable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.setup != nil {
				tt.setup()
				defer e.sim.SetFaults(Faults{})
			}
			r := e.token(tt.form)
			if r.Status != tt.wantCode {
				t.Fatalf("status %d, want %d: %v", r.Status, tt.wantCode, r.Body)
			}
			if tt.wantError != "" {
				if r.Body["error"] != tt.wantError {
					t.Errorf("error %v, want %s", r.Body["error"], tt.wantError)
				}
				if tt.wantDesc != "" && r.Body["error_description"] != tt.wantDesc {
					t.Errorf("error_description %v, want %s", r.Body["error_description"], tt.wantDesc)
				}
				return
			}
			for _, k := range []string{"access_token", "refresh_token", "id_token", "session_state"} {
				if s, _ := r.Body[k].(string); s == "" {
					t.Errorf("%s missing: %v", k, r.Body)
				}
			}
			want := map[string]any{"token_type": "bearer", "expires_in": 300.0, "refresh_expires_in": 21600.0,
				"scope": grantedScope, "not-before-policy": 0.0}
			for k, v := range want {
				if r.Body[k] != v {
					t.Errorf("%s = %v, want %v", k, r.Body[k], v)
				}
			}
		})
	}
	st := e.sim.Stats()
	if st.TokenRequests["password"] < 5 || st.TokenRequests["refresh_token"] != 3 || st.TokenRequests[""] != 1 {
		t.Errorf("token requests by grant: %v", st.TokenRequests)
	}
}

func with(v url.Values, key, value string) url.Values {
	c := url.Values{}
	for k, vv := range v {
		c[k] = vv
	}
	if value == "" {
		c.Del(key)
	} else {
		c.Set(key, value)
	}
	return c
}

func refreshForm(rt string) url.Values {
	return url.Values{"grant_type": {"refresh_token"}, "refresh_token": {rt}, "client_id": {DefaultClientID}}
}

func TestTokenEndpointMethod(t *testing.T) {
	e := newEnv(t, Options{})
	resp, err := http.Get(e.ts.URL + TokenPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET token endpoint: %d", resp.StatusCode)
	}
}

func TestBearerToken(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	if r := e.do("GET", "/orders", tok, nil); r.Status != 200 {
		t.Fatalf("valid token: %d %s", r.Status, r.Body)
	}

	r := e.do("GET", "/orders", "", nil)
	if r.Status != 401 || r.Header.Get("WWW-Authenticate") != "Bearer" {
		t.Errorf("no token: %d %q", r.Status, r.Header.Get("WWW-Authenticate"))
	}
	r = e.do("GET", "/orders", "made-up", nil)
	if r.Status != 401 || !strings.Contains(r.Header.Get("WWW-Authenticate"), `error="invalid_token"`) ||
		!strings.Contains(r.Header.Get("WWW-Authenticate"), "invalid") {
		t.Errorf("unknown token: %d %q", r.Status, r.Header.Get("WWW-Authenticate"))
	}
	r.messages(t)

	// As docs/upstream.md#expired-tokens has it: scheme Bearer, error invalid_token, an error_description naming
	// the expiry of the JWT and an error_uri pointing to RFC 6750 section 3.1.
	before := time.Now().Truncate(time.Second)
	e.sim.ExpireTokens()
	after := time.Now()
	r = e.do("GET", "/locations", tok, nil)
	hdr := r.Header.Get("WWW-Authenticate")
	m := regexp.MustCompile(`^Bearer error="invalid_token", error_description="(Jwt expired at (\S+))", ` +
		`error_uri="https://tools.ietf.org/html/rfc6750#section-3.1"$`).FindStringSubmatch(hdr)
	if r.Status != 401 || m == nil {
		t.Fatalf("expired token: %d %q", r.Status, hdr)
	}
	if at, err := time.Parse(time.RFC3339, m[2]); err != nil || !strings.HasSuffix(m[2], "Z") || at.Before(before) || at.After(after) {
		t.Errorf("expiry %q is not the UTC second the token expired in (%v..%v)", m[2], before, after)
	}
	if msgs := r.messages(t); len(msgs) != 1 || msgs[0] != m[1] {
		t.Errorf("messages %q, want [%q]", msgs, m[1])
	}

	// The refresh token still works and yields a working access token.
	rt := e.token(passwordForm("demo", "demo")).Body["refresh_token"].(string)
	e.sim.ExpireTokens()
	ref := e.token(refreshForm(rt))
	if ref.Status != 200 {
		t.Fatalf("refresh: %d %v", ref.Status, ref.Body)
	}
	if r := e.do("GET", "/orders", ref.Body["access_token"].(string), nil); r.Status != 200 {
		t.Errorf("refreshed token: %d", r.Status)
	}
	if st := e.sim.Stats(); st.Unauthorized != 3 {
		t.Errorf("Unauthorized = %d, want 3", st.Unauthorized)
	}
}

func TestShortAccessTTL(t *testing.T) {
	e := newEnv(t, Options{AccessTTL: 30 * time.Millisecond})
	r := e.token(passwordForm("demo", "demo"))
	if r.Body["expires_in"] != 1.0 {
		t.Errorf("expires_in %v, want 1 (rounded up)", r.Body["expires_in"])
	}
	tok := r.Body["access_token"].(string)
	waitFor(t, "the token to expire", func() bool { return e.do("GET", "/orders", tok, nil).Status == 401 })
}

func TestInjectedErrorsAndLatency(t *testing.T) {
	e := newEnv(t, Options{})
	tok := e.login("demo")
	e.sim.SetFaults(Faults{ErrorRate: 1, RetryAfter: 1500_000_000})
	r := e.do("GET", "/orders", tok, nil)
	if r.Status != 503 || r.Header.Get("Retry-After") != "2" {
		t.Errorf("ErrorRate 1: %d Retry-After %q", r.Status, r.Header.Get("Retry-After"))
	}
	r.messages(t)
	// Token requests have their own knob.
	if r := e.token(passwordForm("demo", "demo")); r.Status != 200 {
		t.Errorf("token with ErrorRate 1: %d", r.Status)
	}
	e.sim.SetFaults(Faults{Latency: 50_000_000})
	if f := e.sim.Faults(); f.Latency != 50_000_000 {
		t.Errorf("Faults() = %+v", f)
	}
	start := time.Now()
	if r := e.do("GET", "/orders", tok, nil); r.Status != 200 {
		t.Errorf("with latency: %d", r.Status)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("answered after %v, want at least the 50 ms latency", d)
	}
}
