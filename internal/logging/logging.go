// Package logging builds the process logger of the commands (the daemon, the simulator, the demo and the
// benchmark), so that every one of them logs the same way, and holds what components need to log input
// from outside safely: a per-reason rate limit (Limiter), a cleaner for quoted values (Value), and URLs
// with their secrets redacted (RedactURL).
package logging

import (
	"fmt"
	"io"
	"log/slog"
)

// MaxAttrBytes bounds every string and error value a log line carries. Components cut the outside values
// they quote much shorter (Value); this is the floor under all of them, so that no value from outside
// (an event id of a megabyte, an error quoting an upstream's header) can make one line huge.
const MaxAttrBytes = 4 << 10

// New returns a logger writing to w at level: JSON (the default) or, with format "text", text.
func New(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: bound}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// bound cuts a string or error value longer than MaxAttrBytes, saying how long it was.
func bound(_ []string, a slog.Attr) slog.Attr {
	var s string
	switch v := a.Value; {
	case v.Kind() == slog.KindString:
		s = v.String()
	case v.Kind() == slog.KindAny:
		err, ok := v.Any().(error)
		if !ok || err == nil {
			return a
		}
		s = err.Error()
	default:
		return a
	}
	if len(s) <= MaxAttrBytes {
		return a
	}
	return slog.String(a.Key, fmt.Sprintf("%s (%d bytes)", Value(s, MaxAttrBytes), len(s)))
}
