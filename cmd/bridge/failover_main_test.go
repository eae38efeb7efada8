package failover

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	// The bridge runs as a child built from cmd/bridge, which go test's cache cannot see: importing the
	// daemon ties a cached result to the daemon's sources (cmd/bridge itself is wiring only).
	_ "github.com/tracking-bridge/tracking-bridge/internal/daemon"
)

// binDir holds the bridge binary, built once per test binary by bridgeBinary.
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// bridgeBinary builds cmd/bridge once and returns its path. It is built with -race when this test
// binary is (raceEnabled), so that the children report data races too; FAILOVER_BRIDGE_RACE=0 or 1
// overrides that (the failover times of a bridge without the race detector are several times shorter).
func bridgeBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "failover-bridge-")
		if err != nil {
			binError = err
			return
		}
		binDir = dir
		binPath = filepath.Join(dir, "bridge")
		args := []string{"build", "-o", binPath}
		race := raceEnabled
		if v := os.Getenv("FAILOVER_BRIDGE_RACE"); v != "" {
			race = v == "1"
		}
		if race {
			args = append(args, "-race")
		}
		args = append(args, "github.com/tracking-bridge/tracking-bridge/cmd/bridge")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			binError = fmt.Errorf("go %v: %v\n%s", args, err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}
