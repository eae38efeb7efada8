package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/retry"
)

func TestBackoff(t *testing.T) {
	const minD, maxD = 100 * time.Millisecond, time.Second
	for _, tc := range []struct {
		n    int
		want time.Duration // the delay before jitter
	}{
		{0, 100 * time.Millisecond}, {1, 200 * time.Millisecond}, {3, 800 * time.Millisecond},
		{4, time.Second}, {1000, time.Second},
	} {
		for range 100 {
			if d := retry.Backoff(minD, maxD, tc.n); d < tc.want/2 || d > tc.want {
				t.Fatalf("Backoff(%v, %v, %d) = %v, want within [%v, %v]", minD, maxD, tc.n, d, tc.want/2, tc.want)
			}
		}
	}
	if d := retry.Backoff(0, maxD, 3); d != 0 {
		t.Errorf("Backoff with minD 0 = %v, want 0", d)
	}
}

func TestSleep(t *testing.T) {
	if !retry.Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep with a live context reported false")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if retry.Sleep(ctx, time.Hour) {
		t.Error("Sleep with a cancelled context reported true")
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Sleep with a cancelled context took %v", d)
	}
	if retry.Sleep(ctx, 0) {
		t.Error("Sleep(0) with a cancelled context reported true")
	}
}
