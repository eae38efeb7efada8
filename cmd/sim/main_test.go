package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestComposeCommandRuns runs the simulator as the compose demo does (its sim service's command, on a
// free port instead of 8081): it listens, and stops with exit code 0.
func TestComposeCommandRuns(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "command: "); ok && strings.Contains(rest, "-addr") {
			if err := json.Unmarshal([]byte(rest), &args); err != nil {
				t.Fatalf("docker-compose.yml: %s: %v", line, err)
			}
		}
	}
	if len(args) == 0 {
		t.Fatal("docker-compose.yml has no simulator command with -addr")
	}
	for i, a := range args {
		if a == "0.0.0.0:8081" {
			args[i] = "127.0.0.1:0"
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testutil.Buffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, &stderr) }()
	testutil.Eventually(t, 15*time.Second, "simulator listening", func() bool {
		select {
		case code := <-done:
			t.Fatalf("sim %q exited %d:\n%s", args, code, stderr.String())
		default:
		}
		return strings.Contains(stderr.String(), "simulator listening")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("sim %q exited %d after SIGTERM's equivalent:\n%s", args, code, stderr.String())
	}
}
