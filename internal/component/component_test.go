package component

import (
	"context"
	"testing"
	"time"
)

// TestStopClock: the clock ends its timeout after the stop, not before; without a timeout it ends only
// when released.
func TestStopClock(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		wantEnd bool
	}{
		{"timeout", 50 * time.Millisecond, true},
		{"no timeout", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stopping, stop := context.WithCancel(context.Background())
			clock, release := StopClock(stopping, tc.timeout)
			defer release()
			select {
			case <-clock.Done():
				t.Fatal("the clock ended before the stop")
			case <-time.After(2 * tc.timeout):
			}
			stop()
			start := time.Now()
			select {
			case <-clock.Done():
				if !tc.wantEnd {
					t.Fatal("the clock ended without a timeout")
				}
				if took := time.Since(start); took < tc.timeout {
					t.Errorf("the clock ended %v after the stop, before its timeout %v", took, tc.timeout)
				}
			case <-time.After(tc.timeout + 500*time.Millisecond):
				if tc.wantEnd {
					t.Fatal("the clock did not end after its timeout")
				}
			}
			release()
			if clock.Err() == nil {
				t.Error("the clock did not end when released")
			}
		})
	}
}
