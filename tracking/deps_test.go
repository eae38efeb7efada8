package tracking

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLightDependencies: a program that imports tracking compiles nats.go (with its own dependencies),
// the standard library, the OpenTelemetry API and, of this module, only the leaf packages that name subjects,
// check reports and carry trace context as the bridge does: no OpenAPI, YAML or JSON Schema library, no
// OpenTelemetry SDK, nothing of the daemon.
func TestLightDependencies(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is needed: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{.Module.Path}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const self = "github.com/tracking-bridge/tracking-bridge"
	ownAllowed := []string{self + "/tracking", self + "/internal/layout", self + "/internal/validate", self + "/internal/jsonscan",
		self + "/internal/rfc3339", self + "/internal/logging", self + "/internal/tracing/carrier"}
	modsAllowed := []string{self, "github.com/nats-io/nats.go", "github.com/nats-io/nkeys", "github.com/nats-io/nuid",
		"github.com/klauspost/compress", "golang.org/x/crypto", "golang.org/x/sys",
		// The OpenTelemetry API (no SDK), for ContinueTrace.
		"go.opentelemetry.io/otel", "go.opentelemetry.io/otel/trace", "github.com/cespare/xxhash/v2"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, mod, _ := strings.Cut(line, " ")
		switch {
		case !slices.Contains(modsAllowed, mod):
			t.Errorf("tracking depends on %s (module %s)", pkg, mod)
		case mod == self && !slices.Contains(ownAllowed, pkg):
			t.Errorf("tracking depends on %s", pkg)
		}
	}
}
