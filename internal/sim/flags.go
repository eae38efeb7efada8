package sim

import (
	"errors"
	"flag"
	"sort"
	"strings"
)

// BindFlags defines flags for o on fs (for `bridge sim`; the listen address is not among them), after
// filling o's zero fields with their defaults so that the usage shows them. Accounts are given as
// -users "user:password,user2:password2" (default demo:demo).
func (o *Options) BindFlags(fs *flag.FlagSet) {
	o.applyDefaults()
	fs.StringVar(&o.BasePath, "base-path", o.BasePath, "path prefix of the API operations, ending in the version segment")
	fs.StringVar(&o.ClientID, "client-id", o.ClientID, "the only client_id the token endpoint accepts")
	fs.Var(&usersFlag{&o.Users}, "users", `accounts as "user:password,user2:password2"; the default account is demo with password demo`)
	fs.DurationVar(&o.AccessTTL, "access-ttl", o.AccessTTL, "access token lifetime")
	fs.DurationVar(&o.RefreshTTL, "refresh-ttl", o.RefreshTTL, "refresh token lifetime")
	fs.Float64Var(&o.EventRate, "rate", o.EventRate, "generated events per second and user from the first stream connection; 0 none, negative floods")
	fs.IntVar(&o.EventLimit, "limit", o.EventLimit, "generated events per user at most; 0 unlimited")
	fs.IntVar(&o.EventSize, "size", o.EventSize, "approximate bytes of a generated event's data")
	fs.DurationVar(&o.Heartbeat, "heartbeat", o.Heartbeat, "keep-alive comment interval on idle streams; negative disables")
	fs.DurationVar(&o.Retry, "retry", o.Retry, "retry: hint sent at the start of each stream connection; 0 none")
	fs.DurationVar(&o.BookAfter, "book-after", o.BookAfter, "book a slot request from every order this long after its creation, closing it (update and delete then answer 409); 0 never")
	fs.IntVar(&o.Retention, "retention", o.Retention, "retained event log entries per user")
	fs.Func("id-tag", `tag in every event id ("ev-<tag>-…"), letters and digits, so that the ids of one run differ from another's; "" for none (default: the start time in base 36)`,
		func(v string) error {
			for _, c := range v {
				if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
					return errors.New("letters and digits only")
				}
			}
			o.IDTag = v
			return nil
		})
	f := &o.Faults
	fs.IntVar(&f.DropEvery, "drop-every", f.DropEvery, "fault: close a stream connection after every N events; 0 never")
	fs.BoolVar(&f.DropMidEvent, "drop-mid-event", f.DropMidEvent, "fault: with -drop-every, cut the connection in the middle of an event")
	fs.Float64Var(&f.ErrorRate, "error-rate", f.ErrorRate, "fault: share (0..1) of API requests answered 503")
	fs.Float64Var(&f.TokenErrorRate, "token-error-rate", f.TokenErrorRate, "fault: share (0..1) of token requests answered 503")
	fs.DurationVar(&f.Latency, "latency", f.Latency, "fault: latency added to every request")
	fs.IntVar(&f.StreamStatus, "stream-status", f.StreamStatus, "fault: answer stream connections with this HTTP status; 0 normal")
	fs.StringVar(&f.StreamContentType, "stream-content-type", f.StreamContentType, "fault: Content-Type of stream answers instead of text/event-stream")
	fs.Float64Var(&f.ReportErrorRate, "report-error-rate", f.ReportErrorRate, "fault: share (0..1) of reports answered 5xx")
	fs.BoolVar(&f.Report429, "report-429", f.Report429, "fault: answer every report 429")
	fs.DurationVar(&f.RetryAfter, "retry-after", f.RetryAfter, "fault: Retry-After of injected 429 and 503 answers; 0 none")
	fs.DurationVar(&f.ReportLatency, "report-latency", f.ReportLatency, "fault: latency added to reports")
}

// usersFlag parses "user:password,…" into a map. Its String never shows passwords.
type usersFlag struct{ m *map[string]string }

func (u *usersFlag) String() string {
	if u == nil || u.m == nil {
		return ""
	}
	names := make([]string, 0, len(*u.m))
	for n := range *u.m {
		names = append(names, n+":[redacted]")
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

func (u *usersFlag) Set(v string) error {
	m := make(map[string]string)
	for _, pair := range strings.Split(v, ",") {
		if pair = strings.TrimSpace(pair); pair == "" {
			continue
		}
		name, pass, ok := strings.Cut(pair, ":")
		if !ok || name == "" {
			return errors.New(`want "user:password,user2:password2"`)
		}
		m[name] = pass
	}
	if len(m) == 0 {
		return errors.New("no account given")
	}
	*u.m = m
	return nil
}
