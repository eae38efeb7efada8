package service_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// The tests of the trust boundary (docs/api.md#no-caller-steers-the-bridge): a request's reply subject, headers and body are the
// caller's.

// dropMessage is the log line of a request dropped without an answer.
const dropMessage = "API request dropped without an answer: no reply subject, or not under a configured inbox prefix"

// discoverySubjects are the micro discovery subjects of every service and of this one.
var discoverySubjects = []string{"$SRV.PING", "$SRV.INFO", "$SRV.STATS",
	"$SRV.PING." + service.Name, "$SRV.INFO." + service.Name, "$SRV.STATS." + service.Name}

// TestReplyOnlyToInboxes: a request whose reply subject is not under a configured inbox prefix, or is
// not a literal subject, gets no answer on it, no upstream call, and is counted by reason; the same
// request with an inbox gets its answer. Discovery requests ($SRV.*) are held to the same rule.
func TestReplyOnlyToInboxes(t *testing.T) {
	t.Parallel()
	h := start(t, options{svc: func(c *service.Config) { c.ReplyPrefixes = []string{"_INBOX.", "_INBOX_alice."} }})
	id := h.create("KEEP") // one upstream call for the terminal, one for the create
	calls := h.calls.n.Load()

	// A watcher on everything but the inboxes sees whatever the service publishes elsewhere.
	watch := h.ns.Connect()
	seen, err := watch.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Flush(); err != nil {
		t.Fatal(err)
	}

	body := `{"id":"` + id + `"}`
	for _, tc := range []struct {
		reply, reason string
	}{
		{"$KV.TRACKING_LEASES.events", service.RefusedReplyNotInbox},
		{"tracking.events.FORGED", service.RefusedReplyNotInbox},
		{"tracking.leader.0001", service.RefusedReplyNotInbox},
		{"tracking.reports", service.RefusedReplyNotInbox},
		{"tracking.dlq.reports", service.RefusedReplyNotInbox},
		{"$JS.API.STREAM.PURGE.TRACKING_EVENTS", service.RefusedReplyNotInbox},
		{"_INBOXES.x", service.RefusedReplyNotInbox},
		{"_INBOX", service.RefusedReplyNotInbox},
		{"_INBOX_alicex.y", service.RefusedReplyNotInbox}, // a prefix is whole tokens
		{"x._INBOX.y", service.RefusedReplyNotInbox},
		{"_INBOX.>", service.RefusedReplyInvalid},
		{"_INBOX.*", service.RefusedReplyInvalid},
		{"_INBOX.a.*.b", service.RefusedReplyInvalid},
		{"_INBOX.a>b", service.RefusedReplyInvalid},
		{"_INBOX..x", service.RefusedReplyInvalid},
		{"_INBOX.x.", service.RefusedReplyInvalid},
		{"_INBOX.x\x7fy", service.RefusedReplyInvalid},
	} {
		// Every mutating endpoint, with a body it would carry out.
		for _, op := range []string{"orders.delete", "orders.get", "orders.list", "orders.create", "tracking.report"} {
			if err := h.nc.PublishRequest("tracking.api."+op, tc.reply, []byte(body)); err != nil {
				t.Fatalf("%s reply %q: %v", op, tc.reply, err)
			}
		}
		// And discovery, which calls nothing upstream but would publish its answer there.
		for _, subj := range discoverySubjects {
			if err := h.nc.PublishRequest(subj, tc.reply, nil); err != nil {
				t.Fatalf("%s reply %q: %v", subj, tc.reply, err)
			}
		}
	}
	for _, subj := range discoverySubjects {
		if _, err := h.nc.Request(subj, nil, 5*time.Second); err != nil {
			t.Fatalf("%s with an inbox: %v", subj, err)
		}
	}
	// A request with an inbox on each endpoint after them: the subscription handles its requests in
	// order, so once these are answered the ones before were handled.
	for _, op := range []string{"orders.delete", "orders.get", "orders.list", "orders.create", "tracking.report"} {
		if r := h.request(op, `{"unknown":1}`); r.code != 400 {
			t.Fatalf("%s: %d %s", op, r.code, r.desc)
		}
	}
	if n := h.calls.n.Load() - calls; n != 0 {
		t.Errorf("%d upstream calls for requests without an inbox", n)
	}
	perReply := 5 + len(discoverySubjects)
	if got, want := h.obs.refusals(service.RefusedReplyNotInbox), 10*perReply; got != want {
		t.Errorf("refused as reply_not_inbox: %d, want %d", got, want)
	}
	if got, want := h.obs.refusals(service.RefusedReplyInvalid), 7*perReply; got != want {
		t.Errorf("refused as reply_invalid: %d, want %d", got, want)
	}
	for {
		m, err := seen.NextMsg(200 * time.Millisecond)
		if err != nil {
			break
		}
		if !strings.HasPrefix(m.Subject, "tracking.api.") && !strings.HasPrefix(m.Subject, "$SRV.") && !strings.HasPrefix(m.Subject, "_INBOX.") {
			t.Errorf("the service published on %s: %q", m.Subject, m.Data)
		}
	}
	h.ok("orders.get", body) // the order is still there

	// The configured per-user prefix is answered; only the reply subjects under it.
	inbox := "_INBOX_alice." + nats.NewInbox()[len("_INBOX."):]
	sub, err := h.nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.nc.PublishRequest("tracking.api.orders.get", inbox, []byte(body)); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(5 * time.Second); err != nil || m.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Errorf("request with the reply prefix _INBOX_alice.: %v %v", m, err)
	}
}

// TestNoReplySubject: a publish (no reply subject) is not sent upstream, is counted, and is logged once
// however many arrive; a second reason gets a line of its own.
func TestNoReplySubject(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	for range 20 {
		if err := h.nc.Publish("tracking.api.orders.create", []byte(order("T", "R"))); err != nil {
			t.Fatal(err)
		}
	}
	if r := h.request("orders.create", `{}`); r.code != 400 { // after the publishes on the same subscription
		t.Fatalf("orders.create {}: %d %s", r.code, r.desc)
	}
	if n := h.calls.n.Load(); n != 0 {
		t.Errorf("%d upstream calls, want none", n)
	}
	if n := h.obs.refusals(service.RefusedNoReply); n != 20 {
		t.Errorf("refused as no_reply: %d, want 20", n)
	}
	if n := h.logs.Count(slog.LevelWarn, dropMessage); n != 1 {
		t.Errorf("%d log lines for 20 publishes, want 1:\n%s", n, h.logs)
	}
	if v, _ := h.logs.Attr(dropMessage, "reason"); v.String() != service.RefusedNoReply {
		t.Errorf("reason %v", v)
	}

	for range 5 {
		if err := h.nc.PublishRequest("tracking.api.orders.create", "$KV.TRACKING_LEASES.events", nil); err != nil {
			t.Fatal(err)
		}
	}
	h.request("orders.create", `{}`)
	if n := h.logs.Count(slog.LevelWarn, dropMessage); n != 2 {
		t.Errorf("%d log lines after a second reason, want 2:\n%s", n, h.logs)
	}
}

// TestDisabledEndpoint: an endpoint left out of Config.Endpoints has no subscription: its callers get
// no responders, and discovery does not list it.
func TestDisabledEndpoint(t *testing.T) {
	t.Parallel()
	h := start(t, options{svc: func(c *service.Config) { c.Endpoints = []string{"orders.list", "orders.get"} }})
	h.ok("orders.list", ``)
	for _, op := range []string{"orders.delete", "orders.create", "orders.update", "tracking.report", "locations.search"} {
		_, err := h.nc.Request("tracking.api."+op, []byte(`{"id":"BO-1"}`), 5*time.Second)
		if !errors.Is(err, nats.ErrNoResponders) {
			t.Errorf("%s: %v, want no responders", op, err)
		}
	}
	info := h.control(micro.InfoVerb)
	if !bytes.Contains(info, []byte(`"tracking.api.orders.get"`)) || bytes.Contains(info, []byte("orders.delete")) {
		t.Errorf("info: %s", info)
	}
	if n := h.calls.n.Load(); n != 1 {
		t.Errorf("%d upstream calls, want 1", n)
	}
}

// TestUnknownEndpointConfig: Run refuses a Config naming an endpoint that does not exist.
func TestUnknownEndpointConfig(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	s := service.New(ns.Connect(), nil, service.Config{Prefix: "tracking", Endpoints: []string{"orders.fetch"},
		ReplyPrefixes: []string{"_INBOX.>"}})
	err := s.Run(t.Context())
	if err == nil || !strings.Contains(err.Error(), `"orders.fetch"`) || !strings.Contains(err.Error(), `"_INBOX.>"`) {
		t.Errorf("Run: %v", err)
	}
}

// TestBodyBound: a body of exactly the bound is read; one byte more is refused 400 (docs/api.md#replies:
// refused before calling the upstream) before it is parsed, with a message naming the size and the bound, and
// without an upstream call.
func TestBodyBound(t *testing.T) {
	t.Parallel()
	const bound = 1024
	h := start(t, options{svc: func(c *service.Config) { c.MaxBody = bound }})
	at := "{}" + strings.Repeat(" ", bound-2)
	h.ok("orders.list", at)
	calls := h.calls.n.Load()
	for _, op := range service.EndpointNames() {
		r := h.request(op, at+" ")
		if r.code != 400 || !strings.Contains(r.desc, "1025 bytes, more than the limit of 1024 bytes") {
			t.Errorf("%s one byte past the bound: %d %q, want 400", op, r.code, r.desc)
		}
		r.messages(t)
		if h.obs.last(op) != 400 {
			t.Errorf("%s observed %d", op, h.obs.last(op))
		}
	}
	if n := h.calls.n.Load() - calls; n != 0 {
		t.Errorf("%d upstream calls past the bound", n)
	}

	// Under the default bound, an endpoint whose request is a few members has its own.
	h = start(t, options{})
	at = "{}" + strings.Repeat(" ", service.MaxEnvelopeBytes-2)
	h.ok("orders.list", at)
	if r := h.request("orders.list", at+" "); r.code != 400 || !strings.Contains(r.desc, "16385 bytes, more than the limit of 16384 bytes for orders.list") {
		t.Errorf("orders.list one byte past its bound: %d %q, want 400", r.code, r.desc)
	}
}

// TestHostileBodies: a body of hundreds of kilobytes of unknown members gets a 400 naming the bound under the
// default bound (an endpoint whose request is a few members has a far smaller one), and, under a bound that
// lets it in, a short 400 listing validate.MaxProblems problems and a count of the rest: never a reply beyond
// max_payload, never silence.
func TestHostileBodies(t *testing.T) {
	t.Parallel()
	hostile := func(size int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := 0; b.Len() < size-16; i++ {
			fmt.Fprintf(&b, `"m%06d":0,`, i)
		}
		b.WriteString(`"id":"x"}`)
		return b.String()
	}
	big, small := hostile(900_000), hostile(service.MaxEnvelopeBytes)

	h := start(t, options{})
	if r := h.request("orders.update", big); r.code != 400 || !strings.Contains(r.desc, "limit of 262144 bytes") {
		t.Errorf("900 KB under the default bound: %d %q, want 400", r.code, r.desc)
	}

	h = start(t, options{svc: func(c *service.Config) { c.MaxBody = 1 << 20 }})
	for _, op := range service.Operations {
		body := big
		if op.MaxBody != 0 {
			r := h.request(op.Name, big)
			if want := fmt.Sprintf("limit of %d bytes for %s", service.MaxEnvelopeBytes, op.Name); r.code != 400 || !strings.Contains(r.desc, want) {
				t.Errorf("%s: %d %q, want 400 with %q", op.Name, r.code, r.desc, want)
			}
			body = small
		}
		begin := time.Now()
		r := h.request(op.Name, body)
		if r.code != 400 {
			t.Errorf("%s: %d %q, want 400", op.Name, r.code, r.desc)
			continue
		}
		msgs := r.messages(t)
		if len(msgs) > 51 || len(r.msg.Data) > 16<<10 || len(r.desc) > 2<<10 {
			t.Errorf("%s: %d messages, %d bytes, description %d bytes", op.Name, len(msgs), len(r.msg.Data), len(r.desc))
		}
		// A booking order may have members the document does not name, and a report's size is bound first.
		if op.Name != "orders.create" && op.Name != "tracking.report" && !strings.HasPrefix(msgs[len(msgs)-1], "and ") {
			t.Errorf("%s: last message %q, want a count of the rest", op.Name, msgs[len(msgs)-1])
		}
		t.Logf("%s: %d bytes: %d messages, %d bytes, in %v", op.Name, len(body), len(msgs), len(r.msg.Data), time.Since(begin))
	}
	if n := h.calls.n.Load(); n != 0 {
		t.Errorf("%d upstream calls", n)
	}
}

// TestCallerHeaders: every header the service reads is checked before anything reaches HTTP: a
// control character, a value far too long, or a header given twice is a 400 quoting the value cut short,
// and the upstream is not called.
func TestCallerHeaders(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	tracked := h.up.Sim().TrackedOrders("demo")[0]
	report := fmt.Sprintf(`{"order":{"orderId":%q,"positionId":%q},"event":{"timestamp":"2026-01-02T03:04:05Z","type":"GATE_IN"}}`,
		tracked.OrderID, tracked.PositionID)
	long := strings.Repeat("k", 100<<10)
	for _, tc := range []struct {
		name, op, body string
		hdr            nats.Header
		want           string
	}{
		{"key with a control character", "tracking.report", report,
			nats.Header{"Idempotency-Key": {"k\x01"}}, `the Idempotency-Key header "k\x01" (2 bytes) must be 1 to 256 printable ASCII characters, without a space at either end`},
		{"key of 100 KB", "tracking.report", report,
			nats.Header{"Idempotency-Key": {long}}, "(102400 bytes) must be 1 to 256"},
		{"key of 257 bytes", "tracking.report", report,
			nats.Header{"Idempotency-Key": {long[:257]}}, "(257 bytes)"},
		{"key not ASCII", "tracking.report", report,
			nats.Header{"Idempotency-Key": {"clé"}}, "printable ASCII"},
		{"key twice", "tracking.report", report,
			nats.Header{"Idempotency-Key": {"a", "b"}}, "the Idempotency-Key header is given 2 times"},
		{"key on another endpoint", "orders.list", ``,
			nats.Header{"Idempotency-Key": {"k\x00"}}, "Idempotency-Key"},
		{"timeout of 100 KB", "orders.list", ``,
			nats.Header{"Bridge-Timeout": {long}}, "is 102400 bytes long"},
		{"timeout with a control character", "orders.list", ``,
			nats.Header{"Bridge-Timeout": {"2s\x00"}}, `"2s\x00" is not a duration`},
		{"timeout twice", "orders.list", ``,
			nats.Header{"Bridge-Timeout": {"1s", "2s"}}, "given 2 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := nats.NewMsg("tracking.api." + tc.op)
			m.Data, m.Header = []byte(tc.body), tc.hdr
			resp, err := h.nc.RequestMsg(m, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			r := reply{msg: resp, desc: resp.Header.Get(micro.ErrorHeader)}
			if code := resp.Header.Get(micro.ErrorCodeHeader); code != "400" || !strings.Contains(r.desc, tc.want) {
				t.Errorf("%s %q, want 400 with %q", code, r.desc, tc.want)
			}
			if len(r.desc) > 300 || len(resp.Data) > 1024 {
				t.Errorf("the refusal is %d + %d bytes: the value is not cut short", len(r.desc), len(resp.Data))
			}
			r.messages(t)
		})
	}
	if n := h.calls.n.Load(); n != 0 {
		t.Errorf("%d upstream calls", n)
	}
	// A good key still goes upstream.
	if r := h.request("tracking.report", report, "Idempotency-Key", "k-"+strings.Repeat("x", 254)); r.code != 0 {
		t.Errorf("a key of 256 bytes: %d %s", r.code, r.desc)
	}
}

// auditLine returns the attributes of the audit lines logged so far, one map per line, groups
// flattened as "caller.account".
func auditLines(logs *testutil.Logs) []map[string]string {
	var out []map[string]string
	for _, r := range logs.Records() {
		if r.Message != service.AuditMessage {
			continue
		}
		m := map[string]string{"level": r.Level.String()}
		var add func(prefix string, a slog.Attr)
		add = func(prefix string, a slog.Attr) {
			if a.Value.Kind() == slog.KindGroup {
				for _, g := range a.Value.Group() {
					add(prefix+a.Key+".", g)
				}
				return
			}
			m[prefix+a.Key] = a.Value.String()
		}
		r.Attrs(func(a slog.Attr) bool { add("", a); return true })
		out = append(out, m)
	}
	return out
}

// TestAudit: every create, update, delete and report through the API is logged at info as one line
// with the endpoint, the order id, the upstream's status, the reply prefix and the Nats-Request-Info a
// caller of the same account wrote, as caller_claimed (only NATS's own, on a service import, is the
// caller: TestAuditCallerAcrossAccounts); reads are not.
func TestAudit(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	id := h.create("AUDIT")
	info := `{"acc":"CALLER","rtt":1000,"user":"alice","name":"erp\u0007` + strings.Repeat("n", 300) + `"}`
	h.ok("orders.update", `{"id":"`+id+`","order":`+order(h.terminal(), "AUDIT-2")+`}`, service.RequestInfoHeader, info)
	h.ok("orders.get", `{"id":"`+id+`"}`)
	h.ok("orders.delete", `{"id":"`+id+`"}`)
	if r := h.request("orders.delete", `{"id":"`+id+`"}`, service.RequestInfoHeader, `{not json`); r.code == 0 {
		t.Fatal("a second delete succeeded")
	}
	tracked := h.up.Sim().TrackedOrders("demo")[0]
	h.ok("tracking.report", fmt.Sprintf(`{"order":{"orderId":%q,"positionId":%q},"event":{"timestamp":"2026-01-02T03:04:05Z","type":"GATE_IN"}}`,
		tracked.OrderID, tracked.PositionID), "Idempotency-Key", "k-audit", service.RequestInfoHeader, strings.Repeat("x", 20<<10))

	lines := auditLines(h.logs)
	want := []map[string]string{
		{"endpoint": "orders.create", "order_id": id, "status": "201", "answered": "true", "reply_prefix": "_INBOX."},
		{"endpoint": "orders.update", "order_id": id, "status": "200", "caller_claimed.account": "CALLER", "caller_claimed.user": "alice",
			"caller_claimed.name": "erp" + strings.Repeat("n", 125) + "…"},
		{"endpoint": "orders.delete", "order_id": id, "status": "200"},
		{"endpoint": "orders.delete", "order_id": id, "caller_claimed.unreadable": "{not json", "err": ""},
		{"endpoint": "tracking.report", "order_id": tracked.OrderID, "status": "202", "idempotency_key": "k-audit",
			"caller_claimed.unreadable": "20480 bytes"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d audit lines, want %d:\n%s", len(lines), len(want), h.logs)
	}
	for i, w := range want {
		if lines[i]["level"] != "INFO" {
			t.Errorf("line %d at %s", i, lines[i]["level"])
		}
		for k, v := range w {
			got, ok := lines[i][k]
			if !ok || (v != "" && got != v) {
				t.Errorf("line %d: %s = %q (present %v), want %q\n%v", i, k, got, ok, v, lines[i])
			}
		}
	}
	for i, l := range lines {
		if _, ok := l["caller.account"]; ok {
			t.Errorf("line %d: a caller named on a request that did not come through a service import: %v", i, l)
		}
	}
	if _, ok := lines[0]["caller_claimed.account"]; ok {
		t.Errorf("a caller on a request without Nats-Request-Info: %v", lines[0])
	}
	if s := lines[3]["status"]; s != "403" && s != "404" && s != "409" {
		t.Errorf("second delete status %s", s)
	}
}

// TestAuditCallerAcrossAccounts: where callers import the API from the bridge's account, the server sets
// Nats-Request-Info itself, over whatever the caller sent, and the audit line names the caller's account
// and user. The request arrives with a reply subject under _R_., the server's own for replies across
// accounts: it is answered whatever the configured reply prefixes.
func TestAuditCallerAcrossAccounts(t *testing.T) {
	t.Parallel()
	conf := filepath.Join(t.TempDir(), "accounts.conf")
	if err := os.WriteFile(conf, []byte(`
accounts: {
  BRIDGE: {
    users: [{user: bridge, password: b}]
    exports: [{service: "tracking.api.>"}]
  }
  CALLER: {
    users: [{user: alice, password: a}]
    imports: [{service: {account: BRIDGE, subject: "tracking.api.>"}, share: true}]
  }
}
no_auth_user: bridge
`), 0o600); err != nil {
		t.Fatal(err)
	}
	accounts := func(o *server.Options) {
		p, err := server.ProcessConfigFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		o.Accounts, o.Users, o.NoAuthUser = p.Accounts, p.Users, p.NoAuthUser
		o.JetStream = false
	}
	for _, tc := range []struct {
		name     string
		prefixes []string
	}{
		{"the default inbox prefix", nil},
		{"a caller's inbox prefix only", []string{"_INBOX.erp."}},
		{"_R_. configured as well", []string{"_INBOX.", "_R_."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, options{nats: accounts, svc: func(c *service.Config) { c.ReplyPrefixes = tc.prefixes }})
			alice, err := nats.Connect(h.ns.URL(), nats.UserInfo("alice", "a"), nats.Name("erp"))
			if err != nil {
				t.Fatal(err)
			}
			defer alice.Close()
			m := nats.NewMsg("tracking.api.orders.delete")
			m.Data = []byte(`{"id":"BO-404"}`)
			m.Header.Set(service.RequestInfoHeader, `{"acc":"FORGED","user":"mallory"}`)
			resp, err := alice.RequestMsg(m, 2*time.Second)
			if err != nil || resp.Header.Get(micro.ErrorCodeHeader) == "" {
				t.Fatalf("delete of an unknown order: %v %v", resp, err)
			}
			lines := auditLines(h.logs)
			if len(lines) != 1 || lines[0]["caller.account"] != "CALLER" || lines[0]["caller.user"] != "alice" ||
				lines[0]["caller.name"] != "erp" || lines[0]["reply_prefix"] != "_R_." {
				t.Errorf("audit: %v", lines)
			}

			// A client cannot pass for an import: the server refuses a client's publish whose reply
			// subject is under _R_., so a forged Nats-Request-Info never reaches the bridge as NATS's
			// own. The same client's next request, with an inbox, is answered and claims only.
			refused := make(chan error, 1)
			mallory, err := nats.Connect(h.ns.URL(), nats.CustomInboxPrefix("_INBOX.erp"), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
				select {
				case refused <- err:
				default:
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer mallory.Close()
			forged := nats.NewMsg("tracking.api.orders.delete")
			forged.Data = []byte(`{"id":"BO-405"}`)
			forged.Reply = "_R_.forged.x1"
			forged.Header.Set(service.RequestInfoHeader, `{"acc":"FORGED","user":"mallory"}`)
			if err := mallory.PublishMsg(forged); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-refused:
				if !strings.Contains(err.Error(), "_R_.forged.x1") {
					t.Errorf("the server's refusal: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Error("the server did not refuse a client's _R_. reply subject")
			}
			forged.Reply = ""
			if resp, err := mallory.RequestMsg(forged, 2*time.Second); err != nil || resp.Header.Get(micro.ErrorCodeHeader) == "" {
				t.Fatalf("delete of an unknown order from an inbox: %v %v", resp, err)
			}
			lines = auditLines(h.logs)
			if len(lines) != 2 || lines[1]["caller_claimed.account"] != "FORGED" || lines[1]["caller.account"] != "" {
				t.Errorf("audit after a forged import: %v", lines)
			}
		})
	}
}

// TestOwnInboxes: a reply subject under the service connection's own inbox prefix is refused when that
// prefix lies within a reply prefix (the bridge's JetStream acknowledgements arrive there), and only
// then: per-user reply prefixes beside nats.go's default inbox prefix answer their callers.
func TestOwnInboxes(t *testing.T) {
	t.Parallel()
	answered := func(t *testing.T, h *harness, reply string) bool {
		t.Helper()
		sub, err := h.nc.SubscribeSync(reply)
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
		if err := h.nc.PublishRequest("tracking.api.orders.list", reply, nil); err != nil {
			t.Fatal(err)
		}
		_, err = sub.NextMsg(2 * time.Second)
		return err == nil
	}
	t.Run("own prefix within a reply prefix", func(t *testing.T) {
		h := start(t, options{inbox: "_INBOX.bridge"})
		if answered(t, h, "_INBOX.bridge.x1") {
			t.Error("answered on the bridge's own inbox")
		}
		if !answered(t, h, "_INBOX.caller.x1") {
			t.Error("a caller's inbox under _INBOX. not answered")
		}
		if n := h.obs.refusals(service.RefusedReplyNotInbox); n != 1 {
			t.Errorf("%d refusals, want 1", n)
		}
	})
	t.Run("per-user prefixes beside the default inbox prefix", func(t *testing.T) {
		h := start(t, options{svc: func(c *service.Config) { c.ReplyPrefixes = []string{"_INBOX.api-writer."} }})
		if !answered(t, h, "_INBOX.api-writer.x1") {
			t.Error("the api-writer's inbox not answered")
		}
		if answered(t, h, "_INBOX.other.x1") {
			t.Error("answered outside the configured prefix")
		}
	})
}

// TestLastErrorKeepsUpstreamOut: the last error that discovery's STATS shows anyone allowed to ask
// carries the bridge's words, not the upstream's messages (which may name another caller's order).
func TestLastErrorKeepsUpstreamOut(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	if r := h.request("orders.get", `{"id":"BO-confidential-4711"}`); r.code != 404 {
		t.Fatalf("%d %s", r.code, r.desc)
	}
	stats := string(h.control(micro.StatsVerb))
	if strings.Contains(stats, "confidential") || !strings.Contains(stats, "404:the upstream answered HTTP 404") {
		t.Errorf("STATS: %s", stats)
	}
}
