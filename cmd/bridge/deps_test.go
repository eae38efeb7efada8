package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoOpenAPIAtStartUp: the daemon links no OpenAPI, YAML or JSON Schema library (validation checks
// bodies against JSON Schema generated at build time, internal/validate), and none of the tools: the
// simulator, the embedded nats-server (the benchmark is a command of its own, which nothing can import).
// golang.org/x/text is linked since tracing: the OTLP exporter's protobuf types bring gRPC, and with it
// golang.org/x/net's HTTP/2 and IDNA (docs/performance.md#tracing).
func TestNoOpenAPIAtStartUp(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("the go command is needed: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{
			"github.com/getkin/kin-openapi", "github.com/santhosh-tekuri/jsonschema", "go.yaml.in/yaml",
			"gopkg.in/yaml", "github.com/go-openapi/",
			"github.com/nats-io/nats-server", "github.com/tracking-bridge/tracking-bridge/api",
			"github.com/tracking-bridge/tracking-bridge/internal/sim", "github.com/tracking-bridge/tracking-bridge/internal/embedded",
		} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("the daemon links %s", pkg)
			}
		}
	}
}
