package daemon

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/lease"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// The hostile-client tests attack a running bridge as a NATS client with only what
// deploy/nats/nats-accounts.conf gives an API caller (api-writer: an account of its own that imports every
// endpoint and discovery from the bridge's). Their helpers carry a "hostile" prefix.

// hostileReplies are reply subjects a caller may name that are not its inbox: the bridge's lease key,
// its fence and restart directive, the events, reports and dead-letter subjects, JetStream's API, the
// bridge's own inboxes, malformed inboxes, and the reply prefixes NATS keeps for itself.
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
	"_R_.forged.x",
	"$JS.ACK.TRACKING_REPORTS.tracking-bridge-reports.1.1.1.1.0",
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
		"units.get":        `{"unit":"MSKU1234567"}`,
		"units.events":     `{"unit":"MSKU1234567","limit":5}`,
	}
}

// hostileDiscovery are the service-discovery subjects a caller may send to.
var hostileDiscovery = []string{
	"$SRV.PING", "$SRV.PING.tracking-bridge", "$SRV.INFO", "$SRV.INFO.tracking-bridge",
	"$SRV.STATS", "$SRV.STATS.tracking-bridge",
}

// hostileConnect connects as one of deploy/nats/nats-accounts.conf's clients.
func hostileConnect(t *testing.T, url, user string) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append(secClient(user), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestHostileReplySubjects: a caller in its own account names, as the reply subject of requests to every
// API endpoint and of service-discovery requests, the bridge's lease key, a fence subject, the restart
// directive, events, reports, dead letters, JetStream's API and the bridge's own inboxes, or no reply
// subject at all. NATS gives each request that crosses into the bridge's account a reply subject of its
// own under _R_. (or refuses it, for the reserved prefixes), so the answers go back to the caller's
// account and nothing is written in the bridge's: no stream gains a message the bridge did not write, the
// leader keeps leading and its events keep flowing; requests without a reply are counted as refused; and a
// caller with a proper inbox is answered.
func TestHostileReplySubjects(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{EventRate: 50})
	ob := accLeading(t, ns, up)
	watch := accWatch(t, ns.URL())
	admin, err := nats.Connect(ns.URL(), secAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	js, _ := jetstream.New(admin)
	streamMsgs := func(stream string, subject string) uint64 {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(5*time.Second))
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

	// The attack: every endpoint and discovery subject with every hostile reply, and without one.
	hostile := hostileConnect(t, ns.URL(), "api-writer")
	var answered atomic.Int64 // answers in the caller's own account, on the subjects it named
	if _, err := hostile.Subscribe(">", func(m *nats.Msg) {
		if slices.Contains(hostileReplies, m.Subject) {
			answered.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	requests := hostileRequests(up)
	noReply := 0
	for op, body := range requests {
		for _, reply := range hostileReplies {
			// A reply NATS keeps for itself is refused by the server: not an error of the publish.
			_ = hostile.PublishRequest("tracking.api."+op, reply, []byte(body))
		}
		if err := hostile.Publish("tracking.api."+op, []byte(body)); err != nil {
			t.Fatal(err)
		}
		noReply++
	}
	for _, subj := range hostileDiscovery {
		for _, reply := range hostileReplies {
			_ = hostile.PublishRequest(subj, reply, nil)
		}
	}
	if err := hostile.Flush(); err != nil {
		t.Fatal(err)
	}

	// A proper request is answered. (Until the answers to the attack have gone back, the caller's own
	// request may go unanswered: NATS drops the caller's pending replies that its wildcard reply subjects
	// match. That harms the caller alone.)
	for _, op := range []string{"locations.search", "orders.list", "orders.get", "tracking.query", "orders.create",
		"orders.update", "orders.delete", "tracking.report"} {
		testutil.EventuallyState(t, 15*time.Second, "an answer to a proper request to "+op, func() (bool, string) {
			_, err := hostile.Request("tracking.api."+op, []byte(requests[op]), 2*time.Second)
			return err == nil, fmt.Sprint(err)
		})
	}
	for _, subj := range hostileDiscovery {
		testutil.EventuallyState(t, 15*time.Second, "an answer to a proper request to "+subj, func() (bool, string) {
			_, err := hostile.Request(subj, nil, 2*time.Second)
			return err == nil, fmt.Sprint(err)
		})
	}
	testutil.EventuallyState(t, 5*time.Second, "every request without a reply counted", func() (bool, string) {
		n := ob.counter(t, "bridge_api_requests_refused_total", map[string]string{"reason": "no_reply"})
		return n >= float64(noReply), fmt.Sprintf("%v of %d", n, noReply)
	})
	if n := answered.Load(); n == 0 {
		t.Error("no answer reached the caller's own account on the subjects it named")
	}

	accStillLeading(t, ns, ob)
	watch.check(t, ns.URL())
	if n := streamMsgs("TRACKING_EVENTS", "tracking.events.FORGED"); n != 0 {
		t.Errorf("%d messages on tracking.events.FORGED", n)
	}
	if n := streamMsgs("TRACKING_DLQ", "tracking.dlq.>"); n != dlqBefore {
		t.Errorf("dead letters went from %d to %d", dlqBefore, n)
	}
	if n := streamMsgs("TRACKING_REPORTS", "tracking.reports"); n != 0 {
		t.Errorf("%d reports stored", n)
	}
	if n := countLines(ob.logs.String(), "dropped without an answer"); n == 0 || n > 3 {
		t.Errorf("%d log lines about dropped requests, want one per reason", n)
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
	ob := opsStartBridge(t, up.Config(ns.URL(), secBridgeUser, func(c *config.Config) {
		c.APIEndpoints = "locations.search,orders.list,orders.create,orders.get,orders.update,tracking.query,tracking.report,units.get,units.events"
	}))
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
		m, err := nc.Request("tracking.api."+op, []byte(at), testutil.Scale(5*time.Second))
		if err != nil || tooLarge(m) {
			t.Errorf("%s, %d bytes (at the bound): %v %v", op, len(at), err, m.Header)
		}
		m, err = nc.Request("tracking.api."+op, []byte(at+" "), testutil.Scale(5*time.Second))
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
	// One each for the seven upstream endpoints served; the units endpoints read NATS.
	fromNATS := 0
	for _, op := range service.Operations {
		if op.FromNATS() {
			fromNATS++
		}
	}
	if want := int64(len(bounds) - 1 - fromNATS); calls != want {
		t.Errorf("%d upstream calls for the bodies at and past their bounds, want %d (those at the bound only)", calls, want)
	}

	// The leader leads on and its events flow.
	if st := ob.status(t); st.Role != "leader" {
		t.Errorf("role %q, want leader", st.Role)
	}
	admin := secAdmin
	n := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", admin)
	testutil.EventuallyState(t, 10*time.Second, "events flowing", func() (bool, string) {
		m := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", admin)
		return m > n, fmt.Sprint(m)
	})
	ob.requireAlive(t)
}
