package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// maxStreamError is the longest error text the tests accept: an upstream value cut to maxQuoted, escaped
// (up to four times as long), plus the error's own words.
const maxStreamError = 4*maxQuoted + 200

// TestStreamErrorsQuoteUpstreamShort: every upstream value the stream's error quotes (it goes to the log
// and /status) is cut short, with control characters escaped, whatever its size: a Content-Type, a
// redirect's Location (refused, or unparsable), an ApiResponseMessage, an OAuth error code.
func TestStreamErrorsQuoteUpstreamShort(t *testing.T) {
	huge := strings.Repeat("a", 1<<20)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		token   http.HandlerFunc // answers the token requests instead of the scripted server
		want    []string         // parts of the error
	}{
		{"Content-Type of 1 MB", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html; x="+huge)
		}, nil, []string{"not text/event-stream", `Content-Type "text/html; x=aaa`, fmt.Sprintf("…\" (%d bytes)", len(huge)+13)}},
		{"redirect of 1 MB to another host", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "http://"+huge+".example/")
			w.WriteHeader(http.StatusTemporaryRedirect)
		}, nil, []string{"refusing redirect to another host (\"aaa", "bytes)"}},
		{"unparsable redirect of 1 MB", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Location", "http://["+huge)
			w.WriteHeader(http.StatusTemporaryRedirect)
		}, nil, []string{"failed to parse Location header", "…"}},
		{"messages of 60 KB", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, `{"messages":["down\u0001for %s","again"]}`, strings.Repeat("m", 60<<10))
		}, nil, []string{"HTTP 503 Service Unavailable: down for mmm", "…"}},
		{"OAuth error code of 100 KB", nil, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"error":"bad\u0001%s"}`, strings.Repeat("c", 100<<10))
		}, []string{`login rejected by the token endpoint: HTTP 400 "bad\x01ccc`, fmt.Sprintf("…\" (%d bytes)", 4+100<<10)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			logs := &testutil.Logs{}
			configure := func(c *StreamConfig) {
				c.Logger = slog.New(logs)
				if tt.token != nil {
					srv := httptest.NewServer(tt.token)
					t.Cleanup(srv.Close)
					c.Tokens = NewTokenSource(TokenConfig{TokenURL: srv.URL, ClientID: "c", Username: "u",
						Password: func() string { return "p" }, LoginRetry: time.Hour})
				}
			}
			var script []http.HandlerFunc // every attempt fails alike: the last error stays
			if tt.handler != nil {
				script = slices.Repeat([]http.HandlerFunc{tt.handler}, 1000)
			}
			sc, _, stop := runScriptedWith(t, configure, script...)
			defer stop()
			var msg string
			testutil.EventuallyState(t, 10*time.Second, "the stream's error", func() (bool, string) {
				if err := sc.stream.LastError(); err != nil {
					msg = err.Error()
				}
				return msg != "", msg
			})
			if len(msg) > maxStreamError || !containsAll(msg, tt.want...) {
				t.Errorf("error of %d bytes %.2000q, want at most %d bytes with %q", len(msg), msg, maxStreamError, tt.want)
			}
			testutil.Eventually(t, 10*time.Second, "the disconnect logged", func() bool {
				_, ok := logs.Attr("stream disconnected", "reason")
				return ok
			})
			if v, _ := logs.Attr("stream disconnected", "reason"); len(v.String()) > maxStreamError {
				t.Errorf("logged a reason of %d bytes", len(v.String()))
			}
		})
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// TestQuoted: short values are quoted whole; long ones are cut at a character boundary with their length.
func TestQuoted(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"text/html", `"text/html"`},
		{"a\x00b\nc", `"a\x00b\nc"`},
		{strings.Repeat("x", maxQuoted), `"` + strings.Repeat("x", maxQuoted) + `"`},
		{strings.Repeat("x", maxQuoted+1), `"` + strings.Repeat("x", maxQuoted-3) + `…" (129 bytes)`},
		{strings.Repeat("x", maxQuoted-4) + "äöü", `"` + strings.Repeat("x", maxQuoted-4) + `…" (130 bytes)`},
	} {
		if got := quoted(tt.in); got != tt.want {
			t.Errorf("quoted(%.40q…) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestCallAndSendErrorsShort: the API and report clients cut net/http's errors short as the stream does
// (a redirect's Location of 1 MB, refused), and the cause stays visible to errors.Is and As.
func TestCallAndSendErrorsShort(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"access_token":"tok","token_type":"bearer","expires_in":300}`)
	})
	mux.HandleFunc("/v1.0/", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Location", "http://"+strings.Repeat("a", 1<<20)+".example/")
		w.WriteHeader(http.StatusTemporaryRedirect)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	client, _ := NewHTTPClient(ClientOptions{Timeout: 10 * time.Second})
	ts := NewTokenSource(TokenConfig{TokenURL: srv.URL + "/token", ClientID: "c", Username: "u",
		Password: func() string { return "p" }, Client: client})

	_, callErr := NewAPIClient(APIConfig{BaseURL: srv.URL + "/v1.0", Tokens: ts, Client: client}).
		Call(context.Background(), APIRequest{Method: http.MethodGet, Path: "/orders"})
	out := NewReportClient(ReportConfig{URL: srv.URL + "/v1.0/tracking/events", Tokens: ts, Client: client}).
		Send(context.Background(), []byte(`{}`), "")
	for name, err := range map[string]error{"Call": callErr, "Send": out.Err} {
		var ue *url.Error
		if err == nil || len(err.Error()) > maxStreamError || !strings.Contains(err.Error(), "refusing redirect") ||
			!errors.As(err, &ue) {
			t.Errorf("%s: error %.1000q, want a short one about the redirect, wrapping a *url.Error", name, err)
		}
	}
	if r := out.Reason(); len(r) > maxStreamError {
		t.Errorf("report's reason of %d bytes", len(r))
	}
}

// TestBoundError: an error's text is cut short, the cause stays visible to errors.Is and As.
func TestBoundError(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	err := boundError(fmt.Errorf("%s: %w", huge, &url.Error{Op: "Get", URL: "http://" + huge, Err: context.DeadlineExceeded}))
	var ne net.Error
	if len(err.Error()) > maxErrorText || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("boundError = %.100q (%d bytes), cause lost or too long", err, len(err.Error()))
	}
	if short := errors.New("short"); boundError(short) != short || boundError(nil) != nil {
		t.Error("boundError changed a short error or nil")
	}
}
