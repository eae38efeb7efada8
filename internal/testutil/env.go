package testutil

import (
	"os"
	"strings"
	"testing"
)

// Env sets exactly the variables of env whose names begin with prefix (BRIDGE_, OTEL_) in the process
// environment, as a bridge started with them would see it: every other variable with that prefix is unset
// until the test ends. Tests that call it cannot run in parallel (t.Setenv).
func Env(t *testing.T, prefix string, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, prefix) {
			t.Setenv(name, "") // restored at the end
			os.Unsetenv(name)
		}
	}
	for k, v := range env {
		if strings.HasPrefix(k, prefix) {
			t.Setenv(k, v)
		}
	}
}
