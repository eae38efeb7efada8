//go:build linux

package sim

import (
	"syscall"
	"time"
)

// preciseSleep blocks the calling goroutine's thread for d with nanosleep. The Go runtime rounds timers up
// to whole milliseconds while the process is idle, too coarse for the stream's event schedule at high
// rates. Use it for short waits only: it holds the thread.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
