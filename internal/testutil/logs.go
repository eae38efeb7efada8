package testutil

import (
	"bytes"
	"sync"
)

// Logs is a log sink that is safe for concurrent writers and readers: hand it to a logger, or as a
// child process's output, and read what was written so far with String.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
