package config

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var updateReference = flag.Bool("update", false, "rewrite docs/configuration.md from the Config struct")

// TestConfigurationReference: docs/configuration.md is what writeReference renders from Config's tags
// (run with -update to rewrite it), and it lists every variable Usage lists.
func TestConfigurationReference(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := writeReference(&buf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "docs", "configuration.md")
	if *updateReference {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, buf.Bytes()) {
		t.Errorf("%s is out of date; run: go test ./config -run TestConfigurationReference -update", path)
	}

	var usage strings.Builder
	Usage(&usage)
	rows := 0
	for line := range strings.Lines(usage.String()) {
		key, _, _ := strings.Cut(line, " ")
		if !strings.HasPrefix(key, Prefix+"_") {
			continue
		}
		rows++
		if !strings.Contains(buf.String(), "\n| `"+key+"` |") {
			t.Errorf("%s lacks %s", path, key)
		}
	}
	if n := strings.Count(buf.String(), "\n| `"+Prefix+"_"); n != rows {
		t.Errorf("%s has %d rows of variables, Usage %d", path, n, rows)
	}
}
