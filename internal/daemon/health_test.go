package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestHandler(t *testing.T) {
	var c healthChecks
	var natsDown atomic.Bool
	c.Add("nats", func(context.Context) error {
		if natsDown.Load() {
			return errors.New("connection RECONNECTING\nsecond line")
		}
		return nil
	})
	c.Add("broken", func(context.Context) error { panic("boom") })
	c.Add("broken", func(context.Context) error { return nil }) // replaces
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()

	for _, tc := range []struct {
		down     bool
		method   string
		wantCode int
		wantBody string
	}{
		{false, http.MethodGet, 200, "nats: ok\nbroken: ok\n"},
		{true, http.MethodGet, 503, "nats: not ready: connection RECONNECTING second line\nbroken: ok\n"},
		{true, http.MethodHead, 503, ""},
		{false, http.MethodPost, 405, "method not allowed\n"},
	} {
		natsDown.Store(tc.down)
		req, _ := http.NewRequest(tc.method, srv.URL, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.wantCode || string(body) != tc.wantBody {
			t.Errorf("%s down=%v: %d %q, want %d %q", tc.method, tc.down, resp.StatusCode, body, tc.wantCode, tc.wantBody)
		}
	}
}

func TestPanickingCheckIsNotReady(t *testing.T) {
	var c healthChecks
	c.Add("broken", func(context.Context) error { panic("boom") })
	rs := c.Evaluate(context.Background())
	if allPass(rs) || formatResults(rs) != "broken: not ready: check failed: boom\n" {
		t.Errorf("got %q", formatResults(rs))
	}
}

func TestEvaluateTimeout(t *testing.T) {
	c := healthChecks{Timeout: 50 * time.Millisecond}
	c.Add("slow", func(ctx context.Context) error {
		<-ctx.Done()
		return ctx.Err()
	})
	start := time.Now()
	if rs := c.Evaluate(context.Background()); allPass(rs) {
		t.Error("a check past the deadline passed")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("took %v", d)
	}
}

// TestEvaluateStuckCheck: a check that ignores its context (stuck on a lock) does not hold the answer:
// it fails as unanswered at the timeout, and the other checks' results stand.
func TestEvaluateStuckCheck(t *testing.T) {
	c := healthChecks{Timeout: 50 * time.Millisecond}
	release := make(chan struct{})
	defer close(release)
	c.Add("ok", func(context.Context) error { return nil })
	c.Add("stuck", func(context.Context) error { <-release; return nil })
	c.Add("down", func(context.Context) error { return errors.New("down") })
	done := make(chan []checkResult, 1)
	go func() { done <- c.Evaluate(context.Background()) }()
	select {
	case rs := <-done:
		if rs[0].Err != nil || rs[1].Err == nil || rs[2].Err == nil || rs[2].Err.Error() != "down" {
			t.Errorf("results = %+v", rs)
		}
		if got := rs[1].Err.Error(); got != "no answer within 50ms (context deadline exceeded)" {
			t.Errorf("stuck check: %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Evaluate waited for a check stuck past its timeout")
	}
}

func TestCached(t *testing.T) {
	var calls atomic.Int32
	f := cachedCheck(time.Hour, func(context.Context) error {
		calls.Add(1)
		return errors.New("no")
	})
	for range 5 {
		if f(context.Background()) == nil {
			t.Fatal("want the error")
		}
	}
	if calls.Load() != 1 {
		t.Errorf("%d calls, want 1", calls.Load())
	}
	g := cachedCheck(0, func(context.Context) error { calls.Add(1); return nil })
	_ = g(context.Background())
	_ = g(context.Background())
	if calls.Load() != 3 {
		t.Errorf("ttl 0: %d calls, want 3", calls.Load())
	}
}
