package sim

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults applied by New (and shown by BindFlags) for zero Options fields.
const (
	DefaultBasePath   = "/v1.0"
	DefaultClientID   = "tracking-bridge"
	DefaultAccessTTL  = 300 * time.Second
	DefaultRefreshTTL = 6 * time.Hour
	DefaultEventSize  = 700
	DefaultHeartbeat  = 15 * time.Second
	DefaultRetention  = 1_000_000
	// TokenPath is where the token endpoint is served, outside the base path.
	TokenPath = "/auth/token"
)

// Options configures a Server. Zero fields take the defaults named on each field.
type Options struct {
	// BasePath is the path prefix of the API operations, ending in the version segment. Default "/v1.0".
	BasePath string
	// ClientID is the only client_id the token endpoint accepts. Default "tracking-bridge".
	ClientID string
	// Users maps user names to passwords. Default {"demo": "demo"}.
	Users map[string]string
	// AccessTTL is the lifetime of access tokens. Default 300 s.
	AccessTTL time.Duration
	// RefreshTTL is the lifetime of refresh tokens. Default 6 h.
	RefreshTTL time.Duration
	// EventRate is the number of events generated per second and user, counted from the user's first
	// stream connection: 0 generates none, a negative value floods (as fast as a stream reader takes them).
	EventRate float64
	// EventLimit bounds the generated events per user; 0 means no bound.
	EventLimit int
	// EventSize is the approximate size in bytes of a generated event's data. Default 700.
	EventSize int
	// Heartbeat is the interval of keep-alive comments on an idle stream. Default 15 s; negative disables.
	Heartbeat time.Duration
	// Retry, when positive, is sent once as the retry: field at the start of every stream connection.
	Retry time.Duration
	// BookAfter, when positive, books a slot request from every booking order this long after the order
	// was created, as MarkBooked does: the order leaves the list of open orders, and update and delete
	// answer 409. It lets a client exercise the open-orders rule (docs/upstream.md#open-orders) against a
	// running simulator. Zero keeps orders open until MarkBooked.
	BookAfter time.Duration
	// IDTag, when set, goes into every event id ("ev-<tag>-0000000000000001"), so that the ids of one
	// run differ from another's: a bridge resuming against a restarted simulator then stores the new
	// run's events instead of taking them for duplicates. Letters and digits only.
	IDTag string
	// Retention bounds the entries of each user's event log (oldest dropped first), and the accepted
	// reports kept for Reports and for recognising a repeated Idempotency-Key. Default 1,000,000.
	Retention int
	// Faults is the initial fault configuration; SetFaults changes it at run time.
	Faults Faults
	// Logger receives the simulator's logs (the caller adds its component attribute); nil discards them.
	// Neither passwords nor tokens are logged.
	Logger *slog.Logger
}

// applyDefaults fills zero fields with their defaults.
func (o *Options) applyDefaults() {
	if o.BasePath == "" {
		o.BasePath = DefaultBasePath
	}
	if o.ClientID == "" {
		o.ClientID = DefaultClientID
	}
	if o.Users == nil {
		o.Users = map[string]string{"demo": "demo"}
	}
	if o.AccessTTL <= 0 {
		o.AccessTTL = DefaultAccessTTL
	}
	if o.RefreshTTL <= 0 {
		o.RefreshTTL = DefaultRefreshTTL
	}
	if o.EventSize <= 0 {
		o.EventSize = DefaultEventSize
	}
	if o.Heartbeat == 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.Retention <= 0 {
		o.Retention = DefaultRetention
	}
}

// Server is the simulated upstream. Its methods are safe for concurrent use.
type Server struct {
	opts   Options
	base   string // BasePath without a trailing slash ("" for the root)
	log    *slog.Logger
	faults atomic.Pointer[Faults]
	mux    *http.ServeMux
	doc    *document

	tokens tokenStore
	orders orderStore
	seed   []Location
	byID   map[string]*Location

	mu    sync.Mutex
	users map[string]*userState

	stats statsCounters

	closed    chan struct{}
	closeOnce sync.Once
}

// New returns a Server configured by o. It serves requests at once; Run is optional.
func New(o Options) *Server {
	o.applyDefaults()
	users := make(map[string]string, len(o.Users))
	for u, p := range o.Users {
		users[u] = p
	}
	o.Users = users
	s := &Server{
		opts:   o,
		base:   strings.TrimSuffix("/"+strings.TrimPrefix(o.BasePath, "/"), "/"),
		log:    o.Logger,
		users:  make(map[string]*userState),
		closed: make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.SetFaults(o.Faults)
	s.tokens.init()
	s.orders.init(o.BookAfter)
	s.seed = seedLocations()
	s.byID = make(map[string]*Location, len(s.seed))
	for i := range s.seed {
		s.byID[s.seed[i].ID] = &s.seed[i]
	}
	s.stats.tokenRequests = make(map[string]int)
	doc, err := newDocument()
	if err != nil {
		panic(err) // the document is embedded and tested: a bug, not a run-time condition
	}
	s.doc = doc
	s.routes()
	return s
}

func (s *Server) routes() {
	m := http.NewServeMux()
	b := s.base
	m.HandleFunc("POST "+TokenPath, s.handleToken)
	m.HandleFunc(TokenPath, s.handleTokenMethod)
	m.HandleFunc("GET "+OpenAPIPath, s.handleOpenAPI)
	// Operations whose handlers answer the document's problems themselves, after their own checks
	// (rejectByDocument), and operations without request data of their own beyond the path.
	own := func(path string, h func(http.ResponseWriter, *http.Request, *userState)) http.HandlerFunc {
		return s.api(path, true, h)
	}
	plain := func(path string, h func(http.ResponseWriter, *http.Request, *userState)) http.HandlerFunc {
		return s.api(path, false, h)
	}
	m.HandleFunc("GET "+b+"/locations", own("/locations", s.handleLocations))
	m.HandleFunc("GET "+b+"/orders", plain("/orders", s.handleListOrders))
	m.HandleFunc("POST "+b+"/orders", own("/orders", s.handleCreateOrder))
	m.HandleFunc("GET "+b+"/orders/{id}", plain("/orders/{id}", s.handleReadOrder))
	m.HandleFunc("PUT "+b+"/orders/{id}", own("/orders/{id}", s.handleUpdateOrder))
	m.HandleFunc("DELETE "+b+"/orders/{id}", plain("/orders/{id}", s.handleDeleteOrder))
	m.HandleFunc("GET "+b+"/tracking", own("/tracking", s.handleTracking))
	m.HandleFunc("POST "+b+"/tracking/events", s.countReportCall(own("/tracking/events", s.handleReport)))
	m.HandleFunc("GET "+b+"/tracking/events/stream", plain("/tracking/events/stream", s.handleStream))
	s.mux = m
}

// Handler returns the HTTP handler serving the token endpoint and every API operation. Requests for
// no operation are answered 404, or 405 with Allow for a known path, with an ApiResponseMessage.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := s.mux.Handler(r)
		if pattern != "" {
			s.mux.ServeHTTP(w, r) // sets the path values
			return
		}
		rec := &statusRecorder{header: make(http.Header)}
		h.ServeHTTP(rec, r) // the mux's own 404 or 405
		if allow := rec.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		writeMessages(w, rec.status, "No operation "+r.Method+" "+r.URL.Path)
	})
}

// statusRecorder keeps only the status and header of an answer.
type statusRecorder struct {
	header http.Header
	status int
}

func (r *statusRecorder) Header() http.Header         { return r.header }
func (r *statusRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *statusRecorder) WriteHeader(code int)        { r.status = code }

// Run performs background housekeeping (dropping long-expired tokens) until ctx is done, then closes the
// server (ending open streams, so that an http.Server's Shutdown can finish) and returns nil.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.Close()
			return nil
		case <-s.closed:
			return nil
		case now := <-t.C:
			s.tokens.sweep(now)
		}
	}
}

// Close ends every open stream and makes new stream connections fail with 503. Other operations keep
// working. Close may be called more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closed) })
}

// userState is everything the simulator keeps for one user.
type userState struct {
	name string

	genOnce sync.Once
	gen     *generator // immutable once built; see generator()

	mu      sync.Mutex
	log     eventLog
	reports []AcceptedReport
	idem    map[string]string // accepted Idempotency-Key -> event id
}

// user returns the state of the named user, creating it on first use.
func (s *Server) user(name string) *userState {
	s.mu.Lock()
	defer s.mu.Unlock()
	u := s.users[name]
	if u == nil {
		u = &userState{name: name, idem: make(map[string]string)}
		u.log.init(&s.opts)
		s.users[name] = u
	}
	return u
}

// generator returns the user's event generator, building it on first use.
func (s *Server) generator(u *userState) *generator {
	u.genOnce.Do(func() { u.gen = newGenerator(u.name, s.opts.EventSize, s.seed, newIDForm(s.opts.IDTag)) })
	return u.gen
}

// api wraps an operation with the checks every API request passes: the added latency, injected 503s,
// the bearer token, and the OpenAPI document's description of the operation at path. With own, the
// handler answers the document's problems after its own checks (rejectByDocument); otherwise they are
// answered 400 here.
func (s *Server) api(path string, own bool, h func(http.ResponseWriter, *http.Request, *userState)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f := s.Faults()
		if !s.delay(w, r, f.Latency) {
			return
		}
		if chance(f.ErrorRate) {
			s.stats.add(&s.stats.injectedErrors, 1)
			s.writeRetryAfter(w, f.RetryAfter)
			writeMessages(w, http.StatusServiceUnavailable, "Service temporarily unavailable")
			return
		}
		name, ok := s.authenticate(w, r)
		if !ok {
			return
		}
		r = s.withDocumentCheck(r, r.Method, path)
		if !own && rejectByDocument(w, r) {
			return
		}
		h(w, r, s.user(name))
	}
}

// apiMessage is the ApiResponseMessage body.
type apiMessage struct {
	Messages []string `json:"messages"`
}

// writeMessages answers with status and an ApiResponseMessage body.
func writeMessages(w http.ResponseWriter, status int, msgs ...string) {
	if msgs == nil {
		msgs = []string{}
	}
	if len(msgs) > 1000 {
		msgs = msgs[:1000]
	}
	writeJSON(w, status, apiMessage{Messages: msgs})
}

// writeJSON answers with status and v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// Stats is a snapshot of the simulator's counters, for tests.
type Stats struct {
	// TokenRequests counts token endpoint requests by their grant_type value as sent ("" when missing),
	// whatever their outcome.
	TokenRequests map[string]int
	// TokensIssued counts successful token responses.
	TokensIssued int
	// TokenFailures counts token requests answered with an error (injected 503s included).
	TokenFailures int
	// Unauthorized counts API answers with status 401.
	Unauthorized int
	// InjectedErrors counts 429 and 5xx answers made by fault injection (token endpoint included).
	InjectedErrors int
	// StreamRequests counts authenticated requests that reached the stream operation.
	StreamRequests int
	// StreamConnects counts stream requests answered with 200.
	StreamConnects int
	// LastEventIDs holds the Last-Event-ID header ("" when absent) of each stream request counted in
	// StreamRequests, oldest first; only the latest 10,000 are kept.
	LastEventIDs []string
	// EventsWritten counts complete events written on all stream connections.
	EventsWritten int64
	// ReportCalls counts requests to the report operation, whatever their outcome.
	ReportCalls int
	// ReportsAccepted counts reports that added an event (202).
	ReportsAccepted int
	// ReportDuplicates counts 202 answers to a repeated Idempotency-Key that added no event.
	ReportDuplicates int
}

const maxLastEventIDs = 10_000

// statsCounters holds the counters behind Stats.
type statsCounters struct {
	mu               sync.Mutex
	tokenRequests    map[string]int
	tokensIssued     int
	tokenFailures    int
	unauthorized     int
	injectedErrors   int
	streamRequests   int
	streamConnects   int
	lastEventIDs     []string
	reportCalls      int
	reportsAccepted  int
	reportDuplicates int
	eventsWritten    atomic.Int64
}

func (c *statsCounters) add(field *int, n int) {
	c.mu.Lock()
	*field += n
	c.mu.Unlock()
}

// Stats returns a snapshot of the counters.
func (s *Server) Stats() Stats {
	c := &s.stats
	c.mu.Lock()
	defer c.mu.Unlock()
	st := Stats{
		TokenRequests:    make(map[string]int, len(c.tokenRequests)),
		TokensIssued:     c.tokensIssued,
		TokenFailures:    c.tokenFailures,
		Unauthorized:     c.unauthorized,
		InjectedErrors:   c.injectedErrors,
		StreamRequests:   c.streamRequests,
		StreamConnects:   c.streamConnects,
		LastEventIDs:     append([]string(nil), c.lastEventIDs...),
		EventsWritten:    c.eventsWritten.Load(),
		ReportCalls:      c.reportCalls,
		ReportsAccepted:  c.reportsAccepted,
		ReportDuplicates: c.reportDuplicates,
	}
	for k, v := range c.tokenRequests {
		st.TokenRequests[k] = v
	}
	return st
}
