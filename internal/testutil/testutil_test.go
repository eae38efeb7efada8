package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalTB records a Fatalf and ends the goroutine as testing.T's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls fn with a fatalTB in a goroutine of its own, and returns what it failed with ("" if nothing).
func run(fn func(tb testing.TB)) string {
	tb := &fatalTB{}
	done := make(chan struct{})
	go func() { defer close(done); fn(tb) }()
	<-done
	return tb.msg
}

// TestScale: deadlines stretch by TEST_TIME_SCALE, 3 when it is unset or empty. Not parallel: it sets the
// variable.
func TestScale(t *testing.T) {
	for _, tc := range []struct {
		env   string
		want  time.Duration
		panic bool
	}{
		{env: "", want: 3 * time.Second},
		{env: "1", want: time.Second},
		{env: "2.5", want: 2500 * time.Millisecond},
		{env: "0", panic: true},
		{env: "-1", panic: true},
		{env: "fast", panic: true},
		{env: "NaN", panic: true},
	} {
		t.Run(fmt.Sprintf("%q", tc.env), func(t *testing.T) {
			t.Setenv(ScaleEnv, tc.env)
			defer func(f func() float64) { scaleFactor = f }(scaleFactor)
			scaleFactor = newScaleFactor()
			defer func() {
				if r := recover(); (r != nil) != tc.panic {
					t.Errorf("panic %v, want one: %v", r, tc.panic)
				}
			}()
			if got := Scale(time.Second); got != tc.want {
				t.Errorf("Scale(1s) = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestEventuallyCount: a count that keeps growing is waited for however long it takes in all; one that
// stops growing fails after the stall, scaled.
func TestEventuallyCount(t *testing.T) {
	t.Parallel()
	start := time.Now()
	if msg := run(func(tb testing.TB) {
		// One more each 10 ms: a second in all, five times the stall (before it is scaled).
		EventuallyCount(tb, 200*time.Millisecond, "slow progress", 100, func() int {
			return int(time.Since(start) / (10 * time.Millisecond))
		})
	}); msg != "" {
		t.Errorf("a count that keeps growing failed: %s", msg)
	}
	msg := run(func(tb testing.TB) {
		EventuallyCount(tb, 20*time.Millisecond, "a stuck count", 10, func() int { return 3 })
	})
	if !strings.Contains(msg, "a stuck count: 3 of 10, and no more for") {
		t.Errorf("a stuck count failed with %q", msg)
	}
}
