//go:build !linux

package bench

import (
	"os"
	"os/exec"
	"syscall"
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
