package testutil

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent use, for a logger or a process output that a test reads
// while it is being written.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p to the buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Logs is an slog.Handler that keeps every record, at every level, for tests that check what was
// logged. Its zero value is ready to use, and it is safe for concurrent use. Groups are not kept: a
// grouped attribute is recorded under its own key.
type Logs struct {
	mu   sync.Mutex
	recs []slog.Record
}

// Enabled implements slog.Handler: every level is kept.
func (l *Logs) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (l *Logs) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, r.Clone())
	return nil
}

// WithAttrs implements slog.Handler: the attributes are added to every record logged through the result.
func (l *Logs) WithAttrs(as []slog.Attr) slog.Handler {
	return &logsWith{logs: l, attrs: as}
}

// WithGroup implements slog.Handler; groups are not kept.
func (l *Logs) WithGroup(string) slog.Handler { return l }

// Records returns the records kept so far, in the order they were logged.
func (l *Logs) Records() []slog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]slog.Record, len(l.recs))
	for i, r := range l.recs {
		out[i] = r.Clone()
	}
	return out
}

// Count returns how many records at level or above have the message msg; with msg "", how many records
// at level or above there are.
func (l *Logs) Count(level slog.Level, msg string) int {
	n := 0
	for _, r := range l.Records() {
		if r.Level >= level && (msg == "" || r.Message == msg) {
			n++
		}
	}
	return n
}

// Attr returns the value of key in the first record with the message msg that has it.
func (l *Logs) Attr(msg, key string) (slog.Value, bool) {
	for _, r := range l.Records() {
		if r.Message != msg {
			continue
		}
		var v slog.Value
		found := false
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				v, found = a.Value, true
			}
			return !found
		})
		if found {
			return v, true
		}
	}
	return slog.Value{}, false
}

// String returns the records one a line, as "LEVEL message key=value ...", for searching and for failure
// messages.
func (l *Logs) String() string {
	var b strings.Builder
	for _, r := range l.Records() {
		fmt.Fprintf(&b, "%s %s", r.Level, r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		b.WriteByte('\n')
	}
	return b.String()
}

// logsWith is a Logs handler with attributes added by WithAttrs.
type logsWith struct {
	logs  *Logs
	attrs []slog.Attr
}

func (h *logsWith) Enabled(ctx context.Context, level slog.Level) bool {
	return h.logs.Enabled(ctx, level)
}

func (h *logsWith) Handle(ctx context.Context, r slog.Record) error {
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	nr.AddAttrs(h.attrs...) // the handler's attributes come first, as slog's own handlers print them
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(a)
		return true
	})
	return h.logs.Handle(ctx, nr)
}

func (h *logsWith) WithAttrs(as []slog.Attr) slog.Handler {
	return &logsWith{logs: h.logs, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], as...)}
}

func (h *logsWith) WithGroup(string) slog.Handler { return h }
