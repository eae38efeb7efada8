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
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting until %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
