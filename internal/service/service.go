// Package service serves the upstream's partner API to NATS clients (contract §7): a NATS micro service
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
// Each upstream call gets Config.Timeout, or less when the caller sends a Bridge-Timeout header. A 401 gets
// a new token and one repeat (upstream.APIClient); nothing else is ever repeated, POST or not. The reply
// to a success is the upstream's body verbatim; a failure carries micro's error headers with the code of
// contract §7 and an ApiResponseMessage body.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Name is the micro service's name and QueueGroup its queue group (contract §7).
const (
	Name       = "tracking-bridge"
	QueueGroup = "tracking-bridge"
)

// Caller makes one upstream API call (upstream.APIClient).
type Caller interface {
	Call(ctx context.Context, r upstream.APIRequest) (*upstream.APIResponse, error)
}

// Observer is told of every request answered: the endpoint's Operation.Name, the reply's code (the
// upstream's status on success, Nats-Service-Error-Code on failure) and the time from receipt to reply.
// It must be safe for concurrent use.
type Observer interface {
	APIServed(endpoint string, code int, d time.Duration)
}

// Config configures a Service.
type Config struct {
	// Prefix is the subject prefix P (BRIDGE_SUBJECT_PREFIX).
	Prefix string
	// Concurrency is the most upstream calls in flight at once on this replica (BRIDGE_API_CONCURRENCY).
	Concurrency int
	// Timeout bounds one request's upstream call, token and 401 repeat included (BRIDGE_API_TIMEOUT).
	Timeout time.Duration
	// ReportPath is the path of op 4.8 (BRIDGE_REPORT_PATH); default /tracking/events.
	ReportPath string
	// Validator checks request bodies; nil means the OpenAPIValidator without a bound on a report's size.
	Validator RequestValidator
	// Version is the bridge's version, shown by nats micro info; one that is not SemVer is shown as
	// 0.0.0-<version>.
	Version string
	// Logger receives the service's logs; nil discards them.
	Logger *slog.Logger
	// Observer, when set, is told of every request answered.
	Observer Observer
}

// Service is the request-reply service. Create it with New and run it with Run.
type Service struct {
	cfg   Config
	nc    *nats.Conn
	api   Caller
	log   *slog.Logger
	sem   chan struct{} // one slot per upstream call in flight
	base  context.Context
	abort context.CancelFunc // ends every call in flight (shutdown past its drain deadline)
	eps   map[string]*endpoint
	up    atomic.Bool
}

// endpoint is one Operation as served, with its counters for micro's STATS data.
type endpoint struct {
	Operation
	calls, errs, busy atomic.Int64
	mu                sync.Mutex
	lastErr           string
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
	s := &Service{cfg: cfg, nc: nc, api: api, log: cfg.Logger, sem: make(chan struct{}, cfg.Concurrency),
		eps: map[string]*endpoint{}}
	s.base, s.abort = context.WithCancel(context.Background())
	for _, op := range Operations {
		if op.Name == "tracking.report" {
			op.Path = cfg.ReportPath
		}
		s.eps[microName(op.Name)] = &endpoint{Operation: op}
	}
	return s
}

// microName is the micro endpoint name of an operation: micro allows no dots.
func microName(op string) string { return strings.ReplaceAll(op, ".", "-") }

// Subject is the subject the operation named op is served on.
func (s *Service) Subject(op string) string { return s.cfg.Prefix + ".api." + op }

// Ready reports whether the service is subscribed and answering.
func (s *Service) Ready() bool { return s.up.Load() }

// Run serves until ctx is done. Then it stops taking requests (the subscriptions are drained), waits for
// the calls in flight until drain is done, cancels those still running (their callers get 503) and
// returns. It returns an error when the service cannot be set up.
func (s *Service) Run(ctx, drain context.Context) error {
	svc, err := micro.AddService(s.nc, micro.Config{
		Name:        Name,
		Version:     semver(s.cfg.Version),
		Description: "The container-logistics provider's partner API, served by tracking-bridge (contract §7)",
		QueueGroup:  QueueGroup,
		StatsHandler: func(e *micro.Endpoint) any {
			if ep := s.eps[e.Name]; ep != nil {
				return ep.stats()
			}
			return nil
		},
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			s.log.Error("service subscription error", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return fmt.Errorf("API service: %w", err)
	}
	for _, op := range Operations {
		ep := s.eps[microName(op.Name)]
		err := svc.AddEndpoint(microName(op.Name), micro.HandlerFunc(func(r micro.Request) { s.handle(ep, r) }),
			micro.WithEndpointSubject(s.Subject(op.Name)),
			micro.WithEndpointMetadata(map[string]string{
				"operation": op.Spec + " " + op.Summary,
				"upstream":  op.Method + " " + ep.Path,
			}))
		if err != nil {
			_ = svc.Stop()
			return fmt.Errorf("API service endpoint %s: %w", op.Name, err)
		}
	}
	s.up.Store(true)
	s.log.Info("API service up", "subjects", s.Subject(">"), "concurrency", s.cfg.Concurrency, "timeout", s.cfg.Timeout)

	<-ctx.Done()
	s.up.Store(false)
	if err := svc.Stop(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		s.log.Warn("stopping the API service", "err", err)
	}
	// Taking every slot waits for the calls in flight, and makes a request still arriving from the
	// drained subscriptions get 503 rather than a call that could outlive the connection.
	taken := 0
	acquire := func(done <-chan struct{}) bool {
		for ; taken < cap(s.sem); taken++ {
			select {
			case s.sem <- struct{}{}:
			case <-done:
				return false
			}
		}
		return true
	}
	if !acquire(drain.Done()) {
		s.log.Warn("API calls still in flight at the shutdown deadline; abandoning them", "in_flight", cap(s.sem)-taken)
		s.abort() // their callers get 503 at once
		grace, cancel := context.WithTimeout(context.Background(), time.Second)
		acquire(grace.Done())
		cancel()
	}
	s.abort()
	return nil
}

// handle is micro's handler of every endpoint: it checks the request, answers a refusal at once, and
// hands the call to a worker.
func (s *Service) handle(ep *endpoint, r micro.Request) {
	start := time.Now()
	reply := r.Reply()
	if reply == "" {
		s.log.Warn("API request without a reply subject ignored: use a request, not a publish", "subject", r.Subject())
		return
	}
	hdr := nats.Header(r.Headers())
	var c checker
	timeout := s.cfg.Timeout
	if v := hdr.Get(TimeoutHeader); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil:
			c.addf("the %s header %s is not a duration with a unit (e.g. 2s, 1500ms)", TimeoutHeader, strQuote(v))
		case d <= 0:
			c.addf("the %s header must be positive, not %s", TimeoutHeader, v)
		default:
			timeout = min(d, timeout)
		}
	}
	req, problems := ep.build(builder{reportPath: s.cfg.ReportPath, validator: s.cfg.Validator,
		idemKey: hdr.Get(IdempotencyKeyHeader)}, r.Data())
	c.problems = append(c.problems, problems...)
	if len(c.problems) > 0 {
		s.refuse(ep, r, failure(CodeInvalid, c.problems...), start)
		return
	}
	select {
	case s.sem <- struct{}{}:
	default:
		msg := fmt.Sprintf("the bridge is busy: %d upstream calls in flight on this replica; try again", cap(s.sem))
		if !s.up.Load() {
			msg = "the bridge is stopping; try again (another replica may answer)"
		} else {
			ep.busy.Add(1)
		}
		s.refuse(ep, r, failure(CodeUnavailable, msg), start)
		return
	}
	req.MaxBody = int(s.nc.MaxPayload())
	go s.work(ep, req, reply, timeout, start)
}

func strQuote(v string) string { return fmt.Sprintf("%q", cut(v, 40)) }

// refuse answers a request the service did not send upstream, from micro's handler (so that micro
// counts the error).
func (s *Service) refuse(ep *endpoint, r micro.Request, res result, start time.Time) {
	ep.failed(res)
	s.observe(ep, res.code, start)
	m := res.message("")
	if err := r.Error(m.Header.Get(micro.ErrorCodeHeader), res.desc, res.body, micro.WithHeaders(micro.Headers(m.Header))); err != nil {
		s.log.Warn("API reply not sent", "subject", r.Subject(), "err", err)
	}
}

// work makes the upstream call and answers it. It runs in its own goroutine holding a slot of s.sem.
func (s *Service) work(ep *endpoint, req upstream.APIRequest, reply string, timeout time.Duration, start time.Time) {
	defer func() { <-s.sem }()
	ep.calls.Add(1)
	ctx, cancel := context.WithTimeout(s.base, timeout)
	resp, err := s.api.Call(ctx, req)
	cancel()
	res := outcome(resp, err, timeout, req.Method == "POST")
	if errors.Is(err, upstream.ErrAnswerTooLarge) {
		res = tooLarge(res, 0, req.MaxBody)
	}
	m := res.message(reply)
	if max := int(s.nc.MaxPayload()); size(m) > max {
		res = tooLarge(res, size(m), max)
		m = res.message(reply)
	}
	if !res.ok {
		ep.failed(res)
		s.log.Debug("API request failed", "subject", s.Subject(ep.Name), "status", res.code, "err", res.desc)
	}
	s.observe(ep, res.code, start) // before the reply, so that a caller that got it sees it counted
	err = s.nc.PublishMsg(m)
	if errors.Is(err, nats.ErrMaxPayload) { // the server's limit changed under us
		res = tooLarge(res, size(m), int(s.nc.MaxPayload()))
		err = s.nc.PublishMsg(res.message(reply))
	}
	if err != nil {
		s.log.Warn("API reply not sent", "subject", s.Subject(ep.Name), "err", err)
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
	out := failure(CodeBadAnswer, fmt.Sprintf("%s is %s the NATS server's max_payload of %d bytes; ask for "+
		"less (e.g. a smaller pageSize)", what, size, max))
	out.upstream = res.upstream
	return out
}

func (s *Service) observe(ep *endpoint, code int, start time.Time) {
	if s.cfg.Observer != nil {
		s.cfg.Observer.APIServed(ep.Name, code, time.Since(start))
	}
}

// failed counts a failure reply.
func (ep *endpoint) failed(res result) {
	ep.errs.Add(1)
	ep.mu.Lock()
	ep.lastErr = fmt.Sprintf("%d:%s", res.code, res.desc)
	ep.mu.Unlock()
}

// EndpointStats is the data of an endpoint in micro's STATS answer (nats micro stats): micro's own
// counters see only the replies made before an upstream call, these see every one.
type EndpointStats struct {
	Operation     string `json:"operation"`
	UpstreamCalls int64  `json:"upstream_calls"`
	Errors        int64  `json:"errors"`
	Busy          int64  `json:"busy_refusals"`
	LastError     string `json:"last_error,omitempty"`
}

func (ep *endpoint) stats() EndpointStats {
	ep.mu.Lock()
	last := ep.lastErr
	ep.mu.Unlock()
	return EndpointStats{Operation: ep.Spec + " " + ep.Summary, UpstreamCalls: ep.calls.Load(),
		Errors: ep.errs.Load(), Busy: ep.busy.Load(), LastError: last}
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
