package service

import (
	"encoding/json"
	"log/slog"
	"net/url"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// AuditMessage is the message of the audit line logged for every call that changes something upstream.
const AuditMessage = "API audit"

// Bounds of what the audit line quotes: every value in it comes from a caller or the upstream.
const (
	maxAuditValue  = 128      // an order id, an idempotency key, a caller's name
	maxAuditErr    = 256      // a failure's description
	maxRequestInfo = 16 << 10 // a Nats-Request-Info header worth reading (with share it carries a JWT)
)

// audit logs the line of a call that changes something upstream (create, update, delete, report), once
// the upstream answered or the call failed, with fixed keys: endpoint, order_id (the request's; for a
// create the id in the upstream's answer; "" when there is none), status (the upstream's HTTP status,
// else the reply's error code), answered (whether the upstream answered at all), reply_prefix (the
// configured prefix the reply went to: the caller chose it, so it names nobody), caller (from
// Nats-Request-Info on a request NATS brought through a service import, the only case where the server
// sets it and removes a caller's own) or caller_claimed (the same header on any other request: whatever
// the caller wrote), idempotency_key (a report's, when given), and err on failure.
func (s *Service) audit(ep *endpoint, c call, res result) {
	status := res.upstream
	if status == 0 {
		status = res.code
	}
	attrs := []any{"endpoint", ep.Name, "order_id", logging.Value(auditOrderID(ep, c.req, res), maxAuditValue),
		"status", status, "answered", res.upstream != 0, "reply_prefix", c.prefix}
	if c.named {
		attrs = append(attrs, c.caller)
	}
	if c.req.IdempotencyKey != "" {
		attrs = append(attrs, "idempotency_key", logging.Value(c.req.IdempotencyKey, maxAuditValue))
	}
	if !res.ok {
		attrs = append(attrs, "err", logging.Value(res.desc, maxAuditErr))
	}
	s.log.Info(AuditMessage, attrs...)
}

// auditOrderID is the order a call concerns: the id in the path of an update or delete, the id the
// upstream gave a created order (BookingOrderCreated), a report's order.orderId; "" when there is none.
func auditOrderID(ep *endpoint, req upstream.APIRequest, res result) string {
	switch ep.Name {
	case "orders.update", "orders.delete":
		id, err := url.PathUnescape(strings.TrimPrefix(req.Path, "/orders/"))
		if err != nil {
			return ""
		}
		return id
	case "orders.create":
		var created struct {
			ID string `json:"id"`
		}
		if res.ok && json.Unmarshal(res.body, &created) == nil {
			return created.ID
		}
	case "tracking.report":
		var report struct {
			Order struct {
				OrderID string `json:"orderId"`
			} `json:"order"`
		}
		if json.Unmarshal(req.Body, &report) == nil {
			return report.Order.OrderID
		}
	}
	return ""
}

// callerAttr reads the Nats-Request-Info header into the audit line's caller group (caller_claimed unless
// imported: see audit): the account, and
// the user and client name when the server gives them (on an import with share). named is false when
// the header is absent. A value that is too long or not JSON is quoted, cut short, as unreadable; it
// never stops the request.
func callerAttr(hdr nats.Header, imported bool) (attr slog.Attr, named bool) {
	vs := hdr.Values(RequestInfoHeader)
	if len(vs) == 0 {
		return slog.Attr{}, false
	}
	key := "caller"
	if !imported {
		key = "caller_claimed"
	}
	v := vs[len(vs)-1] // the server removes a caller's value and appends its own
	if len(v) > maxRequestInfo {
		return slog.Group(key, "unreadable", strconv.Itoa(len(v))+" bytes"), true
	}
	var info struct {
		Account string `json:"acc"`
		User    string `json:"user"`
		Name    string `json:"name"`
	}
	if err := json.Unmarshal([]byte(v), &info); err != nil {
		return slog.Group(key, "unreadable", logging.Value(v, 64)), true
	}
	var args []any
	for _, kv := range [][2]string{{"account", info.Account}, {"user", info.User}, {"name", info.Name}} {
		if kv[1] != "" {
			args = append(args, kv[0], logging.Value(kv[1], maxAuditValue))
		}
	}
	if len(args) == 0 {
		args = []any{"unreadable", logging.Value(v, 64)}
	}
	return slog.Group(key, args...), true
}
