package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func response(code int, header http.Header, body string) *http.Response {
	if header == nil {
		header = http.Header{}
	}
	return &http.Response{StatusCode: code, Header: header, Body: io.NopCloser(strings.NewReader(body))}
}

func TestClassify(t *testing.T) {
	netErr := errors.New("dial tcp 127.0.0.1:1: connection refused")
	ra := http.Header{"Retry-After": []string{"7"}}
	msgs := `{"messages":["event.type is missing","order 42 is not yours"]}`
	tests := []struct {
		name       string
		resp       *http.Response
		err        error
		kind       OutcomeKind
		status     int
		retryAfter time.Duration
		messages   []string
		wantErr    error
	}{
		{name: "network error", err: netErr, kind: Retry, wantErr: netErr},
		{name: "deadline", err: context.DeadlineExceeded, kind: Retry, wantErr: context.DeadlineExceeded},
		{name: "200", resp: response(200, nil, `{"messages":[]}`), kind: Accepted, status: 200},
		{name: "202", resp: response(202, nil, ""), kind: Accepted, status: 202},
		{name: "204", resp: response(204, nil, ""), kind: Accepted, status: 204},
		{name: "401", resp: response(401, nil, ""), kind: Retry, status: 401},
		{name: "408", resp: response(408, nil, ""), kind: Retry, status: 408},
		{name: "425", resp: response(425, nil, ""), kind: Retry, status: 425},
		{name: "429 with Retry-After", resp: response(429, ra, msgs), kind: Retry, status: 429,
			retryAfter: 7 * time.Second, messages: []string{"event.type is missing", "order 42 is not yours"}},
		{name: "500", resp: response(500, nil, "oops"), kind: Retry, status: 500},
		{name: "502", resp: response(502, nil, ""), kind: Retry, status: 502},
		{name: "503 with Retry-After", resp: response(503, ra, ""), kind: Retry, status: 503, retryAfter: 7 * time.Second},
		{name: "504", resp: response(504, nil, ""), kind: Retry, status: 504},
		{name: "400 with messages", resp: response(400, nil, msgs), kind: Reject, status: 400,
			messages: []string{"event.type is missing", "order 42 is not yours"}},
		{name: "400 Retry-After ignored", resp: response(400, ra, ""), kind: Reject, status: 400},
		{name: "403", resp: response(403, nil, ""), kind: Reject, status: 403},
		{name: "404", resp: response(404, nil, "<html>"), kind: Reject, status: 404},
		{name: "409", resp: response(409, nil, ""), kind: Reject, status: 409},
		{name: "413", resp: response(413, nil, ""), kind: Reject, status: 413},
		{name: "415", resp: response(415, nil, ""), kind: Reject, status: 415},
		{name: "422", resp: response(422, nil, ""), kind: Reject, status: 422},
		{name: "unexpected 304", resp: response(304, nil, ""), kind: Reject, status: 304},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := Classify(tt.resp, tt.err)
			if out.Kind != tt.kind || out.Status != tt.status || out.RetryAfter != tt.retryAfter {
				t.Errorf("got %v status %d retry after %v, want %v status %d retry after %v",
					out.Kind, out.Status, out.RetryAfter, tt.kind, tt.status, tt.retryAfter)
			}
			if fmt.Sprint(out.Messages) != fmt.Sprint(tt.messages) {
				t.Errorf("messages %q, want %q", out.Messages, tt.messages)
			}
			if tt.wantErr != nil && !errors.Is(out.Err, tt.wantErr) {
				t.Errorf("err %v, want %v", out.Err, tt.wantErr)
			}
			if (out.Kind == Accepted) != (out.Err == nil) {
				t.Errorf("Err %v with kind %v", out.Err, out.Kind)
			}
			if out.Kind != Accepted && out.Reason() == "" {
				t.Error("empty reason")
			}
		})
	}
}

func TestOutcomeReason(t *testing.T) {
	o := Classify(response(400, nil, `{"messages":["a","b\r\nc"]}`), nil)
	if got, want := o.Reason(), "a; b  c"; got != want {
		t.Errorf("Reason() = %q, want %q", got, want)
	}
	o = Classify(response(409, nil, ""), nil)
	if got, want := o.Reason(), "HTTP 409 Conflict"; got != want {
		t.Errorf("Reason() = %q, want %q", got, want)
	}
}

// fakeAPI is a token endpoint and a report endpoint whose answers a test scripts.
type fakeAPI struct {
	t      *testing.T
	srv    *httptest.Server
	tokens atomic.Int64 // tokens issued: "tok-1", "tok-2", ...

	mu     sync.Mutex
	calls  []call
	answer func(n int, r *http.Request) (int, string) // n: 0-based call number
}

type call struct {
	auth, key, contentType string
	body                   string
}

func newFakeAPI(t *testing.T, answer func(n int, r *http.Request) (int, string)) *fakeAPI {
	f := &fakeAPI{t: t, answer: answer}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		n := f.tokens.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":"tok-%d","token_type":"bearer","expires_in":300,"refresh_token":"r"}`, n)
	})
	mux.HandleFunc("POST /v1.0/tracking/events", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		n := len(f.calls)
		f.calls = append(f.calls, call{auth: r.Header.Get("Authorization"), key: r.Header.Get("Idempotency-Key"),
			contentType: r.Header.Get("Content-Type"), body: string(body)})
		f.mu.Unlock()
		code, resp := f.answer(n, r)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, resp)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) client() *ReportClient {
	ts := NewTokenSource(TokenConfig{TokenURL: f.srv.URL + "/token", ClientID: "tracking-bridge", Username: "demo",
		Password: func() string { return "demo" }, Client: f.srv.Client()})
	return NewReportClient(ReportConfig{URL: f.srv.URL + "/v1.0/tracking/events", Tokens: ts, Client: f.srv.Client()})
}

func (f *fakeAPI) recorded() []call {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]call(nil), f.calls...)
}

func TestSendVerbatimWithBearerAndKey(t *testing.T) {
	f := newFakeAPI(t, func(int, *http.Request) (int, string) { return 202, `{"messages":[]}` })
	body := "{ \"event\" : {\"timestamp\":\"2024-05-01T12:00:00Z\", \"type\":\"GATE_IN\", \"x\": 1.50} }\n"
	out := f.client().Send(context.Background(), []byte(body), "key-1")
	if out.Kind != Accepted || out.Status != 202 || out.Err != nil {
		t.Fatalf("outcome %+v, want accepted 202", out)
	}
	calls := f.recorded()
	if len(calls) != 1 {
		t.Fatalf("%d calls, want 1", len(calls))
	}
	c := calls[0]
	if c.body != body {
		t.Errorf("body %q, want it verbatim %q", c.body, body)
	}
	if c.auth != "Bearer tok-1" || c.key != "key-1" || c.contentType != "application/json" {
		t.Errorf("headers: Authorization %q, Idempotency-Key %q, Content-Type %q", c.auth, c.key, c.contentType)
	}

	// Without a key, no Idempotency-Key header.
	f.client().Send(context.Background(), []byte(body), "")
	if calls = f.recorded(); calls[1].key != "" {
		t.Errorf("Idempotency-Key %q sent for an empty key", calls[1].key)
	}
}

func TestSend401RefreshesTokenOnce(t *testing.T) {
	tests := []struct {
		name      string
		answers   []int
		wantKind  OutcomeKind
		wantCalls int
	}{
		{"401 then 202", []int{401, 202}, Accepted, 2},
		{"401 twice", []int{401, 401, 202}, Retry, 2},
		{"401 then 400", []int{401, 400}, Reject, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeAPI(t, func(n int, r *http.Request) (int, string) {
				return tt.answers[n], `{"messages":["x"]}`
			})
			out := f.client().Send(context.Background(), []byte(`{}`), "k")
			if out.Kind != tt.wantKind {
				t.Errorf("kind %v, want %v (%+v)", out.Kind, tt.wantKind, out)
			}
			calls := f.recorded()
			if len(calls) != tt.wantCalls {
				t.Fatalf("%d calls, want %d", len(calls), tt.wantCalls)
			}
			if calls[0].auth == calls[1].auth {
				t.Errorf("repeat used the rejected token %q", calls[1].auth)
			}
			if calls[0].key != calls[1].key || calls[0].body != calls[1].body {
				t.Error("repeat differs from the first request")
			}
		})
	}
}

func TestSendTransportFailures(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		f := newFakeAPI(t, func(int, *http.Request) (int, string) { return 202, "" })
		c := f.client()
		c.cfg.URL = "http://127.0.0.1:1/v1.0/tracking/events"
		out := c.Send(context.Background(), []byte(`{}`), "k")
		if out.Kind != Retry || out.Status != 0 || out.Err == nil {
			t.Errorf("outcome %+v, want retry without status", out)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		release := make(chan struct{})
		f := newFakeAPI(t, func(int, *http.Request) (int, string) { <-release; return 202, "" })
		defer close(release)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		out := f.client().Send(ctx, []byte(`{}`), "k")
		if out.Kind != Retry || !errors.Is(out.Err, context.DeadlineExceeded) {
			t.Errorf("outcome %+v, want retry with deadline exceeded", out)
		}
	})
	t.Run("token endpoint down", func(t *testing.T) {
		f := newFakeAPI(t, func(int, *http.Request) (int, string) { return 202, "" })
		ts := NewTokenSource(TokenConfig{TokenURL: "http://127.0.0.1:1/token", ClientID: "c", Username: "u",
			Password: func() string { return "p" }})
		c := NewReportClient(ReportConfig{URL: f.srv.URL + "/v1.0/tracking/events", Tokens: ts})
		out := c.Send(context.Background(), []byte(`{}`), "k")
		if out.Kind != Retry || !errors.Is(out.Err, ErrTokenEndpoint) {
			t.Errorf("outcome %+v, want retry with ErrTokenEndpoint", out)
		}
		if n := len(f.recorded()); n != 0 {
			t.Errorf("%d report calls without a token", n)
		}
	})
}

func ExampleClassify() {
	resp := &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Header:     http.Header{"Retry-After": []string{"30"}},
		Body:       io.NopCloser(strings.NewReader(`{"messages":["Too many requests, slow down"]}`)),
	}
	out := Classify(resp, nil)
	fmt.Println(out.Kind, out.Status, out.RetryAfter, out.Reason())
	// Output: retry 429 30s Too many requests, slow down
}
