package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Headers of replies and requests beyond micro's error headers.
const (
	// TimeoutHeader is the request header by which a caller sends its deadline, as a duration with a unit
	// ("2s", "1500ms"): the service gives the upstream at most that long (and never more than its own
	// per-request timeout), then answers 504.
	TimeoutHeader = "Bridge-Timeout"
	// UpstreamStatusHeader is on every failure reply to which the upstream answered: its HTTP status.
	UpstreamStatusHeader = "Bridge-Upstream-Status"
	// IdempotencyKeyHeader, on a tracking.report request, is sent upstream as Idempotency-Key.
	IdempotencyKeyHeader = "Idempotency-Key"
	// RetryAfterHeader carries the upstream's Retry-After on a failure reply (at most MaxRetryAfterHeader
	// bytes of printable ASCII; another is left out).
	RetryAfterHeader = "Retry-After"
	// RequestInfoHeader is set by the NATS server on a request that reached the service through a
	// service import from another account: JSON naming the caller's account (and, on an import with
	// share, its user and connection). The server replaces any value a caller set; within one account it
	// adds none, and what a caller set arrives unchanged, so it names the caller only where the API is
	// imported across accounts.
	RequestInfoHeader = "Nats-Request-Info"
)

// Codes of Nats-Service-Error-Code the service sets itself (docs/api.md); any other is the upstream's
// HTTP status.
const (
	// CodeInvalid: refused before calling the upstream, the body larger than its bound (not parsed) included.
	CodeInvalid     = http.StatusBadRequest
	CodeBadAnswer   = http.StatusBadGateway         // the upstream's answer is unusable (or cannot travel on NATS)
	CodeUnavailable = http.StatusServiceUnavailable // upstream unreachable, no token, or the bridge busy or stopping
	CodeTimeout     = http.StatusGatewayTimeout     // the upstream did not answer in time
	// CodeNotFound: units.get, the units view holds no event of the unit.
	CodeNotFound = http.StatusNotFound
)

// kind names a kind of failure in the bridge's own words. Discovery's STATS answer shows the last one of
// each endpoint to anyone allowed discovery, so a kind is always one of the constants below: never a
// byte a caller or the upstream sent (a caller's refusal quotes its values; the upstream's messages and
// net/http's errors may name another caller's order). The caller gets the detailed description.
type kind string

// The kinds of failure, one per way a request can fail.
const (
	kindTooLargeBody kind = "the request body is larger than its limit"
	kindInvalid      kind = "the request is invalid"
	kindBusy         kind = "the bridge is busy"
	kindStopping     kind = "the bridge is stopping"
	kindUpstream     kind = "the upstream answered" // with its status: see lastError
	kindNotJSON      kind = "the upstream's answer is not JSON"
	kindUnexpected   kind = "the upstream answered with an unexpected status"
	kindTimeout      kind = "the upstream did not answer in time"
	kindTokenTimeout kind = "no access token in time"
	kindNoToken      kind = "the bridge has no access token"
	kindShutdown     kind = "the bridge is shutting down"
	kindBadAnswer    kind = "the upstream's answer is too large or cut short"
	kindUnreachable  kind = "the upstream cannot be reached"
	kindReplyTooBig  kind = "the reply is larger than the NATS server's max_payload"
	kindNoUnitEvent  kind = "the units view has no event of the unit"
	kindNoView       kind = "the units view or the events stream does not exist"
	kindViewNotJSON  kind = "the units view holds a value that is not JSON"
	kindNATSTimeout  kind = "NATS did not answer in time"
	kindNATS         kind = "reading from NATS failed"
)

// kinds are every kind, for the test that no caller's byte reaches discovery.
var kinds = []kind{kindTooLargeBody, kindInvalid, kindBusy, kindStopping, kindUpstream, kindNotJSON, kindUnexpected,
	kindTimeout, kindTokenTimeout, kindNoToken, kindShutdown, kindBadAnswer, kindUnreachable, kindReplyTooBig,
	kindNoUnitEvent, kindNoView, kindViewNotJSON, kindNATSTimeout, kindNATS}

// result is what one request comes to: a success carrying the upstream's body verbatim, or a failure
// with its code, kind, one-line description and ApiResponseMessage body.
type result struct {
	code     int    // the upstream's status on success; the Nats-Service-Error-Code on failure
	ok       bool   // success
	kind     kind   // failure: what kind, for discovery
	desc     string // failure: the Nats-Service-Error line, for the caller alone
	body     []byte
	upstream int    // the upstream's HTTP status, 0 when it did not answer
	retry    string // the upstream's Retry-After, on failures
	unit     string // units.get's success: the Tracking-Unit header
}

// apiMessage is the ApiResponseMessage body.
type apiMessage struct {
	Messages []string `json:"messages"`
}

// failure builds a failure result of kind k whose body lists msgs and whose description joins them.
func failure(code int, k kind, msgs ...string) result {
	b, _ := json.Marshal(apiMessage{Messages: msgs})
	return result{code: code, kind: k, desc: upstream.JoinMessages(msgs), body: b}
}

// lastError is the failure as discovery shows it: the code and the kind, with the upstream's status
// when it answered; nothing else.
func (r result) lastError() string {
	switch {
	case r.kind == kindUpstream:
		return fmt.Sprintf("%d:%s HTTP %d", r.code, kindUpstream, r.upstream)
	case r.upstream != 0:
		return fmt.Sprintf("%d:%s (upstream HTTP %d)", r.code, r.kind, r.upstream)
	}
	return fmt.Sprintf("%d:%s", r.code, r.kind)
}

// outcome maps the upstream's answer to a reply (docs/api.md). post tells a non-idempotent operation,
// whose timeout message says that the request may have been processed.
func outcome(resp *upstream.APIResponse, err error, timeout time.Duration, post bool) result {
	if err != nil {
		return errorOutcome(resp, err, timeout, post)
	}
	st := resp.Status
	switch {
	case st >= 200 && st < 300:
		if len(resp.Body) > 0 && !json.Valid(resp.Body) {
			r := failure(CodeBadAnswer, kindNotJSON, fmt.Sprintf("the upstream answered HTTP %d with a body that is not JSON", st))
			r.upstream = st
			return r
		}
		return result{code: st, ok: true, body: resp.Body, upstream: st}
	case st >= 400 && st < 600:
		var m apiMessage
		var r result
		if isAPIMessage(resp.Body, &m) {
			desc := upstream.JoinMessages(m.Messages)
			if desc == "" {
				desc = httpStatus(st)
			}
			r = result{code: st, kind: kindUpstream, desc: desc, body: resp.Body}
		} else {
			r = failure(st, kindUpstream, httpStatus(st)+" (the upstream's body is not an ApiResponseMessage)")
		}
		r.upstream, r.retry = st, retryAfter(resp.Header.Get(RetryAfterHeader))
		return r
	default:
		r := failure(CodeBadAnswer, kindUnexpected, fmt.Sprintf("the upstream answered with the unexpected %s", httpStatus(st)))
		r.upstream = st
		return r
	}
}

// errorOutcome maps a call that brought no usable answer.
func errorOutcome(resp *upstream.APIResponse, err error, timeout time.Duration, post bool) result {
	var r result
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		msg, k := fmt.Sprintf("the upstream did not answer within %v", timeout), kindTimeout
		if errors.Is(err, upstream.ErrNoToken) {
			msg, k = fmt.Sprintf("no access token within %v: the token endpoint did not answer", timeout), kindTokenTimeout
		} else if post {
			msg += "; the operation may have been carried out, and was not repeated"
		}
		r = failure(CodeTimeout, k, msg)
	case errors.Is(err, context.Canceled):
		r = failure(CodeUnavailable, kindShutdown, "the bridge is shutting down; the request was abandoned")
	case errors.Is(err, upstream.ErrNoToken):
		r = failure(CodeUnavailable, kindNoToken, "the bridge has no access token for the upstream: "+err.Error())
	case errors.Is(err, upstream.ErrAnswerTooLarge), errors.Is(err, upstream.ErrAnswerCut):
		r = failure(CodeBadAnswer, kindBadAnswer, err.Error())
	default:
		r = failure(CodeUnavailable, kindUnreachable, "the upstream cannot be reached: "+err.Error())
	}
	if resp != nil {
		r.upstream = resp.Status
	}
	return r
}

// MaxRetryAfterHeader bounds the upstream's Retry-After passed on: a number of seconds or an HTTP date
// (29 bytes) is far shorter.
const MaxRetryAfterHeader = 64

// retryAfter returns the upstream's Retry-After value when it can travel as a NATS header: a number of
// seconds or an HTTP date, printable ASCII of at most MaxRetryAfterHeader bytes. Anything else is left
// out.
func retryAfter(v string) string {
	if len(v) > MaxRetryAfterHeader {
		return ""
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return ""
		}
	}
	return v
}

// isAPIMessage reports whether body is an ApiResponseMessage: an object whose messages member is an
// array of strings.
func isAPIMessage(body []byte, m *apiMessage) bool {
	var probe struct {
		Messages *[]string `json:"messages"`
	}
	if json.Unmarshal(body, &probe) != nil || probe.Messages == nil {
		return false
	}
	m.Messages = *probe.Messages
	return true
}

func httpStatus(code int) string {
	if t := http.StatusText(code); t != "" {
		return "HTTP " + strconv.Itoa(code) + " " + t
	}
	return "HTTP " + strconv.Itoa(code)
}

// message renders r as the reply to subject. A success is the upstream's body alone, without headers:
// docs/api.md#replies promises nothing else, and a header block costs every hop a parse. The one
// exception is units.get's Tracking-Unit.
func (r result) message(subject string) *nats.Msg {
	m := &nats.Msg{Subject: subject, Data: r.body}
	if r.ok {
		if r.unit != "" {
			m.Header = nats.Header{UnitHeader: []string{r.unit}}
		}
		return m
	}
	m.Header = nats.Header{}
	m.Header.Set(micro.ErrorHeader, r.desc)
	m.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(r.code))
	if r.retry != "" {
		m.Header.Set(RetryAfterHeader, r.retry)
	}
	if r.upstream != 0 {
		m.Header.Set(UpstreamStatusHeader, strconv.Itoa(r.upstream))
	}
	return m
}

// size is the number of bytes m takes against the server's max_payload: its header block as the client
// encodes it, and its data.
func size(m *nats.Msg) int {
	n := len(m.Data)
	if len(m.Header) > 0 {
		n += len("NATS/1.0\r\n\r\n")
		for k, vs := range m.Header {
			for _, v := range vs {
				n += len(k) + len(": ") + len(v) + len("\r\n")
			}
		}
	}
	return n
}
