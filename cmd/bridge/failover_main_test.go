package main

// The replica failover tests (docs/delivery.md, docs/replicas.md), in the failover_*_test.go files: two
// or three bridges run as child processes of the built cmd/bridge binary, against real nats-servers (one,
// or a 3-node cluster with R3 streams) and the upstream simulator over loopback. The tests kill, stop,
// pause and cut off the leader, kill the NATS node that leads the events stream, roll an update and
// restart the cursor, and then check the delivery promise on what JetStream and the simulator hold: every
// event exactly once, every event stored under the fence marker of the leader in office, every report
// accepted upstream once.
//
// They run with the command's other tests:
//
//	go test -race -count=1 ./cmd/bridge/
//
// (-short skips the slowest parts). FAILOVER_LOG_DIR, when set, names a directory that receives every
// bridge's full log of every run. The bridge binary is built with -race when the tests run with it;
// FAILOVER_BRIDGE_RACE=0 or 1 overrides that. The binary is built from this package's sources, which
// go test's cache sees: a cached result is tied to the daemon's sources through this package's imports.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
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
