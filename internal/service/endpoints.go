package service

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
	"github.com/tracking-bridge/tracking-bridge/internal/validate"
)

// Operation describes one endpoint of the service: the subject it is served on (docs/api.md#endpoints)
// and the upstream operation it calls (docs/upstream.md#operations).
type Operation struct {
	// Name is the subject's tail after "P.api." ("orders.get"), the label of the endpoint's metrics and,
	// with dots as dashes, the micro endpoint's name.
	Name string
	// OpenAPI is the upstream operation's id in api/openapi.yaml ("getOrder") and Summary its title.
	OpenAPI, Summary string
	// Method and Path are the upstream request's, Path relative to the upstream URL, as api/openapi.yaml
	// has them.
	Method, Path string
	// Success is the status the document gives a successful answer (any 2xx counts as success).
	Success int
	// MaxBody, when not 0, bounds the request's body below Config.MaxBody: the operations whose whole
	// request is a few short members (MaxEnvelopeBytes) need no room for a booking order or a report.
	MaxBody int

	// Source, on an operation answered from NATS instead of the upstream (OpenAPI, Method and Path
	// empty), says what it reads, for discovery, in the names of any prefix (PFX_UNITS, P.events.>).
	Source string

	// build turns a request's body into the upstream request, or lists every problem of the body.
	build func(b builder, body []byte) (upstream.APIRequest, []string)
	// query, on an operation answered from NATS, checks a request's body instead of build.
	query func(c *checker, body []byte) (unitQuery, []string)
}

// builder carries what building an upstream request needs besides the body.
type builder struct {
	reportPath string
	validator  RequestValidator
	idemKey    string   // the caller's Idempotency-Key header, for the report operation
	c          *checker // holds the problems found before the body (headers); nil for none
}

// checker returns the checker a build adds the body's problems to, after those found before, so that
// the cap and the count of the rest cover the whole request.
func (b builder) checker() *checker {
	if b.c == nil {
		return &checker{}
	}
	return b.c
}

// Operations are the endpoints of the service: layout.APIOperations, in its order.
var Operations = []Operation{
	{Name: layout.OpSearchLocations, OpenAPI: "searchLocations", Summary: "search locations", Method: http.MethodGet, Path: "/locations", Success: 200, MaxBody: MaxEnvelopeBytes, build: buildSearch},
	{Name: layout.OpListOrders, OpenAPI: "listOpenOrders", Summary: "list open booking orders", Method: http.MethodGet, Path: "/orders", Success: 200, MaxBody: MaxEnvelopeBytes, build: buildList},
	{Name: layout.OpCreateOrder, OpenAPI: "createOrder", Summary: "create booking order", Method: http.MethodPost, Path: "/orders", Success: 201, build: buildCreate},
	{Name: layout.OpGetOrder, OpenAPI: "getOrder", Summary: "read booking order", Method: http.MethodGet, Path: "/orders/{id}", Success: 200, MaxBody: MaxEnvelopeBytes, build: buildByID(http.MethodGet)},
	{Name: layout.OpUpdateOrder, OpenAPI: "updateOrder", Summary: "update booking order", Method: http.MethodPut, Path: "/orders/{id}", Success: 200, build: buildUpdate},
	{Name: layout.OpDeleteOrder, OpenAPI: "deleteOrder", Summary: "delete booking order", Method: http.MethodDelete, Path: "/orders/{id}", Success: 200, MaxBody: MaxEnvelopeBytes, build: buildByID(http.MethodDelete)},
	{Name: layout.OpQueryTracking, OpenAPI: "queryTracking", Summary: "query tracking events", Method: http.MethodGet, Path: "/tracking", Success: 200, MaxBody: MaxEnvelopeBytes, build: buildQuery},
	{Name: layout.OpReportEvent, OpenAPI: "reportTrackingEvent", Summary: "report a tracking event", Method: http.MethodPost, Path: "/tracking/events", Success: 202, build: buildReport},
	{Name: layout.OpUnitLatest, Summary: "the latest event of a loading unit", Source: SourceUnitsBucket, Success: 200, MaxBody: MaxEnvelopeBytes, query: buildUnit(false)},
	{Name: layout.OpUnitEvents, Summary: "the most recent stored events of a loading unit", Source: SourceEventsStream, Success: 200, MaxBody: MaxEnvelopeBytes, query: buildUnit(true)},
}

// Sources of the operations answered from NATS, as discovery's metadata names them: PFX and P are the
// names of docs/subjects.md.
const (
	SourceUnitsBucket  = "NATS: key-value bucket PFX_UNITS"
	SourceEventsStream = "NATS: stream PFX_EVENTS, subjects P.events.*.<UNIT>"
)

// FromNATS reports whether the operation is answered from NATS rather than by the upstream.
func (op Operation) FromNATS() bool { return op.query != nil }

// Describe returns the operation's metadata in discovery's INFO answer: what it is, and the upstream
// operation it calls or what it reads from NATS.
func (op Operation) Describe() map[string]string {
	if op.FromNATS() {
		return map[string]string{"operation": op.Summary, "source": op.Source}
	}
	return map[string]string{"operation": op.OpenAPI + " (" + op.Summary + ")", "upstream": op.Method + " " + op.Path}
}

// MaxEnvelopeBytes bounds the body of an operation whose request is a few members of at most
// MaxValueBytes each (search, list, get, delete, query): a valid one is well under a kilobyte, even
// escaped and indented, so a flood of large bodies costs those endpoints nothing to refuse.
const MaxEnvelopeBytes = 16 << 10

// EndpointNames returns the Name of every operation, for metrics that are created up front.
func EndpointNames() []string {
	out := make([]string, len(Operations))
	for i, op := range Operations {
		out[i] = op.Name
	}
	return out
}

// envelope is a request body decoded one level deep.
type envelope map[string]json.RawMessage

// parseEnvelope decodes body as one JSON object. An empty body is an empty object when allowEmpty. A
// body readers may read in different ways is refused (validate.Unambiguous): every id and reference the
// service sends upstream is then valid UTF-8, and a member given twice cannot be checked as one value and
// sent as another.
func parseEnvelope(body []byte, allowEmpty bool) (envelope, []string) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		if allowEmpty {
			return envelope{}, nil
		}
		return nil, []string{"the request is empty; a JSON object is expected"}
	}
	if trimmed[0] != '{' {
		if !json.Valid(trimmed) {
			return nil, []string{"the request is not valid JSON"}
		}
		return nil, []string{"the request must be a JSON object, not " + jsonType(trimmed)}
	}
	if problems := validate.Unambiguous(trimmed, "the request"); problems != nil {
		return nil, problems // bytes that are not UTF-8, an unpaired surrogate escape, a key given twice
	}
	var env envelope
	if err := json.Unmarshal(trimmed, &env); err != nil {
		return nil, []string{"the request is not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")}
	}
	return env, nil
}

// envelope is parseEnvelope adding its problem to c; ok is false when there is no object to check further.
func (c *checker) envelope(body []byte, allowEmpty bool) (env envelope, ok bool) {
	env, problems := parseEnvelope(body, allowEmpty)
	c.add(problems...)
	return env, problems == nil
}

// jsonType names the type of a valid JSON value by its first byte.
func jsonType(v []byte) string {
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// isNull reports whether a member is null, which counts as absent.
func isNull(v json.RawMessage) bool { return string(v) == "null" }

// MaxValueBytes bounds each string member of a request the service reads (an order id, a reference, a
// search term): far longer than any the upstream hands out, and short enough to quote in a log line.
const MaxValueBytes = 128

// checker collects the problems of one request: the first validate.MaxProblems of them, and a count of
// the rest, so that a body of thousands of faults gets a short answer.
type checker struct {
	problems []string
	extra    int
}

func (c *checker) addf(format string, args ...any) {
	if len(c.problems) >= validate.MaxProblems {
		c.extra++ // not formatted: a flood of problems costs a count
		return
	}
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// add adds problems found elsewhere (a RequestValidator's).
func (c *checker) add(problems ...string) {
	for _, p := range problems {
		c.addf("%s", p)
	}
}

// list returns the problems, the last entry counting those left out.
func (c *checker) list() []string {
	if c.extra > 0 {
		return append(c.problems, validate.MoreProblems(c.extra))
	}
	return c.problems
}

// header returns the value of the caller's header name; ok is false when it is absent. A header given
// more than once is a problem: which value would count is not the caller's guess to make.
func (c *checker) header(hdr nats.Header, name string) (v string, ok bool) {
	vs := hdr.Values(name)
	switch len(vs) {
	case 0:
		return "", false
	case 1:
		return vs[0], true
	}
	c.addf("the %s header is given %d times; give it once", name, len(vs))
	return "", false
}

// unknown reports every member of env not in allowed, in name order.
func (c *checker) unknown(env envelope, allowed ...string) {
	var extra []string
	for k := range env {
		if !slices.Contains(allowed, k) {
			extra = append(extra, k)
		}
	}
	slices.Sort(extra)
	for _, k := range extra {
		c.addf("unknown member %s (allowed: %s)", strconv.QuoteToASCII(logging.Cut(k, 40)), allowedList(allowed))
	}
}

func allowedList(allowed []string) string {
	if len(allowed) == 0 {
		return "none"
	}
	return strings.Join(allowed, ", ")
}

// str returns the string member key; ok is false when it is absent, null or not a string (then a problem
// is added when it is not a string, or when it is required).
func (c *checker) str(env envelope, key string, required bool) (string, bool) {
	v, present := env[key]
	if !present || isNull(v) {
		if required {
			c.addf("%s is missing", key)
		}
		return "", false
	}
	var s string
	switch {
	case v[0] != '"':
		c.addf("%s must be a string, not %s", key, jsonType(v))
		return "", false
	case bytes.IndexByte(v, '\\') < 0:
		s = string(v[1 : len(v)-1]) // valid JSON (parseEnvelope checked it) without escapes: the text itself
	default:
		_ = json.Unmarshal(v, &s)
	}
	if required && s == "" {
		c.addf("%s must not be empty", key)
		return "", false
	}
	if len(s) > MaxValueBytes {
		c.addf("%s is %d bytes long, more than the limit of %d: %s", key, len(s), MaxValueBytes, strQuote(s))
		return "", false
	}
	if strings.ContainsFunc(s, unicode.IsControl) {
		c.addf("%s must not contain control characters: %s", key, strQuote(s))
		return "", false
	}
	return s, true
}

// integer returns the int32 member key, at least lo; ok is false when it is absent, null or wrong.
func (c *checker) integer(env envelope, key string, lo int64) (int64, bool) {
	v, present := env[key]
	if !present || isNull(v) {
		return 0, false
	}
	if v[0] != '-' && (v[0] < '0' || v[0] > '9') {
		c.addf("%s must be an integer, not %s", key, jsonType(v))
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
		c.addf("%s must be an integer (int32), not %s", key, logging.Cut(string(v), 40))
		return 0, false
	}
	if int64(f) < lo {
		c.addf("%s must be at least %d, not %d", key, lo, int64(f))
		return 0, false
	}
	return int64(f), true
}

// object returns the raw object member key; ok is false when it is absent, null or not an object.
func (c *checker) object(env envelope, key string, required bool) (json.RawMessage, bool) {
	v, present := env[key]
	if !present || isNull(v) {
		if required {
			c.addf("%s is missing", key)
		}
		return nil, false
	}
	if v[0] != '{' {
		c.addf("%s must be an object, not %s", key, jsonType(v))
		return nil, false
	}
	return v, true
}

// withQuery returns path with the query q, if any.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// changes reports whether the operation changes something upstream (create, update, delete, report):
// those are audited. The operations answered from NATS only read.
func (op Operation) changes() bool { return !op.FromNATS() && op.Method != http.MethodGet }

// buildSearch: searchLocations, {"type","name","page","pageSize"}, each optional.
func buildSearch(b builder, body []byte) (upstream.APIRequest, []string) {
	c := b.checker()
	env, ok := c.envelope(body, true)
	if !ok {
		return upstream.APIRequest{}, c.list()
	}
	c.unknown(env, "type", "name", "page", "pageSize")
	q := url.Values{}
	if s, ok := c.str(env, "type", false); ok && s != "" {
		q.Set("type", s)
	}
	if s, ok := c.str(env, "name", false); ok && s != "" {
		q.Set("name", s)
	}
	if n, ok := c.integer(env, "page", 1); ok {
		q.Set("page", strconv.FormatInt(n, 10))
	}
	if n, ok := c.integer(env, "pageSize", 1); ok {
		q.Set("pageSize", strconv.FormatInt(n, 10))
	}
	return upstream.APIRequest{Method: http.MethodGet, Path: withQuery("/locations", q)}, c.list()
}

// buildList: listOpenOrders, an empty body or {}.
func buildList(b builder, body []byte) (upstream.APIRequest, []string) {
	c := b.checker()
	env, ok := c.envelope(body, true)
	if !ok {
		return upstream.APIRequest{}, c.list()
	}
	c.unknown(env)
	return upstream.APIRequest{Method: http.MethodGet, Path: "/orders"}, c.list()
}

// buildCreate: createOrder, a BookingOrder sent verbatim. The validator reads the body; only its kind is
// checked here, so that a large one is not decoded twice.
func buildCreate(b builder, body []byte) (upstream.APIRequest, []string) {
	c := b.checker()
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) > 0 && trimmed[0] == '{' {
		c.add(b.validator.Validate(SchemaBookingOrder, body)...)
	} else {
		c.envelope(body, false) // says what it is instead
	}
	return upstream.APIRequest{Method: http.MethodPost, Path: "/orders", Body: body}, c.list()
}

// orderID checks the id member and returns the order's path.
func orderID(c *checker, env envelope) string {
	id, ok := c.str(env, "id", true)
	if !ok {
		return ""
	}
	if id == "." || id == ".." {
		c.addf("id must not be %q", id)
		return ""
	}
	return "/orders/" + url.PathEscape(id)
}

// buildByID: getOrder and deleteOrder, {"id"}.
func buildByID(method string) func(builder, []byte) (upstream.APIRequest, []string) {
	return func(b builder, body []byte) (upstream.APIRequest, []string) {
		c := b.checker()
		env, ok := c.envelope(body, false)
		if !ok {
			return upstream.APIRequest{}, c.list()
		}
		c.unknown(env, "id")
		path := orderID(c, env)
		return upstream.APIRequest{Method: method, Path: path}, c.list()
	}
}

// buildUpdate: updateOrder, {"id", "order": BookingOrder}; the order member is sent verbatim.
func buildUpdate(b builder, body []byte) (upstream.APIRequest, []string) {
	c := b.checker()
	env, ok := c.envelope(body, false)
	if !ok {
		return upstream.APIRequest{}, c.list()
	}
	c.unknown(env, "id", "order")
	path := orderID(c, env)
	order, ok := c.object(env, "order", true)
	if ok {
		for _, p := range b.validator.Validate(SchemaBookingOrder, order) {
			c.addf("order: %s", p)
		}
	}
	return upstream.APIRequest{Method: http.MethodPut, Path: path, Body: order}, c.list()
}

// buildQuery: queryTracking, {"orderId","positionId"} or {"clientOrderReference","clientPositionReference"}.
func buildQuery(b builder, body []byte) (upstream.APIRequest, []string) {
	c := b.checker()
	env, ok := c.envelope(body, false)
	if !ok {
		return upstream.APIRequest{}, c.list()
	}
	keys := []string{"orderId", "positionId", "clientOrderReference", "clientPositionReference"}
	c.unknown(env, keys...)
	q := url.Values{}
	for _, k := range keys {
		if s, ok := c.str(env, k, false); ok && s != "" {
			q.Set(k, s)
		}
	}
	has := func(k string) bool { return q.Has(k) }
	if has("orderId") != has("positionId") {
		c.addf("orderId and positionId must be given together")
	}
	if has("clientOrderReference") != has("clientPositionReference") {
		c.addf("clientOrderReference and clientPositionReference must be given together")
	}
	if len(q) == 0 {
		c.addf("either orderId and positionId or clientOrderReference and clientPositionReference must be given")
	}
	return upstream.APIRequest{Method: http.MethodGet, Path: withQuery("/tracking", q)}, c.list()
}

// buildReport: reportTrackingEvent, a TrackingEventReport sent verbatim to the configured report path.
func buildReport(b builder, body []byte) (upstream.APIRequest, []string) {
	c := b.checker()
	c.add(b.validator.Validate(SchemaTrackingEventReport, body)...)
	return upstream.APIRequest{Method: http.MethodPost, Path: b.reportPath, Body: body, IdempotencyKey: b.idemKey}, c.list()
}
