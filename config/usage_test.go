package config_test

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/config"
)

// usageRows returns the variables Usage lists, in order, and each one's row.
func usageRows(t *testing.T) (keys []string, rows map[string]string, out string) {
	t.Helper()
	var buf bytes.Buffer
	config.Usage(&buf)
	out = buf.String()
	rows = make(map[string]string)
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], config.Prefix+"_") {
			if _, dup := rows[f[0]]; dup {
				t.Errorf("%s is listed twice", f[0])
			}
			keys = append(keys, f[0])
			rows[f[0]] = line
		}
	}
	return keys, rows, out
}

// TestUsage checks Usage against Config's struct tags: every variable, its default, whether it is
// required, and a _FILE variant for each secret.
func TestUsage(t *testing.T) {
	t.Parallel()
	_, rows, out := usageRows(t)

	want := 0
	ct := reflect.TypeFor[config.Config]()
	for i := range ct.NumField() {
		sf := ct.Field(i)
		key := config.Prefix + "_" + sf.Tag.Get("envconfig")
		def := sf.Tag.Get("default")
		want++
		row, ok := rows[key]
		if !ok {
			t.Errorf("%s is not listed", key)
			continue
		}
		if def != "" && !strings.Contains(row, " "+def+" ") {
			t.Errorf("%s: row does not show the default %q: %q", key, def, row)
		}
		if sf.Tag.Get("required") == "true" && !strings.Contains(row, "(required)") {
			t.Errorf("%s: row does not say required: %q", key, row)
		}
		if sf.Type == reflect.TypeFor[config.Secret]() {
			want++
			if def != "" {
				t.Errorf("%s: a secret must not have a default, Usage would print it", key)
			}
			if _, ok := rows[key+"_FILE"]; !ok {
				t.Errorf("%s_FILE is not listed", key)
			}
		}
	}
	if len(rows) != want {
		t.Errorf("Usage lists %d variables, want %d:\n%s", len(rows), want, out)
	}
}

// TestVariablesAreUsages checks that Variables names exactly the variables Usage lists, in its order.
func TestVariablesAreUsages(t *testing.T) {
	t.Parallel()
	keys, _, _ := usageRows(t)
	if read := config.Variables(); !slices.Equal(read, keys) {
		t.Errorf("Variables are\n%v\nUsage lists\n%v", read, keys)
	}
}
