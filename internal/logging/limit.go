package logging

import (
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// Limiter lets at most one log line per key through in each interval and counts the lines it held back,
// so that an event anyone can cause at will (a request a caller makes on purpose) costs the log one
// line per interval, carrying the count of the rest, instead of one line each. Keys must come from a
// small fixed set (reasons, not caller input): each one seen is kept for good. It is safe for concurrent
// use.
type Limiter struct {
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	keys  map[string]*limitState
}

type limitState struct {
	last       time.Time
	suppressed int64
}

// NewLimiter returns a Limiter letting one line per key through every interval (a minute when
// interval <= 0), reading the time from now (time.Now when nil).
func NewLimiter(interval time.Duration, now func() time.Time) *Limiter {
	if interval <= 0 {
		interval = time.Minute
	}
	if now == nil {
		now = time.Now
	}
	return &Limiter{every: interval, now: now, keys: map[string]*limitState{}}
}

// Allow reports whether a line for key may be written now. When it may, suppressed is the number of
// lines for key that Allow held back since the last one it let through; the line should say so.
func (l *Limiter) Allow(key string) (ok bool, suppressed int64) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[key]
	if st == nil {
		l.keys[key] = &limitState{last: now}
		return true, 0
	}
	if now.Sub(st.last) < l.every {
		st.suppressed++
		return false, 0
	}
	suppressed, st.suppressed, st.last = st.suppressed, 0, now
	return true, suppressed
}

// Value returns s fit for a log line or a one-line message when it came from outside (a caller's
// header, an upstream's answer): control and other invisible format characters are removed, invalid
// UTF-8 becomes U+FFFD, and the result is cut to at most max bytes on a rune boundary, with "…" appended
// when something was cut.
func Value(s string, max int) string {
	clean := func(r rune) bool {
		return r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	}
	if len(s) <= max && utf8.ValidString(s) && !strings.ContainsFunc(s, clean) {
		return s // the common case: nothing to do, nothing allocated
	}
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= max+utf8.UTFMax { // far enough past max to know it will be cut; stop reading
			break
		}
		switch {
		case r == utf8.RuneError:
			b.WriteRune(utf8.RuneError)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
		default:
			b.WriteRune(r)
		}
	}
	return Cut(b.String(), max)
}

// Clip cuts s to at most n bytes in all, the mark included, on a rune boundary, marking the cut with "…":
// for values whose room is fixed (a header's bound, an error's).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return Cut(s, max(n-len("…"), 0))
}

// Cut returns s cut to at most n bytes on a rune boundary, with "…" appended when something was cut (so
// at most n+len("…") bytes in all). Unlike Value it keeps the bytes as they are: for a value that is
// quoted or escaped afterwards.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
