// Package testutil holds helpers shared by the tests of several packages. Production code never imports it.
package testutil

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, and fails the test when it does not hold within
// Scale(within); what names the condition in the failure message. Tests wait on conditions with it, not on
// sleeps.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	EventuallyState(tb, within, what, func() (bool, string) { return cond(), "" })
}

// EventuallyState is Eventually for a condition that also describes the state it saw, which the failure
// message shows (the last one).
func EventuallyState(tb testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	within = Scale(within)
	deadline := time.Now().Add(within)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			if state != "" {
				state = "; last state:\n" + state
			}
			tb.Fatalf("timed out after %v waiting until %s%s", within, what, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ScaleEnv names the environment variable that sets the factor Scale stretches deadlines by.
const ScaleEnv = "TEST_TIME_SCALE"

// defaultScale is Scale's factor when ScaleEnv is not set. A deadline in a test is how long it waits
// before it gives up; a wait that succeeds costs no more for a larger one. The deadlines written in the
// tests hold on an idle machine under -race; three times them holds with the tests' own packages, other
// packages' tests and two CPU-bound processes sharing two cores.
const defaultScale = 3

// Scale stretches d, the time a test gives something before it fails (a wait on a condition, a request's
// timeout, a process's exit), by the factor in TEST_TIME_SCALE (a positive number; 3 when unset). A machine
// busier still sets it higher; a test that checks a timeout the code under test keeps (it must fire, and
// not too early) does not scale that. A factor that is not a positive number panics: it is a mistake in
// how the tests were started.
func Scale(d time.Duration) time.Duration {
	return time.Duration(float64(d) * scaleFactor())
}

// scaleFactor reads ScaleEnv once.
var scaleFactor = newScaleFactor()

func newScaleFactor() func() float64 {
	return sync.OnceValue(func() float64 {
		v := os.Getenv(ScaleEnv)
		if v == "" {
			return defaultScale
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || !(f > 0) || math.IsInf(f, 0) {
			panic(fmt.Sprintf("%s=%q: want a positive number, the factor that stretches the tests' deadlines", ScaleEnv, v))
		}
		return f
	})
}

// EventuallyCount waits until count() reaches want, and fails the test when it has not grown for
// Scale(stall): a wait for a long run of work (thousands of events) whose length is the machine's speed
// times the work, where a busy machine is slow but a stuck one makes no progress at all.
func EventuallyCount(tb testing.TB, stall time.Duration, what string, want int, count func() int) {
	tb.Helper()
	stall = Scale(stall)
	best, since := -1, time.Now()
	for {
		n := count()
		if n >= want {
			return
		}
		if n > best {
			best, since = n, time.Now()
		}
		if time.Since(since) > stall {
			tb.Fatalf("waiting until %s: %d of %d, and no more for %v", what, best, want, stall)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
