package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestRunBounded: once ctx is done, runBounded waits for the daemon only so long; before that, and for
// a daemon that returns in time, it returns the daemon's own result.
func TestRunBounded(t *testing.T) {
	errDaemon := errors.New("daemon failed")
	if err := runBounded(context.Background(), func(context.Context) error { return errDaemon }, time.Hour); err != errDaemon {
		t.Errorf("a daemon that fails by itself: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := runBounded(ctx, func(ctx context.Context) error { <-ctx.Done(); return nil }, time.Hour); err != nil {
		t.Errorf("a daemon that stops on the signal: %v", err)
	}

	stuck := make(chan struct{})
	defer close(stuck)
	start := time.Now()
	err := runBounded(ctx, func(context.Context) error { <-stuck; return nil }, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "exiting without a clean stop") {
		t.Errorf("a daemon stuck past the bound: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("runBounded waited %v for a bound of 100ms", d)
	}
}

// jsonList returns the JSON array that follows prefix on the last line of the file that starts with it
// (the Dockerfile's exec-form instructions and the compose file's inline lists are JSON arrays; the
// Dockerfile's last ENTRYPOINT is its default stage's, the daemon's).
func jsonList(t *testing.T, file, prefix string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", file))
	if err != nil {
		t.Fatal(err)
	}
	var list []string
	found := false
	for line := range strings.Lines(string(raw)) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			list, found = nil, true
			if err := json.Unmarshal([]byte(rest), &list); err != nil {
				t.Fatalf("%s: %s: %v", file, line, err)
			}
		}
	}
	if !found {
		t.Fatalf("%s has no line starting with %q", file, prefix)
	}
	return list
}

// startRun runs the command line args as main does, in the background, and waits until its stderr
// contains want. stop cancels it (SIGTERM's equivalent) and returns the exit code.
func startRun(t *testing.T, args []string, want string) (stderr *testutil.Buffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stderr = &testutil.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, io.Discard, stderr) }()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(stderr.String(), want) {
		select {
		case code := <-done:
			cancel()
			t.Fatalf("bridge %q exited %d:\n%s", args, code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("bridge %q: no %q within 15s:\n%s", args, want, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return stderr, func() int { cancel(); return <-done }
}

// TestImageEntrypointRuns runs the command the image runs, as this binary's run function: the
// Dockerfile's entrypoint ('bridge run', configured from the environment). (cmd/sim's tests run the
// compose file's simulator command.)
func TestImageEntrypointRuns(t *testing.T) {
	entry := jsonList(t, "Dockerfile", "ENTRYPOINT ")
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{EventRate: 20})
	for k, v := range up.Env(ns.URL(), map[string]string{"BRIDGE_LOG_LEVEL": "info"}) {
		t.Setenv(k, v)
	}
	stderr, stop := startRun(t, entry[1:], "stream connected")
	if code := stop(); code != 0 {
		t.Errorf("bridge %q exited %d after SIGTERM's equivalent:\n%s", entry[1:], code, stderr.String())
	}

	// Every line names its component (docs/operations.md, Logs), the command's own included.
	logs := stderr.String()
	for _, want := range []string{`"msg":"starting"`, `"msg":"stopped"`, `"msg":"in-flight publishes completed"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log lacks %s", want)
		}
	}
	for line := range strings.Lines(logs) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		if c, _ := r["component"].(string); c == "" {
			t.Errorf("log line without component: %s", line)
		}
	}
}

// TestCommands: the commands and their exit codes; the commands that moved out name their new place.
func TestCommands(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string
	}{
		{[]string{"version"}, 0, "tracking-bridge dev (commit unknown, go", ""},
		{[]string{"-h"}, 0, "BRIDGE_UPSTREAM_URL", ""},
		{[]string{"run", "-h"}, 0, "BRIDGE_UPSTREAM_URL", ""},
		{[]string{"run", "--help"}, 0, "bridge check-config", ""},
		{[]string{"check-config", "-h"}, 0, "BRIDGE_UPSTREAM_URL", ""},
		{[]string{"run", "extra"}, 2, "", "run takes no arguments"},
		{[]string{"check-config", "extra"}, 2, "", "check-config takes no arguments"},
		{[]string{"sim"}, 2, "", "go run ./cmd/sim"},
		{[]string{"demo"}, 2, "", "go run ./cmd/demo"},
		{[]string{"bench"}, 2, "", "go run ./cmd/bench"},
		{[]string{"nonsense"}, 2, "", `unknown command "nonsense"`},
		{[]string{"cursor"}, 0, "bridge cursor restart -after ID", ""},
		{[]string{"cursor", "-h"}, 0, "bridge cursor show", ""},
		{[]string{"cursor", "restart"}, 2, "", "give exactly one of -after ID and -from-beginning"},
		{[]string{"cursor", "restart", "-after", "x", "-from-beginning"}, 2, "", "give exactly one of"},
		{[]string{"cursor", "show", "extra"}, 2, "", `unexpected argument "extra"`},
		{[]string{"cursor", "show", "-bogus"}, 2, "", "flag provided but not defined"},
		{[]string{"cursor", "rewind"}, 2, "", `unknown subcommand "rewind"`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String(), tc.out) || !strings.Contains(stderr.String(), tc.err) {
			t.Errorf("bridge %q = %d\nstdout:\n%s\nstderr:\n%s\nwant %d, %q on stdout, %q on stderr",
				tc.args, code, &stdout, &stderr, tc.code, tc.out, tc.err)
		}
	}
}

// Secrets the command test uses; each must never appear in the command's output.
const (
	secUpstreamPassword = "upstream-Pa55-7f3b9c1e"
	secWrongPassword    = "wrong-Pa55-a8d2e4f6"
	secNATSPassword     = "nats-Pa55-5c7e9a1b"
	secNATSToken        = "nats-Tok3n-2b4d6f8h"
	secClientSecret     = "client-S3cret-4e6a8c0d" // in the token URL's query
)

// TestSecretsNeverLeakFromCommand searches the output of 'bridge run' as the process runs it (its
// start-up line logs the configuration), of bridge -h, bridge version and a run whose configuration is
// invalid, all with the secrets in the environment, for the passwords and for every access and refresh
// token the upstream issued. (internal/daemon's TestSecretsNeverLeak covers the flows that handle
// secrets: refreshes, logins, refusals, the endpoints.)
func TestSecretsNeverLeakFromCommand(t *testing.T) {
	var outputs []string
	natsA := testutil.StartNATS(t, func(o *server.Options) {
		o.Users = []*server.User{{Username: "bridge", Password: secNATSPassword}}
	})
	up := simtest.Start(t, false, sim.Options{Users: map[string]string{"alice": secUpstreamPassword}, EventRate: 50})

	// 'bridge run' as the process runs it, configured from the environment.
	for k, v := range up.Env(natsA.URL(), map[string]string{
		"BRIDGE_USERNAME": "alice", "BRIDGE_PASSWORD": secUpstreamPassword,
		"BRIDGE_NATS_USER": "bridge", "BRIDGE_NATS_PASSWORD": secNATSPassword,
		"BRIDGE_TOKEN_URL": up.Srv.URL + sim.TokenPath + "?client_secret=" + secClientSecret,
	}) {
		t.Setenv(k, v)
	}
	stderr, stop := startRun(t, []string{"run"}, "stream connected")
	if code := stop(); code != 0 {
		t.Errorf("bridge run exited %d", code)
	}
	outputs = append(outputs, stderr.String())
	var stdout, errOut bytes.Buffer
	code := run(context.Background(), []string{"check-config"}, &stdout, &errOut)
	outputs = append(outputs, fmt.Sprintf("bridge check-config (exit %d):\n%s%s", code, &stdout, &errOut))

	// The command line with the secrets in the environment: bridge -h, and a run whose configuration
	// is invalid (so that it prints its error).
	t.Setenv("BRIDGE_PASSWORD", secUpstreamPassword)
	t.Setenv("BRIDGE_NATS_PASSWORD", secNATSPassword)
	t.Setenv("BRIDGE_NATS_TOKEN", secNATSToken)
	t.Setenv("BRIDGE_NATS_USER", "bridge")
	t.Setenv("BRIDGE_UPSTREAM_URL", "ftp://user:"+secWrongPassword+"@example.com/v1.0")
	t.Setenv("BRIDGE_TOKEN_URL", "https://user:"+secWrongPassword+"@example.com/token?client_secret="+secClientSecret)
	for _, args := range [][]string{{"-h"}, {"run"}, {"version"}} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)
		outputs = append(outputs, fmt.Sprintf("bridge %v (exit %d):\n%s%s", args, code, &stdout, &stderr))
	}

	secrets := append([]string{secUpstreamPassword, secWrongPassword, secNATSPassword, secNATSToken, secClientSecret},
		up.IssuedTokens()...)
	if len(secrets) < 5+2 {
		t.Fatalf("the upstream issued %d tokens, want at least a login's two", len(secrets)-5)
	}
	all := strings.Join(outputs, "\n")
	testutil.NoSecrets(t, all, secrets...)
	// The flows did run and log.
	for _, want := range []string{"stream connected", "[redacted]", "BRIDGE_UPSTREAM_URL", "client_secret=REDACTED",
		"configuration OK", "BRIDGE_TOKEN_URL: must not contain user information"} {
		if !strings.Contains(all, want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestCheckConfig: 'bridge check-config' exits 0 with one line for a valid configuration and 2 with every
// problem for an invalid one, and contacts nothing: neither the NATS server nor the upstream it names
// sees a connection.
func TestCheckConfig(t *testing.T) {
	var dials atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dials.Add(1)
			c.Close()
		}
	}()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { dials.Add(1) }))
	defer up.Close()
	up.Config.ConnState = func(net.Conn, http.ConnState) { dials.Add(1) }

	env := map[string]string{
		"BRIDGE_UPSTREAM_URL":  up.URL + "/v1.0",
		"BRIDGE_TOKEN_URL":     up.URL + "/auth/token",
		"BRIDGE_CLIENT_ID":     "client",
		"BRIDGE_USERNAME":      "alice",
		"BRIDGE_PASSWORD":      "secret-Pa55",
		"BRIDGE_INSECURE_HTTP": "true",
		"BRIDGE_NATS_URL":      "nats://user:nats-Pa55@" + ln.Addr().String(),
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"check-config"}, &stdout, &stderr); code != 0 {
		t.Fatalf("check-config of a valid configuration = %d\n%s%s", code, &stdout, &stderr)
	}
	if out := stdout.String(); !strings.HasPrefix(out, "bridge: configuration OK") || strings.Count(out, "\n") != 1 ||
		strings.Contains(out, "nats-Pa55") || stderr.Len() != 0 {
		t.Errorf("check-config of a valid configuration printed\nstdout: %q\nstderr: %q", out, &stderr)
	}
	// Tracing on, to a collector that is not contacted either.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", up.URL)
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "0.01")
	stdout.Reset()
	if code := run(context.Background(), []string{"check-config"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "tracing to "+up.URL+"/v1/traces, sampler parentbased_traceidratio 0.01)") {
		t.Errorf("check-config with tracing = %d\n%s%s", code, &stdout, &stderr)
	}

	// Problems at once, all reported: the two http:// URLs, a value, a misspelt name.
	t.Setenv("BRIDGE_INSECURE_HTTP", "false")
	t.Setenv("BRIDGE_LOG_LEVEL", "loud")
	t.Setenv("BRIDGE_NATS_UR", "nats://127.0.0.1:4222")
	t.Setenv("OTEL_TRACES_SAMPLER_ARG", "2")
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=otel-Pa55,broken")
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), []string{"check-config"}, &stdout, &stderr); code != 2 {
		t.Errorf("check-config of an invalid configuration = %d, want 2", code)
	}
	for _, want := range []string{"invalid configuration", "BRIDGE_UPSTREAM_URL", "BRIDGE_TOKEN_URL", "BRIDGE_LOG_LEVEL",
		"BRIDGE_NATS_UR: is not a variable of the bridge; did you mean BRIDGE_NATS_URL?",
		"OTEL_TRACES_SAMPLER_ARG: \"2\" is not a ratio from 0 to 1", "OTEL_EXPORTER_OTLP_HEADERS: entry 2 is not key=value"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("check-config of an invalid configuration: stderr lacks %q:\n%s", want, &stderr)
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("check-config of an invalid configuration wrote to stdout: %q", &stdout)
	}
	if strings.Contains(stderr.String(), "otel-Pa55") {
		t.Errorf("check-config shows a header's value:\n%s", &stderr)
	}
	time.Sleep(100 * time.Millisecond) // a connection made would have been accepted by now
	if n := dials.Load(); n != 0 {
		t.Errorf("check-config made %d connections, want none", n)
	}
}

// TestVersionFromBuildInfo: without -ldflags, the version and commit come from the Go build information;
// what -ldflags set wins.
func TestVersionFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name         string
		v, c         string
		bi           *debug.BuildInfo
		wantV, wantC string
	}{
		{"no build information", "dev", "unknown", nil, "dev", "unknown"},
		{"go install module@version", "dev", "unknown", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0", "unknown"},
		{"go build in a checkout", "dev", "unknown", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "dev", "0123456789ab-dirty"},
		{"pseudo-version and revision", "dev", "unknown", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125-0123456789ab"},
			Settings: vcs[:1]}, "v0.0.0-20261125-0123456789ab", "0123456789ab"},
		{"ldflags win", "v2.0.0", "c0ffee", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}, Settings: vcs}, "v2.0.0", "c0ffee"},
	} {
		if v, c := versionFrom(tc.v, tc.c, tc.bi); v != tc.wantV || c != tc.wantC {
			t.Errorf("%s: %s, %s; want %s, %s", tc.name, v, c, tc.wantV, tc.wantC)
		}
	}
}

// TestVersionOfPlainBuild builds the command as 'go build' does in a git checkout, without -ldflags,
// and checks that 'bridge version' reports the checkout's revision rather than "commit unknown". The
// build runs in a copy of the working tree committed to a fresh repository: the Go toolchain records no
// revision in a git worktree (where .git is a file), nor where GOFLAGS holds -buildvcs=false.
func TestVersionOfPlainBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("copies the source and builds the command")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com"}, args...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %q: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	top := git(".", "rev-parse", "--show-toplevel")
	src := t.TempDir()
	for f := range strings.Lines(git(top, "ls-files", "--cached", "--others", "--exclude-standard")) {
		f = strings.TrimSpace(f)
		b, err := os.ReadFile(filepath.Join(top, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		} else if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git(src, "init", "-q")
	git(src, "add", "-A")
	git(src, "commit", "-q", "-m", "test")
	rev := git(src, "rev-parse", "HEAD")

	bin := filepath.Join(t.TempDir(), "bridge")
	build := exec.Command("go", "build", "-o", bin, "./cmd/bridge")
	build.Dir = src
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=true")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "(commit " + rev[:12] + ", " + runtime.Version() + ")"
	if !strings.Contains(string(out), want) {
		t.Errorf("bridge version = %q, want %q", out, want)
	}
}

// TestRunFailureIsLogged: when the daemon stops with an error after the logger exists (here its HTTP
// address is taken), the reason is the last log line, in the log's format with its component, and
// nothing else is written: a log pipeline keeps it. The exit code is 1.
func TestRunFailureIsLogged(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	for k, v := range up.Env(ns.URL(), map[string]string{"BRIDGE_HTTP_ADDR": taken.Addr().String()}) {
		t.Setenv(k, v)
	}
	var stderr testutil.Buffer
	if code := run(context.Background(), []string{"run"}, io.Discard, &stderr); code != 1 {
		t.Fatalf("exit code %d, want 1:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var last map[string]any
	for _, line := range lines {
		last = nil // a map Unmarshal fills keeps the keys of the line before
		if err := json.Unmarshal([]byte(line), &last); err != nil {
			t.Fatalf("a line that is not JSON: %s", line)
		}
	}
	if last["msg"] != "stopped with an error" || last["component"] != "main" || last["level"] != "ERROR" ||
		!strings.Contains(fmt.Sprint(last["err"]), "BRIDGE_HTTP_ADDR") {
		t.Errorf("last line %v, want the error with component main", last)
	}
}
