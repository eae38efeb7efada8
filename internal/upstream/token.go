package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// Sentinel errors of the token source. Callers branch on them with errors.Is.
var (
	// ErrLoginRejected means the token endpoint refused the user name, password or client id. The token
	// source will not ask again before the login retry interval has passed.
	ErrLoginRejected = errors.New("login rejected by the token endpoint")
	// ErrTokenEndpoint means the token endpoint could not be reached or answered with a server error.
	// It is transient.
	ErrTokenEndpoint = errors.New("token endpoint unavailable")
)

// TokenConfig configures a TokenSource.
type TokenConfig struct {
	// TokenURL is the token endpoint (docs/upstream.md#authentication).
	TokenURL string
	// ClientID and Username identify the client and the account in the password grant.
	ClientID string
	Username string
	// Password returns the account password. It is a function so that the secret is read only when
	// needed and never stored in a printable field.
	Password func() string
	// Client makes the token requests; it must have a timeout. Nil means a client with a 30 s timeout.
	Client *http.Client
	// RefreshMargin is how long before expiry a token is refreshed (capped at half its lifetime).
	RefreshMargin time.Duration
	// LoginRetry is the minimum interval between two password logins after the credentials were rejected.
	LoginRetry time.Duration
	// Logger receives the token source's logs; nil discards them.
	Logger *slog.Logger
	// Observe, when set, is told of each token request: kind is "login" or "refresh", err its outcome.
	Observe func(kind string, err error)
}

// TokenSource hands out access tokens for the OAuth 2.0 password grant
// (docs/upstream.md#authentication). It refreshes a
// token ahead of its expiry, logs in again with the password when the refresh token is no longer
// accepted, drops a token the API rejected (Invalidate), and lets concurrent callers share one in-flight
// request. It is safe for concurrent use.
//
// Errors it returns never contain a token, the password or the token endpoint's response body.
type TokenSource struct {
	cfg    TokenConfig
	oauth  oauth2.Config
	ctx    context.Context // carries the HTTP client for x/oauth2
	log    *slog.Logger
	now    func() time.Time
	mu     sync.Mutex
	tok    *oauth2.Token
	refExp time.Time // expiry of tok.RefreshToken; zero = unknown
	flight *tokenCall

	// After a rejected login: no new login before loginAfter; loginErr is returned meanwhile.
	loginAfter time.Time
	loginErr   error
}

type tokenCall struct {
	done chan struct{}
	tok  *oauth2.Token
	err  error
}

// NewTokenSource returns a TokenSource; it does not contact the token endpoint until asked for a token.
func NewTokenSource(cfg TokenConfig) *TokenSource {
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.LoginRetry <= 0 {
		cfg.LoginRetry = time.Minute
	}
	return &TokenSource{
		cfg: cfg,
		oauth: oauth2.Config{
			ClientID: cfg.ClientID,
			Endpoint: oauth2.Endpoint{TokenURL: cfg.TokenURL, AuthStyle: oauth2.AuthStyleInParams},
			Scopes:   []string{"openid"},
		},
		ctx: context.WithValue(context.Background(), oauth2.HTTPClient, cfg.Client),
		log: cfg.Logger,
		now: time.Now,
	}
}

// Token returns a valid access token, fetching or refreshing one when needed. It blocks until the token
// endpoint answered or ctx is done.
func (ts *TokenSource) Token(ctx context.Context) (string, error) {
	ts.mu.Lock()
	if t := ts.tok; t != nil && ts.fresh(t) {
		ts.mu.Unlock()
		return t.AccessToken, nil
	}
	c := ts.flight
	if c == nil {
		c = &tokenCall{done: make(chan struct{})}
		ts.flight = c
		go ts.fetch(c)
	}
	ts.mu.Unlock()
	select {
	case <-c.done:
		if c.err != nil {
			return "", c.err
		}
		return c.tok.AccessToken, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Invalidate drops the access token after the API answered 401 to it, so that the next Token call gets a
// new one. A token other than the current one (already replaced) is ignored.
func (ts *TokenSource) Invalidate(accessToken string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.tok != nil && ts.tok.AccessToken == accessToken {
		// Keep the refresh token: a refresh is cheaper than a login and falls back to one when refused.
		ts.tok = &oauth2.Token{RefreshToken: ts.tok.RefreshToken}
	}
}

// Valid reports whether the source holds an unexpired access token (for readiness).
func (ts *TokenSource) Valid() bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.tok != nil && ts.tok.AccessToken != "" && ts.now().Before(ts.tok.Expiry)
}

// fresh reports whether t can be handed out: valid and not within the refresh margin. Caller holds mu.
func (ts *TokenSource) fresh(t *oauth2.Token) bool {
	if t.AccessToken == "" {
		return false
	}
	if t.Expiry.IsZero() {
		return true
	}
	margin := ts.cfg.RefreshMargin
	if life := time.Duration(t.ExpiresIn) * time.Second; life > 0 && margin > life/2 {
		margin = life / 2
	}
	return ts.now().Add(margin).Before(t.Expiry)
}

// fetch runs one token request on behalf of every waiting caller.
func (ts *TokenSource) fetch(c *tokenCall) {
	ts.mu.Lock()
	old, refExp := ts.tok, ts.refExp
	loginAfter, loginErr := ts.loginAfter, ts.loginErr
	ts.mu.Unlock()

	var tok *oauth2.Token
	var err error
	refreshed := false
	if old != nil && old.RefreshToken != "" && (refExp.IsZero() || ts.now().Before(refExp)) {
		tok, err = ts.request("refresh", func(ctx context.Context) (*oauth2.Token, error) {
			return ts.oauth.TokenSource(ctx, &oauth2.Token{RefreshToken: old.RefreshToken}).Token()
		})
		refreshed = err == nil
		if err != nil && !errors.Is(err, ErrTokenEndpoint) {
			ts.log.Info("refresh token no longer accepted, logging in again", "err", err)
		}
	}
	if !refreshed && (err == nil || !errors.Is(err, ErrTokenEndpoint)) {
		if ts.now().Before(loginAfter) {
			tok, err = nil, loginErr
		} else {
			tok, err = ts.request("login", func(ctx context.Context) (*oauth2.Token, error) {
				return ts.oauth.PasswordCredentialsToken(ctx, ts.cfg.Username, ts.cfg.Password())
			})
		}
	}

	ts.mu.Lock()
	switch {
	case err == nil:
		ts.tok, ts.loginAfter, ts.loginErr = tok, time.Time{}, nil
		ts.refExp = time.Time{}
		if s, ok := extraSeconds(tok, "refresh_expires_in"); ok && s > 0 {
			ts.refExp = ts.now().Add(time.Duration(s) * time.Second)
		}
	case errors.Is(err, ErrLoginRejected) && err != loginErr:
		ts.loginAfter, ts.loginErr = ts.now().Add(ts.cfg.LoginRetry), err
		ts.tok = nil
	}
	ts.flight = nil
	ts.mu.Unlock()

	if err == nil {
		kind := "logged in"
		if refreshed {
			kind = "token refreshed"
		}
		ts.log.Debug(kind, "expires_in", tok.ExpiresIn)
	}
	c.tok, c.err = tok, err
	close(c.done)
}

// request performs one token request and turns its failure into an error that is safe to log.
func (ts *TokenSource) request(kind string, do func(context.Context) (*oauth2.Token, error)) (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(ts.ctx, ts.cfg.Client.Timeout+time.Second)
	defer cancel()
	tok, err := do(ctx)
	if err == nil && tok.AccessToken == "" {
		err = fmt.Errorf("%w: %s answer without access_token", ErrTokenEndpoint, kind)
	}
	if err != nil {
		err = safeTokenError(kind, err)
	}
	if ts.cfg.Observe != nil {
		ts.cfg.Observe(kind, err)
	}
	if err != nil {
		return nil, err
	}
	return tok, nil
}

// safeTokenError classifies a token request failure. x/oauth2's RetrieveError.Error includes the raw
// response body, so only the status and the RFC 6749 error code are kept.
func safeTokenError(kind string, err error) error {
	var re *oauth2.RetrieveError
	if !errors.As(err, &re) {
		// Transport errors from net/http name the URL and the cause, never the form body; a redirect's
		// Location among them is the upstream's.
		return fmt.Errorf("%w: %s: %v", ErrTokenEndpoint, kind, boundError(err))
	}
	status := 0
	if re.Response != nil {
		status = re.Response.StatusCode
	}
	code := re.ErrorCode
	switch {
	case code == "":
		code = "no error code"
	case !plainCode(code):
		code = quoted(code) // a value from the upstream's body, not an RFC 6749 code
	}
	switch {
	case status >= 500 || status == http.StatusTooManyRequests || status == http.StatusRequestTimeout:
		return fmt.Errorf("%w: %s: HTTP %d", ErrTokenEndpoint, kind, status)
	case kind == "login":
		return fmt.Errorf("%w: HTTP %d %s (check BRIDGE_USERNAME, BRIDGE_PASSWORD and BRIDGE_CLIENT_ID)",
			ErrLoginRejected, status, code)
	default:
		return fmt.Errorf("refresh rejected: HTTP %d %s", status, code)
	}
}

// plainCode reports whether an OAuth error code is short and made of the characters RFC 6749 allows in
// one (its section 5.2), spaces aside: it then goes into errors as it is.
func plainCode(s string) bool {
	if len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func extraSeconds(t *oauth2.Token, key string) (int64, bool) {
	switch v := t.Extra(key).(type) {
	case float64:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}
