package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
)

// Errors of APIClient.Call that are not an answer of the upstream. Callers branch on them with errors.Is.
var (
	// ErrNoToken means no access token could be had (the token endpoint refused the login or could not be
	// reached); the request was not sent.
	ErrNoToken = errors.New("no access token")
	// ErrAnswerTooLarge means the answer's body was larger than the caller's bound; the rest was not read.
	ErrAnswerTooLarge = errors.New("upstream answer too large")
	// ErrAnswerCut means the answer's status and headers arrived but its body could not be read to the end.
	ErrAnswerCut = errors.New("upstream answer cut short")
)

// APIConfig configures an APIClient.
type APIConfig struct {
	// BaseURL is the upstream URL including the version segment (BRIDGE_UPSTREAM_URL).
	BaseURL string
	// Tokens provides the bearer token; required.
	Tokens *TokenSource
	// Client makes the requests. Its Timeout should be 0: each call is bounded by its context, so that
	// a caller's shorter deadline is honoured. Nil means http.DefaultClient, for tests only.
	Client *http.Client
	Logger *slog.Logger
}

// APIRequest is one call of an operation of the upstream API.
type APIRequest struct {
	// Method is the HTTP method; Path is relative to the base URL, with its query already encoded.
	Method, Path string
	// Body, when not nil, is sent verbatim with Content-Type application/json.
	Body []byte
	// IdempotencyKey, when set, is sent as the Idempotency-Key header.
	IdempotencyKey string
	// MaxBody bounds the answer's body; a larger one gives ErrAnswerTooLarge. 0 means 64 KiB.
	MaxBody int
}

// APIResponse is the upstream's answer to an APIRequest, whatever its status.
type APIResponse struct {
	Status int
	// Header holds the answer's headers (Retry-After, Location, Content-Type, …).
	Header http.Header
	// Body is the answer's body, verbatim.
	Body []byte
	// Retried reports that the request was sent twice: a 401 answered the first attempt.
	Retried bool
}

// APIClient calls the operations of the upstream API (the operations of
// docs/upstream.md#operations but the stream) on behalf of the request-reply
// service. Each Call is one request, plus one immediate repeat with a new token when the upstream answers
// 401 (docs/upstream.md#expired-tokens: the request was not processed, so the repeat is safe for every
// method, POST included). It never repeats a request for any other reason: a timeout or a lost connection may
// hide a processed request. It is safe for concurrent use.
type APIClient struct {
	cfg  APIConfig
	base string
	log  *slog.Logger
}

// NewAPIClient returns an APIClient. It contacts nothing until Call is called.
func NewAPIClient(cfg APIConfig) *APIClient {
	if cfg.Client == nil {
		cfg.Client = http.DefaultClient
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &APIClient{cfg: cfg, base: strings.TrimRight(cfg.BaseURL, "/"), log: cfg.Logger}
}

// Call sends r and returns the upstream's answer, whatever its status. The error is nil when an answer
// was read in full; otherwise it wraps ErrNoToken (no request was sent), ErrAnswerTooLarge,
// ErrAnswerCut, or the transport's error, and ctx's error when ctx ended first (errors.Is with
// context.DeadlineExceeded tells a timeout). When the error is not ErrNoToken the request may have
// reached the upstream.
func (c *APIClient) Call(ctx context.Context, r APIRequest) (*APIResponse, error) {
	for attempt := 0; ; attempt++ {
		tok, err := c.cfg.Tokens.Token(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("%w: waiting for the token endpoint: %w", ErrNoToken, ctx.Err())
			}
			return nil, fmt.Errorf("%w: %w", ErrNoToken, err)
		}
		resp, err := c.do(ctx, r, tok)
		if err == nil && resp.Status == http.StatusUnauthorized && attempt == 0 {
			c.cfg.Tokens.Invalidate(tok)
			c.log.Debug("API call answered 401; repeating with a new token", "method", r.Method, "status", resp.Status)
			continue
		}
		if resp != nil {
			resp.Retried = attempt > 0
		}
		return resp, err
	}
}

// do makes one request and reads its answer.
func (c *APIClient) do(ctx context.Context, r APIRequest, tok string) (*APIResponse, error) {
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, c.base+r.Path, body)
	if err != nil {
		return nil, fmt.Errorf("API request %s: %w", r.Method, err)
	}
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	if r.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", r.IdempotencyKey)
	}
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		// Errors from Do name the method and URL (never a header) and wrap the cause, ctx's error included.
		return nil, boundError(err)
	}
	defer resp.Body.Close()
	limit := r.MaxBody
	if limit <= 0 {
		limit = maxErrorBody
	}
	out := &APIResponse{Status: resp.StatusCode, Header: resp.Header}
	out.Body, err = io.ReadAll(io.LimitReader(resp.Body, int64(limit)+1))
	switch {
	case err != nil:
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return out, fmt.Errorf("%w: HTTP %d: %w", ErrAnswerCut, resp.StatusCode, err)
	case len(out.Body) > limit:
		return out, fmt.Errorf("%w: HTTP %d with a body of more than %d bytes", ErrAnswerTooLarge, resp.StatusCode, limit)
	}
	return out, nil
}
