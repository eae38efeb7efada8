//go:build linux

package sim

import (
	"syscall"
	"time"
)

// preciseSleep blocks the calling goroutine's thread for d. The Go runtime rounds timers up to whole
// milliseconds while the process is idle; nanosleep is accurate to tens of microseconds, which the
// stream's scheduling of events needs at rates of thousands per second. Use it for short waits only.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
