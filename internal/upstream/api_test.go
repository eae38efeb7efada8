package upstream

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func (f *fakeAPI) apiClient() *APIClient {
	ts := NewTokenSource(TokenConfig{TokenURL: f.srv.URL + "/token", ClientID: "tracking-bridge", Username: "demo",
		Password: func() string { return "demo" }, Client: f.srv.Client()})
	return NewAPIClient(APIConfig{BaseURL: f.srv.URL + "/v1.0/", Tokens: ts, Client: f.srv.Client()})
}

var postReport = APIRequest{Method: http.MethodPost, Path: "/tracking/events", Body: []byte(`{"event":{}}`)}

func TestCallVerbatim(t *testing.T) {
	f := newFakeAPI(t, func(int, *http.Request) (int, string) { return 202, `{"messages":["ok"]}` })
	r := postReport
	r.IdempotencyKey = "k"
	resp, err := f.apiClient().Call(context.Background(), r)
	if err != nil || resp.Status != 202 || string(resp.Body) != `{"messages":["ok"]}` || resp.Retried {
		t.Fatalf("Call: %+v, %v", resp, err)
	}
	c := f.recorded()
	if len(c) != 1 || c[0].auth != "Bearer tok-1" || c[0].key != "k" || c[0].contentType != "application/json" || c[0].body != `{"event":{}}` {
		t.Errorf("request: %+v", c)
	}
}

// TestCall401 repeats a request, a POST included, once with a new token after a 401, and returns a
// second 401 as it is.
func TestCall401(t *testing.T) {
	f := newFakeAPI(t, func(n int, _ *http.Request) (int, string) {
		if n == 0 {
			return 401, `{"messages":["Jwt expired"]}`
		}
		return 202, `{"messages":[]}`
	})
	resp, err := f.apiClient().Call(context.Background(), postReport)
	if err != nil || resp.Status != 202 || !resp.Retried {
		t.Fatalf("Call: %+v, %v", resp, err)
	}
	if c := f.recorded(); len(c) != 2 || c[0].auth != "Bearer tok-1" || c[1].auth != "Bearer tok-2" {
		t.Errorf("requests: %+v", c)
	}

	g := newFakeAPI(t, func(int, *http.Request) (int, string) { return 401, `{"messages":["no"]}` })
	resp, err = g.apiClient().Call(context.Background(), postReport)
	if err != nil || resp.Status != 401 || len(g.recorded()) != 2 {
		t.Errorf("two 401s: %+v, %v, %d requests", resp, err, len(g.recorded()))
	}
}

// TestCallNoRetry: no status other than 401, and no timeout, makes Call send a request again.
func TestCallNoRetry(t *testing.T) {
	for _, code := range []int{400, 403, 404, 409, 415, 429, 500, 502, 503, 504} {
		f := newFakeAPI(t, func(int, *http.Request) (int, string) { return code, `{"messages":["x"]}` })
		resp, err := f.apiClient().Call(context.Background(), postReport)
		if err != nil || resp.Status != code || len(f.recorded()) != 1 {
			t.Errorf("%d: %+v, %v, %d requests", code, resp, err, len(f.recorded()))
		}
	}
	f := newFakeAPI(t, func(_ int, r *http.Request) (int, string) {
		<-r.Context().Done()
		return 200, ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := f.apiClient().Call(ctx, postReport)
	if !errors.Is(err, context.DeadlineExceeded) || len(f.recorded()) != 1 {
		t.Errorf("timeout: %v, %d requests", err, len(f.recorded()))
	}
}

func TestCallBodyBound(t *testing.T) {
	f := newFakeAPI(t, func(int, *http.Request) (int, string) { return 200, strings.Repeat("x", 100) })
	r := postReport
	r.MaxBody = 100
	if resp, err := f.apiClient().Call(context.Background(), r); err != nil || len(resp.Body) != 100 {
		t.Errorf("at the bound: %v", err)
	}
	r.MaxBody = 99
	if _, err := f.apiClient().Call(context.Background(), r); !errors.Is(err, ErrAnswerTooLarge) {
		t.Errorf("beyond the bound: %v", err)
	}
}

func TestCallNoToken(t *testing.T) {
	f := newFakeAPI(t, nil)
	ts := NewTokenSource(TokenConfig{TokenURL: f.srv.URL + "/nowhere", ClientID: "c", Username: "u",
		Password: func() string { return "p" }, Client: f.srv.Client()})
	c := NewAPIClient(APIConfig{BaseURL: f.srv.URL + "/v1.0", Tokens: ts, Client: f.srv.Client()})
	_, err := c.Call(context.Background(), postReport)
	if !errors.Is(err, ErrNoToken) || len(f.recorded()) != 0 {
		t.Errorf("%v, %d requests", err, len(f.recorded()))
	}
}
