package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOpenAPILint checks openapi.yaml against what Redocly CLI (its recommended rules) and Spectral (the
// spectral:oas ruleset) reported on it, at the versions lint/package-lock.json pins and with the
// configurations in lint/, and fails on any error either reports; warnings are logged. The linters are
// npm packages, so go test does not run them: lint/run does (.ci/run runs it), into the directory that
// API_LINT_RESULTS names; without it the test skips.
func TestOpenAPILint(t *testing.T) {
	dir := lintResults(t)
	t.Run("redocly", func(t *testing.T) {
		t.Parallel()
		out := linterReport(t, dir, "redocly")
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
		out := linterReport(t, dir, "spectral")
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

// lintResults returns the directory of lint/run's reports that API_LINT_RESULTS names, and skips the test
// when it names none.
func lintResults(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("API_LINT_RESULTS")
	if dir == "" {
		t.Skip("API_LINT_RESULTS is not set: run api/lint/run DIR (Node.js and npm) and set it to DIR, as .ci/run does")
	}
	return dir
}

// linterReport reads what lint/run wrote of the linter name: its report, its standard error and its exit
// code. A non-zero exit is the linter's way of saying it found errors; reportFindings tells that from a
// crash.
func linterReport(t *testing.T, dir, name string) linterOutput {
	t.Helper()
	var out linterOutput
	var err error
	if out.stdout, err = os.ReadFile(filepath.Join(dir, name+".json")); err != nil {
		t.Fatalf("%v: did api/lint/run write %s?", err, dir)
	}
	if out.stderr, err = os.ReadFile(filepath.Join(dir, name+".stderr")); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, name+".exit"))
	if err != nil {
		t.Fatal(err)
	}
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("%s.exit: %v", name, err)
	}
	if code != 0 {
		out.err = errors.New("exit status " + strconv.Itoa(code))
	}
	return out
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
