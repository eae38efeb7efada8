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
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
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
				return fmt.Errorf("refusing redirect to another host (%s)", quoted(req.URL.Host))
			}
			return nil
		},
	}, nil
}

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// readStatusError reads a non-success response into a StatusError: the status, Retry-After and the
// messages of an ApiResponseMessage body, if the body is one.
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

// Bounds of the upstream's values in errors, which reach the log and /status: the upstream's headers and
// bodies may be megabytes long.
const (
	maxQuoted    = 128 // a header value, an error code
	maxMessages  = 256 // the messages of an ApiResponseMessage, joined
	maxErrorText = 512 // a transport error's text
)

// quoted returns an upstream value for an error: quoted, so that control characters are escaped, and cut
// to maxQuoted bytes, with the value's length, when longer.
func quoted(s string) string {
	if len(s) <= maxQuoted {
		return strconv.Quote(s)
	}
	return strconv.Quote(logging.Clip(s, maxQuoted)) + " (" + strconv.Itoa(len(s)) + " bytes)"
}

// boundError makes an error from the HTTP client fit for the log and /status. net/http puts the whole
// request URL into its errors (a *url.Error), where a token URL's query may hold a client secret: the URL
// is redacted (logging.RedactURL), then cut short, as is the whole text, for net/http quotes some of the
// upstream's values whole (a redirect's Location as the URL, a malformed status line). errors.Is and As
// see the error as it was, but for that URL.
func boundError(err error) error {
	if err == nil {
		return nil
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = logging.RedactURL(ue.URL)
		if len(ue.URL) > maxQuoted {
			ue.URL = logging.Clip(ue.URL, maxQuoted)
		}
	}
	msg := err.Error()
	if len(msg) <= maxErrorText {
		return err
	}
	return &boundedError{msg: logging.Clip(msg, maxErrorText), err: err}
}

// boundedError is an error whose text boundError cut short.
type boundedError struct {
	msg string
	err error
}

func (e *boundedError) Error() string { return e.msg }
func (e *boundedError) Unwrap() error { return e.err }
