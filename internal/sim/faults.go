package sim

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// Faults is the fault injection configuration. The zero value injects nothing. Read it with
// Server.Faults and change it with Server.SetFaults at any time; running streams pick up changes between
// writes.
type Faults struct {
	// DropEvery closes a stream connection after every N events written on it (0 = never).
	DropEvery int
	// DropMidEvent makes a DropEvery drop cut the connection in the middle of the next event: only its
	// first half (at least its first line, never its end) is written, and the connection is aborted, so
	// the client sees an incomplete event.
	DropMidEvent bool
	// ErrorRate is the share (0..1) of API requests, stream connections included, answered 503 before
	// authentication.
	ErrorRate float64
	// TokenErrorRate is the share (0..1) of token endpoint requests answered 503.
	TokenErrorRate float64
	// Latency is added before answering every request, token endpoint included.
	Latency time.Duration
	// StreamStatus, when non-zero, answers every stream connection with this status and an
	// ApiResponseMessage (e.g. 403 or 404: the function is not available to the account).
	StreamStatus int
	// StreamContentType, when set, replaces text/event-stream as the Content-Type of stream answers.
	StreamContentType string
	// ReportErrorRate is the share (0..1) of report requests answered with a 5xx status (500, 502, 503
	// or 504).
	ReportErrorRate float64
	// Report429 answers every report request 429 Too Many Requests while set.
	Report429 bool
	// RetryAfter, when positive, is sent as Retry-After (whole seconds, rounded up) with injected 429 and
	// 503 answers.
	RetryAfter time.Duration
	// ReportLatency is added before answering report requests, after Latency.
	ReportLatency time.Duration
	// RejectReports, when set, is called with the body of each report that passed the other faults and
	// the Content-Type check; when it returns ok, the report is answered with status and an
	// ApiResponseMessage of messages instead of being processed. It must be safe for concurrent use.
	RejectReports func(body []byte) (status int, messages []string, ok bool)
}

// SetFaults replaces the fault configuration.
func (s *Server) SetFaults(f Faults) {
	s.faults.Store(&f)
}

// Faults returns the current fault configuration.
func (s *Server) Faults() Faults {
	return *s.faults.Load()
}

// chance reports true with probability p.
func chance(p float64) bool {
	return p > 0 && (p >= 1 || rand.Float64() < p)
}

// delay waits d before a request is answered. It reports false when the request ended first (the client
// left) or the server was closed meanwhile (then it answers 503 itself).
func (s *Server) delay(w http.ResponseWriter, r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-s.closed:
		writeMessages(w, http.StatusServiceUnavailable, "The server is shutting down")
		return false
	}
}

// writeRetryAfter sets the Retry-After header to d in whole seconds, rounded up, when d is positive.
func (s *Server) writeRetryAfter(w http.ResponseWriter, d time.Duration) {
	if d > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
	}
}

// report5xx are the statuses ReportErrorRate draws from.
var report5xx = [...]int{
	http.StatusInternalServerError, http.StatusBadGateway,
	http.StatusServiceUnavailable, http.StatusGatewayTimeout,
}

// reportFault answers a report request with an injected fault and reports true, or reports false when
// none applies.
func (s *Server) reportFault(w http.ResponseWriter, r *http.Request, f *Faults) bool {
	if !s.delay(w, r, f.ReportLatency) {
		return true
	}
	switch {
	case f.Report429:
		s.stats.add(&s.stats.injectedErrors, 1)
		s.writeRetryAfter(w, f.RetryAfter)
		writeMessages(w, http.StatusTooManyRequests, "Too many requests, slow down")
		return true
	case chance(f.ReportErrorRate):
		s.stats.add(&s.stats.injectedErrors, 1)
		code := report5xx[rand.IntN(len(report5xx))]
		if code == http.StatusServiceUnavailable {
			s.writeRetryAfter(w, f.RetryAfter)
		}
		writeMessages(w, code, http.StatusText(code))
		return true
	}
	return false
}
