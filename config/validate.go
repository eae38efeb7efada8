package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/nats-io/nkeys"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// maxQuoted bounds a value a problem quotes, in bytes.
const maxQuoted = 64

// problem is one configuration problem: the variables it concerns and what is wrong with them. Its text is
// "VAR: message" (or "VAR1, VAR2: message"); cause, when set, is kept for errors.Is.
type problem struct {
	vars  []string
	msg   string
	cause error
}

func problemf(vars []string, cause error, format string, args ...any) *problem {
	return &problem{vars: vars, msg: fmt.Sprintf(format, args...), cause: cause}
}

func (p *problem) Error() string { return strings.Join(p.vars, ", ") + ": " + p.msg }

func (p *problem) Unwrap() error { return p.cause }

// concerns reports whether the problem is about one of the variables in set.
func (p *problem) concerns(set map[string]bool) bool {
	return slices.ContainsFunc(p.vars, func(v string) bool { return set[v] })
}

// checker collects problems.
type checker struct{ errs []error }

func (ck *checker) add(key, format string, args ...any) {
	ck.errs = append(ck.errs, problemf([]string{key}, nil, format, args...))
}

func (ck *checker) addCause(key string, cause error, format string, args ...any) {
	ck.errs = append(ck.errs, problemf([]string{key}, cause, format, args...))
}

func (ck *checker) addVars(keys []string, format string, args ...any) {
	ck.errs = append(ck.errs, problemf(keys, nil, format, args...))
}

// fine reports whether no problem was found so far about any of keys.
func (ck *checker) fine(keys ...string) bool {
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return !slices.ContainsFunc(ck.errs, func(err error) bool {
		p, ok := err.(*problem)
		return ok && p.concerns(set)
	})
}

// Validate checks the configuration and reports every problem at once, joined with errors.Join, one per
// line, each naming the variables it concerns; nil means the configuration is usable. Beyond required
// values, ranges and enumerations it checks URL schemes (https unless BRIDGE_INSECURE_HTTP), subject and
// consumer names, that named files exist (and that certificate, key, seed and credentials files hold what
// their variable says), and that at most one NATS authentication method is set. It reads the file system
// and nothing else, and no message contains a secret's value.
func (c *Config) Validate() error { return errors.Join(c.check()...) }

// check returns Validate's problems, each a *problem.
func (c *Config) check() []error {
	var ck checker

	// Required values. Required fields are strings or Secrets.
	v := reflect.ValueOf(c).Elem()
	for _, f := range fields {
		if !f.required || v.Field(f.index).String() != "" {
			continue
		}
		if f.secret {
			ck.add(f.key, "is required (or name a file holding it in %s_FILE)", f.key)
		} else {
			ck.add(f.key, "is required")
		}
	}

	// Upstream.
	ck.httpURL("BRIDGE_UPSTREAM_URL", c.UpstreamURL, c.InsecureHTTP, true)
	ck.httpURL("BRIDGE_TOKEN_URL", c.TokenURL, c.InsecureHTTP, false)
	ck.path("BRIDGE_STREAM_PATH", c.StreamPath)
	ck.path("BRIDGE_REPORT_PATH", c.ReportPath)
	ck.fileContent("BRIDGE_UPSTREAM_CA_FILE", c.UpstreamCAFile, pemCertificates)

	// NATS and the HTTP endpoint.
	ck.natsURLs("BRIDGE_NATS_URL", c.NATSURL)
	ck.subjectPrefix("BRIDGE_SUBJECT_PREFIX", c.SubjectPrefix)
	ck.subjectPrefix("BRIDGE_NATS_INBOX_PREFIX", c.NATSInboxPrefix)
	ck.listenAddr("BRIDGE_HTTP_ADDR", c.HTTPAddr)
	if c.HTTPMaxConns < MinHTTPMaxConns || c.HTTPMaxConns > MaxHTTPMaxConns {
		ck.add("BRIDGE_HTTP_MAX_CONNS", "must be between %d and %d (got %d)", MinHTTPMaxConns, MaxHTTPMaxConns, c.HTTPMaxConns)
	}
	ck.consumerName("BRIDGE_REPORT_DURABLE", c.ReportDurable)
	if c.CESource != "" {
		if _, err := url.Parse(c.CESource); err != nil {
			ck.addCause("BRIDGE_CE_SOURCE", err, "is not a URI reference: %v", urlReason(err))
		}
	}

	// Logging.
	ck.oneOf("BRIDGE_LOG_FORMAT", c.LogFormat, "json", "text")
	ck.oneOf("BRIDGE_LOG_LEVEL", c.LogLevel, "debug", "info", "warn", "error")

	// Durations and sizes.
	positive(&ck, "BRIDGE_STREAM_IDLE_TIMEOUT", c.StreamIdleTimeout)
	positive(&ck, "BRIDGE_STREAM_MAX_EVENT_BYTES", c.StreamMaxEventBytes)
	positive(&ck, "BRIDGE_RECONNECT_MIN", c.ReconnectMin)
	positive(&ck, "BRIDGE_RECONNECT_MAX", c.ReconnectMax)
	ck.ordered("BRIDGE_RECONNECT_MIN", c.ReconnectMin, "BRIDGE_RECONNECT_MAX", c.ReconnectMax)
	positive(&ck, "BRIDGE_UNAVAILABLE_RETRY", c.UnavailableRetry)
	positive(&ck, "BRIDGE_STREAM_RETRY_HINT_MAX", c.StreamRetryHintMax)
	if c.LoginRetry < MinLoginRetry {
		ck.add("BRIDGE_LOGIN_RETRY", "must be at least %v (got %v): faster logins with rejected credentials "+
			"risk locking the account", MinLoginRetry, c.LoginRetry)
	}
	if c.RefreshMargin < MinRefreshMargin {
		ck.add("BRIDGE_REFRESH_MARGIN", "must be at least %v (got %v)", MinRefreshMargin, c.RefreshMargin)
	}
	positive(&ck, "BRIDGE_HTTP_TIMEOUT", c.HTTPTimeout)
	positive(&ck, "BRIDGE_PUBLISH_WINDOW", c.PublishWindow)
	atMost(&ck, "BRIDGE_PUBLISH_WINDOW", c.PublishWindow, MaxPublishWindow)
	positive(&ck, "BRIDGE_PUBLISH_TIMEOUT", c.PublishTimeout)
	positive(&ck, "BRIDGE_DUPLICATE_WINDOW", c.DuplicateWindow)
	if c.StreamReplicas < 1 || c.StreamReplicas > 5 {
		ck.add("BRIDGE_STREAM_REPLICAS", "must be between 1 and 5 (got %d)", c.StreamReplicas)
	}
	if c.LeaseTTL < time.Second || c.LeaseTTL%time.Second != 0 {
		// The server counts per-key TTLs in whole seconds, at least one: 1.5s would expire after 1s.
		ck.add("BRIDGE_LEASE_TTL", "must be a whole number of seconds, at least 1s (got %v)", c.LeaseTTL)
	}
	positive(&ck, "BRIDGE_REPORT_CONCURRENCY", c.ReportConcurrency)
	atMost(&ck, "BRIDGE_REPORT_CONCURRENCY", c.ReportConcurrency, MaxReportConcurrency)
	positive(&ck, "BRIDGE_REPORT_MAX_BYTES", c.ReportMaxBytes)
	if c.ReportMaxAge < 0 {
		ck.add("BRIDGE_REPORT_MAX_AGE", "must not be negative (got %v; 0 means retry forever)", c.ReportMaxAge)
	}
	positive(&ck, "BRIDGE_REPORT_BACKOFF_MIN", c.ReportBackoffMin)
	positive(&ck, "BRIDGE_REPORT_BACKOFF_MAX", c.ReportBackoffMax)
	ck.ordered("BRIDGE_REPORT_BACKOFF_MIN", c.ReportBackoffMin, "BRIDGE_REPORT_BACKOFF_MAX", c.ReportBackoffMax)
	c.checkStreamLimits(&ck)
	positive(&ck, "BRIDGE_API_CONCURRENCY", c.APIConcurrency)
	atMost(&ck, "BRIDGE_API_CONCURRENCY", c.APIConcurrency, MaxAPIConcurrency)
	positive(&ck, "BRIDGE_API_TIMEOUT", c.APITimeout)
	positive(&ck, "BRIDGE_API_MAX_BODY_BYTES", c.APIMaxBodyBytes)
	atMost(&ck, "BRIDGE_API_MAX_BODY_BYTES", c.APIMaxBodyBytes, MaxAPIBodyBytes)
	ck.apiEndpoints("BRIDGE_API_ENDPOINTS", c.APIEndpoints)
	ck.replyPrefixes("BRIDGE_API_REPLY_PREFIXES", c.APIReplyPrefixes, c.SubjectPrefix)
	c.checkInboxApart(&ck)
	positive(&ck, "BRIDGE_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)

	// NATS authentication and TLS.
	ck.fileContent("BRIDGE_NATS_CREDS_FILE", c.NATSCredsFile, natsCredentials)
	ck.fileContent("BRIDGE_NATS_NKEY_SEED_FILE", c.NATSNKeySeedFile, nkeySeed)
	ck.fileContent("BRIDGE_NATS_CA_FILE", c.NATSCAFile, pemCertificates)
	ck.file("BRIDGE_NATS_CERT_FILE", c.NATSCertFile)
	ck.file("BRIDGE_NATS_KEY_FILE", c.NATSKeyFile)
	ck.together("BRIDGE_NATS_CERT_FILE", c.NATSCertFile != "", "BRIDGE_NATS_KEY_FILE", c.NATSKeyFile != "")
	if ck.fine("BRIDGE_NATS_CERT_FILE", "BRIDGE_NATS_KEY_FILE") && c.NATSCertFile != "" && c.NATSKeyFile != "" {
		if _, err := tls.LoadX509KeyPair(c.NATSCertFile, c.NATSKeyFile); err != nil {
			ck.addVars([]string{"BRIDGE_NATS_CERT_FILE", "BRIDGE_NATS_KEY_FILE"}, "not a certificate and its key: %v", err)
		}
	}
	ck.together("BRIDGE_NATS_USER", c.NATSUser != "", "BRIDGE_NATS_PASSWORD", c.NATSPassword != "")
	var methods []string // the variables of the methods in use
	n := 0
	for _, m := range []struct {
		set  bool
		vars []string
	}{
		{c.NATSCredsFile != "", []string{"BRIDGE_NATS_CREDS_FILE"}},
		{c.NATSNKeySeedFile != "", []string{"BRIDGE_NATS_NKEY_SEED_FILE"}},
		{c.NATSUser != "" || c.NATSPassword != "", []string{"BRIDGE_NATS_USER", "BRIDGE_NATS_PASSWORD"}},
		{c.NATSToken != "", []string{"BRIDGE_NATS_TOKEN"}},
	} {
		if m.set {
			methods = append(methods, m.vars...)
			n++
		}
	}
	if n > 1 {
		ck.addVars(methods, "more than one NATS authentication method is set; use at most one of "+
			"a credentials file, an NKey seed file, user and password, or a token")
	}

	return ck.errs
}

// checkStreamLimits checks the limits of the streams the bridge creates as JetStream would, and more:
// each stream's total size holds at least its largest message, an age is no shorter than the stream's
// duplicate window, and the reports stream removes no report before the consumer dead-letters it.
func (c *Config) checkStreamLimits(ck *checker) {
	l := layout.Streams{MaxEventBytes: c.StreamMaxEventBytes, MaxReportBytes: c.ReportMaxBytes}
	events, reports, dlq := l.MsgSizes()
	for _, s := range []struct {
		bytesKey, ageKey, dataKey string
		bytes                     ByteSize
		age, dup                  time.Duration
		data                      int
		msgSize                   int32
	}{
		{"BRIDGE_EVENTS_STREAM_MAX_BYTES", "BRIDGE_EVENTS_STREAM_MAX_AGE", "BRIDGE_STREAM_MAX_EVENT_BYTES",
			c.EventsStreamMaxBytes, c.EventsStreamMaxAge, c.DuplicateWindow, c.StreamMaxEventBytes, events},
		{"BRIDGE_REPORTS_STREAM_MAX_BYTES", "BRIDGE_REPORTS_STREAM_MAX_AGE", "BRIDGE_REPORT_MAX_BYTES",
			c.ReportsStreamMaxBytes, c.ReportsStreamMaxAge, layout.ReportsDuplicateWindow, c.ReportMaxBytes, reports},
		{"BRIDGE_DLQ_STREAM_MAX_BYTES", "BRIDGE_DLQ_STREAM_MAX_AGE", "",
			c.DLQStreamMaxBytes, c.DLQStreamMaxAge, c.DuplicateWindow, 0, dlq},
	} {
		positive(ck, s.bytesKey, s.bytes)
		if s.data > 0 && int64(s.data)+layout.HeaderRoom > math.MaxInt32 {
			ck.add(s.dataKey, "must be at most %d (got %d): with %d bytes for headers it is the stream's largest "+
				"message, which JetStream holds in 32 bits", math.MaxInt32-layout.HeaderRoom, s.data, layout.HeaderRoom)
		}
		if s.bytes > 0 && s.msgSize > 0 && int64(s.bytes) < int64(s.msgSize) {
			vars := []string{s.bytesKey, "BRIDGE_STREAM_MAX_EVENT_BYTES", "BRIDGE_REPORT_MAX_BYTES"}
			if s.dataKey != "" {
				vars = []string{s.bytesKey, s.dataKey}
			}
			ck.addVars(vars, "the stream's total size %v is below its largest message, %d bytes (the data bound "+
				"plus %d for headers)", s.bytes, s.msgSize, layout.HeaderRoom)
		}
		switch {
		case s.age < 0:
			ck.add(s.ageKey, "must not be negative (got %v; 0 means no age limit)", s.age)
		case s.age > 0 && s.age < s.dup:
			// JetStream refuses a stream whose duplicate window outlasts its messages.
			vars := []string{s.ageKey}
			if s.dup == c.DuplicateWindow {
				vars = append(vars, "BRIDGE_DUPLICATE_WINDOW")
			}
			ck.addVars(vars, "the age limit %v is shorter than the stream's duplicate window %v; use 0 (none) or "+
				"at least the window", s.age, s.dup)
		}
	}
	if c.ReportsStreamMaxAge > 0 && (c.ReportMaxAge <= 0 || c.ReportMaxAge >= c.ReportsStreamMaxAge) {
		ck.addVars([]string{"BRIDGE_REPORTS_STREAM_MAX_AGE", "BRIDGE_REPORT_MAX_AGE"}, "JetStream removes a "+
			"report older than %v from the work queue without a trace; BRIDGE_REPORT_MAX_AGE (%v) must be set "+
			"and shorter, so that a report still failing is dead-lettered first, never lost",
			c.ReportsStreamMaxAge, c.ReportMaxAge)
	}
}

// httpURL checks an upstream URL: absolute, http(s), http only when insecure is allowed, no user
// information; a base URL (which paths are appended to) has no query or fragment either.
func (ck *checker) httpURL(key, raw string, insecure, base bool) {
	if raw == "" {
		return // reported as required
	}
	u, err := url.Parse(raw)
	if err != nil {
		ck.addCause(key, err, "is not a URL: %v", urlReason(err))
		return
	}
	if u.Scheme == "" || u.Hostname() == "" {
		ck.add(key, "must be an absolute URL with scheme and host, e.g. https://api.example.com/v1.0")
		return
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
	case "http":
		if !insecure {
			ck.add(key, "an http:// URL is not allowed; use https://, or for local development (e.g. the "+
				"simulator) set BRIDGE_INSECURE_HTTP=true")
		}
	default:
		ck.add(key, "scheme %q is not supported; use https:// (or http:// with BRIDGE_INSECURE_HTTP=true)", u.Scheme)
	}
	if u.User != nil {
		ck.add(key, "must not contain user information; the account goes in BRIDGE_USERNAME and BRIDGE_PASSWORD")
	}
	if base && (u.RawQuery != "" || u.Fragment != "" || u.ForceQuery) {
		ck.add(key, "must not have a query or fragment: the paths are appended to it")
	}
}

// urlReason is the reason of a url.Parse error without the URL itself, which may hold credentials.
func urlReason(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// path checks a request path relative to the upstream URL.
func (ck *checker) path(key, p string) {
	switch {
	case !strings.HasPrefix(p, "/"):
		ck.add(key, "%q must start with /", p)
	case strings.ContainsFunc(p, badRune):
		ck.add(key, "%q must not contain white space or control characters", p)
	default:
		if _, err := url.Parse("https://example.com" + p); err != nil {
			ck.addCause(key, err, "%q is not a valid URL path: %v", p, urlReason(err))
		}
	}
}

func badRune(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }

// natsURLs checks a comma-separated list of NATS server URLs. URLs are shown without user information.
func (ck *checker) natsURLs(key, list string) {
	if strings.TrimSpace(list) == "" {
		ck.add(key, "is required")
		return
	}
	entries := strings.Split(list, ",")
	for i, e := range entries {
		e = strings.TrimSpace(e)
		which := fmt.Sprintf("entry %d of %d", i+1, len(entries))
		if e == "" {
			ck.add(key, "%s is empty", which)
			continue
		}
		u, err := url.Parse(e)
		if err != nil {
			ck.addCause(key, err, "%s is not a URL: %v", which, urlReason(err))
			continue
		}
		switch strings.ToLower(u.Scheme) {
		case "nats", "tls", "ws", "wss":
			if u.Hostname() == "" {
				ck.add(key, "%q has no host", redactURL(u))
			}
		case "":
			ck.add(key, "%s has no scheme; write it as nats://host:port (or tls://, ws://, wss://)", which)
		default:
			ck.add(key, "%q: scheme %q is not supported; use nats, tls, ws or wss", redactURL(u), u.Scheme)
		}
	}
}

// subjectPrefix checks that p is one or more NATS subject tokens separated by dots: no empty token, no
// wildcard, no white space or control character.
func (ck *checker) subjectPrefix(key, p string) {
	if p == "" {
		ck.add(key, "must not be empty")
		return
	}
	ck.literalSubject(key, strconv.Quote(p), p)
}

// literalSubject adds a problem for each fault that keeps p from being literal subject tokens (an empty
// token, a wildcard, white space or a control character), showing p as shown; it reports whether there
// was none.
func (ck *checker) literalSubject(key, shown, p string) bool {
	var empty, wildcard, space bool
	for tok := range strings.SplitSeq(p, ".") {
		empty = empty || tok == ""
		wildcard = wildcard || strings.ContainsAny(tok, "*>")
		space = space || strings.ContainsFunc(tok, badRune)
	}
	if empty {
		ck.add(key, "%s has an empty token (a leading, trailing or doubled dot)", shown)
	}
	if wildcard {
		ck.add(key, "%s must not contain the wildcards * or >", shown)
	}
	if space {
		ck.add(key, "%s must not contain white space or control characters", shown)
	}
	return !empty && !wildcard && !space
}

// apiEndpoints checks BRIDGE_API_ENDPOINTS: "all", or a comma-separated list of APIEndpointNames
// (matched without regard to case), every entry known and none empty.
func (ck *checker) apiEndpoints(key, list string) {
	valid := "use " + AllEndpoints + ", or a comma-separated list of: " + strings.Join(APIEndpointNames, ", ")
	if strings.TrimSpace(list) == "" {
		ck.add(key, "names no endpoint; %s (or set BRIDGE_API_ENABLED=false to serve none)", valid)
		return
	}
	entries := strings.Split(list, ",")
	var unknown []string
	all := false
	for i, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "":
			ck.add(key, "entry %d of %d is empty", i+1, len(entries))
		case e == AllEndpoints:
			all = true
		case !slices.Contains(APIEndpointNames, e):
			unknown = append(unknown, strconv.Quote(logging.Cut(e, maxQuoted)))
		}
	}
	if len(unknown) > 0 {
		noun := "an unknown endpoint"
		if len(unknown) > 1 {
			noun = "unknown endpoints"
		}
		ck.add(key, "%s %s; %s", noun, strings.Join(unknown, ", "), valid)
	}
	if all && len(entries) > 1 {
		ck.add(key, "%q stands alone; %s", AllEndpoints, valid)
	}
}

// replyPrefixes checks BRIDGE_API_REPLY_PREFIXES: one or more subject prefixes of whole tokens (a trailing
// dot is implied), without wildcards, white space or empty tokens. A prefix must not cover a system
// subject ($JS, $KV, $SRV, ...) or the bridge's own subjects under prefix: answering there is exactly
// what the reply check is for.
func (ck *checker) replyPrefixes(key, list, prefix string) {
	if strings.TrimSpace(list) == "" {
		ck.add(key, "names no prefix; the callers' inbox prefix, _INBOX. by default, is needed")
		return
	}
	entries := strings.Split(list, ",")
	for i, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			ck.add(key, "entry %d of %d is empty", i+1, len(entries))
			continue
		}
		q := strconv.Quote(logging.Cut(e, maxQuoted))
		if !ck.literalSubject(key, q, strings.TrimSuffix(e, ".")) {
			continue
		}
		norm := strings.TrimSuffix(e, ".") + "."
		if strings.HasPrefix(norm, "$") {
			ck.add(key, "%s is a system subject prefix ($JS, $KV, $SRV, ...), not an inbox", q)
		} else if own := prefix + "."; prefix != "" && (strings.HasPrefix(own, norm) || strings.HasPrefix(norm, own)) {
			ck.add(key, "%s covers the bridge's own subjects (BRIDGE_SUBJECT_PREFIX %q), not an inbox", q, prefix)
		}
	}
}

// importReplyPrefix starts the reply subjects the NATS server writes itself for requests it brings
// through a service import; a client may not publish with one as its reply subject.
const importReplyPrefix = "_R_."

// checkInboxApart checks that the bridge's own inboxes (BRIDGE_NATS_INBOX_PREFIX) and the reply subjects
// the API answers (BRIDGE_API_REPLY_PREFIXES) are apart, in whole tokens: neither lies under the other.
// Else a caller could aim the API's answer at the bridge's JetStream acknowledgements, its report fetches
// or its lease watch, which only the random part of their names would protect. Nor may the inboxes lie
// under _R_., the server's own reply subjects, which it refuses as a client's.
func (c *Config) checkInboxApart(ck *checker) {
	const inboxKey, replyKey = "BRIDGE_NATS_INBOX_PREFIX", "BRIDGE_API_REPLY_PREFIXES"
	if !ck.fine(inboxKey) || c.NATSInboxPrefix == "" {
		return
	}
	own := c.NATSInboxPrefix + "."
	q := strconv.Quote(logging.Cut(c.NATSInboxPrefix, maxQuoted))
	if strings.HasPrefix(own, importReplyPrefix) {
		ck.add(inboxKey, "%s lies under %s, the reply subjects the NATS server writes itself for service "+
			"imports and refuses from a client; give the bridge a prefix of its own, e.g. _INBOX_bridge", q, importReplyPrefix)
		return
	}
	if !c.APIEnabled || !ck.fine(replyKey) {
		return
	}
	for _, p := range c.APIReplyPrefixList() {
		rq := strconv.Quote(logging.Cut(p, maxQuoted))
		switch {
		case strings.HasPrefix(own, p):
			ck.addVars([]string{inboxKey, replyKey}, "the bridge's own inboxes %s lie under the reply prefix %s: "+
				"a caller could aim the API's answers at them; give the bridge a prefix of its own, e.g. _INBOX_bridge", q, rq)
		case strings.HasPrefix(p, own):
			ck.addVars([]string{inboxKey, replyKey}, "the reply prefix %s lies under the bridge's own inboxes %s: "+
				"a caller could aim the API's answers at them; give the bridge a prefix of its own, e.g. _INBOX_bridge", rq, q)
		}
	}
}

// consumerName checks a JetStream durable consumer name.
func (ck *checker) consumerName(key, name string) {
	switch {
	case name == "":
		ck.add(key, "must not be empty")
	case strings.ContainsAny(name, ".*>/\\") || strings.ContainsFunc(name, badRune):
		ck.add(key, "%q must not contain '.', '*', '>', '/', '\\', white space or control characters", name)
	}
}

// listenAddr checks a host:port listen address with a numeric port.
func (ck *checker) listenAddr(key, addr string) {
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = strconv.ParseUint(port, 10, 16)
	}
	if err != nil {
		ck.add(key, "%q is not a host:port listen address with a numeric port, e.g. :8080 or 127.0.0.1:8080", addr)
	}
}

// oneOf checks that v is one of allowed, ignoring case.
func (ck *checker) oneOf(key, v string, allowed ...string) {
	if !slices.Contains(allowed, strings.ToLower(v)) {
		ck.add(key, "%q is not one of %s", v, strings.Join(allowed, ", "))
	}
}

// positive checks that a duration or size is greater than zero.
func positive[T ~int | ~int64](ck *checker, key string, v T) {
	if v <= 0 {
		ck.add(key, "must be positive (got %v)", v)
	}
}

// atMost checks an upper bound.
func atMost(ck *checker, key string, v, limit int) {
	if v > limit {
		ck.add(key, "must be at most %d (got %d)", limit, v)
	}
}

// ordered checks min ≤ max when both are positive (otherwise positive has reported them).
func (ck *checker) ordered(minKey string, minV time.Duration, maxKey string, maxV time.Duration) {
	if minV > 0 && maxV > 0 && minV > maxV {
		ck.addVars([]string{minKey, maxKey}, "the minimum %v is greater than the maximum %v", minV, maxV)
	}
}

// together checks that two variables are either both set or both unset.
func (ck *checker) together(aKey string, a bool, bKey string, b bool) {
	switch {
	case a && !b:
		ck.addVars([]string{aKey, bKey}, "must be set together; %s is missing", bKey)
	case b && !a:
		ck.addVars([]string{aKey, bKey}, "must be set together; %s is missing", aKey)
	}
}

// file checks that a named file exists and is not a directory.
// fileContent checks that path names a readable file whose content check accepts: bridge run would stop
// on it at start-up, so check-config and Validate report it as a configuration problem. The content is
// never quoted (a seed or key is secret).
func (ck *checker) fileContent(key, path string, check func([]byte) error) {
	if path == "" {
		return
	}
	ck.file(key, path)
	if !ck.fine(key) {
		return
	}
	if err := checkFile(path, check); err != nil {
		ck.add(key, "%v", err)
	}
}

// checkFile reads the file at path, at most maxCheckedFileBytes of it (a path such as /dev/zero must not
// hold the check), and hands it to check. Its error names the file (pathError), never its content.
func checkFile(path string, check func([]byte) error) error {
	b, err := readAtMost(path, maxCheckedFileBytes)
	if err == nil {
		err = check(b)
	}
	if err != nil {
		return pathError(path, err)
	}
	return nil
}

// maxCheckedFileBytes bounds the files checkFile reads (certificate bundles are far smaller).
const maxCheckedFileBytes = 16 << 20

// pemCertificates accepts a PEM bundle with at least one certificate.
func pemCertificates(b []byte) error {
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return errors.New("no PEM certificate found")
	}
	return nil
}

// nkeySeed accepts a file holding an NKey seed, decorated or not, as nats.NkeyOptionFromSeed reads it.
func nkeySeed(b []byte) error {
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return errors.New("no NKey seed found")
	}
	kp.Wipe()
	return nil
}

// natsCredentials accepts a credentials file: a user JWT and its NKey seed, as nats.UserCredentials
// reads it.
func natsCredentials(b []byte) error {
	// ParseDecoratedJWT returns the whole content when it finds no JWT block: a JWT has three parts.
	jwt, err := nkeys.ParseDecoratedJWT(b)
	if err != nil || strings.Count(jwt, ".") != 2 || strings.ContainsFunc(jwt, unicode.IsSpace) {
		return errors.New("no user JWT found")
	}
	return nkeySeed(b)
}

func (ck *checker) file(key, path string) {
	if path == "" {
		return
	}
	st, err := os.Stat(path)
	switch {
	case err != nil:
		err = pathError(path, err)
		ck.addCause(key, err, "%v", err)
	case st.IsDir():
		ck.add(key, "%s is a directory, not a file", path)
	}
}
