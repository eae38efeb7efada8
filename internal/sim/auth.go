package sim

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strings"
	"sync"
	"time"
)

// grantedScope is the scope string of every token response (docs/upstream.md#authentication).
const grantedScope = "openid email profile tracking-api"

// WWW-Authenticate values of 401 answers (docs/upstream.md#expired-tokens).
const (
	errorURI    = `error_uri="https://tools.ietf.org/html/rfc6750#section-3.1"`
	authInvalid = `Bearer error="invalid_token", error_description="The access token is invalid", ` + errorURI
)

// expiredDescription is the error_description of an expired access token. The provider documents only
// that it names the JWT's expiry (docs/upstream.md#expired-tokens); this uses Spring Security's resource
// server wording, with the instant in whole seconds as a JWT's exp claim has it.
func expiredDescription(expires time.Time) string {
	return "Jwt expired at " + expires.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// authExpired is the WWW-Authenticate value of an expired access token (docs/upstream.md#expired-tokens).
func authExpired(expires time.Time) string {
	return `Bearer error="invalid_token", error_description="` + expiredDescription(expires) + `", ` + errorURI
}

// tokenInfo is what the store knows of one issued token.
type tokenInfo struct {
	user    string
	session string
	expires time.Time
}

// tokenStore holds issued access and refresh tokens.
type tokenStore struct {
	mu      sync.Mutex
	access  map[string]*tokenInfo
	refresh map[string]*tokenInfo
}

func (t *tokenStore) init() {
	t.access = make(map[string]*tokenInfo)
	t.refresh = make(map[string]*tokenInfo)
}

// sweep forgets tokens that expired more than an hour before now; they are then merely invalid.
func (t *tokenStore) sweep(now time.Time) {
	cut := now.Add(-time.Hour)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range []map[string]*tokenInfo{t.access, t.refresh} {
		for k, v := range m {
			if v.expires.Before(cut) {
				delete(m, k)
			}
		}
	}
}

// expireAll makes every token of m expired now.
func (t *tokenStore) expireAll(m map[string]*tokenInfo) {
	past := time.Now().Add(-time.Nanosecond)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, v := range m {
		if v.expires.After(past) {
			v.expires = past
		}
	}
}

// ExpireTokens makes every access token issued so far expired: the next API request with one is answered
// 401 with the expiry described in docs/upstream.md#expired-tokens. Refresh tokens stay valid.
func (s *Server) ExpireTokens() { s.tokens.expireAll(s.tokens.access) }

// ExpireRefreshTokens makes every refresh token issued so far expired: refreshing with one is answered
// 400 invalid_grant "Token is not active".
func (s *Server) ExpireRefreshTokens() { s.tokens.expireAll(s.tokens.refresh) }

// randomToken returns an opaque random string.
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// randomUUID returns a random UUID-shaped string (Keycloak's session_state).
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// tokenResponse is the Keycloak-shaped token answer (docs/upstream.md#authentication).
type tokenResponse struct {
	AccessToken      string `json:"access_token"`
	ExpiresIn        int64  `json:"expires_in"`
	RefreshExpiresIn int64  `json:"refresh_expires_in"`
	RefreshToken     string `json:"refresh_token"`
	TokenType        string `json:"token_type"`
	IDToken          string `json:"id_token"`
	NotBeforePolicy  int    `json:"not-before-policy"`
	SessionState     string `json:"session_state"`
	Scope            string `json:"scope"`
}

// oauthError is the Keycloak-shaped error answer.
type oauthError struct {
	Error       string `json:"error"`
	Description string `json:"error_description"`
}

// seconds rounds d up to whole seconds, so that a sub-second TTL is never announced as 0.
func seconds(d time.Duration) int64 { return int64((d + time.Second - 1) / time.Second) }

func (s *Server) tokenError(w http.ResponseWriter, status int, code, desc string) {
	s.stats.add(&s.stats.tokenFailures, 1)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, status, oauthError{Error: code, Description: desc})
}

// handleTokenMethod answers token endpoint requests with another method than POST.
func (s *Server) handleTokenMethod(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Allow", http.MethodPost)
	s.tokenError(w, http.StatusMethodNotAllowed, "invalid_request", "HTTP 405 Method Not Allowed")
}

// handleToken serves the token endpoint: grant_type password and refresh_token
// (docs/upstream.md#authentication). Neither passwords nor tokens are logged.
func (s *Server) handleToken(w http.ResponseWriter, r *http.Request) {
	f := s.Faults()
	if !s.delay(w, r, f.Latency) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	_ = r.ParseForm()
	form := r.PostForm
	grant := form.Get("grant_type")
	s.stats.mu.Lock()
	s.stats.tokenRequests[grant]++
	s.stats.mu.Unlock()

	if chance(f.TokenErrorRate) {
		s.stats.add(&s.stats.injectedErrors, 1)
		s.writeRetryAfter(w, f.RetryAfter)
		s.tokenError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "Service temporarily unavailable")
		return
	}
	clientID := form.Get("client_id")
	if clientID == "" {
		clientID, _, _ = r.BasicAuth()
	}
	if clientID != s.opts.ClientID {
		s.log.Info("token request with unknown client", "client_id", clientID, "grant_type", grant)
		s.tokenError(w, http.StatusUnauthorized, "invalid_client", "Invalid client or Invalid client credentials")
		return
	}
	now := time.Now()
	switch grant {
	case "":
		s.tokenError(w, http.StatusBadRequest, "invalid_request", "Missing form parameter: grant_type")
	case "password":
		user, pass := form.Get("username"), form.Get("password")
		want, known := s.opts.Users[user]
		if user == "" || !known || subtle.ConstantTimeCompare([]byte(pass), []byte(want)) != 1 {
			s.log.Info("login rejected", "user", user)
			s.tokenError(w, http.StatusUnauthorized, "invalid_grant", "Invalid user credentials")
			return
		}
		// Spec 5 makes openid the only and default scope and never requires the field, so a missing or
		// blank scope is granted as openid, as Keycloak does. A given scope list must hold openid; other
		// values beside it are tolerated.
		if sc := form.Get("scope"); strings.TrimSpace(sc) != "" && !hasScope(sc, "openid") {
			s.tokenError(w, http.StatusBadRequest, "invalid_scope", "Invalid scopes: "+sc)
			return
		}
		s.issue(w, user, randomUUID(), now, grant)
	case "refresh_token":
		rt := form.Get("refresh_token")
		s.tokens.mu.Lock()
		info := s.tokens.refresh[rt]
		var user, session string
		active := info != nil && now.Before(info.expires)
		if active {
			user, session = info.user, info.session
		}
		s.tokens.mu.Unlock()
		if !active {
			s.log.Info("refresh rejected: token not active")
			s.tokenError(w, http.StatusBadRequest, "invalid_grant", "Token is not active")
			return
		}
		s.issue(w, user, session, now, grant)
	default:
		s.tokenError(w, http.StatusBadRequest, "unsupported_grant_type", "Unsupported grant_type")
	}
}

// issue answers with a fresh access and refresh token for user.
func (s *Server) issue(w http.ResponseWriter, user, session string, now time.Time, grant string) {
	resp := tokenResponse{
		AccessToken:      randomToken(),
		ExpiresIn:        seconds(s.opts.AccessTTL),
		RefreshExpiresIn: seconds(s.opts.RefreshTTL),
		RefreshToken:     randomToken(),
		TokenType:        "bearer", // as the provider documents it (Keycloak sends "Bearer"); RFC 6749: any case
		IDToken:          randomToken(),
		SessionState:     session,
		Scope:            grantedScope,
	}
	s.tokens.mu.Lock()
	s.tokens.access[resp.AccessToken] = &tokenInfo{user: user, session: session, expires: now.Add(s.opts.AccessTTL)}
	s.tokens.refresh[resp.RefreshToken] = &tokenInfo{user: user, session: session, expires: now.Add(s.opts.RefreshTTL)}
	s.tokens.mu.Unlock()
	s.stats.add(&s.stats.tokensIssued, 1)
	s.log.Debug("token issued", "user", user, "grant_type", grant)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, resp)
}

// hasScope reports whether the space-separated scope list holds want.
func hasScope(list, want string) bool {
	for _, sc := range strings.Fields(list) {
		if sc == want {
			return true
		}
	}
	return false
}

// authenticate checks the request's bearer token and returns its user, or answers 401 and reports false.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, _ := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !strings.EqualFold(scheme, "Bearer") || tok == "" {
		s.unauthorized(w, `Bearer`, "Full authentication is required to access this resource")
		return "", false
	}
	now := time.Now()
	s.tokens.mu.Lock()
	info := s.tokens.access[tok]
	var user string
	var expired bool
	var expires time.Time
	if info != nil {
		user, expired, expires = info.user, !now.Before(info.expires), info.expires
	}
	s.tokens.mu.Unlock()
	switch {
	case info == nil:
		s.unauthorized(w, authInvalid, "The access token is invalid")
		return "", false
	case expired:
		s.unauthorized(w, authExpired(expires), expiredDescription(expires))
		return "", false
	}
	return user, true
}

func (s *Server) unauthorized(w http.ResponseWriter, challenge, msg string) {
	s.stats.add(&s.stats.unauthorized, 1)
	w.Header().Set("WWW-Authenticate", challenge)
	writeMessages(w, http.StatusUnauthorized, msg)
}
