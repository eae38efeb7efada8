package daemon

// The health checks behind the liveness (/healthz) and readiness (/readyz) endpoints.
//
// Readiness is built from each component's own view of its state, in the manner of the Prometheus
// Pushgateway's handlers: a healthCheck per component, each asked on every request (cachedCheck bounds
// the cost of the ones that make a request of their own). The answer is 200 when every check passes and
// 503 otherwise, with one line per check in a fixed order (the first three of the daemon's, for example):
//
//	nats: ok
//	jetstream_streams: ok
//	upstream_token: not ready: no valid access token: token endpoint unavailable: login: HTTP 503
//
// Liveness is one healthCheck: the process loop is running and has not hit a state only a restart fixes.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// healthCheck is one named condition. Func returns nil when the condition holds and otherwise an error whose
// text says why not; it must return within the context's deadline and be safe for concurrent use.
type healthCheck struct {
	Name string
	Func func(ctx context.Context) error
}

// checkResult is the outcome of one healthCheck.
type checkResult struct {
	Name string
	Err  error // nil: ok
}

// healthChecks is an ordered set of checks.
type healthChecks struct {
	mu     sync.RWMutex
	checks []healthCheck
	// Timeout bounds one evaluation of all checks; 0 means 5 s.
	Timeout time.Duration
}

// Add appends a check. healthChecks may be added at any time; a name added twice replaces the earlier check.
func (c *healthChecks) Add(name string, f func(ctx context.Context) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.checks {
		if c.checks[i].Name == name {
			c.checks[i].Func = f
			return
		}
	}
	c.checks = append(c.checks, healthCheck{Name: name, Func: f})
}

// Evaluate runs every check, concurrently, and returns their results in the order they were added. It
// returns by the timeout even when a check does not (one stuck on a lock its context cannot interrupt):
// such a check fails with "no answer within", and its late answer is dropped.
func (c *healthChecks) Evaluate(ctx context.Context) []checkResult {
	c.mu.RLock()
	checks := append([]healthCheck(nil), c.checks...)
	c.mu.RUnlock()
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type answer struct {
		i   int
		err error
	}
	answers := make(chan answer, len(checks)) // buffered: a late check never blocks
	out := make([]checkResult, len(checks))
	for i, ch := range checks {
		out[i] = checkResult{Name: ch.Name, Err: errNoAnswer}
		go func() { answers <- answer{i, runCheck(ctx, ch.Func)} }()
	}
	for range checks {
		select {
		case a := <-answers:
			out[a.i].Err = a.err
		case <-ctx.Done():
			for i := range out {
				if out[i].Err == errNoAnswer {
					out[i].Err = fmt.Errorf("no answer within %v (%w)", timeout, ctx.Err())
				}
			}
			return out
		}
	}
	return out
}

// errNoAnswer marks a result whose check has not returned yet.
var errNoAnswer = errors.New("no answer")

// runCheck calls f, turning a panic into an error: a broken check must not take the process down.
func runCheck(ctx context.Context, f func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("check failed: %v", r)
		}
	}()
	return f(ctx)
}

// allPass reports whether every result is ok.
func allPass(rs []checkResult) bool {
	for _, r := range rs {
		if r.Err != nil {
			return false
		}
	}
	return true
}

// Handler answers 200 when every check passes and 503 otherwise; the plain-text body has one line per
// check: "name: ok" or "name: not ready: reason". It answers GET and HEAD.
func (c *healthChecks) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		rs := c.Evaluate(r.Context())
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if allPass(rs) {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = w.Write([]byte(formatResults(rs)))
	})
}

// formatResults renders results one per line, as the handler's body.
func formatResults(rs []checkResult) string {
	var b strings.Builder
	for _, r := range rs {
		b.WriteString(r.Name)
		if r.Err == nil {
			b.WriteString(": ok\n")
			continue
		}
		b.WriteString(": not ready: ")
		b.WriteString(oneLine(r.Err.Error()))
		b.WriteByte('\n')
	}
	return b.String()
}

// oneLine keeps a reason on one line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// cachedCheck returns f with its result remembered for ttl, so that frequent probes do not each make a
// request of their own. Concurrent callers share one evaluation.
func cachedCheck(ttl time.Duration, f func(context.Context) error) func(context.Context) error {
	var (
		mu   sync.Mutex
		at   time.Time
		last error
	)
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < ttl {
			return last
		}
		last = f(ctx)
		if errors.Is(last, context.Canceled) && ctx.Err() != nil {
			return last // the prober went away: do not remember that
		}
		at = time.Now()
		return last
	}
}
