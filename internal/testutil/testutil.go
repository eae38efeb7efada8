// Package testutil holds helpers shared by the tests of several packages. Production code never imports it.
package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it holds, and fails the test when it does not hold within that
// time; what names the condition in the failure message. Tests wait on conditions with it, not on sleeps.
func Eventually(tb testing.TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	EventuallyState(tb, within, what, func() (bool, string) { return cond(), "" })
}

// EventuallyState is Eventually for a condition that also describes the state it saw, which the failure
// message shows (the last one).
func EventuallyState(tb testing.TB, within time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
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
