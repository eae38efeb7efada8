package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/lease"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// The accounts tests run the bridge and its example clients with the shipped NATS configuration
// (deploy/nats/nats-server.conf and the accounts it includes) and attack the bridge's account from the
// clients' accounts. Their helpers carry an "acc" prefix.

// accReaderAPIPrefix is the JetStream API prefix under which the events reader's account imports its
// consumer's subjects.
const accReaderAPIPrefix = "JS.tracking.API"

// accTargets are reply subjects a client aims at the bridge's account: every fence subject, the lease
// key, an event and a dead letter subject, the bridge's inboxes and a plain inbox.
func accTargets() []string {
	out := []string{"$KV.TRACKING_LEASES." + lease.DefaultKey, "tracking.events.GATE_IN", "tracking.dlq.events",
		"tracking.dlq.reports", "tracking.leader.restart", "_INBOX_bridge.x", "_INBOX.x"}
	for i := range 1024 {
		out = append(out, fmt.Sprintf("tracking.leader.%d", i))
	}
	return out
}

// accFootprints watches, as secAdmin, the bridge's account for what JetStream writes on a client's behalf:
// its acknowledgements, API answers and status messages on the bridge's subjects, and anything at all on
// the fence subjects and on the two inboxes of accTargets. The bridge's own writes there (events, its
// lease renewals, dead letters) carry none of it.
type accFootprints struct {
	mu   sync.Mutex
	seen []string
}

func accWatch(t *testing.T, url string) *accFootprints {
	t.Helper()
	admin, err := nats.Connect(url, secAdmin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	f := &accFootprints{}
	record := func(m *nats.Msg) {
		f.mu.Lock()
		f.seen = append(f.seen, fmt.Sprintf("%s %v: %.100q", m.Subject, m.Header, m.Data))
		f.mu.Unlock()
	}
	for _, subj := range []string{"tracking.>", "$KV.>"} {
		if _, err := admin.Subscribe(subj, func(m *nats.Msg) {
			empty := len(m.Data) == 0 && m.Header.Get("KV-Operation") == "" // not a lease release
			if empty || m.Header.Get("Status") != "" || bytes.Contains(m.Data, []byte(`"stream":"`)) ||
				bytes.Contains(m.Data, []byte("io.nats.jetstream.api")) {
				record(m)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, subj := range []string{"tracking.leader.>", "_INBOX_bridge.x", "_INBOX.x"} {
		if _, err := admin.Subscribe(subj, record); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	return f
}

// check fails the test for everything seen (after a round trip, so that what was on its way arrives).
func (f *accFootprints) check(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url, secAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.Flush()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) > 0 {
		t.Errorf("%d messages written in the bridge's account on a client's behalf, e.g.:\n%s", len(f.seen),
			strings.Join(f.seen[:min(len(f.seen), 10)], "\n"))
	}
}

// accLeading starts a bridge as the shipped tracking-bridge user and waits until it leads.
func accLeading(t *testing.T, ns *testutil.NATS, up *simtest.Upstream, set ...func(*config.Config)) *opsBridge {
	t.Helper()
	cfg := up.Config(ns.URL(), secBridgeUser, func(c *config.Config) {
		// A lease a busy machine's pauses do not end: these tests check that the leader is never disturbed.
		c.LeaseTTL = 6 * time.Second
	})
	for _, f := range set {
		f(cfg)
	}
	ob := opsStartBridge(t, cfg)
	ob.waitReady(t, 60*time.Second, http.StatusOK, append(allReady, "report_consumer: ok")...)
	testutil.EventuallyState(t, 30*time.Second, "leading", func() (bool, string) {
		st := ob.status(t)
		return st.Role == "leader", st.Role
	})
	return ob
}

// accStillLeading checks that the bridge leads on, was never fenced out, and its events keep flowing.
func accStillLeading(t *testing.T, ns *testutil.NATS, ob *opsBridge) {
	t.Helper()
	before := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", secAdmin)
	testutil.EventuallyState(t, 30*time.Second, "events still flowing", func() (bool, string) {
		n := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS", secAdmin)
		return n > before+10, fmt.Sprintf("%d, before %d", n, before)
	})
	if st := ob.status(t); st.Role != "leader" {
		t.Errorf("role %q, want leader", st.Role)
	}
	logs := ob.logs.String()
	if strings.Contains(logs, "stopped leading") || strings.Contains(strings.ToLower(logs), "permission") {
		t.Errorf("the leader was disturbed:\n%s", logs)
	}
}

// TestAccountsReportProducerReplies: the report producer, in its own account, publishes reports through
// JetStream with reply subjects aimed at every fence subject of the bridge, its lease key, an event and a
// dead-letter subject and the bridge's inboxes (an outside review stopped a single-account set-up's leader
// for 26 s this way). NATS writes JetStream's acknowledgements to those subjects in the producer's own
// account, where it receives them; nothing reaches the bridge's account (replies under _R_. and $JS.ACK.
// are refused outright); the reports reach the upstream, and the leader leads on with its events flowing.
func TestAccountsReportProducerReplies(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{EventRate: 50})
	ob := accLeading(t, ns, up)
	watch := accWatch(t, ns.URL())

	producer, err := nats.Connect(ns.URL(), append(secClient("report-producer"),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	var acks sync.Map // subject -> the acknowledgement received there, in the producer's account
	targets := accTargets()
	for _, subj := range []string{"tracking.>", "$KV.>", "_INBOX_bridge.>", "_INBOX.x"} {
		if _, err := producer.Subscribe(subj, func(m *nats.Msg) {
			if bytes.Contains(m.Data, []byte(`"stream":"TRACKING_REPORTS"`)) {
				acks.Store(m.Subject, true)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	// One report a target group: the fence subjects share one (its repeats are duplicates JetStream
	// acknowledges all the same), each other target has its own.
	ids := map[string]bool{}
	for i, reply := range targets {
		id := "accounts-fence"
		if !strings.HasPrefix(reply, "tracking.leader.") || reply == "tracking.leader.restart" {
			id = fmt.Sprintf("accounts-%d", i)
		}
		ids[id] = true
		m := &nats.Msg{Subject: "tracking.reports", Reply: reply, Data: opsReport(up, i), Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, id)
		if err := producer.PublishMsg(m); err != nil {
			t.Fatalf("report with reply %s: %v", reply, err)
		}
	}
	// Replies NATS keeps for itself are refused, not forwarded.
	for _, reply := range []string{"_R_.x.y", "$JS.ACK.TRACKING_REPORTS.tracking-bridge-reports.1.1.1.1.0"} {
		_ = producer.PublishRequest("tracking.reports", reply, opsReport(up, 99))
	}
	if err := producer.Flush(); err != nil {
		t.Fatal(err)
	}

	// The producer's own acknowledgements still arrive, on its inbox and on every subject it named.
	js, _ := jetstream.New(producer)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if ack, err := js.Publish(ctx, "tracking.reports", opsReport(up, 100), jetstream.WithMsgID("accounts-inbox")); err != nil || ack.Stream != "TRACKING_REPORTS" {
		t.Fatalf("a report acknowledged on the producer's inbox: %v %v", ack, err)
	}
	reports := len(ids) + 1
	testutil.EventuallyState(t, 60*time.Second, "the reports delivered upstream", func() (bool, string) {
		n := len(up.Sim().Reports("demo"))
		return n == reports, fmt.Sprintf("%d of %d", n, reports)
	})

	accStillLeading(t, ns, ob)
	watch.check(t, ns.URL())
	if d := opsStreamMsgs(t, ns.URL(), "TRACKING_DLQ", secAdmin); d != 0 {
		t.Errorf("%d dead letters", d)
	}
	testutil.EventuallyState(t, 30*time.Second, "an acknowledgement on every subject the producer named", func() (bool, string) {
		n := 0
		acks.Range(func(any, any) bool { n++; return true })
		return n == len(targets), fmt.Sprintf("%d of %d", n, len(targets))
	})
}

// TestAccountsEventsReader: the events reader, in its own account, reads the events through the durable
// consumer an operator created in the bridge's account with the bridge's own credentials (as
// docs/operations.md shows), with package tracking bound to it under the imported API prefix: it fetches
// and acknowledges, and a restarted reader resumes after what it acknowledged. It also sees the events live
// on tracking.events.>. It cannot create, change or delete a consumer, nor read another stream; and its
// fetches, lookups and acknowledgements with reply subjects aimed at the bridge's subjects write nothing in
// the bridge's account.
func TestAccountsEventsReader(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{EventRate: 50})
	ob := accLeading(t, ns, up)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()

	// The operator's step, with the bridge's credentials.
	opNC, err := nats.Connect(ns.URL(), nats.UserInfo("tracking-bridge", secNATSPassword), nats.CustomInboxPrefix("_INBOX_bridge"))
	if err != nil {
		t.Fatal(err)
	}
	defer opNC.Close()
	opJS, _ := jetstream.New(opNC)
	if _, err := opJS.CreateConsumer(ctx, "TRACKING_EVENTS", jetstream.ConsumerConfig{Durable: "events-reader",
		FilterSubject: "tracking.events.>", AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait: 2 * time.Second}); err != nil {
		t.Fatalf("creating the reader's durable with the bridge's credentials: %v", err)
	}
	adminNC, err := nats.Connect(ns.URL(), secAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer adminNC.Close()
	adminJS, _ := jetstream.New(adminNC)
	if _, err := adminJS.CreateConsumer(ctx, "TRACKING_EVENTS", jetstream.ConsumerConfig{Durable: "billing",
		FilterSubject: "tracking.events.>", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	watch := accWatch(t, ns.URL())

	connect := func() (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect(ns.URL(), append(secClient("events-reader"),
			nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
		if err != nil {
			t.Fatal(err)
		}
		js, err := jetstream.NewWithAPIPrefix(nc, accReaderAPIPrefix)
		if err != nil {
			t.Fatal(err)
		}
		return nc, js
	}
	bind := func(js jetstream.JetStream) *tracking.EventConsumer {
		c, err := tracking.NewEventConsumer(ctx, js, tracking.EventConsumerConfig{Bind: true,
			Consumer: jetstream.ConsumerConfig{Durable: "events-reader"}})
		if err != nil {
			t.Fatalf("binding to the reader's durable across accounts: %v", err)
		}
		return c
	}

	// Read and acknowledge ten events, then stop.
	nc, js := connect()
	live, err := nc.SubscribeSync("tracking.events.>")
	if err != nil {
		t.Fatal(err)
	}
	c := bind(js)
	acked := map[uint64]bool{}
	var last uint64 // the stream sequence of the last event acknowledged
	for range 10 {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("reading an event: %v", err)
		}
		md, err := ev.Msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if err := ev.Msg.DoubleAck(ctx); err != nil {
			t.Fatalf("acknowledging event %s: %v", ev.ID, err)
		}
		acked[md.Sequence.Stream], last = true, md.Sequence.Stream
	}
	c.Stop()
	if m, err := live.NextMsg(testutil.Scale(5 * time.Second)); err != nil || !strings.HasPrefix(m.Subject, "tracking.events.") {
		t.Errorf("the live events: %v %v", m, err)
	}
	nc.Close()

	// A new reader resumes after the last acknowledged event: none of those comes again, and the one
	// after them does (fetched ahead and not acknowledged, it comes again after the consumer's AckWait).
	nc, js = connect()
	defer nc.Close()
	c = bind(js)
	info, err := c.Consumer().Info(ctx)
	if err != nil || info.AckFloor.Stream < last {
		t.Fatalf("the durable's ack floor: %v %v, want at least stream sequence %d", info, err, last)
	}
	var after []uint64
	for !slices.Contains(after, last+1) {
		ev, err := c.Next(ctx)
		if err != nil {
			t.Fatalf("reading after the restart (got stream sequences %v, want %d among them): %v", after, last+1, err)
		}
		md, _ := ev.Msg.Metadata()
		if acked[md.Sequence.Stream] {
			t.Fatalf("event at stream sequence %d delivered again after it was acknowledged", md.Sequence.Stream)
		}
		after = append(after, md.Sequence.Stream)
		_ = ev.Msg.Ack()
	}
	c.Stop()

	// What the reader cannot do: JetStream's API of the bridge's account is not there for it.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }
	sctx, scancel := short()
	defer scancel()
	for name, cfg := range map[string]jetstream.ConsumerConfig{
		"a pull consumer":                       {Durable: "mine", AckPolicy: jetstream.AckExplicitPolicy},
		"a push consumer onto the fence":        {Durable: "fence", DeliverSubject: "tracking.leader.9"},
		"a replacement of the reader's durable": {Durable: "events-reader", FilterSubject: "tracking.events.GATE_IN", AckPolicy: jetstream.AckExplicitPolicy},
		"a replacement of another's durable":    {Durable: "billing", FilterSubject: "tracking.events.GATE_IN", AckPolicy: jetstream.AckExplicitPolicy},
	} {
		if _, err := js.CreateOrUpdateConsumer(sctx, "TRACKING_EVENTS", cfg); err == nil {
			t.Errorf("the reader created %s", name)
		}
	}
	if err := js.DeleteConsumer(sctx, "TRACKING_EVENTS", "billing"); err == nil {
		t.Error("the reader deleted another reader's consumer")
	}
	if _, err := js.Consumer(sctx, "TRACKING_EVENTS", "billing"); err == nil {
		t.Error("the reader looked up another reader's consumer")
	}
	if _, err := js.Stream(sctx, "TRACKING_REPORTS"); err == nil {
		t.Error("the reader looked up the reports stream")
	}
	plain, _ := jetstream.New(nc)
	if _, err := plain.CreateOrUpdateConsumer(sctx, "TRACKING_EVENTS", jetstream.ConsumerConfig{Durable: "fence", DeliverSubject: "tracking.leader.9"}); err == nil {
		t.Error("the reader created a consumer through $JS.API")
	}

	// Its own subjects, with reply subjects aimed at the bridge's: NATS writes the answers in the
	// reader's account.
	next := accReaderAPIPrefix + ".CONSUMER.MSG.NEXT.TRACKING_EVENTS.events-reader"
	infoSubj := accReaderAPIPrefix + ".CONSUMER.INFO.TRACKING_EVENTS.events-reader"
	for _, reply := range accTargets()[:12] {
		for _, req := range []struct{ subj, body string }{
			{next, `{"batch":1,"no_wait":true}`}, {next, `{"batch":1,"expires":100000000}`}, {infoSubj, ""},
		} {
			if err := nc.PublishRequest(req.subj, reply, []byte(req.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	ev, err := c.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ev.Msg.Ack(); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest(ev.Msg.Reply(), "tracking.leader.3", nil); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c.Stop()

	accStillLeading(t, ns, ob)
	watch.check(t, ns.URL())
	infos, err := adminJS.Stream(ctx, "TRACKING_EVENTS")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for ci := range infos.ListConsumers(ctx).Info() {
		names = append(names, ci.Name)
	}
	if len(names) < 2 || !strings.Contains(strings.Join(names, ","), "billing") {
		t.Errorf("consumers on TRACKING_EVENTS: %q", names)
	}
	for _, n := range names {
		if n == "mine" || n == "fence" {
			t.Errorf("the reader's consumer %q exists", n)
		}
	}
}

// TestAccountsAPICallers: api-reader and api-writer call the API through their accounts' service
// imports, whose replies NATS writes under _R_. in the bridge's account, and the bridge answers them with
// its default configuration; api-reader cannot reach the writing endpoints; both see the service with
// discovery; the audit line names the writer's account and user from Nats-Request-Info, whatever the
// caller claimed; and the bridge needs no permission it lacks.
func TestAccountsAPICallers(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Config(ns.URL(), secBridgeUser))
	ob.waitReady(t, 15*time.Second, http.StatusOK)

	connect := func(user string) *nats.Conn {
		nc, err := nats.Connect(ns.URL(), secClient(user)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	reader, writer := connect("api-reader"), connect("api-writer")
	for _, nc := range []*nats.Conn{reader, writer} {
		for _, subj := range []string{"tracking.api.orders.list", "tracking.api.locations.search"} {
			var m *nats.Msg
			testutil.EventuallyState(t, 30*time.Second, "an answer on "+subj, func() (bool, string) {
				var err error
				m, err = nc.Request(subj, []byte(`{}`), time.Second)
				return err == nil, fmt.Sprint(err)
			})
			if m.Header.Get(micro.ErrorCodeHeader) != "" {
				t.Errorf("%s: %v %q", subj, m.Header, m.Data)
			}
		}
		for _, subj := range []string{"$SRV.PING", "$SRV.INFO.tracking-bridge", "$SRV.STATS.tracking-bridge"} {
			m, err := nc.Request(subj, nil, testutil.Scale(5*time.Second))
			if err != nil || !bytes.Contains(m.Data, []byte(`"tracking-bridge"`)) {
				t.Errorf("%s: %v %v", subj, m, err)
			}
		}
	}
	for _, ep := range []string{"orders.create", "orders.update", "orders.delete", "tracking.report"} {
		if _, err := reader.Request("tracking.api."+ep, []byte(`{"id":"BO-1"}`), time.Second); err != nats.ErrNoResponders {
			t.Errorf("api-reader calling %s: %v, want no responders", ep, err)
		}
	}

	m := nats.NewMsg("tracking.api.orders.delete")
	m.Data = []byte(`{"id":"BO-404"}`)
	m.Header.Set("Nats-Request-Info", `{"acc":"FORGED","user":"mallory"}`)
	resp, err := writer.RequestMsg(m, 5*time.Second)
	if err != nil || resp.Header.Get(micro.ErrorCodeHeader) != "404" {
		t.Fatalf("api-writer deleting an unknown order: %v %v", resp, err)
	}
	var audit map[string]any
	testutil.EventuallyState(t, 30*time.Second, "the audit line", func() (bool, string) {
		for line := range strings.Lines(ob.logs.String()) {
			if strings.Contains(line, `"msg":"API audit"`) {
				return json.Unmarshal([]byte(line), &audit) == nil, line
			}
		}
		return false, ""
	})
	caller, _ := audit["caller"].(map[string]any)
	if audit["endpoint"] != "orders.delete" || audit["reply_prefix"] != "_R_." || caller["account"] != "API_WRITERS" ||
		caller["user"] != "api-writer" || caller["name"] != "api-writer" {
		t.Errorf("audit line: %v", audit)
	}
	if n := ob.counter(t, "bridge_api_requests_refused_total", map[string]string{"reason": "reply_not_inbox"}); n != 0 {
		t.Errorf("%v requests refused for their reply subject", n)
	}
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(ob.logs.String()), "permission") {
		t.Errorf("permission trouble in the bridge's log:\n%s", ob.logs)
	}
}

// TestAccountsUnitsReader: with the shipped accounts, the events reader reads the units view from its own
// account with the JetStream API prefix: a unit's latest event by direct get (what nats kv get does),
// and every change through the durable units-reader that an operator created with the bridge's
// credentials (what nats kv watch shows). It cannot write the bucket (put, delete, purge, a plain
// publish on its subject), create a consumer on it (nats kv watch's own), nor delete it; its requests
// with reply subjects aimed at the bridge's write nothing in the bridge's account. api-reader calls
// units.get and units.events through the bridge, which reads them with its own permissions.
func TestAccountsUnitsReader(t *testing.T) {
	t.Parallel()
	ns := secPermissionedNATS(t)
	up := simtest.Start(t, false, sim.Options{})
	ob := opsStartBridge(t, up.Config(ns.URL(), secBridgeUser))
	ob.waitReady(t, 15*time.Second, http.StatusOK)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	const bucket, unit = "TRACKING_UNITS", "MSKU1234567"

	// The view as the bridges build it: the bucket (when no bridge made it yet) and a unit's value.
	adminNC, err := nats.Connect(ns.URL(), secAdmin)
	if err != nil {
		t.Fatal(err)
	}
	defer adminNC.Close()
	adminJS, _ := jetstream.New(adminNC)
	kv, err := adminJS.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = adminJS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1})
	}
	if err != nil {
		t.Fatal(err)
	}
	put := func(id string) string {
		data := fmt.Sprintf(`{"id":%q,"type":"LOAD","timestamp":"2026-11-25T08:30:00Z","observation":{"observedLoadingUnit":{"loadingUnit":{"number":"MSKU 123456-7"}}}}`, id)
		m := nats.NewMsg("$KV." + bucket + "." + unit)
		m.Data = []byte(data)
		m.Header.Set("Tracking-Event-Id", id)
		m.Header.Set("Tracking-Unit", unit)
		if _, err := adminJS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
		return data
	}
	first := put("ev-1")
	event := nats.NewMsg("tracking.events.LOAD." + unit)
	event.Data = []byte(first)
	event.Header.Set(jetstream.MsgIDHeader, "ev-1")
	if _, err := adminJS.PublishMsg(ctx, event); err != nil {
		t.Fatal(err)
	}

	// The operator's step, with the bridge's credentials.
	opNC, err := nats.Connect(ns.URL(), nats.UserInfo("tracking-bridge", secNATSPassword), nats.CustomInboxPrefix("_INBOX_bridge"))
	if err != nil {
		t.Fatal(err)
	}
	defer opNC.Close()
	opJS, _ := jetstream.New(opNC)
	if _, err := opJS.CreateConsumer(ctx, "KV_"+bucket, jetstream.ConsumerConfig{Durable: "units-reader",
		FilterSubject: "$KV." + bucket + ".>", DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatalf("creating the units reader's durable with the bridge's credentials: %v", err)
	}
	watch := accWatch(t, ns.URL())

	nc, err := nats.Connect(ns.URL(), append(secClient("events-reader"), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.NewWithAPIPrefix(nc, accReaderAPIPrefix)
	if err != nil {
		t.Fatal(err)
	}

	// nats kv get: the bucket's lookup and a direct get.
	view, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatalf("looking up the bucket across accounts: %v", err)
	}
	e, err := view.Get(ctx, unit)
	if err != nil || string(e.Value()) != first {
		t.Fatalf("the unit's value across accounts: %v %v", e, err)
	}
	if _, err := view.Get(ctx, "NOSUCHUNIT"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a unit without a value: %v, want not found", err)
	}

	// The watch: the current value, then a change, through the durable.
	c, err := js.Consumer(ctx, "KV_"+bucket, "units-reader")
	if err != nil {
		t.Fatalf("binding to the units reader's durable across accounts: %v", err)
	}
	next := func(want string) {
		t.Helper()
		m, err := c.Next(jetstream.FetchMaxWait(testutil.Scale(10 * time.Second)))
		if err != nil || string(m.Data()) != want || m.Headers().Get("Tracking-Event-Id") == "" {
			t.Fatalf("watching: %v %v, want %s", m, err, want)
		}
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatalf("acknowledging: %v", err)
		}
	}
	next(first)
	second := put("ev-2")
	next(second)

	// Writing: refused or going nowhere; the value stays.
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }
	sctx, scancel := short()
	defer scancel()
	if _, err := view.Put(sctx, unit, []byte(`{"planted":true}`)); err == nil {
		t.Error("the reader put a value")
	}
	if err := view.Delete(sctx, unit); err == nil {
		t.Error("the reader deleted a unit")
	}
	if err := view.Purge(sctx, unit); err == nil {
		t.Error("the reader purged a unit")
	}
	if err := nc.Publish("$KV."+bucket+"."+unit, []byte(`{"planted":true}`)); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(sctx, bucket); err == nil {
		t.Error("the reader deleted the bucket")
	}
	if _, err := view.Watch(sctx, unit); err == nil {
		t.Error("the reader created a watch's consumer")
	}
	for name, cfg := range map[string]jetstream.ConsumerConfig{
		"a push consumer onto the fence": {Durable: "fence", DeliverSubject: "tracking.leader.9"},
		"a replacement of its durable":   {Durable: "units-reader", DeliverSubject: "tracking.leader.9"},
	} {
		if _, err := js.CreateOrUpdateConsumer(sctx, "KV_"+bucket, cfg); err == nil {
			t.Errorf("the reader created %s", name)
		}
	}
	// Its own subjects, with reply subjects aimed at the bridge's.
	for _, reply := range accTargets()[:12] {
		for _, subj := range []string{accReaderAPIPrefix + ".DIRECT.GET.KV_" + bucket + ".$KV." + bucket + "." + unit,
			accReaderAPIPrefix + ".STREAM.INFO.KV_" + bucket} {
			if err := nc.PublishRequest(subj, reply, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if e, err := kv.Get(ctx, unit); err != nil || string(e.Value()) != second {
		t.Errorf("the unit's value after the reader's writes: %v %v, want %s", e, err, second)
	}
	watch.check(t, ns.URL())

	// api-reader through the bridge.
	api, err := nats.Connect(ns.URL(), secClient("api-reader")...)
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	m, err := api.Request("tracking.api.units.get", []byte(`{"unit":"msku 123456-7"}`), testutil.Scale(5*time.Second))
	if err != nil || string(m.Data) != second || m.Header.Get("Tracking-Unit") != unit {
		t.Errorf("api-reader, units.get: %v %v", m, err)
	}
	m, err = api.Request("tracking.api.units.events", []byte(`{"unit":"msku 123456-7"}`), testutil.Scale(5*time.Second))
	if err != nil || string(m.Data) != `{"unit":"MSKU1234567","events":[`+first+`]}` {
		t.Errorf("api-reader, units.events: %v %v", m, err)
	}
	if err := ob.stop(t); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.ToLower(ob.logs.String()), "permission") {
		t.Errorf("permission trouble in the bridge's log:\n%s", ob.logs)
	}
}
