package deploy_test

// Tests of the Dockerfile, read by BuildKit's own parser: its stages, base images, build commands,
// entrypoint and default command.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/distribution/reference"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"

	"github.com/tracking-bridge/tracking-bridge/config"
)

// The images the Dockerfile builds from and onto.
const (
	goImage      = "docker.io/library/golang:1.26"
	runtimeImage = "gcr.io/distroless/static-debian12:nonroot"
	runtimeUser  = "nonroot:nonroot"
)

// stage is what the tests read from one stage of the Dockerfile.
type stage struct {
	instructions.Stage
	entrypoint, cmd *instructions.ShellDependantCmdLine
	args            []string                          // names of its ARGs
	expose          []string                          // ports
	user            string                            // the last USER
	builds          []string                          // RUN lines that run go build
	copies          map[string]*copyFrom              // COPY --from=<stage> <src> <dst>, by destination
	commands        map[string][]instructions.Command // every instruction, by name (lower case)
}

// copyFrom is a COPY --from: the stage and the path it copies.
type copyFrom struct{ from, src string }

// dockerfile is the Dockerfile as BuildKit reads it: its stages, in order (the last is the default
// target), and the names of the ARGs before the first FROM.
type dockerfile struct {
	stages   []*stage
	metaArgs []string
}

// parseDockerfile parses the Dockerfile with BuildKit's parser and instructions, as docker build does;
// the parser's warnings and the lint rules BuildKit checks while parsing fail the test.
func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	f, err := os.Open(repoPath("Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res, err := parser.Parse(f)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	for _, w := range res.Warnings {
		t.Errorf("Dockerfile:%d: %s", w.Location.Start.Line, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, _, url, msg string, loc []parser.Range) {
		line := 0
		if len(loc) > 0 {
			line = loc[0].Start.Line
		}
		t.Errorf("Dockerfile:%d: %s: %s (%s)", line, rule, msg, url)
	}})
	stages, metaArgs, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("Dockerfile: %v", err)
	}
	if len(stages) == 0 {
		t.Fatal("the Dockerfile has no FROM")
	}
	var d dockerfile
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			d.metaArgs = append(d.metaArgs, kv.Key)
		}
	}
	for _, st := range stages {
		s := &stage{Stage: st, copies: map[string]*copyFrom{}, commands: map[string][]instructions.Command{}}
		for _, c := range st.Commands {
			s.commands[c.Name()] = append(s.commands[c.Name()], c)
			switch c := c.(type) {
			case *instructions.ArgCommand:
				for _, a := range c.Args {
					s.args = append(s.args, a.Key)
				}
			case *instructions.ExposeCommand:
				s.expose = append(s.expose, c.Ports...)
			case *instructions.UserCommand:
				s.user = c.User
			case *instructions.EntrypointCommand:
				s.entrypoint = &c.ShellDependantCmdLine
			case *instructions.CmdCommand:
				s.cmd = &c.ShellDependantCmdLine
			case *instructions.RunCommand:
				if line := strings.Join(c.CmdLine, " "); strings.Contains(line, "go build") {
					s.builds = append(s.builds, line)
				}
			case *instructions.CopyCommand:
				if c.From == "" {
					continue
				}
				if len(c.SourcePaths) != 1 {
					t.Fatalf("stage %q: COPY --from=%s %q: want one source", s.Name, c.From, c.SourcePaths)
				}
				s.copies[c.DestPath] = &copyFrom{from: c.From, src: c.SourcePaths[0]}
			}
		}
		d.stages = append(d.stages, s)
	}
	return d
}

// stage returns the stage named name, nil if none.
func (d dockerfile) stage(name string) *stage {
	for _, s := range d.stages {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// final is the default target's stage.
func (d dockerfile) final() *stage { return d.stages[len(d.stages)-1] }

// args are the ARGs of the Dockerfile: before the first FROM and in every stage.
func (d dockerfile) args() []string {
	out := slices.Clone(d.metaArgs)
	for _, s := range d.stages {
		out = append(out, s.args...)
	}
	return out
}

// binary returns where stage s puts the binary of the package pkg (./cmd/<name>) that it copies from
// another stage, and the RUN line that built it there.
func (d dockerfile) binary(t *testing.T, s *stage, pkg string) (dst, build string) {
	t.Helper()
	for dst, c := range s.copies {
		src := d.stage(c.from)
		if src == nil {
			t.Fatalf("stage %q copies %s from %q, which is not a stage", s.Name, dst, c.from)
		}
		for _, b := range src.builds {
			if strings.Contains(b, "-o "+c.src+" ") && strings.HasSuffix(b, " "+pkg) {
				return dst, b
			}
		}
	}
	t.Fatalf("stage %q copies no binary built from %s", s.Name, pkg)
	return "", ""
}

// execForm returns the command line of an ENTRYPOINT or CMD in exec (JSON) form; the shell form, which
// runs through /bin/sh (there is none in distroless) and drops arguments, fails the test.
func execForm(t *testing.T, what string, c *instructions.ShellDependantCmdLine) []string {
	t.Helper()
	if c == nil {
		return nil
	}
	if c.PrependShell {
		t.Errorf("%s %q is in shell form; write it as a JSON array (exec form)", what, c.CmdLine)
	}
	return c.CmdLine
}

// qualified reports whether image names its registry (docker.io/library/golang, not golang): an engine
// whose default registry is not Docker Hub, or that has none (podman), finds it only then.
func qualified(image string) bool {
	_, err := reference.ParseNamed(image)
	return err == nil
}

// TestDockerfile: a multi-stage build of static, trimmed binaries onto a pinned distroless non-root
// image, every base image fully qualified. The default target is the daemon alone, version-stamped,
// with the binary as its entrypoint and run as its default command (so that 'docker run IMAGE version'
// and 'check-config' work); the sim target is the simulator alone (cmd/sim), for the compose demo.
func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	for _, s := range d.stages {
		from := s.BaseName
		if d.stage(from) == nil && !qualified(from) {
			t.Errorf("stage %q from %q: name the registry (docker.io/library/..., gcr.io/...)", s.Name, from)
		}
		if len(s.builds) > 0 {
			if d.stage(from) == nil && from != goImage {
				t.Errorf("build stage %q from %q: want %s (or another build stage)", s.Name, from, goImage)
			}
			if d.stage(from) == nil && s.Platform != "$BUILDPLATFORM" {
				t.Errorf("build stage %q: platform %q; build on $BUILDPLATFORM and cross-compile", s.Name, s.Platform)
			}
		} else if len(s.copies) > 0 {
			if from != runtimeImage {
				t.Errorf("image stage %q from %q: want %s", s.Name, from, runtimeImage)
			}
			if s.user != runtimeUser {
				t.Errorf("image stage %q: USER %q, want %s", s.Name, s.user, runtimeUser)
			}
			if len(s.copies) != 1 {
				t.Errorf("image stage %q holds %d binaries, want one", s.Name, len(s.copies))
			}
		}
		for _, b := range s.builds {
			for _, want := range []string{"CGO_ENABLED=0", "-trimpath", "-s -w", "GOOS=$TARGETOS", "GOARCH=$TARGETARCH"} {
				if !strings.Contains(b, want) {
					t.Errorf("build command %q lacks %q", b, want)
				}
			}
		}
		if len(s.commands["healthcheck"]) > 0 {
			t.Errorf("stage %q has a HEALTHCHECK; it is left to the orchestrator (/healthz, /readyz)", s.Name)
		}
	}

	// The image: the daemon as the entrypoint, run as the default command.
	final := d.final()
	if final.BaseName != runtimeImage {
		t.Errorf("the image is from %q: want %s", final.BaseName, runtimeImage)
	}
	if final.user != runtimeUser {
		t.Errorf("the image's USER is %q, want %s", final.user, runtimeUser)
	}
	copyTo, build := d.binary(t, final, "./cmd/bridge")
	for _, want := range []string{"-X main.version=$VERSION", "-X main.commit=$COMMIT"} {
		if !strings.Contains(build, want) {
			t.Errorf("build command %q lacks %q", build, want)
		}
	}
	for _, a := range []string{"VERSION", "COMMIT", "TARGETOS", "TARGETARCH"} {
		if !slices.Contains(d.args(), a) {
			t.Errorf("no ARG %s", a)
		}
	}
	main := readRepo(t, "cmd/bridge/main.go")
	for _, v := range []string{"version = ", "commit  = "} {
		if !strings.Contains(main, v) {
			t.Errorf("cmd/bridge/main.go declares no %q: -X main.%s has nothing to set", v, strings.TrimSpace(strings.TrimSuffix(v, "= ")))
		}
	}
	if ep := execForm(t, "ENTRYPOINT", final.entrypoint); !slices.Equal(ep, []string{copyTo}) {
		t.Errorf("ENTRYPOINT %q, want [%q]: the binary alone, so that the arguments of docker run are its command", ep, copyTo)
	}
	if cmd := execForm(t, "CMD", final.cmd); !slices.Equal(cmd, []string{"run"}) {
		t.Errorf("CMD %q, want [\"run\"]: the daemon by default", cmd)
	}
	_, port, _ := net.SplitHostPort(config.Default().HTTPAddr)
	if !slices.Equal(final.expose, []string{port}) {
		t.Errorf("EXPOSE %q, want the default BRIDGE_HTTP_ADDR port %s", final.expose, port)
	}

	// The simulator's target: its binary alone, as the entrypoint.
	sim := d.stage("sim")
	if sim == nil {
		t.Fatal("the Dockerfile has no sim stage")
	}
	if simTo, _ := d.binary(t, sim, "./cmd/sim"); !slices.Equal(execForm(t, "sim ENTRYPOINT", sim.entrypoint), []string{simTo}) {
		t.Errorf("sim ENTRYPOINT %q, want [%q]", sim.entrypoint.CmdLine, simTo)
	}
	execForm(t, "sim CMD", sim.cmd)
}

// TestDockerfileBuildCommand runs the Dockerfile's build command here, then the binary as the image
// would run it, its entrypoint with the arguments of 'docker run IMAGE version' and of 'docker run
// --env-file deploy/bridge.env.example IMAGE check-config'. A cold build cache makes it take a minute,
// so it runs only when TRACKING_BRIDGE_BUILD_TEST=1.
func TestDockerfileBuildCommand(t *testing.T) {
	if os.Getenv("TRACKING_BRIDGE_BUILD_TEST") != "1" {
		t.Skip("set TRACKING_BRIDGE_BUILD_TEST=1 to run the Dockerfile's build command (about a minute with a cold cache)")
	}
	d := parseDockerfile(t)
	_, build := d.binary(t, d.final(), "./cmd/bridge")
	out := filepath.Join(t.TempDir(), "bridge")
	cmd := exec.Command("sh", "-c", strings.Replace(build, "/out/bridge", out, 1))
	cmd.Dir = repoPath(".")
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

	check := exec.Command(out, "check-config")
	check.Env = []string{}
	for line := range strings.Lines(readRepo(t, "deploy/bridge.env.example")) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			check.Env = append(check.Env, line)
		}
	}
	if b, err := check.CombinedOutput(); err != nil {
		t.Errorf("check-config with deploy/bridge.env.example: %v\n%s", err, b)
	}
}
