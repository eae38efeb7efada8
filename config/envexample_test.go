package config_test

// Tests of deploy/bridge.env.example, which is generated from the Config struct: it lists every variable
// the configuration knows (and no other), is what the generator renders, and passes validation as it
// is. They live beside the configuration, not in the deploy module, so that a change of a variable shows
// here, in the repository's go test ./... (deploy/'s tests check the other deployment files).

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

var updateEnvExample = flag.Bool("update-env-example", false, "rewrite deploy/bridge.env.example from the Config struct")

// envVar is one configuration variable, read from Config's struct tags.
type envVar struct {
	name, def, desc  string
	required, secret bool
}

// envVars returns every variable of Config, in declaration order.
func envVars(t *testing.T) []envVar {
	t.Helper()
	var out []envVar
	typ := reflect.TypeFor[config.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Tag.Get("envconfig")
		if name == "" {
			t.Fatalf("field %s has no envconfig tag", f.Name)
		}
		out = append(out, envVar{
			name:     config.Prefix + "_" + name,
			def:      f.Tag.Get("default"),
			desc:     f.Tag.Get("desc"),
			required: f.Tag.Get("required") == "true",
			secret:   f.Type == reflect.TypeFor[config.Secret](),
		})
	}
	return out
}

// envKnown returns the set of variables the bridge reads: every field's, and X_FILE for secrets.
func envKnown(t *testing.T) map[string]bool {
	known := map[string]bool{}
	for _, v := range envVars(t) {
		known[v.name] = true
		if v.secret {
			known[v.name+"_FILE"] = true
		}
	}
	return known
}

// readRepo returns the content of a file of the repository, given relative to its root.
func readRepo(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// loadEnv runs config.FromEnv with exactly the BRIDGE_* variables of env set in the process environment:
// every other BRIDGE_* variable is unset for the test. Tests that call it cannot run in parallel.
func loadEnv(t *testing.T, env map[string]string) (*config.Config, error) {
	t.Helper()
	testutil.Env(t, "BRIDGE_", env)
	return config.FromEnv()
}

// Example values of the env example's active lines: the required variables and the NATS URL. As it is,
// the file is a configuration that passes validation, so no active line names a file.
var exampleValues = map[string]string{
	"BRIDGE_UPSTREAM_URL": "https://api.example.com/v1.0",
	"BRIDGE_TOKEN_URL":    "https://auth.example.com/realms/partners/protocol/openid-connect/token",
	"BRIDGE_CLIENT_ID":    "the-api-client-id",
	"BRIDGE_USERNAME":     "partner-account",
	"BRIDGE_PASSWORD":     "replace-with-the-account-password",
	"BRIDGE_NATS_URL":     "nats://nats:4222",
}

// Example values the env example shows commented out: alternatives to its active lines, which would
// change the configuration (and need a file, or a second variable) when uncommented.
var exampleAlternatives = map[string]string{
	"BRIDGE_PASSWORD_FILE":      "/run/secrets/bridge-password",
	"BRIDGE_NATS_USER":          "tracking-bridge",
	"BRIDGE_NATS_PASSWORD_FILE": "/run/secrets/nats-password",
}

// renderEnvExample renders deploy/bridge.env.example from the variables.
func renderEnvExample(vars []envVar) string {
	var b strings.Builder
	b.WriteString(`# tracking-bridge configuration: every BRIDGE_* variable the bridge reads, with its default. Tracing
# takes OpenTelemetry's own OTEL_* variables, off unless an endpoint is set: 'bridge -h' and
# docs/configuration.md list them.
#
# Generated from the Config struct by: go test ./config -run TestEnvExample -update-env-example
# ('bridge -h' prints the same list). Use it with 'docker run --env-file', compose's env_file, or a
# Kubernetes ConfigMap. As it is, it passes validation ('bridge check-config'): replace the example
# values, and uncomment what you change; a variable set to the empty string counts as unset.
# A secret can instead be read from a file: set X_FILE to its path and comment X out (never both).
# Durations take a unit: 500ms, 30s, 5m, 1h. Sizes are bytes, or take a binary unit: 512KiB, 256MiB, 4GiB.
`)
	line := func(name, value string, active bool) {
		if !active {
			b.WriteString("#")
		}
		fmt.Fprintf(&b, "%s=%s\n", name, value)
	}
	for _, v := range vars {
		b.WriteString("\n# ")
		b.WriteString(v.name)
		switch {
		case v.required && v.secret:
			b.WriteString(" (required, secret)")
		case v.required:
			b.WriteString(" (required)")
		case v.secret:
			b.WriteString(" (secret)")
		}
		b.WriteString(": " + v.desc + "\n")
		if ex, ok := exampleValues[v.name]; ok {
			line(v.name, ex, true)
		} else if ex, ok := exampleAlternatives[v.name]; ok {
			line(v.name, ex, false)
		} else if v.required && !v.secret {
			line(v.name, "", true)
		} else {
			line(v.name, v.def, false)
		}
		if v.secret {
			fmt.Fprintf(&b, "# %s_FILE: file holding %s (its content less trailing CR/LF)\n", v.name, v.name)
			ex, ok := exampleValues[v.name+"_FILE"]
			if alt, isAlt := exampleAlternatives[v.name+"_FILE"]; isAlt {
				ex = alt
			}
			line(v.name+"_FILE", ex, ok)
		}
	}
	return b.String()
}

// parseEnvFile parses KEY=value lines (docker --env-file syntax); commented assignments are returned
// separately.
func parseEnvFile(t *testing.T, text string) (active, commented map[string]string) {
	t.Helper()
	active, commented = map[string]string{}, map[string]string{}
	assign := regexp.MustCompile(`^(#?)([A-Z][A-Z0-9_]*)=(.*)$`)
	for line := range strings.Lines(text) {
		line = strings.TrimRight(line, "\r\n")
		m := assign.FindStringSubmatch(line)
		if m == nil {
			if line != "" && !strings.HasPrefix(line, "#") {
				t.Errorf("env example: not an assignment or comment: %q", line)
			}
			continue
		}
		target := active
		if m[1] == "#" {
			target = commented
		}
		if _, dup := active[m[2]]; dup {
			t.Errorf("env example: %s assigned twice", m[2])
		}
		if _, dup := commented[m[2]]; dup {
			t.Errorf("env example: %s listed twice", m[2])
		}
		target[m[2]] = m[3]
	}
	return active, commented
}

// TestEnvExample: deploy/bridge.env.example lists every variable the configuration knows (and no other),
// is what the generator renders, and its active lines load.
func TestEnvExample(t *testing.T) {
	vars := envVars(t)
	want := renderEnvExample(vars)
	if *updateEnvExample {
		if err := os.WriteFile(filepath.Join("..", "deploy", "bridge.env.example"), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := readRepo(t, "deploy/bridge.env.example")
	active, commented := parseEnvFile(t, got)
	known := envKnown(t)
	for name := range known {
		_, a := active[name]
		_, c := commented[name]
		if !a && !c {
			t.Errorf("env example lacks %s", name)
		}
	}
	for name := range active {
		if !known[name] {
			t.Errorf("env example sets %s, which the bridge does not read", name)
		}
	}
	for name := range commented {
		if !known[name] {
			t.Errorf("env example lists %s, which the bridge does not read", name)
		}
	}
	if got != want {
		t.Errorf("deploy/bridge.env.example is out of date; run: go test ./config -run TestEnvExample -update-env-example")
	}

	// The file as it is (docker run --env-file deploy/bridge.env.example) is a configuration that
	// loads: its active lines alone, no file to create first.
	for k := range active {
		if strings.HasSuffix(k, "_FILE") {
			t.Errorf("env example: %s is active; the file it names does not exist where the example is used", k)
		}
	}
	if _, err := loadEnv(t, active); err != nil {
		t.Errorf("the env example's active lines do not load:\n%v", err)
	}
	// The commented defaults are the defaults: uncommenting any one of them changes nothing.
	for k, v := range commented {
		if _, alt := exampleAlternatives[k]; v == "" || alt {
			continue
		}
		env := map[string]string{k: v}
		for ak, av := range active {
			env[ak] = av
		}
		if _, err := loadEnv(t, env); err != nil {
			t.Errorf("uncommenting %s=%s: %v", k, v, err)
		}
	}
}

// TestRefreshMarginRules: every place that describes BRIDGE_REFRESH_MARGIN gives both of its rules, at
// least 30s (Validate) and at most half the token's lifetime (the token source cuts a longer margin): its
// description (bridge -h and the env example), and the configuration reference, docs/configuration.md.
func TestRefreshMarginRules(t *testing.T) {
	const key = "BRIDGE_REFRESH_MARGIN"
	_, rows, _ := usageRows(t)
	places := map[string]string{"bridge -h": rows[key]}
	for line := range strings.Lines(readRepo(t, "deploy/bridge.env.example")) {
		if strings.HasPrefix(line, "# "+key+":") {
			places["deploy/bridge.env.example"] = line
		}
	}
	for line := range strings.Lines(readRepo(t, "docs/configuration.md")) {
		if strings.HasPrefix(line, "| `"+key+"`") {
			places["docs/configuration.md"] = line
		}
	}
	if len(places) != 3 {
		t.Fatalf("found %d of the 3 places that describe %s: %q", len(places), key, places)
	}
	min := regexp.MustCompile("at least `?" + regexp.QuoteMeta(config.MinRefreshMargin.String()) + "`?")
	for place, text := range places {
		if !min.MatchString(text) || !strings.Contains(text, "at most half the token's lifetime") {
			t.Errorf("%s describes %s without both rules (at least %v, at most half the token's lifetime): %s",
				place, key, config.MinRefreshMargin, text)
		}
	}
}
