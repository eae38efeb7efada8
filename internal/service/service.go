// Package service serves the upstream's partner API to NATS clients (docs/api.md): a NATS micro service
// named tracking-bridge, in the queue group tracking-bridge, with one endpoint per operation on
// P.api.<area>.<verb>. Every bridge replica serves it through its own token source, so downstream services
// never handle OAuth.
//
// A request is checked before the upstream is called (its envelope here, the body through a
// RequestValidator) and refused with 400 listing every problem. A checked request is handed to a worker:
// micro calls an endpoint's handler one request at a time, so the upstream calls run in goroutines bounded
// by a semaphore of Config.Concurrency slots. When every slot is taken the request is answered 503 at once,
// never queued: a queue in front of a slow upstream would only turn into timeouts the caller cannot tell
// apart, and a 503 before any upstream call is always safe to retry, on this replica or another.
//
// Two endpoints, units.get and units.events, are answered from NATS instead (units.go): the units bucket
// and the events stream, read through Config.JetStream with slots of their own, each endpoint its own
// Config.Concurrency of them: a slow upstream never makes them busy, and a flood of units.events (each a
// read of many events) never makes units.get (one get) busy.
//
// Each upstream call gets Config.Timeout, or less when the caller sends a Bridge-Timeout header. A 401 gets
// a new token and one repeat (upstream.APIClient); nothing else is ever repeated, POST or not. The reply
// to a success is the upstream's body verbatim; a failure carries micro's error headers with the code of
// docs/api.md#replies and an ApiResponseMessage body.
//
// A request's reply subject, headers and body are the caller's, so the service trusts none of them:
//   - It answers only reply subjects under Config.ReplyPrefixes (the callers' inboxes) and under
//     ImportedReplyPrefix, where the NATS server puts the replies of requests from callers in other
//     accounts (no client may publish with such a reply itself). A request with
//     any other reply subject, or none, is dropped before anything else is looked at: no answer, not even
//     an error, and no upstream call. It is counted (Observer.APIRefused) and logged at most once a
//     minute per reason, so that no caller can make the bridge publish on a subject of its choosing
//     (a stream's, the lease's, $JS.API's) or flood its log.
//   - Only the endpoints of Config.Endpoints are subscribed; a request to another gets "no responders".
//   - Every size is bounded: the body (Config.MaxBody, or less where the operation's request is small:
//     Operation.MaxBody; else 400, before it is parsed), each string of the
//     request (MaxValueBytes), each header the service reads, the problems listed in a refusal
//     (validate.MaxProblems), and the requests each endpoint's subscription holds while its handler is
//     busy (micro's pending limits, derived from the body bound: beyond them the client drops requests
//     rather than holding them in memory).
//   - Every call that changes something upstream (create, update, delete, report) is logged at info as
//     one "API audit" line, after the upstream answered or failed.
//
// The service speaks NATS micro's protocol with micro's own types (discovery.go says why not through
// micro.AddService): discovery requests ($SRV.PING, $SRV.INFO, $SRV.STATS) go through the same reply
// check as the endpoints' requests, so no request of any kind makes the bridge publish outside an inbox.
package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/component"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Name is the micro service's name and QueueGroup its queue group (docs/api.md).
const (
	Name       = "tracking-bridge"
	QueueGroup = "tracking-bridge"
)

// Caller makes one upstream API call (upstream.APIClient).
type Caller interface {
	Call(ctx context.Context, r upstream.APIRequest) (*upstream.APIResponse, error)
}

// Observer is told of every request answered: the endpoint's Operation.Name, the reply's code (the
// upstream's status on success, Nats-Service-Error-Code on failure) and the time from receipt to reply;
// and of every request dropped without an answer, with its reason (one of RefusalReasons). It must be
// safe for concurrent use.
type Observer interface {
	APIServed(endpoint string, code int, d time.Duration)
	APIRefused(reason string)
}

// Reasons a request is dropped without an answer, the reason label of bridge_api_requests_refused_total.
const (
	// RefusedNoReply: the request has no reply subject (a publish, not a request).
	RefusedNoReply = "no_reply"
	// RefusedReplyInvalid: the reply subject is not a subject one may publish on (a wildcard, white space
	// or a control character, an empty token).
	RefusedReplyInvalid = "reply_invalid"
	// RefusedReplyNotInbox: the reply subject is not under any of the configured inbox prefixes.
	RefusedReplyNotInbox = "reply_not_inbox"
)

// RefusalReasons are every reason of Observer.APIRefused, for metrics created up front.
var RefusalReasons = []string{RefusedNoReply, RefusedReplyInvalid, RefusedReplyNotInbox}

// ImportedReplyPrefix starts the reply subjects the NATS server gives requests it brings through a
// service import from another account; only on those is Nats-Request-Info the server's. They are always
// answered: the server refuses a client's own publish with such a reply, and answering one reaches only
// the caller whose request it replaced.
const ImportedReplyPrefix = "_R_."

// DefaultReplyPrefix is the inbox prefix of the NATS clients (nats.go, the nats CLI), the reply prefix
// answered when Config.ReplyPrefixes is empty.
const DefaultReplyPrefix = "_INBOX."

// DefaultMaxBody is the body bound of a Config without one, BRIDGE_API_MAX_BODY_BYTES's default.
const DefaultMaxBody = 256 << 10

// Config configures a Service.
type Config struct {
	// Prefix is the subject prefix P (BRIDGE_SUBJECT_PREFIX).
	Prefix string
	// Concurrency is the most upstream calls in flight at once on this replica (BRIDGE_API_CONCURRENCY),
	// and, besides them, the most reads from NATS of units.get, and again of units.events.
	Concurrency int
	// Timeout bounds one request's upstream call, token and 401 repeat included, or its reads from NATS
	// (BRIDGE_API_TIMEOUT).
	Timeout time.Duration
	// JetStream reads the units bucket and the events stream for the units endpoints; nil means a
	// JetStream handle on the service's own connection.
	JetStream jetstream.JetStream
	// ReportPath is the path of operation reportTrackingEvent (BRIDGE_REPORT_PATH); default /tracking/events.
	ReportPath string
	// Validator checks request bodies; nil means the OpenAPIValidator without a bound on a report's size.
	Validator RequestValidator
	// Version is the bridge's version, shown by nats micro info; one that is not SemVer is shown as
	// 0.0.0-<version>.
	Version string
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
	// Observer, when set, is told of every request answered and every request dropped.
	Observer Observer
	// Endpoints names the operations served (Operation.Name, BRIDGE_API_ENDPOINTS); nil serves every one.
	// The others are not subscribed at all.
	Endpoints []string
	// ReplyPrefixes are the prefixes of the reply subjects answered (BRIDGE_API_REPLY_PREFIXES), each made
	// of whole tokens and ending in "."; nil means DefaultReplyPrefix alone. ImportedReplyPrefix is
	// answered besides them, always.
	ReplyPrefixes []string
	// MaxBody bounds a request's body in bytes (BRIDGE_API_MAX_BODY_BYTES); 0 means DefaultMaxBody.
	MaxBody int
	// StopTimeout bounds Run's stop (BRIDGE_SHUTDOWN_TIMEOUT), counted from the end of Run's context: the
	// calls in flight then are answered within it, and those still running at its end are cancelled
	// (their callers get 503). Zero waits for them without bound.
	StopTimeout time.Duration
	// RefusalLogEvery is the least time between two log lines about dropped requests of one reason; 0
	// means a minute.
	RefusalLogEvery time.Duration
	// Tracer, when set, records a server span per request (trace.go), continuing the trace of its
	// traceparent header; nil leaves tracing out of the service altogether.
	Tracer trace.Tracer
}

// Service is the request-reply service, a component.Component. Create it with New and run it with Run.
type Service struct {
	cfg   Config
	nc    *nats.Conn
	api   Caller
	log   *slog.Logger
	sem   chan struct{} // one slot per upstream call in flight
	gets  chan struct{} // one slot per units.get in flight (a read from NATS)
	reads chan struct{} // one slot per units.events in flight (a read from NATS)
	units *units
	base  context.Context
	abort context.CancelFunc   // ends every call in flight (shutdown past its drain deadline)
	eps   map[string]*endpoint // the endpoints served, by micro name
	up    atomic.Bool
	// stopping is set when Run's context ended, stopped when Run returned.
	stopping, stopped atomic.Bool
	limit             *logging.Limiter // the log lines anyone can cause, one per reason a minute
	err               error            // a Config that cannot be served, returned by Run
}

// endpoint is one Operation as served, with the pool of slots its calls take and its counters for
// micro's STATS answer.
type endpoint struct {
	Operation
	requests, calls, errs, busy, dropped atomic.Int64
	busyNanos                            atomic.Int64 // time from receipt to reply, summed
	mu                                   sync.Mutex
	lastErr                              string

	slots chan struct{} // s.sem for an upstream call, s.gets or s.reads for a read from NATS
	what  string        // what the slots count, for the refusal when they are all taken
}

// New returns a Service answering on nc through api. It subscribes nothing until Run.
func New(nc *nats.Conn, api Caller, cfg Config) *Service {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 32
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.ReportPath == "" {
		cfg.ReportPath = "/tracking/events"
	}
	if cfg.Validator == nil {
		cfg.Validator = defaultValidator()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if len(cfg.ReplyPrefixes) == 0 {
		cfg.ReplyPrefixes = []string{DefaultReplyPrefix}
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	s := &Service{cfg: cfg, nc: nc, api: api, log: cfg.Logger, sem: make(chan struct{}, cfg.Concurrency),
		gets: make(chan struct{}, cfg.Concurrency), reads: make(chan struct{}, cfg.Concurrency), eps: map[string]*endpoint{},
		limit: logging.NewLimiter(cfg.RefusalLogEvery, nil)}
	s.base, s.abort = context.WithCancel(context.Background())
	var errs []error
	js := cfg.JetStream
	if js == nil && nc != nil {
		var err error
		if js, err = jetstream.New(nc); err != nil {
			errs = append(errs, fmt.Errorf("JetStream for the units endpoints: %w", err))
		}
	}
	s.units = newUnits(js, cfg.Prefix)
	for _, p := range cfg.ReplyPrefixes {
		if !validReplyPrefix(p) {
			errs = append(errs, fmt.Errorf("reply prefix %q: not whole subject tokens ending in a dot, without wildcards or white space", p))
		}
	}
	for _, name := range cfg.Endpoints {
		if !slices.Contains(EndpointNames(), name) {
			errs = append(errs, fmt.Errorf("endpoint %q: unknown; the endpoints are %s", name, strings.Join(EndpointNames(), ", ")))
		}
	}
	s.err = errors.Join(errs...)
	for _, op := range Operations {
		if cfg.Endpoints != nil && !slices.Contains(cfg.Endpoints, op.Name) {
			continue
		}
		if op.Name == "tracking.report" {
			op.Path = cfg.ReportPath
		}
		s.eps[microName(op.Name)] = s.newEndpoint(op)
	}
	return s
}

// newEndpoint returns op as served, with the pool of slots its calls take (see the package comment), chosen
// once here rather than per request.
func (s *Service) newEndpoint(op Operation) *endpoint {
	ep := &endpoint{Operation: op, slots: s.sem, what: "upstream calls"}
	if op.FromNATS() {
		ep.slots, ep.what = s.reads, op.Name+" reads from NATS"
		if op.Name == layout.OpUnitLatest {
			ep.slots = s.gets
		}
	}
	return ep
}

// instanceID is the service instance's id, which discovery shows anyone. It comes from a generator of its
// own: nats.go names the connection's inboxes with the package's shared one, whose names all begin with
// the same 12 characters, so an id from it would tell a caller most of every inbox name of the bridge.
func instanceID() string { return nuid.New().Next() }

// microName is the micro endpoint name of an operation: micro allows no dots.
func microName(op string) string { return strings.ReplaceAll(op, ".", "-") }

// Subject is the subject the operation named op is served on.
func (s *Service) Subject(op string) string { return layout.API(s.cfg.Prefix, op) }

// Ready returns nil while the service is subscribed and answering, else why not.
func (s *Service) Ready() error {
	switch {
	case s.up.Load():
		return nil
	case s.err != nil:
		return fmt.Errorf("API service: %w", s.err)
	case s.stopped.Load():
		return errors.New("API service stopped")
	case s.stopping.Load():
		return errors.New("API service stopping")
	}
	return errors.New("API service not started")
}

// The API service is one of the bridge's components.
var _ component.Component = (*Service)(nil)

// Run serves until ctx is done. Then it stops taking requests (the subscriptions are drained), waits for
// the calls in flight within Config.StopTimeout, cancels those still running (their callers get 503) and
// returns. It returns an error when the service cannot be set up.
func (s *Service) Run(ctx context.Context) error {
	defer s.stopped.Store(true)
	if s.err != nil {
		return fmt.Errorf("API service: %w", s.err)
	}
	// The stop clock counts from ctx's end, not from the end of the drain of the subscriptions, which
	// waits for the connection's lock (held up to BRIDGE_PUBLISH_TIMEOUT by a write to a frozen server).
	drain, release := component.StopClock(ctx, s.cfg.StopTimeout)
	defer release()
	started := time.Now().UTC()
	d := &discovery{
		identity: micro.ServiceIdentity{Name: Name, ID: instanceID(), Version: semver(s.cfg.Version), Metadata: map[string]string{}},
		answer:   s.answerDiscovery,
	}
	var infos []micro.EndpointInfo
	var subs []*nats.Subscription
	stop := func() {
		for _, sub := range subs {
			_ = sub.Drain() // the requests already received are still handled
		}
	}
	for _, op := range Operations {
		ep := s.eps[microName(op.Name)]
		if ep == nil {
			continue // not in Config.Endpoints: no subscription, so its callers get no responders
		}
		sub, err := s.nc.QueueSubscribe(s.Subject(op.Name), QueueGroup, func(m *nats.Msg) { s.handle(ep, m) })
		if err == nil {
			err = sub.SetPendingLimits(pendingLimits(s.cfg.Concurrency, ep.maxBody(s.cfg.MaxBody), int(s.nc.MaxPayload())))
		}
		if err != nil {
			stop()
			return fmt.Errorf("API service endpoint %s: %w", op.Name, err)
		}
		subs = append(subs, sub)
		infos = append(infos, micro.EndpointInfo{Name: microName(op.Name), Subject: s.Subject(op.Name), QueueGroup: QueueGroup,
			Metadata: ep.Describe()})
	}
	d.info = func() micro.Info {
		return micro.Info{ServiceIdentity: d.identity, Type: micro.InfoResponseType,
			Description: "The container-logistics provider's partner API on NATS, served by tracking-bridge", Endpoints: infos}
	}
	d.stats = func() micro.Stats { return s.stats(d.identity, started, infos) }
	ds, err := d.subscribe(s.nc)
	subs = append(subs, ds...)
	if err != nil {
		stop()
		return fmt.Errorf("API service discovery: %w", err)
	}
	s.up.Store(true)
	var served []string
	for _, e := range infos {
		served = append(served, strings.TrimPrefix(e.Subject, s.Subject("")))
	}
	s.log.Info("API service up", "subjects", s.Subject(">"), "endpoints", served, "reply_prefixes", s.cfg.ReplyPrefixes,
		"concurrency", s.cfg.Concurrency, "timeout", s.cfg.Timeout, "max_body", s.cfg.MaxBody, "instance", d.identity.ID)

	<-ctx.Done()
	s.stopping.Store(true)
	s.up.Store(false)
	stop()
	// Taking every slot waits for the calls and reads in flight, and makes a request still arriving from
	// the drained subscriptions get 503 rather than a call that could outlive the connection.
	var slots []chan struct{} // every slot of every pool, by its pool
	for _, pool := range []chan struct{}{s.sem, s.gets, s.reads} {
		for range cap(pool) {
			slots = append(slots, pool)
		}
	}
	taken := 0
	acquire := func(done <-chan struct{}) bool {
		for ; taken < len(slots); taken++ {
			select {
			case slots[taken] <- struct{}{}:
			case <-done:
				return false
			}
		}
		return true
	}
	if !acquire(drain.Done()) {
		s.log.Warn("API calls still in flight at the shutdown deadline; abandoning them", "in_flight", len(slots)-taken)
		s.abort() // their callers get 503 at once
		grace, cancel := context.WithTimeout(context.Background(), time.Second)
		acquire(grace.Done())
		cancel()
	}
	s.abort()
	return nil
}

// handle is the message handler of every endpoint's subscription, called one request at a time per
// endpoint: it checks the request, answers a refusal at once, and hands the call to a worker.
func (s *Service) handle(ep *endpoint, r *nats.Msg) {
	start := time.Now()
	ep.requests.Add(1)
	// The reply subject before anything else: no reply at all, not even an error, goes to a subject that
	// is not a caller's inbox; and such a request costs no span either (its metric and log line say it).
	reply := r.Reply
	prefix, reason := s.replyPrefix(reply)
	if reason != "" {
		s.drop(s.Subject(ep.Name), reason, reply)
		ep.dropped.Add(1)
		return
	}
	ctx := s.base // the request's: with its span when tracing
	var span trace.Span
	if s.cfg.Tracer != nil {
		ctx, span = s.startSpan(ep, r)
	}
	if n, max := len(r.Data), ep.maxBody(s.cfg.MaxBody); n > max {
		s.refuse(ep, r, span, failure(CodeInvalid, kindTooLargeBody, fmt.Sprintf("the request body is %d bytes, more than the limit "+
			"of %d bytes for %s", n, max, ep.Name)), start)
		return
	}
	hdr := r.Header
	var c checker
	timeout := s.cfg.Timeout
	if v, ok := c.header(hdr, TimeoutHeader); ok && len(v) > MaxTimeoutHeader {
		c.addf("the %s header %s is %d bytes long; a duration with a unit is expected (e.g. 2s, 1500ms)",
			TimeoutHeader, strQuote(v), len(v))
	} else if ok {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			c.addf("the %s header %s is not a duration with a unit (e.g. 2s, 1500ms)", TimeoutHeader, strQuote(v))
		case d <= 0:
			c.addf("the %s header must be positive, not %s", TimeoutHeader, strQuote(v))
		default:
			timeout = min(d, timeout)
		}
	}
	key, ok := c.header(hdr, IdempotencyKeyHeader)
	if ok && !upstream.ValidIdempotencyKey(key) {
		c.addf("the %s header %s (%d bytes) must be 1 to %d printable ASCII characters, without a space at "+
			"either end", IdempotencyKeyHeader, strQuote(key), len(key), upstream.MaxIdempotencyKeyBytes)
	}
	var req upstream.APIRequest
	var q unitQuery
	var problems []string
	slots := ep.slots
	if ep.FromNATS() {
		q, problems = ep.query(&c, r.Data)
	} else {
		req, problems = ep.build(builder{reportPath: s.cfg.ReportPath, validator: s.cfg.Validator, idemKey: key, c: &c}, r.Data)
	}
	if len(problems) > 0 {
		s.refuse(ep, r, span, failure(CodeInvalid, kindInvalid, problems...), start)
		return
	}
	select {
	case slots <- struct{}{}:
	default:
		msg, k := fmt.Sprintf("the bridge is busy: %d %s in flight on this replica; try again", cap(slots), ep.what), kindBusy
		if !s.up.Load() {
			msg, k = "the bridge is stopping; try again (another replica may answer)", kindStopping
		} else {
			ep.busy.Add(1)
		}
		s.refuse(ep, r, span, failure(CodeUnavailable, k, msg), start)
		return
	}
	req.MaxBody = int(s.nc.MaxPayload())
	cl := call{req: req, unit: q, reply: reply, prefix: prefix, timeout: timeout, start: start, slots: slots,
		ctx: ctx}
	if ep.changes() {
		cl.caller, cl.named = callerAttr(hdr, strings.HasPrefix(reply, ImportedReplyPrefix))
	}
	go s.work(ep, cl)
}

// MaxTimeoutHeader bounds a Bridge-Timeout value (400 when longer): a duration is written in far fewer
// bytes.
const MaxTimeoutHeader = 32

// call is a checked request, handed to a worker.
type call struct {
	req     upstream.APIRequest
	unit    unitQuery // instead of req, for an operation answered from NATS
	reply   string    // the caller's inbox
	prefix  string    // the configured prefix reply is under
	timeout time.Duration
	start   time.Time // of handling, for the duration observed
	caller  slog.Attr // from Nats-Request-Info, for the audit line; when named
	named   bool
	slots   chan struct{}   // the pool whose slot the call holds
	ctx     context.Context // s.base, with the request's span when tracing
}

// replyPrefix returns the configured prefix the reply subject is under, or the reason to drop the
// request. A reply subject must be one a client could subscribe to and the bridge publish on: tokens
// separated by dots, none empty, no wildcard, no white space or control character.
func (s *Service) replyPrefix(reply string) (prefix, reason string) {
	if reply == "" {
		return "", RefusedNoReply
	}
	if !validSubject(reply) {
		return "", RefusedReplyInvalid
	}
	if strings.HasPrefix(reply, ImportedReplyPrefix) {
		return ImportedReplyPrefix, ""
	}
	for _, p := range s.cfg.ReplyPrefixes {
		if len(reply) > len(p) && strings.HasPrefix(reply, p) {
			// The bridge's own inboxes (its JetStream acknowledgements, fetches, the lease's watch) are
			// never a caller's: refused when they lie within the prefix matched. When they are exactly
			// that prefix (nats.go's default _INBOX with _INBOX.), they cannot be told apart; the
			// bridge's configuration refuses both.
			if own := s.nc.Opts.InboxPrefix + "."; len(own) > len(p) && strings.HasPrefix(reply, own) {
				return "", RefusedReplyNotInbox
			}
			return p, ""
		}
	}
	return "", RefusedReplyNotInbox
}

// validSubject reports whether subj is a literal subject: non-empty tokens of bytes other than white
// space, control characters and the wildcards * and >.
func validSubject(subj string) bool {
	if subj == "" || subj[0] == '.' || subj[len(subj)-1] == '.' {
		return false
	}
	for i := 0; i < len(subj); i++ {
		switch b := subj[i]; {
		case b <= ' ' || b == 0x7f || b == '*' || b == '>':
			return false
		case b == '.' && subj[i+1] == '.':
			return false
		}
	}
	return true
}

// validReplyPrefix reports whether p can be a Config.ReplyPrefixes entry: a literal subject followed by
// a dot.
func validReplyPrefix(p string) bool {
	return strings.HasSuffix(p, ".") && validSubject(strings.TrimSuffix(p, "."))
}

// drop counts a request to subject dropped without an answer and logs it, at most once per reason per
// RefusalLogEvery, with the number of drops not logged since.
func (s *Service) drop(subject, reason, reply string) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.APIRefused(reason)
	}
	if ok, n := s.limit.Allow(reason); ok {
		s.log.Warn("API request dropped without an answer: no reply subject, or not under a configured inbox prefix",
			"reason", reason, "subject", subject, "reply", logging.Value(reply, 80),
			"reply_prefixes", s.cfg.ReplyPrefixes, "suppressed", n)
	}
}

// answerDiscovery sends a discovery answer after the reply check; a request it refuses is dropped as
// an endpoint's would be.
func (s *Service) answerDiscovery(m *nats.Msg, verb string, data []byte) bool {
	if _, reason := s.replyPrefix(m.Reply); reason != "" {
		s.drop(m.Subject, reason, m.Reply)
		return false
	}
	if err := s.nc.Publish(m.Reply, data); err != nil {
		if ok, n := s.limit.Allow("reply_not_sent"); ok {
			s.log.Warn("API reply not sent", "subject", m.Subject, "verb", verb, "err", err, "suppressed", n)
		}
		return false
	}
	return true
}

// stats is the STATS answer: per endpoint, micro's counts (requests received, failures answered, the
// time from receipt to reply) and the bridge's own in Data.
func (s *Service) stats(id micro.ServiceIdentity, started time.Time, infos []micro.EndpointInfo) micro.Stats {
	out := micro.Stats{ServiceIdentity: id, Type: micro.StatsResponseType, Started: started}
	for _, e := range infos {
		ep := s.eps[e.Name]
		st := &micro.EndpointStats{Name: e.Name, Subject: e.Subject, QueueGroup: e.QueueGroup,
			NumRequests: int(ep.requests.Load()), NumErrors: int(ep.errs.Load()), ProcessingTime: time.Duration(ep.busyNanos.Load())}
		if answered := ep.requests.Load() - ep.dropped.Load(); answered > 0 {
			st.AverageProcessingTime = st.ProcessingTime / time.Duration(answered)
		}
		data := ep.stats()
		st.LastError = data.LastError
		st.Data, _ = json.Marshal(data)
		out.Endpoints = append(out.Endpoints, st)
	}
	return out
}

// maxBody is the endpoint's body bound under the configured one.
func (ep *endpoint) maxBody(configured int) int {
	if ep.MaxBody > 0 {
		return min(ep.MaxBody, configured)
	}
	return configured
}

// pendingLimits are the limits of each endpoint's subscription: the requests the client holds while the
// endpoint's handler is busy. The handler answers a request at the bound at once (400) and hands a
// checked one to a worker, so a few bodies at the bound plus one of max_payload (so that it still gets
// its 400) are enough; a flood beyond them is dropped by the client instead of held in memory (micro's
// default is 64 MB per endpoint).
func pendingLimits(concurrency, maxBody, maxPayload int) (msgs, bytes int) {
	if maxPayload <= 0 {
		maxPayload = 1 << 20 // not connected yet: the server's default
	}
	return 256 + 2*concurrency, 4*maxBody + maxPayload
}

func strQuote(v string) string { return fmt.Sprintf("%q", logging.Cut(v, 40)) }

// refuse answers a request the service did not send upstream.
// span is the request's, nil with tracing off.
func (s *Service) refuse(ep *endpoint, r *nats.Msg, span trace.Span, res result, start time.Time) {
	defer spanAnswered(span, res)
	ep.failed(res)
	s.observe(ep, res.code, start)
	if err := s.nc.PublishMsg(res.message(r.Reply)); err != nil {
		s.replyNotSent(ep, err)
	}
}

// work makes the upstream call, or the read from NATS, and answers it. It runs in its own goroutine
// holding a slot of c.slots: s.sem, s.gets or s.reads.
func (s *Service) work(ep *endpoint, c call) {
	defer func() { <-c.slots }()
	var res result
	req := c.req
	if ep.FromNATS() {
		ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		res = s.readUnit(ctx, ep, c.unit, c.timeout, int(s.nc.MaxPayload()))
		cancel()
	} else {
		ep.calls.Add(1)
		ctx, cancel := context.WithTimeout(c.ctx, c.timeout)
		resp, err := s.api.Call(ctx, req)
		cancel()
		res = outcome(resp, err, c.timeout, req.Method == "POST")
		if errors.Is(err, upstream.ErrAnswerTooLarge) {
			res = tooLarge(res, 0, req.MaxBody)
		}
	}
	if ep.changes() {
		s.audit(ep, c, res)
	}
	m := res.message(c.reply)
	if max := int(s.nc.MaxPayload()); size(m) > max {
		res = tooLarge(res, size(m), max)
		m = res.message(c.reply)
	}
	if !res.ok {
		ep.failed(res)
		s.log.Debug("API request failed", "subject", s.Subject(ep.Name), "status", res.code, "err", res.desc)
	}
	s.observe(ep, res.code, c.start) // before the reply, so that a caller that got it sees it counted
	err := s.nc.PublishMsg(m)
	if errors.Is(err, nats.ErrMaxPayload) { // the server's limit changed under us
		res = tooLarge(res, size(m), int(s.nc.MaxPayload()))
		err = s.nc.PublishMsg(res.message(c.reply))
	}
	if err != nil {
		s.replyNotSent(ep, err)
	}
	spanAnswered(trace.SpanFromContext(c.ctx), res) // with tracing off a no-op span, which costs nothing
}

// replyNotSent logs a reply that could not be sent, once a minute at most.
func (s *Service) replyNotSent(ep *endpoint, err error) {
	if ok, n := s.limit.Allow("reply_not_sent"); ok {
		s.log.Warn("API reply not sent", "subject", s.Subject(ep.Name), "err", err, "suppressed", n)
	}
}

// tooLarge replaces a reply that would not fit in max_payload with a failure saying so; n is the reply's
// size, 0 when the upstream's body was not read to its end.
func tooLarge(res result, n, max int) result {
	what := "the reply"
	if res.upstream != 0 {
		what = fmt.Sprintf("the reply to the upstream's HTTP %d answer", res.upstream)
	}
	size := "more than"
	if n > 0 {
		size = fmt.Sprintf("%d bytes, more than", n)
	}
	out := failure(CodeBadAnswer, kindReplyTooBig, fmt.Sprintf("%s is %s the NATS server's max_payload of %d bytes; ask for "+
		"less (e.g. a smaller pageSize)", what, size, max))
	out.upstream = res.upstream
	return out
}

func (s *Service) observe(ep *endpoint, code int, start time.Time) {
	ep.busyNanos.Add(int64(time.Since(start)))
	if s.cfg.Observer != nil {
		s.cfg.Observer.APIServed(ep.Name, code, time.Since(start))
	}
}

// failed counts a failure reply. The last error is shown to anyone allowed discovery, so it keeps the
// failure's code and kind only (result.lastError), never its description: a refusal quotes the caller's
// values, and the upstream's messages and transport errors may name another caller's orders.
func (ep *endpoint) failed(res result) {
	ep.errs.Add(1)
	last := res.lastError()
	ep.mu.Lock()
	ep.lastErr = last
	ep.mu.Unlock()
}

// EndpointStats is the data of an endpoint in the STATS answer (nats micro stats): the upstream calls,
// every failure answered, the busy refusals, and the requests dropped without an answer.
type EndpointStats struct {
	Operation     string `json:"operation"`
	UpstreamCalls int64  `json:"upstream_calls"`
	Errors        int64  `json:"errors"`
	Busy          int64  `json:"busy_refusals"`
	Dropped       int64  `json:"dropped_not_inbox"`
	LastError     string `json:"last_error,omitempty"`
}

func (ep *endpoint) stats() EndpointStats {
	ep.mu.Lock()
	last := ep.lastErr
	ep.mu.Unlock()
	return EndpointStats{Operation: ep.Describe()["operation"], UpstreamCalls: ep.calls.Load(),
		Errors: ep.errs.Load(), Busy: ep.busy.Load(), Dropped: ep.dropped.Load(), LastError: last}
}

// semverRE is the expression semver.org suggests, as micro checks it.
var semverRE = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?$`)

// semver returns v as micro accepts it: v without a leading "v" when that is SemVer, else 0.0.0-v with
// the characters SemVer does not allow as "-".
func semver(v string) string {
	v = strings.TrimPrefix(v, "v")
	if semverRE.MatchString(v) {
		return v
	}
	clean := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' {
			return r
		}
		return '-'
	}, v)
	if clean == "" || clean[0] >= '0' && clean[0] <= '9' {
		clean = "v" + clean // a numeric identifier must not start with 0; prefixing keeps it alphanumeric
	}
	return "0.0.0-" + clean
}
