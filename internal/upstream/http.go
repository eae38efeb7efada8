package upstream

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// ClientOptions configures the HTTP clients towards the provider.
type ClientOptions struct {
	// CAFile is a PEM bundle of trusted roots; empty means the system roots.
	CAFile string
	// Timeout bounds a whole request and its response; 0 means none (the event stream).
	Timeout time.Duration
}

// NewHTTPClient returns a client for the provider's API: TLS 1.2 or newer, verification always on,
// response headers within 30 s, and redirects followed only to the same host (the bearer token never goes
// elsewhere).
func NewHTTPClient(o ClientOptions) (*http.Client, error) {
	tlsCfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("upstream CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream CA file %s: no PEM certificate found", o.CAFile)
		}
		tlsCfg.RootCAs = pool
	}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:       tlsCfg,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: tr,
		Timeout:   o.Timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errors.New("stopped after 5 redirects")
			}
			if req.URL.Host != via[0].URL.Host || req.URL.Scheme != via[0].URL.Scheme {
				return fmt.Errorf("refusing redirect to another host (%s)", req.URL.Host)
			}
			return nil
		},
	}, nil
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// readStatusError reads a non-success response into a StatusError: the status, Retry-After and the
// messages of an ApiResponseMessage body (spec 2.19), if the body is one.
func readStatusError(resp *http.Response) *StatusError {
	st := &StatusError{Code: resp.StatusCode, RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var msg struct {
		Messages []string `json:"messages"`
	}
	if json.Unmarshal(body, &msg) == nil {
		st.Messages = msg.Messages
	}
	return st
}

// maxServerDelay bounds the delays the upstream asks for (Retry-After, the stream's retry: hint): a
// larger value, or one that overflows, would stop the bridge for good.
const maxServerDelay = 24 * time.Hour

// parseRetryAfter reads a Retry-After header: delay-seconds or an HTTP date. Invalid or past values give 0;
// longer ones maxServerDelay.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(maxServerDelay/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), maxServerDelay)
	}
	return 0
}
