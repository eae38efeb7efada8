package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
)

// Headers of the API's requests and replies (docs/api.md).
const (
	// HeaderTimeout is the request header by which a caller tells the bridge its deadline, a duration
	// with a unit ("2s"): the bridge answers 504 when the upstream has not answered by then.
	HeaderTimeout = "Bridge-Timeout"
	// HeaderIdempotencyKey on a report request is sent upstream as Idempotency-Key.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderErrorCode and HeaderError are NATS micro's error headers, on every failure reply.
	HeaderErrorCode = "Nats-Service-Error-Code"
	HeaderError     = "Nats-Service-Error"
	// HeaderUpstreamStatus is on a failure reply to which the upstream answered: its HTTP status.
	HeaderUpstreamStatus = "Bridge-Upstream-Status"
	// HeaderRetryAfter is the upstream's Retry-After, on a failure reply.
	HeaderRetryAfter = "Retry-After"
	// HeaderUnit is on the reply of OpUnitLatest: the unit token of the number asked for.
	HeaderUnit = "Tracking-Unit"
)

// DefaultTimeout bounds a Client's request whose context has no deadline.
const DefaultTimeout = 30 * time.Second

// Client calls the bridge's request-reply API (docs/api.md): each method is one operation, its request
// and reply the types of the OpenAPI document. A failure is an *APIError (errors.Is it with ErrNotFound,
// ErrTimeout, …), ErrNoResponders when no bridge serves the API, or the context's error. A Client is safe
// for concurrent use.
//
// The context's deadline bounds the request; the bridge is told a little less in the Bridge-Timeout
// header, so that it answers 504 (with its reason) before the caller gives up. Without a deadline the
// request gets Timeout. The bridge never repeats a request (apart from one repeat after a 401), and
// neither does the Client.
type Client struct {
	nc       *nats.Conn
	subjects Subjects
	// Timeout bounds a request whose context has no deadline; 0 means DefaultTimeout.
	Timeout time.Duration
}

// NewClient returns a Client of the API served on the prefix's subjects ("" is DefaultPrefix).
func NewClient(nc *nats.Conn, prefix string) *Client {
	return &Client{nc: nc, subjects: Subjects{Prefix: prefix}}
}

// SearchLocations searches the master-data locations (operation searchLocations); every parameter is
// optional.
func (c *Client) SearchLocations(ctx context.Context, p SearchLocationsParams) (*PaginatedLocationResponse, error) {
	return call[PaginatedLocationResponse](ctx, c, OpSearchLocations, p)
}

// ListOrders lists the identifiers of the open booking orders (operation listOpenOrders).
func (c *Client) ListOrders(ctx context.Context) (*OrderIdList, error) {
	return call[OrderIdList](ctx, c, OpListOrders, struct{}{})
}

// CreateOrder creates a booking order (operation createOrder); order.Id must be nil. The bridge checks the
// order against the OpenAPI document first (a 400 lists every problem). After a 504 or a 503 that is not
// "busy" the order may have been created: ListOrders before creating it again.
func (c *Client) CreateOrder(ctx context.Context, order BookingOrder) (*BookingOrderCreated, error) {
	return call[BookingOrderCreated](ctx, c, OpCreateOrder, order)
}

// GetOrder reads a booking order (operation getOrder).
func (c *Client) GetOrder(ctx context.Context, id string) (*BookingOrder, error) {
	return call[BookingOrder](ctx, c, OpGetOrder, idRequest{ID: id})
}

// UpdateOrder replaces an open booking order (operation updateOrder); order.Id must be nil. A booked order
// gives ErrConflict.
func (c *Client) UpdateOrder(ctx context.Context, id string, order BookingOrder) error {
	return c.call(ctx, OpUpdateOrder, struct {
		ID    string       `json:"id"`
		Order BookingOrder `json:"order"`
	}{id, order}, nil, nil)
}

// DeleteOrder deletes an open booking order (operation deleteOrder). A booked order gives ErrConflict.
func (c *Client) DeleteOrder(ctx context.Context, id string) error {
	return c.call(ctx, OpDeleteOrder, idRequest{ID: id}, nil, nil)
}

// QueryTracking returns a tracked unit and its events (operation queryTracking), named by OrderId and
// PositionId or by ClientOrderReference and ClientPositionReference.
func (c *Client) QueryTracking(ctx context.Context, p QueryTrackingParams) (*TrackedUnit, error) {
	return call[TrackedUnit](ctx, c, OpQueryTracking, p)
}

// ReportEvent reports a tracking event upstream and returns once the upstream accepted it (operation
// reportTrackingEvent). idempotencyKey, when not empty, goes upstream as Idempotency-Key: a repeat with the
// same key is accepted without adding the event again, so a report that failed with a Temporary error can be
// sent again safely. Reporter.Report is the other way: through JetStream, retried by the bridge until the
// upstream takes it. A report with a zero Timestamp or an empty Type gives an *InvalidReportError without a
// request.
func (c *Client) ReportEvent(ctx context.Context, report TrackingEventReport, idempotencyKey string) error {
	if problems := zeroRequired(report); len(problems) > 0 {
		return &InvalidReportError{Problems: problems}
	}
	var hdr nats.Header
	if idempotencyKey != "" {
		hdr = nats.Header{HeaderIdempotencyKey: []string{idempotencyKey}}
	}
	return c.call(ctx, OpReportEvent, report, hdr, nil)
}

// UnitEvent is one event of a loading unit as the units endpoints answer it: its data verbatim, and
// decoded.
type UnitEvent struct {
	// Unit is the unit token (UnitToken of the number asked for): the key of the units bucket and the
	// last token of the unit's event subjects.
	Unit string
	// Data is Raw decoded; when Err is set it holds what did decode.
	Data TrackingEvent
	// Raw is the event's data verbatim, as the bridge published it.
	Raw json.RawMessage
	// Err is a *MalformedEventError when Raw is not a TrackingEvent (a type or timestamp missing, a
	// timestamp that is not RFC 3339); nil otherwise.
	Err error
}

// UnitHistory is the reply of UnitEvents: the unit's most recent stored events, oldest first.
type UnitHistory struct {
	// Unit is the unit token (UnitToken of the number asked for).
	Unit   string
	Events []UnitEvent
}

// UnitLatest returns the latest event of the loading unit with number as written ("msku 123456-7"):
// the event with the largest timestamp (then the largest id) among those the bridge stored, from the
// units view, without calling the upstream (operation units.get). ErrNotFound: the view holds no event
// of the unit; ErrUnavailable: the view does not exist (BRIDGE_UNITS_VIEW=false, or not built yet);
// ErrInvalid: number names no unit (UnitToken gives NoUnit).
func (c *Client) UnitLatest(ctx context.Context, number string) (*UnitEvent, error) {
	var raw json.RawMessage
	var unit string
	if err := c.call(ctx, OpUnitLatest, unitRequest{Unit: number}, nil, &raw, func(m *nats.Msg) { unit = m.Header.Get(HeaderUnit) }); err != nil {
		return nil, err
	}
	ev := c.unitEvent(unit, raw)
	return &ev, nil
}

// UnitEvents returns the most recent stored events of the loading unit with number as written, oldest
// first, from the events stream without calling the upstream (operation units.events): at most limit
// (0 asks for the bridge's default, 20; at most 200), fewer when they would not fit in one NATS message
// (the oldest are left out). Events stored before event subjects carried their unit are not among them.
// ErrInvalid: number names no unit, or limit is out of range.
func (c *Client) UnitEvents(ctx context.Context, number string, limit int) (*UnitHistory, error) {
	var reply struct {
		Unit   string            `json:"unit"`
		Events []json.RawMessage `json:"events"`
	}
	if err := c.call(ctx, OpUnitEvents, unitRequest{Unit: number, Limit: limit}, nil, &reply); err != nil {
		return nil, err
	}
	h := &UnitHistory{Unit: reply.Unit, Events: make([]UnitEvent, len(reply.Events))}
	for i, raw := range reply.Events {
		h.Events[i] = c.unitEvent(reply.Unit, raw)
	}
	return h, nil
}

type unitRequest struct {
	Unit  string `json:"unit"`
	Limit int    `json:"limit,omitempty"`
}

// unitEvent decodes one event of a units reply; a malformed one names the unit's subjects.
func (c *Client) unitEvent(unit string, raw json.RawMessage) UnitEvent {
	ev := UnitEvent{Unit: unit, Raw: raw}
	if err := decodeTrackingEvent(raw, &ev.Data); err != nil {
		me := &MalformedEventError{Subject: layout.EventBase(c.subjects.prefix()) + "*." + unit, Data: raw, Err: err}
		if ev.Data.Id != nil {
			me.ID = *ev.Data.Id
		}
		ev.Err = me
	}
	return ev
}

// call is Client.call for an operation whose success reply is a T.
func call[T any](ctx context.Context, c *Client, op string, req any) (*T, error) {
	var out T
	if err := c.call(ctx, op, req, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

type idRequest struct {
	ID string `json:"id"`
}

// timeoutMargin returns how much shorter than the time left the Bridge-Timeout header is: a tenth,
// between 20 ms and 500 ms, so that the bridge's 504 has time to arrive.
func timeoutMargin(left time.Duration) time.Duration {
	return min(max(left/10, 20*time.Millisecond), 500*time.Millisecond)
}

// call sends req as JSON to the operation's subject and decodes a success reply into out (nil: the
// reply is ignored); each of seen, when given, is handed the success reply.
func (c *Client) call(ctx context.Context, op string, req any, hdr nats.Header, out any, seen ...func(*nats.Msg)) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("tracking: %s: %w", op, err)
	}
	if _, ok := ctx.Deadline(); !ok {
		timeout := c.Timeout
		if timeout <= 0 {
			timeout = DefaultTimeout
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	left := time.Until(deadline)
	if left <= 0 {
		return fmt.Errorf("tracking: %s: %w", op, context.DeadlineExceeded)
	}
	msg := &nats.Msg{Subject: c.subjects.API(op), Data: body, Header: hdr}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	msg.Header.Set(HeaderTimeout, max(left-timeoutMargin(left), time.Millisecond).Truncate(time.Millisecond).String())
	carrier.Inject(ctx, msg.Header) // the caller's trace, when ctx holds a span: the bridge's span continues it
	reply, err := c.nc.RequestMsgWithContext(ctx, msg)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("tracking: %s: %w on %s: %w", op, ErrNoResponders, msg.Subject, err)
	case err != nil:
		return fmt.Errorf("tracking: %s: %w", op, err)
	}
	if code := reply.Header.Get(HeaderErrorCode); code != "" {
		return replyError(op, code, reply)
	}
	for _, f := range seen {
		f(reply)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		return fmt.Errorf("tracking: %s: %w: %v", op, ErrMalformedReply, err)
	}
	return nil
}

// replyError builds the *APIError of a failure reply.
func replyError(op, code string, reply *nats.Msg) *APIError {
	e := &APIError{Op: op, Description: reply.Header.Get(HeaderError)}
	e.Code, _ = strconv.Atoi(code)
	e.UpstreamStatus, _ = strconv.Atoi(reply.Header.Get(HeaderUpstreamStatus))
	if s, err := strconv.Atoi(reply.Header.Get(HeaderRetryAfter)); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	var m ApiResponseMessage
	if json.Unmarshal(reply.Data, &m) == nil && m.Messages != nil {
		e.Messages = *m.Messages
	}
	return e
}
