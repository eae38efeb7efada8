package metrics

import (
	"errors"

	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Tokens is the token source's metrics. Its method is safe for concurrent use.
type Tokens struct {
	requests map[[2]string]*Counter
}

// NewTokens returns the token source's metrics, registered on reg.
func NewTokens(reg *Registry) *Tokens {
	m := &Tokens{requests: map[[2]string]*Counter{}}
	vec := reg.NewCounterVec(Namespace+"_token_requests_total",
		"Token endpoint requests by kind (login, refresh) and result (ok, rejected, unavailable).",
		[]string{"kind", "result"})
	for _, k := range TokenKinds {
		for _, r := range TokenResults {
			m.requests[[2]string{k, r}] = vec.With(k, r)
		}
	}
	return m
}

// TokenObserved counts one token request; it has the signature of upstream.TokenConfig.Observe.
func (m *Tokens) TokenObserved(kind string, err error) {
	result := "ok"
	switch {
	case err == nil:
	case errors.Is(err, upstream.ErrTokenEndpoint):
		result = "unavailable"
	default:
		result = "rejected"
	}
	if c, ok := m.requests[[2]string{kind, result}]; ok {
		c.Inc()
	}
}
