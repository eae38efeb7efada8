package tracking

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestGeneratedTypesUpToDate runs the //go:generate line of generate.go (oapi-codegen as go.mod's tool
// directive pins it) into a temporary file and fails when types.gen.go differs: the document changed and
// 'go generate ./tracking' was not run, or types.gen.go was edited by hand. 'go tool' builds the
// generator from the module cache (or the module proxy) the first time, and the build cache keeps it.
func TestGeneratedTypesUpToDate(t *testing.T) {
	src, err := os.ReadFile("generate.go")
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, line := range strings.Split(string(src), "\n") {
		if rest, ok := strings.CutPrefix(line, "//go:generate "); ok {
			args = strings.Fields(rest)
		}
	}
	if len(args) < 4 || args[0] != "go" || args[1] != "tool" || args[2] != "oapi-codegen" {
		t.Fatalf("generate.go has no '//go:generate go tool oapi-codegen ...' line: %q", args)
	}
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to check the generated types: %v", err)
	}
	// The same command with its -o pointed at a temporary file (the configuration names no output).
	out := filepath.Join(t.TempDir(), "types.gen.go")
	cmdArgs := append([]string{}, args[1:]...)
	o := slices.Index(cmdArgs, "-o")
	if o < 0 || o+1 >= len(cmdArgs) || cmdArgs[o+1] != "types.gen.go" {
		t.Fatalf("the //go:generate line must write with -o types.gen.go: %q", args)
	}
	cmdArgs[o+1] = out
	cmd := exec.Command(goCmd, cmdArgs...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(cmdArgs, " "), err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile("types.gen.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("types.gen.go is not what oapi-codegen makes of api/openapi.yaml: run 'go generate ./tracking'\n%s",
			firstDifference(have, want))
	}
}

// firstDifference shows the first line where have and want differ.
func firstDifference(have, want []byte) string {
	h, w := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(h), len(w)) {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return fmt.Sprintf("line %d:\n  have: %s\n  want: %s", i+1, hl, wl)
		}
	}
	return ""
}
