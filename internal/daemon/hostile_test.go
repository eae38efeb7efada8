package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/lease"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// The hostile-client tests attack a running bridge as a NATS client with only the rights
// deploy/nats/nats-users.conf gives an API caller (api-writer: publish tracking.api.> and $SRV.>, subscribe
// its own inbox). Their helpers carry a "hostile" prefix.

// hostileReplies are reply subjects a caller may name that are not its inbox: the bridge's lease key,
// its fence and restart directive, the events, reports and dead-letter subjects, JetStream's API, the
// bridge's own inboxes, and malformed inboxes.
var hostileReplies = []string{
	"$KV.TRACKING_LEASES." + lease.DefaultKey,
	"$KV.TRACKING_LEASES.forged",
	"tracking.leader.7",
	"tracking.leader.restart",
	"tracking.events.FORGED",
	"tracking.events.GATE_IN",
	"tracking.reports",
	"tracking.dlq.events",
	"tracking.dlq.reports",
	"$JS.API.STREAM.PURGE.TRACKING_EVENTS",
	"$JS.API.STREAM.DELETE.TRACKING_REPORTS",
	"_INBOX_bridge.forged",
	"_INBOX",
	"_INBOXES.x",
	"_INBOX..x",
	"_INBOX.x.",
	"_INBOX.*",
	"_INBOX.>",
}

// hostileWatched are the hostile replies a test subscribes to (as admin) to see whether anything was
// published there. The lease key is left out (the leader renews it) and checked by the leader staying
// leader; wildcards and malformed subjects cannot be subscribed to or published on.
func hostileWatched() []string {
	var out []string
	for _, r := range hostileReplies {
		if r == "$KV.TRACKING_LEASES."+lease.DefaultKey || strings.ContainsAny(r, "*>") || strings.Contains(r, "..") ||
			strings.HasSuffix(r, ".") || r == "tracking.events.GATE_IN" {
			continue
		}
		out = append(out, r)
	}
	return out
}

// hostileRequests are a valid request to every endpoint of the API service: without the reply check
// each would be sent upstream and answered.
func hostileRequests(up *simtest.Upstream) map[string]string {
	order := `{"terminalId":"T","action":"PICK_UP","reference":"R","unit":{"loadingState":"FULL","isoCode":"22G1"}}`
	return map[string]string{
		"locations.search": `{}`,
		"orders.list":      `{}`,
		"orders.create":    order,
		"orders.get":       `{"id":"o-1"}`,
		"orders.update":    `{"id":"o-1","order":` + order + `}`,
		"orders.delete":    `{"id":"o-1"}`,
		"tracking.query":   `{"orderId":"a","positionId":"b"}`,
		"tracking.report":  string(opsReport(up, 1)),
	}
}

// hostileDiscovery are the service-discovery subjects a caller may send to.
var hostileDiscovery = []string{
	"$SRV.PING", "$SRV.PING.tracking-bridge", "$SRV.INFO", "$SRV.INFO.tracking-bridge",
	"$SRV.STATS", "$SRV.STATS.tracking-bridge",
}

// hostileConnect connects as one of deploy/nats/nats-users.conf's clients.
func hostileConnect(t *testing.T, url, user string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append(secClient(user), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestHostileReplySubjects: a caller names, as the reply subject of requests to every API endpoint and
// of service-discovery requests, the bridge's lease key, a fence subject, the restart directive, events,
// reports, dead letters, JetStream's API and the bridge's own inboxes, or no reply subject at all. The
// bridge calls nothing upstream for them and publishes nothing there: no stream gains a message, the
// leader keeps leading and its events keep flowing; each request is counted as refused, the log says so
// in few lines, and a caller with a proper inbox is still answered.
func TestHostileReplySubjects(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{EventRate: 50})
	ob := opsStartBridge(t, up.Env(ns.URL(), secBridgeEnv))
	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	testutil.EventuallyState(t, 10*time.Second, "leading", func() (bool, string) {
		st := ob.status(t)
		return st.Role == "leader", st.Role
	})

	admin, err := nats.Connect(ns.URL(), nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, _ := jetstream.New(admin)
	var mu sync.Mutex
	var seen []string
	for _, subj := range hostileWatched() {
		if _, err := admin.Subscribe(subj, func(m *nats.Msg) {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s: %.80q", m.Subject, m.Data))
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	streamMsgs := func(stream string, subject string) uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, c := range info.State.Subjects {
			n += c
		}
		return n
	}
	dlqBefore := streamMsgs("TRACKING_DLQ", "tracking.dlq.>")
	callsBefore := up.APICalls()

	// The attack: every endpoint and discovery subject with every hostile reply, and without one.
	hostile := hostileConnect(t, ns.URL(), "api-writer")
	requests := hostileRequests(up)
	sent := 0
	for op, body := range requests {
		for _, reply := range hostileReplies {
			if err := hostile.PublishRequest("tracking.api."+op, reply, []byte(body)); err != nil {
				t.Fatalf("%s with reply %s: %v", op, reply, err)
			}
			sent++
		}
		if err := hostile.Publish("tracking.api."+op, []byte(body)); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	for _, subj := range hostileDiscovery {
		for _, reply := range hostileReplies {
			if err := hostile.PublishRequest(subj, reply, nil); err != nil {
				t.Fatalf("%s with reply %s: %v", subj, reply, err)
			}
		}
	}
	if err := hostile.Flush(); err != nil {
		t.Fatal(err)
	}

	// Requests on one subscription are handled in order: once a proper request on each subject is
	// answered, the hostile ones before it were handled.
	for _, op := range []string{"locations.search", "orders.list", "orders.get", "tracking.query"} {
		if _, err := hostile.Request("tracking.api."+op, []byte(requests[op]), 5*time.Second); err != nil {
			t.Errorf("a proper request to %s after the attack: %v", op, err)
		}
	}
	for _, subj := range hostileDiscovery {
		if _, err := hostile.Request(subj, nil, 5*time.Second); err != nil {
			t.Errorf("a proper request to %s after the attack: %v", subj, err)
		}
	}
	testutil.EventuallyState(t, 5*time.Second, "every hostile request counted", func() (bool, string) {
		var n float64
		for _, reason := range []string{"no_reply", "reply_invalid", "reply_not_inbox"} {
			n += ob.counter(t, "bridge_api_requests_refused_total", map[string]string{"reason": reason})
		}
		return n >= float64(sent), fmt.Sprintf("%v of %d", n, sent)
	})

	// The upstream: only the four proper requests; nothing published where the caller pointed.
	if calls := up.APICalls() - callsBefore; calls != 4 {
		t.Errorf("%d upstream API calls during the attack, want the 4 proper ones", calls)
	}
	eventsBefore := streamMsgs("TRACKING_EVENTS", "tracking.events.>")
	testutil.EventuallyState(t, 10*time.Second, "events still flowing", func() (bool, string) {
		n := streamMsgs("TRACKING_EVENTS", "tracking.events.>")
		return n > eventsBefore+10, fmt.Sprintf("%d, before %d", n, eventsBefore)
	})
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(seen) > 0 {
		t.Errorf("published where a caller pointed:\n%s", strings.Join(seen, "\n"))
	}
	mu.Unlock()
	if n := streamMsgs("TRACKING_EVENTS", "tracking.events.FORGED"); n != 0 {
		t.Errorf("%d messages on tracking.events.FORGED", n)
	}
	if n := streamMsgs("TRACKING_DLQ", "tracking.dlq.>"); n != dlqBefore {
		t.Errorf("dead letters went from %d to %d", dlqBefore, n)
	}
	if n := streamMsgs("TRACKING_REPORTS", "tracking.reports"); n != 0 {
		t.Errorf("%d reports stored", n)
	}
	if r := up.Sim().Reports("demo"); len(r) != 0 {
		t.Errorf("%d reports reached the upstream", len(r))
	}
	if st := ob.status(t); st.Role != "leader" {
		t.Errorf("role %q after the attack, want leader", st.Role)
	}
	logs := ob.logs.String()
	if strings.Contains(logs, "stopped leading") {
		t.Errorf("the leader stopped leading:\n%s", logs)
	}
	if n := countLines(logs, "dropped without an answer"); n == 0 || n > 3 {
		t.Errorf("%d log lines about dropped requests, want one per reason", n)
	}
	if strings.Contains(strings.ToLower(logs), "permission") {
		t.Errorf("permission trouble in the bridge's log:\n%s", logs)
	}
}

// TestHostileInputs: as the example API writer, against a bridge that serves every endpoint but
// orders.delete: the disabled endpoint has no responders; every endpoint takes a body exactly at its
// bound and answers one byte past it 400 naming the bound, and one past the NATS server's max_payload is refused by the
// client; control characters and long values in every header a caller may send are answered 400; none
// of it reaches the upstream, and the leader's events keep flowing.
func TestHostileInputs(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{EventRate: 50})
	env := up.Env(ns.URL(), secBridgeEnv)
	env["BRIDGE_API_ENDPOINTS"] = "locations.search,orders.list,orders.create,orders.get,orders.update,tracking.query,tracking.report"
	ob := opsStartBridge(t, env)
	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	nc := hostileConnect(t, ns.URL(), "api-writer")
	testutil.EventuallyState(t, 5*time.Second, "the API served", func() (bool, string) {
		_, err := nc.Request("tracking.api.orders.list", nil, time.Second)
		return err == nil, fmt.Sprint(err)
	})
	code := func(m *nats.Msg) string { return m.Header.Get("Nats-Service-Error-Code") }
	tooLarge := func(m *nats.Msg) bool {
		return code(m) == "400" && strings.Contains(m.Header.Get("Nats-Service-Error"), "more than the limit")
	}

	// The disabled endpoint: nobody answers, nothing is called.
	calls := up.APICalls()
	if _, err := nc.Request("tracking.api.orders.delete", []byte(`{"id":"o-1"}`), time.Second); err != nats.ErrNoResponders {
		t.Errorf("orders.delete, disabled: %v, want no responders", err)
	}

	// Bodies at and one byte past each bound: a valid JSON object padded with spaces.
	requests := hostileRequests(up)
	bounds := map[string]int{}
	for _, op := range service.Operations {
		bounds[op.Name] = 256 << 10 // BRIDGE_API_MAX_BODY_BYTES's default
		if op.MaxBody > 0 {
			bounds[op.Name] = op.MaxBody
		}
	}
	for op, max := range bounds {
		if op == "orders.delete" {
			continue
		}
		body := requests[op]
		at := body + strings.Repeat(" ", max-len(body))
		m, err := nc.Request("tracking.api."+op, []byte(at), 5*time.Second)
		if err != nil || tooLarge(m) {
			t.Errorf("%s, %d bytes (at the bound): %v %v", op, len(at), err, m.Header)
		}
		m, err = nc.Request("tracking.api."+op, []byte(at+" "), 5*time.Second)
		if err != nil || !tooLarge(m) {
			t.Errorf("%s, %d bytes (past the bound): %v %v, want 400 naming the bound", op, len(at)+1, err, m.Header)
		}
	}
	// Past max_payload the client refuses to send it; the server would cut the connection otherwise.
	if err := nc.Publish("tracking.api.orders.create", make([]byte, nc.MaxPayload()+1)); err != nats.ErrMaxPayload {
		t.Errorf("a body past max_payload: %v", err)
	}
	calls = up.APICalls() - calls

	// Hostile headers on every endpoint: each is refused 400 before any upstream call. (A CR LF in a value
	// never arrives as such: NATS's header block would read it as a second header.)
	long := strings.Repeat("k", 100<<10)
	before := up.APICalls()
	for _, hdr := range []struct{ name, value string }{
		{"Idempotency-Key", "key\x00with-nul"},
		{"Idempotency-Key", long},
		{"Bridge-Timeout", "2s\x7f"},
		{"Bridge-Timeout", long},
		{"Bridge-Timeout", "-1s"},
	} {
		for op, body := range requests {
			if op == "orders.delete" {
				continue
			}
			msg := &nats.Msg{Subject: "tracking.api." + op, Data: []byte(body), Header: nats.Header{hdr.name: []string{hdr.value}}}
			m, err := nc.RequestMsg(msg, 5*time.Second)
			if err != nil || code(m) != "400" {
				t.Errorf("%s with %s %.40q: %v %v, want 400", op, hdr.name, hdr.value, err, m.Header)
				continue
			}
			if d := m.Header.Get("Nats-Service-Error"); len(d) > 2048 || strings.ContainsAny(d, "\x00\r\n") {
				t.Errorf("%s: the error quotes the header unbounded or raw: %.200q", op, d)
			}
		}
	}
	if n := up.APICalls() - before; n != 0 {
		t.Errorf("%d upstream calls for requests with hostile headers", n)
	}
	if want := int64(len(bounds) - 1); calls != want { // one each for the seven endpoints served
		t.Errorf("%d upstream calls for the bodies at and past their bounds, want %d (those at the bound only)", calls, want)
	}

	// The leader leads on and its events flow.
	if st := ob.status(t); st.Role != "leader" {
		t.Errorf("role %q, want leader", st.Role)
	}
	admin := nats.UserInfo("admin", "admin")
	n := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", admin)
	testutil.EventuallyState(t, 10*time.Second, "events flowing", func() (bool, string) {
		m := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", admin)
		return m > n, fmt.Sprint(m)
	})
	ob.requireAlive(t)
}

// TestEventsReaderRights: config/nats-users.conf's events-reader reads the events through package
// tracking's consumer with the durable its rights name, and cannot delete, read or replace another
// reader's consumer. (An outside review found the rights it had before reached every consumer.)
func TestEventsReaderRights(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{EventRate: 50})
	ob := opsStartBridge(t, up.Env(ns.URL(), secBridgeEnv))
	ob.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	admin, err := nats.Connect(ns.URL(), nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)
	if _, err := ajs.CreateOrUpdateConsumer(ctx, "TRACKING_EVENTS", jetstream.ConsumerConfig{Durable: "billing",
		FilterSubject: "tracking.events.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}

	reader := hostileConnect(t, ns.URL(), "events-reader")
	js, err := jetstream.New(reader)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{
		Consumer: jetstream.ConsumerConfig{Durable: "events-reader", DeliverPolicy: jetstream.DeliverAllPolicy}})
	if err != nil {
		t.Fatalf("the events reader's own durable: %v", err)
	}
	ev, err := c.Next(ctx)
	if err != nil || ev.ID == "" {
		t.Fatalf("reading an event: %v %v", ev, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	if err := js.DeleteConsumer(short, "TRACKING_EVENTS", "billing"); err == nil {
		t.Error("the events reader deleted another reader's consumer")
	}
	if _, err := js.CreateOrUpdateConsumer(short, "TRACKING_EVENTS", jetstream.ConsumerConfig{Durable: "billing",
		FilterSubject: "tracking.events.GATE_IN", AckPolicy: jetstream.AckExplicitPolicy}); err == nil {
		t.Error("the events reader replaced another reader's consumer")
	}
	if _, err := ajs.Consumer(ctx, "TRACKING_EVENTS", "billing"); err != nil {
		t.Errorf("the other reader's consumer: %v", err)
	}
}
