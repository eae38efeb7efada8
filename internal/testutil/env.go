package testutil

import (
	"os"
	"strings"
	"testing"
)

// BridgeEnv sets exactly the BRIDGE_* variables of env in the process environment, as a bridge started
// with them would see it: every other BRIDGE_* variable is unset until the test ends. Tests that call it
// cannot run in parallel (t.Setenv).
func BridgeEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "BRIDGE_") {
			t.Setenv(name, "") // restored at the end
			os.Unsetenv(name)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}
