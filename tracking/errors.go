package tracking

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Sentinels of the API's failures, for errors.Is: an *APIError is each of them whose code it has
// (ErrNotFound for 404, …). Errors of the other helpers are their own.
var (
	// ErrInvalid: 400, the request was refused (by the bridge before it called the upstream, or by the
	// upstream); the messages say why. Repeating it unchanged fails again.
	ErrInvalid = errors.New("invalid request")
	// ErrUnauthorized: 401, the bridge's token was refused even after a new one.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrForbidden: 403, the order or tracked unit is another client's.
	ErrForbidden = errors.New("forbidden")
	// ErrNotFound: 404, no such order or tracked unit.
	ErrNotFound = errors.New("not found")
	// ErrConflict: 409, the order is no longer open.
	ErrConflict = errors.New("conflict")
	// ErrTooManyRequests: 429, the upstream is rate-limiting; see APIError.RetryAfter.
	ErrTooManyRequests = errors.New("too many requests")
	// ErrBadAnswer: 502, the upstream's answer was unusable or too large for NATS (ask for a smaller page).
	ErrBadAnswer = errors.New("bad answer from the upstream")
	// ErrUnavailable: 503, the upstream cannot be reached, the bridge has no token, or it is busy or stopping.
	ErrUnavailable = errors.New("unavailable")
	// ErrTimeout: 504, the upstream did not answer within the request's time.
	ErrTimeout = errors.New("upstream timeout")

	// ErrNoResponders: no bridge serves the API on the prefix's subjects (none running, BRIDGE_API_ENABLED
	// false, another prefix, or no permission to publish there). It wraps nats.ErrNoResponders.
	ErrNoResponders = errors.New("no bridge answers the API")
	// ErrMalformedReply: a success reply whose body is not the JSON the operation returns.
	ErrMalformedReply = errors.New("malformed reply")
	// ErrMalformedEvent: an event whose data is not a TrackingEvent (see MalformedEventError).
	ErrMalformedEvent = errors.New("malformed event")
	// ErrInvalidReport: a report that does not pass the bridge's report check (see InvalidReportError).
	ErrInvalidReport = errors.New("invalid report")
)

var codeSentinels = map[int]error{
	http.StatusBadRequest:         ErrInvalid,
	http.StatusUnauthorized:       ErrUnauthorized,
	http.StatusForbidden:          ErrForbidden,
	http.StatusNotFound:           ErrNotFound,
	http.StatusConflict:           ErrConflict,
	http.StatusTooManyRequests:    ErrTooManyRequests,
	http.StatusBadGateway:         ErrBadAnswer,
	http.StatusServiceUnavailable: ErrUnavailable,
	http.StatusGatewayTimeout:     ErrTimeout,
}

// APIError is a failure reply of the API (docs/api.md).
type APIError struct {
	// Op is the operation (an Op* constant).
	Op string
	// Code is Nats-Service-Error-Code: the upstream's HTTP status, or the bridge's own 400, 502, 503 or
	// 504.
	Code int
	// Description is Nats-Service-Error, the failure in one line.
	Description string
	// UpstreamStatus is Bridge-Upstream-Status, the upstream's HTTP status; 0 when it did not answer
	// (the bridge refused the request, or the upstream was unreachable or too slow).
	UpstreamStatus int
	// Messages are the messages of the ApiResponseMessage body (the upstream's own when it sent one).
	Messages []string
	// RetryAfter is the upstream's Retry-After in seconds, as a duration; 0 when it sent none.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	desc := e.Description
	if desc == "" {
		desc = strings.Join(e.Messages, "; ")
	}
	return fmt.Sprintf("tracking: %s: %d %s", e.Op, e.Code, desc)
}

// Is makes errors.Is(err, ErrNotFound) and the like true for the error's code.
func (e *APIError) Is(target error) bool {
	s, ok := codeSentinels[e.Code]
	return ok && s == target
}

// Temporary reports whether the same request may succeed later: 429, 503 and 504. After a 504 (or a 503
// that is not "busy") a create or a report may have been carried out upstream; see docs/api.md,
// "Timeouts, retries and concurrency".
func (e *APIError) Temporary() bool {
	switch e.Code {
	case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// MalformedEventError is an event on P.events.> whose data is not a TrackingEvent as the OpenAPI document
// describes it: not JSON, a member of the wrong JSON type, a timestamp that is not an RFC 3339 date-time,
// or no timestamp or type. errors.Is(err, ErrMalformedEvent) is true.
type MalformedEventError struct {
	Subject string
	ID      string // Nats-Msg-Id
	Data    []byte // the message's data, verbatim
	// Msg is the message from the EventConsumer, for acknowledging or terminating it; nil from
	// DecodeEvent.
	Msg jetstream.Msg
	Err error
}

func (e *MalformedEventError) Error() string {
	return fmt.Sprintf("tracking: malformed event %q on %s: %v", e.ID, e.Subject, e.Err)
}

func (e *MalformedEventError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrMalformedEvent) true.
func (e *MalformedEventError) Is(target error) bool { return target == ErrMalformedEvent }

// InvalidReportError is a report the bridge would dead-letter without sending it upstream, with every
// problem its check finds. errors.Is(err, ErrInvalidReport) is true.
type InvalidReportError struct {
	Problems []string
}

func (e *InvalidReportError) Error() string {
	return "tracking: invalid report: " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrInvalidReport) true.
func (e *InvalidReportError) Is(target error) bool { return target == ErrInvalidReport }
