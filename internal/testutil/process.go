package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"
)

// Process is a child process a test started, such as a built bridge binary, so that SIGKILL, SIGSTOP and
// SIGTERM are real signals to a real process. Its standard output and error go to Out; it is killed
// (continued first, in case it was stopped) when the test ends, unless it has exited.
type Process struct {
	Cmd *exec.Cmd
	// Out receives the process's standard output and standard error.
	Out *Buffer

	done chan struct{} // closed once the process has exited, with Wait's result in err
	err  error
}

// StartProcess starts path with args in an environment of env alone (plus PATH, HOME and TMPDIR from
// the test's own), so that the caller's variables cannot leak into the child's configuration. out
// receives its output; nil gives it a Buffer of its own.
func StartProcess(tb testing.TB, out *Buffer, path string, args []string, env map[string]string) *Process {
	tb.Helper()
	if out == nil {
		out = &Buffer{}
	}
	cmd := exec.Command(path, args...)
	cmd.Env = childEnv(env)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting %s: %v", path, err)
	}
	p := &Process{Cmd: cmd, Out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	tb.Cleanup(p.kill)
	return p
}

// childEnv is env as KEY=value lines, sorted, with PATH, HOME and TMPDIR added when env lacks them.
func childEnv(env map[string]string) []string {
	out := make([]string, 0, len(env)+3)
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	for _, k := range []string{"PATH", "HOME", "TMPDIR"} {
		if _, set := env[k]; !set {
			if v, ok := os.LookupEnv(k); ok {
				out = append(out, k+"="+v)
			}
		}
	}
	sort.Strings(out)
	return out
}

// PID is the process id.
func (p *Process) PID() int { return p.Cmd.Process.Pid }

// Signal sends sig to the process; signalling a process that has exited is not an error.
func (p *Process) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return nil
	}
	if err := p.Cmd.Process.Signal(sig); err != nil && !p.Exited() {
		return fmt.Errorf("signal %v to pid %d: %w", sig, p.PID(), err)
	}
	return nil
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Wait waits up to within for the process to exit. exited is false when it was still running then;
// otherwise err is its exit error (nil for exit code 0).
func (p *Process) Wait(within time.Duration) (exited bool, err error) {
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-p.done:
		return true, p.err
	case <-t.C:
		return false, nil
	}
}

// kill continues and kills the process unless it has exited, and waits for it.
func (p *Process) kill() {
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(syscall.SIGCONT)
	_ = p.Cmd.Process.Kill()
	<-p.done
}
