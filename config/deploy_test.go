package config_test

// Tests of the deployment files: docker-compose.yml, Dockerfile, deploy/bridge.env.example,
// deploy/nats/nats-server.conf and deploy/monitoring/grafana-dashboard.json. They check that what those files set or
// query exists in the bridge: configuration variables, commands, ports, paths and metric names.

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tracking-bridge/tracking-bridge/config"
)

var deployUpdateEnv = flag.Bool("update-env-example", false, "rewrite deploy/bridge.env.example from the Config struct")

// deployVar is one configuration variable, read from Config's struct tags.
type deployVar struct {
	name, def, desc  string
	required, secret bool
}

// deployVars returns every variable of Config, in declaration order.
func deployVars(t *testing.T) []deployVar {
	t.Helper()
	var out []deployVar
	typ := reflect.TypeFor[config.Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Tag.Get("envconfig")
		if name == "" {
			t.Fatalf("field %s has no envconfig tag", f.Name)
		}
		out = append(out, deployVar{
			name:     config.Prefix + "_" + name,
			def:      f.Tag.Get("default"),
			desc:     f.Tag.Get("desc"),
			required: f.Tag.Get("required") == "true",
			secret:   f.Type == reflect.TypeFor[config.Secret](),
		})
	}
	return out
}

// deployKnown returns the set of variables the bridge reads: every field's, and X_FILE for secrets.
func deployKnown(t *testing.T) map[string]bool {
	known := map[string]bool{}
	for _, v := range deployVars(t) {
		known[v.name] = true
		if v.secret {
			known[v.name+"_FILE"] = true
		}
	}
	return known
}

func deployRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// deployLoad runs config.Load over env.
func deployLoad(env map[string]string) (*config.Config, error) {
	return config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
}

// Example values of the env example's active lines: the required variables and the NATS URL. As it is,
// the file is a configuration that passes validation, so no active line names a file.
var deployExampleValues = map[string]string{
	"BRIDGE_UPSTREAM_URL": "https://api.example.com/v1.0",
	"BRIDGE_TOKEN_URL":    "https://auth.example.com/realms/partners/protocol/openid-connect/token",
	"BRIDGE_CLIENT_ID":    "the-api-client-id",
	"BRIDGE_USERNAME":     "partner-account",
	"BRIDGE_PASSWORD":     "replace-with-the-account-password",
	"BRIDGE_NATS_URL":     "nats://nats:4222",
}

// Example values the env example shows commented out: alternatives to its active lines, which would
// change the configuration (and need a file, or a second variable) when uncommented.
var deployExampleAlternatives = map[string]string{
	"BRIDGE_PASSWORD_FILE":      "/run/secrets/bridge-password",
	"BRIDGE_NATS_USER":          "tracking-bridge",
	"BRIDGE_NATS_PASSWORD_FILE": "/run/secrets/nats-password",
}

// deployEnvExample renders deploy/bridge.env.example from the variables.
func deployEnvExample(vars []deployVar) string {
	var b strings.Builder
	b.WriteString(`# tracking-bridge configuration: every variable the bridge reads, with its default.
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
		if ex, ok := deployExampleValues[v.name]; ok {
			line(v.name, ex, true)
		} else if ex, ok := deployExampleAlternatives[v.name]; ok {
			line(v.name, ex, false)
		} else if v.required && !v.secret {
			line(v.name, "", true)
		} else {
			line(v.name, v.def, false)
		}
		if v.secret {
			fmt.Fprintf(&b, "# %s_FILE: file holding %s (its content less trailing CR/LF)\n", v.name, v.name)
			ex, ok := deployExampleValues[v.name+"_FILE"]
			if alt, isAlt := deployExampleAlternatives[v.name+"_FILE"]; isAlt {
				ex = alt
			}
			line(v.name+"_FILE", ex, ok)
		}
	}
	return b.String()
}

// deployEnvFile parses KEY=value lines (docker --env-file syntax); commented assignments are returned
// separately.
func deployEnvFile(t *testing.T, text string) (active, commented map[string]string) {
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
	vars := deployVars(t)
	want := deployEnvExample(vars)
	if *deployUpdateEnv {
		if err := os.WriteFile(filepath.Join("..", "deploy", "bridge.env.example"), []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := deployRead(t, "deploy/bridge.env.example")
	active, commented := deployEnvFile(t, got)
	known := deployKnown(t)
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
	if _, err := deployLoad(active); err != nil {
		t.Errorf("the env example's active lines do not load:\n%v", err)
	}
	// The commented defaults are the defaults: uncommenting any one of them changes nothing.
	for k, v := range commented {
		if _, alt := deployExampleAlternatives[k]; v == "" || alt {
			continue
		}
		env := map[string]string{k: v}
		for ak, av := range active {
			env[ak] = av
		}
		if _, err := deployLoad(env); err != nil {
			t.Errorf("uncommenting %s=%s: %v", k, v, err)
		}
	}
}

// A strict YAML subset: two-space indentation, "key: value" and "key:" + block, "- scalar" list items,
// inline lists as JSON arrays, "{}" and quoted or plain scalars. Comments only on lines of their own.

type deployLine struct {
	no     int
	indent int
	text   string
}

func deployYAML(t *testing.T, src string) map[string]any {
	t.Helper()
	var lines []deployLine
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, "\t") {
			t.Fatalf("line %d: tab character", i+1)
		}
		trimmed := strings.TrimLeft(l, " ")
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		indent := len(l) - len(trimmed)
		if indent%2 != 0 {
			t.Fatalf("line %d: indentation of %d spaces", i+1, indent)
		}
		lines = append(lines, deployLine{i + 1, indent, strings.TrimRight(trimmed, " ")})
	}
	node, next := deployBlock(t, lines, 0, 0)
	if next != len(lines) {
		t.Fatalf("line %d: unexpected indentation", lines[next].no)
	}
	m, ok := node.(map[string]any)
	if !ok {
		t.Fatal("the document is not a map")
	}
	return m
}

var deployKey = regexp.MustCompile(`^([A-Za-z0-9_.-]+):(?: (.*))?$`)

func deployBlock(t *testing.T, lines []deployLine, i, indent int) (any, int) {
	t.Helper()
	if strings.HasPrefix(lines[i].text, "- ") {
		var list []any
		for i < len(lines) && lines[i].indent == indent && strings.HasPrefix(lines[i].text, "- ") {
			list = append(list, deployScalar(t, lines[i], strings.TrimPrefix(lines[i].text, "- ")))
			i++
		}
		return list, i
	}
	m := map[string]any{}
	for i < len(lines) && lines[i].indent == indent {
		l := lines[i]
		kv := deployKey.FindStringSubmatch(l.text)
		if kv == nil {
			t.Fatalf("line %d: not a key: %q", l.no, l.text)
		}
		if _, dup := m[kv[1]]; dup {
			t.Fatalf("line %d: duplicate key %s", l.no, kv[1])
		}
		i++
		if kv[2] != "" {
			m[kv[1]] = deployScalar(t, l, kv[2])
			continue
		}
		if i >= len(lines) || lines[i].indent <= indent {
			t.Fatalf("line %d: %s has no value", l.no, kv[1])
		}
		if lines[i].indent != indent+2 {
			t.Fatalf("line %d: indent by two spaces", lines[i].no)
		}
		m[kv[1]], i = deployBlock(t, lines, i, indent+2)
	}
	return m, i
}

func deployScalar(t *testing.T, l deployLine, s string) any {
	t.Helper()
	switch {
	case strings.HasPrefix(s, "["):
		var list []any
		if err := json.Unmarshal([]byte(s), &list); err != nil {
			t.Fatalf("line %d: inline list is not a JSON array: %v", l.no, err)
		}
		return list
	case s == "{}":
		return map[string]any{}
	case strings.HasPrefix(s, `"`):
		var v string
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("line %d: bad quoted string: %v", l.no, err)
		}
		return v
	case strings.Contains(s, " #"), strings.HasPrefix(s, "{"), strings.HasPrefix(s, "'"),
		strings.HasPrefix(s, "&"), strings.HasPrefix(s, "*"), strings.HasPrefix(s, "|"), strings.HasPrefix(s, ">"):
		t.Fatalf("line %d: outside the supported YAML subset: %q", l.no, s)
	}
	return s
}

func deployMap(t *testing.T, v any, path string) map[string]any {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s is not a map", path)
	}
	return m
}

func deployStrings(t *testing.T, v any, path string) []string {
	t.Helper()
	list, ok := v.([]any)
	if !ok {
		t.Fatalf("%s is not a list", path)
	}
	out := make([]string, len(list))
	for i, x := range list {
		s, ok := x.(string)
		if !ok {
			t.Fatalf("%s[%d] is not a string", path, i)
		}
		out[i] = s
	}
	return out
}

var deployInterp = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)

// deployNATSPasswords sets, for this test, the NATS_*_PASSWORD variables that deploy/nats/nats-users.conf
// reads, as the NATS service's environment in docker-compose.yml gives them; every one the users file
// references must be there.
func deployNATSPasswords(t *testing.T, svc map[string]any, where string) {
	t.Helper()
	env := deployMap(t, svc["environment"], where+".environment")
	users := string(deployRead(t, filepath.Join("deploy", "nats", "nats-users.conf")))
	refs := regexp.MustCompile(`\$(NATS_[A-Z_]+_PASSWORD)`).FindAllStringSubmatch(users, -1)
	if len(refs) == 0 {
		t.Fatal("deploy/nats/nats-users.conf references no NATS_*_PASSWORD variable")
	}
	for _, m := range refs {
		v, ok := env[m[1]].(string)
		if !ok {
			t.Errorf("%s does not set %s, which deploy/nats/nats-users.conf reads", where, m[1])
			continue
		}
		t.Setenv(m[1], deployResolve(t, v))
	}
}

// deployResolve replaces ${NAME:-default} with the default, as compose does when NAME is unset; a
// reference without a default is an error (the demo must run with nothing set).
func deployResolve(t *testing.T, s string) string {
	t.Helper()
	return deployInterp.ReplaceAllStringFunc(s, func(ref string) string {
		m := deployInterp.FindStringSubmatch(ref)
		if !strings.Contains(ref, ":-") {
			t.Errorf("%s has no default: the demo would need it set", ref)
		}
		return m[2]
	})
}

// deployStage is one stage of the Dockerfile.
type deployStage struct {
	from, name string
	entrypoint []string
	cmd        []string
	args       []string
	expose     []string
	user       string
	builds     []string              // RUN lines that run go build
	copies     map[string]deployCopy // COPY --from=<stage> <src> <dst>, by destination
}

// deployCopy is a COPY --from: the stage and the path it copies.
type deployCopy struct{ from, src string }

// deployDockerfile is what the tests read from the Dockerfile: its stages, in order (the last is the
// default target).
type deployDockerfile struct {
	stages []*deployStage
}

// stage returns the stage named name, nil if none.
func (d deployDockerfile) stage(name string) *deployStage {
	for _, s := range d.stages {
		if s.name == name {
			return s
		}
	}
	return nil
}

// final is the default target's stage.
func (d deployDockerfile) final() *deployStage { return d.stages[len(d.stages)-1] }

// args are the ARGs of every stage.
func (d deployDockerfile) args() []string {
	var out []string
	for _, s := range d.stages {
		out = append(out, s.args...)
	}
	return out
}

// binary returns where stage s puts the binary of the package pkg (./cmd/<name>) that it copies from
// another stage, and the RUN line that built it there.
func (d deployDockerfile) binary(t *testing.T, s *deployStage, pkg string) (dst, build string) {
	t.Helper()
	for dst, c := range s.copies {
		src := d.stage(c.from)
		if src == nil {
			t.Fatalf("stage %q copies %s from %q, which is not a stage", s.name, dst, c.from)
		}
		for _, b := range src.builds {
			if strings.Contains(b, "-o "+c.src+" ") && strings.HasSuffix(b, " "+pkg) {
				return dst, b
			}
		}
	}
	t.Fatalf("stage %q copies no binary built from %s", s.name, pkg)
	return "", ""
}

func deployParseDockerfile(t *testing.T) deployDockerfile {
	t.Helper()
	var d deployDockerfile
	var cur *deployStage
	for line := range strings.Lines(deployRead(t, "Dockerfile")) {
		line = strings.TrimSpace(line)
		instr, rest, _ := strings.Cut(line, " ")
		if instr == "FROM" {
			cur = &deployStage{from: rest, copies: map[string]deployCopy{}}
			f := strings.Fields(rest)
			if len(f) >= 3 && strings.EqualFold(f[len(f)-2], "AS") {
				cur.name = f[len(f)-1]
				cur.from = strings.Join(f[:len(f)-2], " ")
			}
			d.stages = append(d.stages, cur)
			continue
		}
		if cur == nil {
			continue
		}
		switch instr {
		case "ARG":
			name, _, _ := strings.Cut(rest, "=")
			cur.args = append(cur.args, name)
		case "EXPOSE":
			cur.expose = append(cur.expose, strings.Fields(rest)...)
		case "USER":
			cur.user = rest
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(rest), &cur.entrypoint); err != nil {
				t.Fatalf("ENTRYPOINT is not in exec (JSON) form: %v", err)
			}
		case "CMD":
			if err := json.Unmarshal([]byte(rest), &cur.cmd); err != nil {
				t.Fatalf("CMD is not in exec (JSON) form: %v", err)
			}
		case "RUN":
			if strings.Contains(rest, "go build") {
				cur.builds = append(cur.builds, rest)
			}
		case "COPY":
			if from, ok := strings.CutPrefix(rest, "--from="); ok {
				f := strings.Fields(from)
				if len(f) != 3 {
					t.Fatalf("COPY --from=%s: want one source and one destination", from)
				}
				cur.copies[f[2]] = deployCopy{from: f[0], src: f[1]}
			}
		}
	}
	if len(d.stages) == 0 {
		t.Fatal("the Dockerfile has no FROM")
	}
	return d
}

// deployQualified reports whether image names its registry (docker.io/library/golang, not golang): an
// engine whose default registry is not Docker Hub, or that has none (podman), finds it only then.
func deployQualified(image string) bool {
	host, _, ok := strings.Cut(image, "/")
	return ok && (strings.Contains(host, ".") || strings.Contains(host, ":") || host == "localhost")
}

// TestDockerfile: a multi-stage build of static, trimmed binaries onto a pinned distroless non-root
// image, every base image fully qualified. The default target is the daemon alone, version-stamped, with
// the binary as entrypoint and run as its command; the sim target is the simulator alone (cmd/sim), for the compose demo.
func TestDockerfile(t *testing.T) {
	d := deployParseDockerfile(t)
	for _, s := range d.stages {
		from := strings.TrimSpace(strings.TrimPrefix(s.from, "--platform=$BUILDPLATFORM"))
		if d.stage(from) == nil && !deployQualified(from) {
			t.Errorf("stage %q from %q: name the registry (docker.io/library/..., gcr.io/...)", s.name, from)
		}
		if len(s.builds) > 0 {
			if d.stage(from) == nil && from != "docker.io/library/golang:1.26" {
				t.Errorf("build stage %q from %q: want docker.io/library/golang:1.26 (or another build stage)", s.name, from)
			}
		} else if len(s.copies) > 0 {
			if s.from != "gcr.io/distroless/static-debian12:nonroot" {
				t.Errorf("image stage %q from %q: want gcr.io/distroless/static-debian12:nonroot", s.name, s.from)
			}
			if s.user != "nonroot:nonroot" {
				t.Errorf("image stage %q: USER %q, want nonroot:nonroot", s.name, s.user)
			}
			if len(s.copies) != 1 {
				t.Errorf("image stage %q holds %d binaries, want one", s.name, len(s.copies))
			}
		}
		for _, b := range s.builds {
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-s -w"} {
				if !strings.Contains(b, want) {
					t.Errorf("build command %q lacks %q", b, want)
				}
			}
		}
	}

	// The image: the daemon, the entrypoint.
	final := d.final()
	if final.from != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("the image is from %q: want gcr.io/distroless/static-debian12:nonroot", final.from)
	}
	if final.user != "nonroot:nonroot" {
		t.Errorf("the image's USER is %q, want nonroot:nonroot", final.user)
	}
	copyTo, build := d.binary(t, final, "./cmd/bridge")
	for _, want := range []string{"-X main.version=$VERSION", "-X main.commit=$COMMIT"} {
		if !strings.Contains(build, want) {
			t.Errorf("build command %q lacks %q", build, want)
		}
	}
	for _, a := range []string{"VERSION", "COMMIT"} {
		if !slices.Contains(d.args(), a) {
			t.Errorf("no ARG %s", a)
		}
	}
	main := deployRead(t, "cmd/bridge/main.go")
	for _, v := range []string{"version = ", "commit  = "} {
		if !strings.Contains(main, v) {
			t.Errorf("cmd/bridge/main.go declares no %q: -X main.%s has nothing to set", v, strings.TrimSpace(strings.TrimSuffix(v, "= ")))
		}
	}
	if !slices.Equal(final.entrypoint, []string{copyTo}) || !slices.Equal(final.cmd, []string{"run"}) {
		t.Errorf("ENTRYPOINT %q CMD %q, want [%q] [\"run\"]", final.entrypoint, final.cmd, copyTo)
	}
	def := config.Default()
	_, port, _ := net.SplitHostPort(def.HTTPAddr)
	if !slices.Equal(final.expose, []string{port}) {
		t.Errorf("EXPOSE %q, want the default BRIDGE_HTTP_ADDR port %s", final.expose, port)
	}

	// The simulator's target: its binary alone, as the entrypoint.
	simStage := d.stage("sim")
	if simStage == nil {
		t.Fatal("the Dockerfile has no sim stage")
	}
	if simTo, _ := d.binary(t, simStage, "./cmd/sim"); !slices.Equal(simStage.entrypoint, []string{simTo}) {
		t.Errorf("sim ENTRYPOINT %q, want [%q]", simStage.entrypoint, simTo)
	}
	if strings.Contains(deployRead(t, "Dockerfile"), "HEALTHCHECK") {
		t.Error("the Dockerfile has a HEALTHCHECK; it is left to the orchestrator")
	}
}

// TestDockerfileBuildCommand runs the Dockerfile's build command here and checks that the binary is
// stamped. A cold build cache makes it take a minute, so it runs only when TRACKING_BRIDGE_BUILD_TEST=1.
func TestDockerfileBuildCommand(t *testing.T) {
	if os.Getenv("TRACKING_BRIDGE_BUILD_TEST") != "1" {
		t.Skip("set TRACKING_BRIDGE_BUILD_TEST=1 to run the Dockerfile's build command (about a minute with a cold cache)")
	}
	d := deployParseDockerfile(t)
	_, build := d.binary(t, d.final(), "./cmd/bridge")
	out := filepath.Join(t.TempDir(), "bridge")
	cmd := exec.Command("sh", "-c", strings.Replace(build, "/out/bridge", out, 1))
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "VERSION=v0.0.0-test", "COMMIT=c0ffee", "TARGETOS=", "TARGETARCH=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, b)
	}
	b, err := exec.Command(out, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("tracking-bridge v0.0.0-test (commit c0ffee, %s)", runtime.Version())
	if strings.TrimSpace(string(b)) != want {
		t.Errorf("version = %q, want %q", b, want)
	}
}

// TestCompose: docker-compose.yml runs NATS with this directory's server configuration, the bridge with
// variables it knows and a configuration that loads, and the simulator in the demo profile from the
// Dockerfile's sim target, with the names, ports and paths agreeing with each other and with the
// Dockerfile.
func TestCompose(t *testing.T) {
	doc := deployYAML(t, deployRead(t, "docker-compose.yml"))
	services := deployMap(t, doc["services"], "services")
	nats := deployMap(t, services["nats"], "services.nats")
	bridge := deployMap(t, services["bridge"], "services.bridge")
	sim := deployMap(t, services["sim"], "services.sim")
	d := deployParseDockerfile(t)

	// The bridge: the image's entrypoint, variables the configuration knows, a configuration that loads.
	if _, ok := bridge["entrypoint"]; ok {
		t.Error("the bridge service overrides the image's entrypoint")
	}
	if _, ok := bridge["profiles"]; ok {
		t.Error("the bridge service must run without a profile")
	}
	build := deployMap(t, bridge["build"], "services.bridge.build")
	if build["context"] != "." {
		t.Errorf("bridge build context %v, want .", build["context"])
	}
	for arg := range deployMap(t, build["args"], "services.bridge.build.args") {
		if !slices.Contains(d.args(), arg) {
			t.Errorf("build arg %s is not an ARG of the Dockerfile", arg)
		}
	}
	known := deployKnown(t)
	env := map[string]string{}
	for k, v := range deployMap(t, bridge["environment"], "services.bridge.environment") {
		if !known[k] {
			t.Errorf("the bridge service sets %s, which the bridge does not read", k)
		}
		s, ok := v.(string)
		if !ok {
			t.Fatalf("environment %s is not a string", k)
		}
		env[k] = deployResolve(t, s)
	}
	cfg, err := deployLoad(env)
	if err != nil {
		t.Fatalf("the bridge service's environment does not load:\n%v", err)
	}

	// Its ports: the HTTP endpoint, as exposed by the image.
	_, httpPort, _ := net.SplitHostPort(cfg.HTTPAddr)
	if !slices.Contains(d.final().expose, httpPort) {
		t.Errorf("BRIDGE_HTTP_ADDR port %s is not EXPOSEd", httpPort)
	}
	if ports := deployStrings(t, bridge["ports"], "services.bridge.ports"); !slices.ContainsFunc(ports, func(p string) bool {
		return strings.HasSuffix(p, ":"+httpPort)
	}) {
		t.Errorf("bridge ports %q do not publish %s", ports, httpPort)
	}

	// NATS: the service the bridge connects to, configured by deploy/nats/nats-server.conf.
	natsURL, _ := url.Parse(cfg.NATSServers()[0])
	if _, ok := services[natsURL.Hostname()]; !ok || natsURL.Hostname() != "nats" {
		t.Errorf("BRIDGE_NATS_URL host %q is not the nats service", natsURL.Hostname())
	}
	cmd := deployStrings(t, nats["command"], "services.nats.command")
	if len(cmd) != 2 || cmd[0] != "--config" {
		t.Fatalf("nats command %q, want [--config <path>]", cmd)
	}
	var confMounted, dataVolume string
	for _, v := range deployStrings(t, nats["volumes"], "services.nats.volumes") {
		parts := strings.Split(v, ":")
		switch {
		case strings.HasPrefix(v, "./"):
			if _, err := os.Stat(filepath.Join("..", parts[0])); err != nil {
				t.Errorf("volume source %s: %v", parts[0], err)
			}
			if parts[1] == cmd[1] {
				confMounted = parts[0]
			}
		default:
			dataVolume = v
		}
	}
	if confMounted != "./deploy/nats/nats-server.conf" {
		t.Fatalf("%s is not mounted from ./deploy/nats/nats-server.conf", cmd[1])
	}
	deployNATSPasswords(t, nats, "services.nats")
	opts, err := server.ProcessConfigFile(filepath.Join("..", confMounted))
	if err != nil {
		t.Fatalf("deploy/nats/nats-server.conf: %v", err)
	}
	if !opts.JetStream || !opts.SyncAlways {
		t.Errorf("deploy/nats/nats-server.conf: JetStream %v, sync_interval always %v; want both", opts.JetStream, opts.SyncAlways)
	}
	if want := "nats-data:" + opts.StoreDir; dataVolume != want {
		t.Errorf("data volume %q, want %q (the store_dir on a named volume)", dataVolume, want)
	}
	if _, ok := deployMap(t, doc["volumes"], "volumes")["nats-data"]; !ok {
		t.Error("the nats-data volume is not declared")
	}
	if natsURL.Port() != fmt.Sprint(opts.Port) {
		t.Errorf("BRIDGE_NATS_URL port %s, the server listens on %d", natsURL.Port(), opts.Port)
	}

	// Every image pulled names its registry (images of services with a build section are built here).
	for name, svc := range services {
		m := deployMap(t, svc, "services."+name)
		img, _ := m["image"].(string)
		if _, built := m["build"]; img != "" && !built && !deployQualified(deployResolve(t, img)) {
			t.Errorf("service %s: image %q does not name its registry (docker.io/library/...)", name, img)
		}
	}

	// The simulator: demo profile only, the Dockerfile's sim target (not a second build of the bridge's
	// image), listening where the demo defaults point.
	if p := deployStrings(t, sim["profiles"], "services.sim.profiles"); !slices.Equal(p, []string{"demo"}) {
		t.Errorf("sim profiles %q, want [demo]", p)
	}
	simBuild := deployMap(t, sim["build"], "services.sim.build")
	if simBuild["context"] != "." {
		t.Error("the sim service is not built from this directory")
	}
	if simBuild["target"] != "sim" || d.stage("sim") == nil {
		t.Errorf("the sim service builds target %v; want sim, a stage of the Dockerfile", simBuild["target"])
	}
	if sim["image"] == nil || sim["image"] == bridge["image"] {
		t.Errorf("the sim service's image %v must be a name of its own (the bridge's is %v)", sim["image"], bridge["image"])
	}
	if _, ok := sim["entrypoint"]; ok {
		t.Error("the sim service overrides the sim image's entrypoint")
	}
	args := deployStrings(t, sim["command"], "services.sim.command")
	if len(args) != 2 || args[0] != "-addr" {
		t.Fatalf("sim command %q, want [-addr <host:port>]", args)
	}
	_, simPort, _ := net.SplitHostPort(args[1])
	for _, u := range []string{cfg.UpstreamURL, cfg.TokenURL} {
		pu, _ := url.Parse(u)
		if pu.Hostname() != "sim" || pu.Port() != simPort {
			t.Errorf("demo default %s does not point at the sim service on port %s", u, simPort)
		}
	}
	if s := d.stage("sim"); s != nil && !slices.Contains(s.expose, simPort) {
		t.Errorf("the sim stage EXPOSEs %q, not the port %s it listens on", s.expose, simPort)
	}
	if ports := deployStrings(t, sim["ports"], "services.sim.ports"); !slices.ContainsFunc(ports, func(p string) bool {
		return strings.HasSuffix(p, ":"+simPort)
	}) {
		t.Errorf("sim ports %q do not publish %s", ports, simPort)
	}
}

// TestGrafanaDashboard: every metric the dashboard queries is one the bridge's registry has (histograms
// through their _bucket, _sum and _count series), and it has the panels the issue asks for.
func TestGrafanaDashboard(t *testing.T) {
	raw := deployRead(t, "deploy/monitoring/grafana-dashboard.json")
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(raw), &dash); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Error("dashboard without title or uid")
	}

	names := exportedMetrics(t)
	ident := regexp.MustCompile(`\b(bridge_[a-z0-9_]+|go_[a-z0-9_]+|process_[a-z0-9_]+)\b`)
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, id := range ident.FindAllString(tg.Expr, -1) {
				queried[id] = true
				if !names[id] {
					t.Errorf("panel %q queries %s, which the bridge does not export", p.Title, id)
				}
			}
		}
	}
	for _, want := range []string{"bridge_events_published_total", "bridge_stream_state",
		"bridge_stream_last_event_age_seconds", "bridge_reports_outcomes_total", "bridge_token_requests_total"} {
		if !queried[want] {
			t.Errorf("the dashboard does not show %s", want)
		}
	}
}

// deployRoundTripper answers every request 200.
type deployRoundTripper struct{}

func (deployRoundTripper) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: http.NoBody, Header: http.Header{}}, nil
}

// TestRefreshMarginRules: every place that describes BRIDGE_REFRESH_MARGIN gives both of its rules, at
// least 30s (Validate) and at most half the token's lifetime (the token source cuts a longer margin): its
// description (bridge -h and the env example), and the README's table.
func TestRefreshMarginRules(t *testing.T) {
	const key = "BRIDGE_REFRESH_MARGIN"
	_, rows, _ := usageRows(t)
	places := map[string]string{"bridge -h": rows[key]}
	for line := range strings.Lines(deployRead(t, "deploy/bridge.env.example")) {
		if strings.HasPrefix(line, "# "+key+":") {
			places["deploy/bridge.env.example"] = line
		}
	}
	for line := range strings.Lines(deployRead(t, "README.md")) {
		if strings.HasPrefix(line, "| `"+key+"`") {
			places["README.md"] = line
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
