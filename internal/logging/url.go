package logging

import (
	"net/url"
	"strings"
)

// Redacted is what RedactURL shows instead of a query value or a fragment.
const Redacted = "REDACTED"

// RedactURL returns a URL fit for a log line, an error or /status: its user information (a user and
// password, or a token alone) as "xxxxx", and the value of each query parameter (a client secret, an
// API key) and the fragment as REDACTED, the keys kept. A string that does not parse as a URL but may
// hold either is shown as "[unparsable URL]"; any other string is returned unchanged.
func RedactURL(raw string) string {
	if !strings.ContainsAny(raw, "@?#") {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "[unparsable URL]"
	}
	return RedactedURL(u)
}

// RedactedURL is RedactURL of a parsed URL.
func RedactedURL(u *url.URL) string {
	r := *u
	if r.User != nil {
		r.User = url.User("xxxxx")
	}
	if r.RawQuery != "" {
		pairs := strings.Split(r.RawQuery, "&")
		for i, p := range pairs {
			if k, _, ok := strings.Cut(p, "="); ok {
				pairs[i] = k + "=" + Redacted
			} else if p != "" {
				pairs[i] = Redacted // a bare value, or a key: which one is not known
			}
		}
		r.RawQuery = strings.Join(pairs, "&")
	}
	if r.Fragment != "" || r.RawFragment != "" {
		r.Fragment, r.RawFragment = Redacted, ""
	}
	return r.String()
}
