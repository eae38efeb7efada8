package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"
)

// Child is a child process run for measurement from the outside. Start puts it in its own process group
// (on Linux, also killed when the benchmark dies), so that signals reach it and whatever it starts.
type Child struct {
	Name    string
	Cmd     *exec.Cmd
	Started time.Time

	done  chan struct{}
	ended time.Time
	werr  error
	hwm   atomic.Int64 // largest VmHWM sampled
}

// Usage is what an exited child used.
type Usage struct {
	User, Sys time.Duration // from its rusage
	// PeakRSS is the child's peak resident set size in bytes: the largest VmHWM read from /proc while it
	// ran (by TrackPeakRSS, PeakRSS and Stop; growth after the last read, in its last moments, is missed);
	// 0 when never read or where there is no /proc.
	PeakRSS int64
	// MaxRSS is ru_maxrss from its rusage, in bytes. On Linux it is at least the parent's peak RSS at the
	// time of the fork: Go starts children with vfork semantics (CLONE_VM), and execve carries the
	// high-water mark of the mm it leaves, the parent's, into the child's. Use PeakRSS.
	MaxRSS   int64
	Wall     time.Duration // from Start to exit
	ExitCode int           // -1 when killed by a signal
}

// CPU is the child's total CPU time, user and kernel.
func (u Usage) CPU() time.Duration { return u.User + u.Sys }

// Start starts cmd as a child named name (for messages). When cmd was made with exec.CommandContext, the
// end of its context kills the child's whole process group.
func Start(name string, cmd *exec.Cmd) (*Child, error) {
	configure(cmd)
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c := &Child{Name: name, Cmd: cmd, Started: time.Now(), done: make(chan struct{})}
	go func() {
		c.werr = cmd.Wait()
		c.ended = time.Now()
		close(c.done)
	}()
	return c, nil
}

// TrackPeakRSS reads the child's VmHWM every interval until it exits, for Usage.PeakRSS. VmHWM only grows,
// so the interval bounds what is missed at the end of the child's life only. Each read costs the caller
// some CPU: the kernel builds all of /proc/<pid>/status (figures: docs/performance.md).
func (c *Child) TrackPeakRSS(interval time.Duration) { go c.sample(interval) }

func (c *Child) sample(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if m, err := ReadMem(c.Pid()); err == nil && m.PeakRSS > c.hwm.Load() {
			c.hwm.Store(m.PeakRSS)
		}
		select {
		case <-c.done:
			return
		case <-t.C:
		}
	}
}

// PeakRSS returns the child's peak resident set size (VmHWM) as sampled so far, after sampling once more
// when it still runs.
func (c *Child) PeakRSS() int64 {
	if c.Exited() {
		return c.hwm.Load()
	}
	if m, err := ReadMem(c.Pid()); err == nil && m.PeakRSS > c.hwm.Load() {
		c.hwm.Store(m.PeakRSS)
	}
	return c.hwm.Load()
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// Done is closed when the child has exited and been waited for.
func (c *Child) Done() <-chan struct{} { return c.done }

// Exited reports whether the child has exited.
func (c *Child) Exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to the child's process group.
func (c *Child) Signal(sig syscall.Signal) error { return signalGroup(c.Cmd.Process, sig) }

// Wait waits for the child to exit, or for ctx, and returns its usage. An exit status other than 0 is
// reported as an error along with the usage.
func (c *Child) Wait(ctx context.Context) (Usage, error) {
	select {
	case <-c.done:
	case <-ctx.Done():
		return Usage{}, ctx.Err()
	}
	ps := c.Cmd.ProcessState
	if ps == nil {
		return Usage{}, fmt.Errorf("%s: %w", c.Name, c.werr)
	}
	u := Usage{User: ps.UserTime(), Sys: ps.SystemTime(), PeakRSS: c.hwm.Load(), MaxRSS: maxRSS(ps),
		Wall: c.ended.Sub(c.Started), ExitCode: ps.ExitCode()}
	var err error
	if c.werr != nil {
		err = fmt.Errorf("%s: %w", c.Name, c.werr)
	}
	return u, err
}

// Stop asks the child to stop with SIGTERM (after a last sample of its memory), waits up to grace for it to exit and kills its process group
// after that. It returns the usage like Wait.
func (c *Child) Stop(grace time.Duration) (Usage, error) {
	if !c.Exited() {
		c.PeakRSS()
		_ = c.Signal(syscall.SIGTERM)
		t := time.NewTimer(grace)
		select {
		case <-c.done:
		case <-t.C:
			_ = c.Signal(syscall.SIGKILL)
		}
		t.Stop()
	}
	u, err := c.Wait(context.Background())
	if err == nil && u.ExitCode != 0 {
		err = fmt.Errorf("%s: exit code %d", c.Name, u.ExitCode)
	}
	return u, err
}

// Kill kills the child's process group and waits for the child, ignoring errors: for clean-up.
func (c *Child) Kill() {
	if c == nil || c.Exited() {
		return
	}
	_ = c.Signal(syscall.SIGKILL)
	<-c.done
}

// errExited is returned for a signal to a child that has already exited.
var errExited = errors.New("process already exited")
