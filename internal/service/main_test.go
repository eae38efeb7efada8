package service_test

import (
	"os"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestMain runs up to four tests at once (testutil.SetParallel): most of them wait on a server, a
// timeout or a TTL rather than compute.
func TestMain(m *testing.M) {
	testutil.SetParallel(4)
	os.Exit(m.Run())
}
