//go:build !linux

package main

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// configure leaves cmd as it is: process groups and peak RSS are measured on Linux only.
func configure(*exec.Cmd) {}

func signalGroup(p *os.Process, sig syscall.Signal) error {
	if p == nil {
		return errExited
	}
	return p.Signal(sig)
}

func maxRSS(*os.ProcessState) int64 { return 0 }

// SelfUsage returns this process's CPU time and peak RSS; it measures on Linux only and returns zeros here.
func SelfUsage() (cpu time.Duration, maxRSS int64) { return 0, 0 }
