package lease

import (
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestMain runs up to four tests at once: most of them wait on a server, a backoff or a timeout.
func TestMain(m *testing.M) { testutil.RunParallel(m, 4) }
