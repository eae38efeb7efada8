package config

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kelseyhightower/envconfig"
)

func TestUsage(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	Usage(&buf)
	out := buf.String()

	rows := make(map[string]string) // variable -> its row
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "BRIDGE_") {
			if _, dup := rows[f[0]]; dup {
				t.Errorf("%s is listed twice", f[0])
			}
			rows[f[0]] = line
		}
	}

	want := 0
	for _, f := range fields {
		want++
		row, ok := rows[f.key]
		if !ok {
			t.Errorf("%s is not listed", f.key)
			continue
		}
		if f.def != "" && !strings.Contains(row, " "+f.def+" ") {
			t.Errorf("%s: row does not show the default %q: %q", f.key, f.def, row)
		}
		if f.required && !strings.Contains(row, "(required)") {
			t.Errorf("%s: row does not say required: %q", f.key, row)
		}
		if f.secret {
			want++
			if f.def != "" {
				t.Errorf("%s: a secret must not have a default, Usage would print it", f.key)
			}
			if _, ok := rows[f.key+"_FILE"]; !ok {
				t.Errorf("%s_FILE is not listed", f.key)
			}
		}
	}
	if len(rows) != want {
		t.Errorf("Usage lists %d variables, want %d:\n%s", len(rows), want, out)
	}
	if strings.Contains(out, "config: usage:") {
		t.Errorf("Usage failed:\n%s", out)
	}
}

// TestFieldsMatchEnvconfig checks that Load reads the variables envconfig (and so Usage) names.
func TestFieldsMatchEnvconfig(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := envconfig.Usagef(Prefix, new(Config), &buf, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
		t.Fatal(err)
	}
	keys := strings.Fields(buf.String())
	if len(keys) != len(fields) {
		t.Fatalf("envconfig sees %d variables, Load %d", len(keys), len(fields))
	}
	for i, f := range fields {
		if keys[i] != f.key {
			t.Errorf("field %d: envconfig names %s, Load reads %s", i, keys[i], f.key)
		}
	}
}
