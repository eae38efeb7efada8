package upstream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
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
	// Messages are the messages of the upstream's ApiResponseMessage body (spec 2.19), when it sent one.
	Messages []string
	// Err describes the failure (Retry and Reject): a *StatusError when the upstream answered, otherwise
	// the transport or token error. Nil for Accepted.
	Err error
}

// Reason returns a one-line, human-readable reason for a Retry or Reject: the upstream's messages
// joined with "; " when it sent any, else the error. It never contains a token.
func (o Outcome) Reason() string {
	switch {
	case len(o.Messages) > 0:
		return joinMessages(o.Messages)
	case o.Err != nil:
		return joinMessages([]string{o.Err.Error()})
	case o.Status != 0:
		return fmt.Sprintf("HTTP %d %s", o.Status, http.StatusText(o.Status))
	default:
		return o.Kind.String()
	}
}

// Classify is the one place that decides what an upstream answer to a report means (spec 4.8, contract
// §5):
//
//   - err != nil (network error, timeout, cancelled request): Retry.
//   - 2xx: Accepted.
//   - 401, 408, 425, 429 and 5xx: Retry, with the answer's Retry-After. (For 401 the report client first
//     fetches a new token and repeats the request once at once; a 401 to that repeat is retried later.)
//   - any other status (400, 403, 404, 409, 413, 415, 422, …, and unexpected 1xx or 3xx answers): Reject,
//     with the messages of the answer's ApiResponseMessage body.
//
// Classify reads and closes resp.Body (at most 64 KiB of it) when resp is not nil.
func Classify(resp *http.Response, err error) Outcome {
	if err != nil {
		if resp != nil {
			_ = resp.Body.Close()
		}
		return Outcome{Kind: Retry, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		// Drain what is left so that the connection is reused.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return Outcome{Kind: Accepted, Status: resp.StatusCode}
	}
	st := readStatusError(resp)
	out := Outcome{Status: st.Code, Messages: st.Messages, Err: st}
	switch st.Code {
	case http.StatusUnauthorized, http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		out.Kind, out.RetryAfter = Retry, st.RetryAfter
	default:
		if st.Code >= 500 {
			out.Kind, out.RetryAfter = Retry, st.RetryAfter
		} else {
			out.Kind = Reject
		}
	}
	return out
}

// ReportConfig configures a ReportClient.
type ReportConfig struct {
	// URL of the report operation (op 4.8): the upstream URL joined with BRIDGE_REPORT_PATH.
	URL string
	// Tokens provides the bearer token; required.
	Tokens *TokenSource
	// Client makes the requests; it must have a timeout (NewHTTPClient with the HTTP timeout). Nil means
	// http.DefaultClient, for tests only.
	Client *http.Client
	Logger *slog.Logger
}

// ReportClient posts tracking event reports (spec 2.17) to the upstream's report operation (spec 4.8).
// It makes one attempt per Send, plus one immediate repeat with a new token after a 401, and leaves every
// other retry to its caller (the report consumer, through JetStream redelivery). It is safe for concurrent
// use.
type ReportClient struct {
	cfg ReportConfig
	log *slog.Logger
}

// NewReportClient returns a ReportClient. It contacts nothing until Send is called.
func NewReportClient(cfg ReportConfig) *ReportClient {
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &ReportClient{cfg: cfg, log: cfg.Logger}
}

// Send posts body, verbatim, with Content-Type application/json, the bearer token and, when
// idempotencyKey is not empty, an Idempotency-Key header, and classifies the answer (see Classify).
//
// When the upstream answers 401, Send drops the token (TokenSource.Invalidate), gets a new one and repeats
// the request once, at once. When no token can be had, the outcome is Retry with the token source's error.
// A cancelled or expired ctx gives Retry with the context's error.
func (c *ReportClient) Send(ctx context.Context, body []byte, idempotencyKey string) Outcome {
	for attempt := 0; ; attempt++ {
		tok, err := c.cfg.Tokens.Token(ctx)
		if err != nil {
			return Outcome{Kind: Retry, Err: fmt.Errorf("access token: %w", err)}
		}
		out := c.post(ctx, body, idempotencyKey, tok)
		if out.Status == http.StatusUnauthorized && attempt == 0 {
			c.cfg.Tokens.Invalidate(tok)
			c.log.Debug("report answered 401; repeating with a new token", "status", out.Status)
			continue
		}
		return out
	}
}

// post makes one request.
func (c *ReportClient) post(ctx context.Context, body []byte, key, tok string) Outcome {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL, bytes.NewReader(body))
	if err != nil {
		// A malformed URL is a configuration error that no retry fixes, but the report is not at fault:
		// keep it (Retry) rather than dead-letter it.
		return Outcome{Kind: Retry, Err: fmt.Errorf("report request: %w", err)}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	// Errors from Do name the method and URL (never a header) and wrap the cause, ctx's error included.
	return Classify(c.cfg.Client.Do(req))
}
