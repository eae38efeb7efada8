package upstream

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
)

// Classify is the one place that decides what an upstream answer to a report means (operation
// reportTrackingEvent; docs/delivery.md#reports):
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
	// URL of the report operation (operation reportTrackingEvent): the upstream URL joined with
	// BRIDGE_REPORT_PATH.
	URL string
	// Tokens provides the bearer token; required.
	Tokens *TokenSource
	// Client makes the requests; it must have a timeout (NewHTTPClient with the HTTP timeout). Nil means
	// http.DefaultClient, for tests only.
	Client *http.Client
	Logger *slog.Logger
}

// ReportClient posts tracking event reports to the upstream's report operation (operation
// reportTrackingEvent). It makes one attempt per Send, plus one immediate repeat with a new token after a
// 401, and leaves every other retry to its caller (the report consumer, through JetStream redelivery). It is
// safe for concurrent use.
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
	resp, err := c.cfg.Client.Do(req)
	return Classify(resp, boundError(err))
}
