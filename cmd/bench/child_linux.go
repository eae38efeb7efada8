//go:build linux

package main

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// configure puts the child in its own process group, has the kernel kill it when the benchmark dies,
// and makes a context's cancellation kill the whole group.
func configure(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if cmd.Cancel != nil { // made by exec.CommandContext
		cmd.Cancel = func() error { return signalGroup(cmd.Process, syscall.SIGKILL) }
	}
}

func signalGroup(p *os.Process, sig syscall.Signal) error {
	if p == nil {
		return errExited
	}
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		if err == syscall.ESRCH {
			return errExited
		}
		return err
	}
	return nil
}

func maxRSS(ps *os.ProcessState) int64 {
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && ru != nil {
		return ru.Maxrss << 10 // kilobytes on Linux
	}
	return 0
}

// SelfUsage returns this process's CPU time (user and kernel) and peak RSS in bytes so far.
func SelfUsage() (cpu time.Duration, maxRSS int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), ru.Maxrss << 10
}
