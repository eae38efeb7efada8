package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// tokens is the upstream token source as a component, shared by the event stream, the report consumer
// and the API service. The source refreshes on demand and runs nothing of its own: Run gets a token once,
// so that a standby's readiness reflects its credentials (docs/delivery.md#replicas-one-leader-fenced: a
// standby is ready when its own parts are; a leader's stream gets one anyway), then waits for the stop.
type tokens struct {
	src *upstream.TokenSource
	// The last token request's outcome (observed): its error text (nil after a success), and whether one
	// succeeded.
	lastErr atomic.Pointer[string]
	ok      atomic.Bool
}

// observed records a token request's outcome; the daemon calls it from the source's Observe hook.
func (t *tokens) observed(err error) {
	t.ok.Store(err == nil)
	if err == nil {
		t.lastErr.Store(nil)
		return
	}
	msg := err.Error() // the token source's errors carry no secret
	t.lastErr.Store(&msg)
}

// Run gets a token once, retrying until one request succeeds or ctx ends (the token source paces logins
// after a rejection), and returns when ctx ends.
func (t *tokens) Run(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		if _, err := t.src.Token(ctx); err == nil || ctx.Err() != nil {
			break
		}
		if !retry.Sleep(ctx, retry.Backoff(time.Second, time.Minute, attempt)) {
			break
		}
	}
	<-ctx.Done()
	return nil
}

// Ready: the source holds an unexpired access token, or its last request succeeded. (While the stream
// stays connected, nothing asks for a token and it may expire unused; the next request gets a new one.)
func (t *tokens) Ready() error {
	if t.src.Valid() || t.ok.Load() {
		return nil
	}
	if msg := t.lastErr.Load(); msg != nil {
		return fmt.Errorf("no valid access token: %s", *msg)
	}
	return errors.New("no valid access token yet")
}
