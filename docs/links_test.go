// Package docs holds the reference documents. Its only code is this test, which keeps the links of the
// README and of docs/*.md, and the references to docs/*.md and to api/openapi.yaml's operations in the
// code and configuration files, pointing at files, headings and operations that exist.
package docs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

var (
	// link matches a Markdown link or image target: [text](target).
	link = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	// headingLink matches a link in a heading, whose text counts for the anchor.
	headingLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	// docRef matches a reference to a document in code or configuration: docs/delivery.md#reports.
	docRef = regexp.MustCompile(`\bdocs/([A-Za-z0-9_-]+\.md)(#[A-Za-z0-9_-]*)?`)
	// operationRef matches an OpenAPI operation id named in a Go comment: "operation reportTrackingEvent".
	operationRef = regexp.MustCompile(`\boperation ([a-z]+[A-Z][A-Za-z]*)\b`)
	// operationID matches an operation id in api/openapi.yaml.
	operationID = regexp.MustCompile(`(?m)^\s+operationId: (\w+)$`)
)

// TestRelativeLinks: every relative link in README.md and docs/*.md names a file of the repository, and
// every #anchor a heading of the Markdown file it points into (GitHub's anchors: lower case, spaces as
// '-', punctuation dropped, '-1', '-2' for repeated headings).
func TestRelativeLinks(t *testing.T) {
	docs, err := filepath.Glob("*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs/*.md: %v", err)
	}
	anchors := map[string]map[string]bool{} // by cleaned path
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(raw))
		anchors[path] = a
		return a
	}
	for _, doc := range append([]string{filepath.Join("..", "README.md")}, docs...) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range proseLines(string(raw)) {
			for _, m := range link.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				file := filepath.Clean(filepath.Join(filepath.Dir(doc), path))
				if path == "" {
					file = filepath.Clean(doc)
				}
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s:%d: link %s: no such file", doc, l.n, target)
					continue
				}
				if anchor != "" && strings.HasSuffix(file, ".md") && !anchorsOf(file)[anchor] {
					t.Errorf("%s:%d: link %s: %s has no heading with that anchor", doc, l.n, target, file)
				}
			}
		}
	}
}

// TestRepositoryReferences: every reference to a document of docs/ and its anchor (as
// docs/delivery.md#reports) that a Go file, a YAML or JSON file, a server configuration or the Dockerfile
// holds names a document with that heading, and every OpenAPI
// operation a Go comment names ("operation reportTrackingEvent") is an operation id of api/openapi.yaml.
// Comments cite the repository's own reference, and this keeps them from pointing nowhere when a heading
// or an operation is renamed.
func TestRepositoryReferences(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "api", "openapi.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	operations := map[string]bool{}
	for _, m := range operationID.FindAllStringSubmatch(string(raw), -1) {
		operations[m[1]] = true
	}
	if len(operations) == 0 {
		t.Fatal("api/openapi.yaml has no operationId")
	}
	anchors := map[string]map[string]bool{}
	checked := 0
	err = filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != ".." && (strings.HasPrefix(name, ".") || name == "node_modules" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(path)
		switch {
		case ext == ".go", ext == ".yaml", ext == ".yml", ext == ".json", ext == ".conf", d.Name() == "Dockerfile":
		default:
			return nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, l := range strings.Split(string(text), "\n") {
			for _, m := range docRef.FindAllStringSubmatch(l, -1) {
				checked++
				doc, anchor := m[1], strings.TrimPrefix(m[2], "#")
				a, ok := anchors[doc]
				if !ok {
					raw, err := os.ReadFile(doc)
					if err != nil {
						t.Errorf("%s:%d: docs/%s: no such document", path, i+1, doc)
						anchors[doc] = nil
						continue
					}
					a = headingAnchors(string(raw))
					anchors[doc] = a
				}
				if a != nil && anchor != "" && !a[anchor] {
					t.Errorf("%s:%d: docs/%s#%s: the document has no heading with that anchor", path, i+1, doc, anchor)
				}
			}
			if ext != ".go" {
				continue
			}
			if k := strings.Index(l, "//"); k >= 0 {
				for _, m := range operationRef.FindAllStringSubmatch(l[k:], -1) {
					if !operations[m[1]] {
						t.Errorf("%s:%d: operation %s is not an operationId of api/openapi.yaml", path, i+1, m[1])
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Error("no docs/*.md reference found outside docs/: is the walk looking at the repository?")
	}
}

// line is a line of a document and its number, from 1.
type line struct {
	n    int
	text string
}

// proseLines returns the lines of a Markdown document outside fenced code blocks, in order.
func proseLines(text string) []line {
	var lines []line
	fenced := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			lines = append(lines, line{i + 1, l})
		}
	}
	return lines
}

// headingAnchors returns the GitHub anchors of a Markdown document's ATX headings.
func headingAnchors(text string) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, l := range proseLines(text) {
		if !strings.HasPrefix(l.text, "#") {
			continue
		}
		title := strings.TrimLeft(l.text, "#")
		if title == "" || title[0] != ' ' {
			continue
		}
		a := anchor(strings.TrimSpace(title))
		if k := seen[a]; k > 0 {
			anchors[fmt.Sprintf("%s-%d", a, k)] = true
		} else {
			anchors[a] = true
		}
		seen[a]++
	}
	return anchors
}

// anchor is GitHub's anchor of a heading: lower case, letters, digits, '-' and '_' kept, spaces as '-',
// everything else dropped. The text of a link in a heading counts, not its target.
func anchor(title string) string {
	title = headingLink.ReplaceAllString(title, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(title) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestAnchor(t *testing.T) {
	for title, want := range map[string]string{
		"Replicas: one leader, fenced":                                      "replicas-one-leader-fenced",
		"Watching events with the `nats` CLI":                               "watching-events-with-the-nats-cli",
		"NATS: authentication, TLS and permissions":                         "nats-authentication-tls-and-permissions",
		"Reports at 16 in flight (one server, `BRIDGE_REPORT_CONCURRENCY`)": "reports-at-16-in-flight-one-server-bridge_report_concurrency",
		"The bridge's own acknowledgements, and why":                        "the-bridges-own-acknowledgements-and-why",
		"Report validation (`consume.Validate`)":                            "report-validation-consumevalidate",
		"From Go: package tracking":                                         "from-go-package-tracking",
	} {
		if got := anchor(title); got != want {
			t.Errorf("anchor(%q) = %q, want %q", title, got, want)
		}
	}
}
