//go:build !linux

package sim

import "time"

// preciseSleep sleeps for d (see the Linux version).
func preciseSleep(d time.Duration) { time.Sleep(d) }
