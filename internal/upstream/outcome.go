package upstream

// The outcome of one attempt to deliver a tracking report to the upstream: the report client produces
// it, and the report consumer (internal/consume) and the API service (internal/service) act on it.

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// OutcomeKind is what happens to a report after one attempt to deliver it.
type OutcomeKind int

// Outcome kinds. The zero value is not a valid kind.
const (
	// Accepted: the upstream answered 2xx. The report is done.
	Accepted OutcomeKind = iota + 1
	// Retry: a transient failure (network error, timeout, 401 after a fresh token, 408, 425, 429, 5xx, no
	// token). The report is to be sent again later, not before Outcome.RetryAfter.
	Retry
	// Reject: the upstream refused the report for good (any other 4xx, or an unexpected 1xx or 3xx
	// answer). Sending it again would not help; it goes to the dead-letter subject.
	Reject
)

var kindNames = [...]string{"invalid", "accepted", "retry", "reject"}

// String returns "accepted", "retry" or "reject".
func (k OutcomeKind) String() string {
	if k < 0 || int(k) >= len(kindNames) {
		return "invalid"
	}
	return kindNames[k]
}

// Outcome is the classified result of one attempt to deliver a report.
type Outcome struct {
	Kind OutcomeKind
	// Status is the HTTP status of the upstream's answer; 0 when there was none (network error, timeout,
	// no access token).
	Status int
	// RetryAfter is the upstream's Retry-After (Retry only); 0 when absent.
	RetryAfter time.Duration
	// Messages are the messages of the upstream's ApiResponseMessage body, when it sent one.
	Messages []string
	// Err describes the failure (Retry and Reject): an *upstream.StatusError when the upstream answered,
	// otherwise the transport or token error. Nil for Accepted.
	Err error
}

// Reason returns a one-line, human-readable reason for a Retry or Reject: the upstream's messages
// joined with "; " when it sent any, else the error. It never contains a token.
func (o Outcome) Reason() string {
	switch {
	case len(o.Messages) > 0:
		return JoinMessages(o.Messages)
	case o.Err != nil:
		return JoinMessages([]string{o.Err.Error()})
	case o.Status != 0:
		return fmt.Sprintf("HTTP %d %s", o.Status, http.StatusText(o.Status))
	default:
		return o.Kind.String()
	}
}

// JoinMessages joins an ApiResponseMessage's messages for a log line or a header: "; "
// between them, at most about 1 KiB, control characters as spaces.
func JoinMessages(m []string) string {
	const maxLen = 1024
	s := strings.Join(m, "; ")
	s = logging.Cut(s, maxLen) // on a character's boundary
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
