// Package component is the contract every long-running part of the bridge keeps, so that the daemon
// supervises them all one way: it runs each with Run in one group, stops them all by cancelling Run's
// context, and builds /readyz from their Ready.
//
// A component is stopped in one way only: its Run context ends. It then stops taking new work at once
// (ingress first), finishes the work it has in flight within its own stop timeout counted from that
// moment (StopClock; BRIDGE_SHUTDOWN_TIMEOUT in the bridge), and returns. What it does with work still
// unfinished at the timeout (hand it back, abandon it) is its own business: Run returns ErrStopTimeout
// when that work must be done again (the report consumer hands its reports back), nil when it only
// abandons answers (the API service) or settles what it could (the event path).
package component

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Component is a long-running part of the bridge.
//
// Run runs it until ctx ends, then finishes its work in flight within its stop timeout and returns: nil
// after a clean stop, else the reason (it cannot work, or its stop timed out). Run is called once; when
// it returns before ctx ends, the daemon stops every other component too.
//
// Ready returns nil when the component does its work now, else an error saying why not, on one line and
// without secrets (it is shown by /readyz and /status). It is called at any time, before, during and
// after Run, from many goroutines at once, and must return quickly: it reads state, it does not ask
// anybody.
type Component interface {
	Run(ctx context.Context) error
	Ready() error
}

// ErrStopTimeout is a component's Run error when it was still stopping at its stop timeout and left work
// unfinished (handed back for another to do, or to be done again after a restart).
var ErrStopTimeout = errors.New("stop timed out after BRIDGE_SHUTDOWN_TIMEOUT")

// StopClock returns a context that ends timeout after stopping ends: the deadline of the work a
// component finishes after being told to stop. A timeout of zero or less never ends it. The function
// returned releases its timer; call it when Run returns.
func StopClock(stopping context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if timeout <= 0 {
		return ctx, cancel
	}
	var mu sync.Mutex
	var timer *time.Timer
	released := false
	stopWatch := context.AfterFunc(stopping, func() {
		mu.Lock()
		defer mu.Unlock()
		if !released {
			timer = time.AfterFunc(timeout, cancel)
		}
	})
	return ctx, func() {
		stopWatch()
		mu.Lock()
		released = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel()
	}
}
