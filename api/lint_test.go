package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestOpenAPILint lints openapi.yaml with Redocly CLI (its recommended rules) and Spectral (the
// spectral:oas ruleset), at the versions lint/package-lock.json pins and with the configurations in
// lint/, and fails on any error either reports; warnings are logged. The first run installs the linters
// into lint/node_modules with 'npm ci' (tens of seconds), later runs reuse them while package-lock.json
// is unchanged. It skips where Node.js or npm is not installed, or the npm registry cannot be reached.
func TestOpenAPILint(t *testing.T) {
	dir := installLinters(t)
	// The linters' own calls home and notices, off: the test's output is the findings.
	env := append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	t.Run("redocly", func(t *testing.T) {
		t.Parallel()
		out := runLinter(t, dir, env, "redocly", "lint", "--config", "redocly.yaml", "--format", "json", "../openapi.yaml")
		var r struct {
			Totals   struct{ Errors, Warnings, Ignored int }
			Version  string
			Problems []struct {
				RuleID   string `json:"ruleId"`
				Severity string
				Message  string
				Location []struct {
					Pointer string
					Start   struct{ Line, Col int }
				}
			}
		}
		if err := json.Unmarshal(out.stdout, &r); err != nil {
			t.Fatalf("redocly's report is not JSON: %v\n%s\n%s", err, out.stdout, out.stderr)
		}
		var fs []finding
		for _, p := range r.Problems {
			f := finding{severity: p.Severity, rule: p.RuleID, message: p.Message}
			if len(p.Location) > 0 {
				l := p.Location[0]
				f.line, f.col, f.where = l.Start.Line, l.Start.Col, l.Pointer
			}
			fs = append(fs, f)
		}
		reportFindings(t, "redocly "+r.Version, fs, out, fmt.Sprintf("%d ignored in lint/.redocly.lint-ignore.yaml", r.Totals.Ignored))
	})
	t.Run("spectral", func(t *testing.T) {
		t.Parallel()
		out := runLinter(t, dir, env, "spectral", "lint", "--ruleset", ".spectral.yaml", "--format", "json", "--quiet", "../openapi.yaml")
		var results []struct {
			Code     string
			Message  string
			Severity int // 0 error, 1 warning, 2 information, 3 hint
			Path     []any
			Range    struct{ Start struct{ Line, Character int } }
		}
		if err := json.Unmarshal(out.stdout, &results); err != nil {
			t.Fatalf("spectral's report is not JSON: %v\n%s\n%s", err, out.stdout, out.stderr)
		}
		var fs []finding
		for _, r := range results {
			severity := "hint"
			if r.Severity >= 0 && r.Severity < 3 {
				severity = []string{"error", "warning", "info"}[r.Severity]
			}
			path := make([]string, len(r.Path))
			for i, p := range r.Path {
				path[i] = fmt.Sprint(p)
			}
			fs = append(fs, finding{severity: severity, rule: r.Code, message: r.Message,
				line: r.Range.Start.Line + 1, col: r.Range.Start.Character + 1, where: strings.Join(path, ".")})
		}
		reportFindings(t, "spectral", fs, out, "")
	})
}

// A finding is one problem a linter reports, at a line and column of file (openapi.yaml when empty).
type finding struct {
	file, severity, rule, message, where string
	line, col                            int
}

type linterOutput struct {
	stdout, stderr []byte
	err            error
}

// runLinter runs the linter name of lint/node_modules/.bin in dir. A non-zero exit is the linter's way
// of saying it found errors; reportFindings tells that from a crash.
func runLinter(t *testing.T, dir string, env []string, name string, args ...string) linterOutput {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "node_modules", ".bin", name), args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("run %s: %v", name, err)
	}
	return linterOutput{stdout: stdout.Bytes(), stderr: stderr.Bytes(), err: err}
}

// reportFindings fails on every error-level finding and logs the others, with the counts.
func reportFindings(t *testing.T, linter string, fs []finding, out linterOutput, note string) {
	t.Helper()
	counts := map[string]int{}
	for _, f := range fs {
		counts[f.severity]++
		file := f.file
		if file == "" {
			file = "openapi.yaml"
		}
		msg := fmt.Sprintf("%s:%d:%d: %s %s: %s (%s)", file, f.line, f.col, f.severity, f.rule, f.message, f.where)
		if f.severity == "error" {
			t.Error(msg)
		} else {
			t.Log(msg)
		}
	}
	if out.err != nil && counts["error"] == 0 {
		t.Fatalf("%s failed without reporting an error: %v\n%s", linter, out.err, out.stderr)
	}
	summary := fmt.Sprintf("%s: %d errors, %d warnings", linter, counts["error"], counts["warning"])
	if n := len(fs) - counts["error"] - counts["warning"]; n > 0 {
		summary += fmt.Sprintf(", %d infos and hints", n)
	}
	if note != "" {
		summary += "; " + note
	}
	t.Log(summary)
}

// installedStamp, in node_modules, holds the SHA-256 of the package-lock.json it was installed from.
const installedStamp = ".package-lock.sha256"

// installLinters returns the absolute path of lint/, with the linters of its package-lock.json installed
// in lint/node_modules: reused when the stamp matches, else installed with 'npm ci' into a temporary
// directory and renamed into place, so a run beside this one never sees half an install.
func installLinters(t *testing.T) string {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed: the linters of api/lint (OpenAPI, AsyncAPI) need Node.js and npm", tool)
		}
	}
	dir, err := filepath.Abs("lint")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(lock)
	stamp := hex.EncodeToString(sum[:])
	modules := filepath.Join(dir, "node_modules")
	installed := func() bool {
		b, err := os.ReadFile(filepath.Join(modules, installedStamp))
		return err == nil && string(b) == stamp
	}
	if installed() {
		return dir
	}

	tmp, err := os.MkdirTemp(dir, ".npm-ci-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(tmp, name), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// No install scripts: the linters need none (the one there is reports the download to its vendor).
	cmd := exec.CommandContext(ctx, "npm", "ci", "--ignore-scripts", "--audit=false", "--fund=false", "--update-notifier=false")
	cmd.Dir = tmp
	start := time.Now()
	out, err := cmd.CombinedOutput()
	switch {
	case ctx.Err() != nil:
		t.Skipf("npm ci did not finish in 5 minutes: is the npm registry reachable?\n%s", out)
	case err != nil && npmNetworkError.Match(out):
		t.Skipf("npm ci could not reach the npm registry to install the linters of api/lint: %v\n%s", err, out)
	case err != nil:
		t.Fatalf("npm ci in %s: %v\n%s", tmp, err, out)
	}
	t.Logf("installed the linters of api/lint with npm ci in %v", time.Since(start).Round(100*time.Millisecond))
	if err := os.WriteFile(filepath.Join(tmp, "node_modules", installedStamp), []byte(stamp), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Rename(modules, filepath.Join(tmp, "stale")) // an install from another package-lock.json, if any
	if err := os.Rename(filepath.Join(tmp, "node_modules"), modules); err != nil && !installed() {
		t.Fatal(err)
	}
	return dir
}

// npmNetworkError matches npm's report of a registry it could not reach.
var npmNetworkError = regexp.MustCompile(`(?m)^npm (?:ERR!|error) (?:network |code (?:ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH)\b)`)
