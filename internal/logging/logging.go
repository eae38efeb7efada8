// Package logging builds the process logger of the commands (the daemon, the simulator, the demo and the
// benchmark), so that every one of them logs the same way, and holds what components need to log input
// from outside safely: a per-reason rate limit (Limiter) and a cleaner for quoted values (Value).
package logging

import (
	"io"
	"log/slog"
)

// New returns a logger writing to w at level: JSON (the default) or, with format "text", text.
func New(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
