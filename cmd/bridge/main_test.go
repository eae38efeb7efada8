package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRunBounded: once ctx is done, runBounded waits for the daemon only so long; before that, and for
// a daemon that returns in time, it returns the daemon's own result.
func TestRunBounded(t *testing.T) {
	errDaemon := errors.New("daemon failed")
	if err := runBounded(context.Background(), func(context.Context) error { return errDaemon }, time.Hour); err != errDaemon {
		t.Errorf("a daemon that fails by itself: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runBounded(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil }, time.Hour); err != nil {
		t.Errorf("a daemon that stops on the signal: %v", err)
	}

	stuck := make(chan struct{})
	defer close(stuck)
	start := time.Now()
	err := runBounded(ctx, func(context.Context) error { <-stuck; return nil }, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "exiting without a clean stop") {
		t.Errorf("a daemon stuck past the bound: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("runBounded waited %v for a bound of 100ms", d)
	}
}
