// Package retry holds the two primitives every retry layer of the bridge uses: capped exponential backoff
// with jitter, and a sleep that ends with its context.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff returns the delay before attempt n (0-based): minD·2ⁿ capped at maxD, with equal jitter, so a
// value in [d/2, d]. Spreading the attempts keeps many bridges from reconnecting in step.
func Backoff(minD, maxD time.Duration, n int) time.Duration {
	if minD <= 0 {
		return 0
	}
	d := minD
	for i := 0; i < n && d < maxD; i++ {
		d *= 2
	}
	d = min(d, maxD)
	return d/2 + rand.N(d/2+1)
}

// Sleep waits for d or until ctx is done, and reports whether the whole time passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
