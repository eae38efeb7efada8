package consume

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func TestValidReportDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	c := e.start(e.js, e.config())

	// Odd spacing and number formats: the upstream must get these very bytes.
	body := "{ \"event\":{\"timestamp\":\"2024-05-01T12:30:00.000+00:00\",\"type\":\"GATE_IN\", " +
		"\"observation\":{\"observedLoadingUnit\":{\"weight\":{\"gross\":1.50e4}}}},\n\"x\":[] }"
	e.publish(body, jetstream.MsgIDHeader, "producer-id-1", "Producer", "scanner-7")
	e.publish(string(report(2))) // no Nats-Msg-Id

	testutil.Eventually(t, 10*time.Second, "two reports accepted", func() bool { return len(e.accepted()) == 2 })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })

	calls := e.rec.all()
	if len(calls) != 2 {
		t.Fatalf("%d upstream calls, want exactly 2", len(calls))
	}
	if calls[0].key != "producer-id-1" { // the two went in parallel
		calls[0], calls[1] = calls[1], calls[0]
	}
	if string(calls[0].body) != body {
		t.Errorf("upstream got body\n%q\nwant it verbatim\n%q", calls[0].body, body)
	}
	for i, call := range calls {
		if !strings.HasPrefix(call.auth, "Bearer ") || len(call.auth) < len("Bearer ")+8 {
			t.Errorf("call %d: Authorization %q, want a bearer token", i, call.auth)
		}
		if call.contentType != "application/json" || call.status != http.StatusAccepted {
			t.Errorf("call %d: Content-Type %q, status %d", i, call.contentType, call.status)
		}
	}
	if calls[0].key != "producer-id-1" {
		t.Errorf("Idempotency-Key %q, want the producer's Nats-Msg-Id", calls[0].key)
	}
	if !strings.HasPrefix(calls[1].key, e.layout.Reports()+"-2-") {
		t.Errorf("Idempotency-Key %q, want one derived from the stream and sequence 2", calls[1].key)
	}
	testutil.Eventually(t, 10*time.Second, "both settled", func() bool { return c.Stats().InFlight == 0 })
	if st := c.Stats(); st.Accepted != 2 || st.Consumed != 2 || st.Retried+st.Rejected+st.Invalid != 0 {
		t.Errorf("stats %+v", st)
	}
	if n := len(e.deadLetters()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	// Never a token or a body in the logs.
	if logs := e.logs.String(); strings.Contains(logs, "Bearer") || strings.Contains(logs, "GATE_IN") {
		t.Errorf("logs contain a token or a body:\n%s", logs)
	}
	if err := c.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := c.Ready(); err == nil || err.Error() != "report consumer stopped" {
		t.Errorf("Ready() = %v after stop", err)
	}
}

func TestConsumerConfiguration(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.sim.SetFaults(sim.Faults{Report429: true, RetryAfter: time.Hour}) // nothing gets through
	e.publishN(5)
	c := New(e.js, e.client, e.config())
	if err := c.Ready(); err == nil || err.Error() != "report consumer not started" {
		t.Errorf("Ready() before Run = %v", err)
	}
	r := e.start(e.js, e.config())
	ctx := context.Background()
	cons, err := e.js.Consumer(ctx, e.layout.Reports(), "bridge-reports")
	if err != nil {
		t.Fatal(err)
	}
	cfg := cons.CachedInfo().Config
	if cfg.MaxDeliver != -1 || cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.FilterSubject != "tracking.reports" ||
		cfg.AckWait != 30*time.Second || cfg.MaxAckPending < 16 {
		t.Errorf("consumer config %+v", cfg)
	}
	testutil.Eventually(t, 10*time.Second, "Pending() = 5", func() bool { return r.Pending() == 5 })
	testutil.Eventually(t, 10*time.Second, "backing off", func() bool { return r.Stats().BackingOff })
	if err := r.Ready(); err != nil {
		t.Errorf("Ready() while the upstream fails = %v", err)
	}

	// A second Run is refused; a bad configuration is reported at once.
	if err := r.Run(ctx); err == nil {
		t.Error("second Run returned nil")
	}
	bad := New(e.js, e.client, Config{Durable: "a.b", Subject: "x", DLQSubject: "x"})
	if err := bad.Run(ctx); err == nil || !strings.Contains(err.Error(), "Stream is empty") ||
		!strings.Contains(err.Error(), "durable name") || !strings.Contains(err.Error(), "is the reports subject") {
		t.Errorf("Run with a bad config: %v", err)
	}
}

func TestInvalidReportsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	cfg := e.config()
	cfg.MaxBytes = 1024
	c := e.start(e.js, cfg)

	big := `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN","id":"` + strings.Repeat("x", 1100) + `"}}`
	tests := []struct{ name, body, want string }{
		{"invalid JSON", `{"event": {"timestamp": "2024-05-01T12:30:00Z", "type": "GATE_IN"}`,
			"the report is not valid JSON: it ends in the middle of a value"},
		{"missing event", `{"order":{"orderId":"o-1","positionId":"1"}}`, "event is missing"},
		{"wrong types", `{"order":{"orderId":1},"event":{"timestamp":"noon","type":["GATE_IN"]}}`,
			`order.orderId must be a string, not a number; order.positionId is missing; ` +
				`event.timestamp is not an RFC 3339 date-time (like 2024-05-01T12:30:00Z): "noon"; ` +
				`event.type must be a string, not an array`},
		{"oversized", big, fmt.Sprintf("the report is %d bytes, more than the limit of 1024 bytes", len(big))},
		{"not an object", `["GATE_IN"]`, "the report must be a JSON object (TrackingEventReport), not an array"},
	}
	for i, tt := range tests {
		e.publish(tt.body, jetstream.MsgIDHeader, fmt.Sprintf("bad-%d", i), "Producer", "scanner-7")
	}
	e.publish(string(report(1)), jetstream.MsgIDHeader, "good-1")

	testutil.Eventually(t, 10*time.Second, "dead letters", func() bool { return len(e.deadLetters()) == len(tests) })
	testutil.Eventually(t, 10*time.Second, "valid report accepted", func() bool { return len(e.accepted()) == 1 })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })

	byID := map[string]*jetstream.RawStreamMsg{}
	for _, m := range e.deadLetters() {
		byID[m.Header.Get("Bridge-Original-Nats-Msg-Id")] = m
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := byID[fmt.Sprintf("bad-%d", i)]
			if m == nil {
				t.Fatal("no dead letter")
			}
			if got := m.Header.Get(layout.HeaderError); got != tt.want {
				t.Errorf("Bridge-Error\n got %q\nwant %q", got, tt.want)
			}
			if m.Subject != "tracking.dlq.reports" || string(m.Data) != tt.body {
				t.Errorf("subject %q, body %q; want the report verbatim on tracking.dlq.reports", m.Subject, m.Data)
			}
			if m.Header.Get("Producer") != "scanner-7" || m.Header.Get(layout.HeaderUpstreamStatus) != "" {
				t.Errorf("headers %v: want the original ones and no upstream status", m.Header)
			}
			if id := m.Header.Get(jetstream.MsgIDHeader); !strings.HasSuffix(id, "-dlq") {
				t.Errorf("Nats-Msg-Id %q", id)
			}
			if m.Header.Get(layout.HeaderReportSequence) != fmt.Sprint(i+1) || m.Header.Get(layout.HeaderDeliveries) != "1" {
				t.Errorf("sequence %q, deliveries %q", m.Header.Get(layout.HeaderReportSequence), m.Header.Get(layout.HeaderDeliveries))
			}
		})
	}
	if n := e.rec.count(); n != 1 {
		t.Errorf("%d upstream calls, want 1 (only the valid report)", n)
	}
	if st := c.Stats(); st.Invalid != int64(len(tests)) || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
	if n := e.logs.Count(slog.LevelWarn, "report dead-lettered"); n != 1 {
		t.Errorf("%d dead-letter log lines, want 1 (one per kind a minute)", n)
	}
	if c.Ready() != nil {
		t.Error("consumer not ready after bad input")
	}
}

// TestDeadLettersFitMaxPayload: reports that fit the server's max_payload but whose dead letter (the
// report plus the bridge's headers) would not are dead-lettered all the same, a large body as its
// description, large headers by leaving them out, and the work queue empties; without that they would
// be redelivered forever.
func TestDeadLettersFitMaxPayload(t *testing.T) {
	t.Parallel()
	const max = 16 << 10
	e := newEnvWith(t, false, func(o *server.Options) { o.MaxPayload = max })
	cfg := e.config()
	cfg.MaxBytes = 1024
	e.start(e.js, cfg)

	big := `{"pad":"` + strings.Repeat("x", max-70) + `"}`
	e.publish(big, jetstream.MsgIDHeader, "big-body")
	e.publish(`{"not":"a report"`, jetstream.MsgIDHeader, "big-header", "Producer-Note", strings.Repeat("n", max-200))
	e.publish(string(report(1)), jetstream.MsgIDHeader, "good-1")

	testutil.Eventually(t, 10*time.Second, "dead letters", func() bool { return len(e.deadLetters()) == 2 })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	dl := map[string]*jetstream.RawStreamMsg{} // by report sequence: reports are handled concurrently
	for i, m := range e.deadLetters() {
		if size := layout.MsgSize(&nats.Msg{Header: m.Header, Data: m.Data}); size > max {
			t.Errorf("dead letter %d: %d bytes", i, size)
		}
		dl[m.Header.Get(layout.HeaderReportSequence)] = m
	}
	if dl["1"] == nil || dl["2"] == nil {
		t.Fatalf("dead letters of reports %v, want 1 and 2", slices.Sorted(maps.Keys(dl)))
	}
	// The large report: described, with the report's headers.
	var d struct {
		Reason string
		Size   int
		Prefix string `json:"data_prefix"`
	}
	if err := json.Unmarshal(dl["1"].Data, &d); err != nil || !strings.Contains(d.Reason, "more than the limit") ||
		d.Size != len(big) || d.Prefix != big[:256] {
		t.Errorf("the large report's dead letter is not its description: %v: %.200s", err, dl["1"].Data)
	}
	if got := dl["1"].Header.Get(layout.HeaderError); !strings.Contains(got, "the data was dropped") {
		t.Errorf("the large report's Bridge-Error: %q", got)
	}
	if got := dl["1"].Header.Get("Bridge-Original-Nats-Msg-Id"); got != "big-body" {
		t.Errorf("the large report's dead letter lost the report's headers: %v", dl["1"].Header)
	}
	// The small report with a large header: verbatim, without the report's headers.
	if string(dl["2"].Data) != `{"not":"a report"` || dl["2"].Header.Get("Producer-Note") != "" ||
		!strings.Contains(dl["2"].Header.Get(layout.HeaderError), "the report's headers were dropped") {
		t.Errorf("the large-header report's dead letter: %.100s %v", dl["2"].Data, dl["2"].Header)
	}
}

// TestDeadLettersWithUnsendableHeaders: a report with headers that fit JetStream's 64 KiB header block
// but not once the bridge's are added, and one with a header name the server accepts from other clients
// but nats.go refuses to send, are both dead-lettered instead of redelivered forever.
func TestDeadLettersWithUnsendableHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.start(e.js, e.config())
	e.publish(`{"not":"a report"`, jetstream.MsgIDHeader, "r-1", "Producer-Note", strings.Repeat("n", 65400))

	// A raw HPUB, as another client library may send it.
	e.rawHPUB(e.layout.ReportsSubject(), "NATS/1.0\r\nTrace/Id: 1\r\nProducer: scanner-7\r\n\r\n", `{"not":"a report"`)

	testutil.Eventually(t, 10*time.Second, "dead letters", func() bool { return len(e.deadLetters()) == 2 })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	for _, m := range e.deadLetters() {
		if size := layout.HeaderSize(&nats.Msg{Header: m.Header}); size > layout.MaxHeaderBlock {
			t.Errorf("a dead letter's header block is %d bytes", size)
		}
		if m.Header.Get(layout.HeaderReportSequence) == "2" {
			if m.Header.Get("Producer") != "scanner-7" || m.Header.Get("Trace/Id") != "" ||
				!strings.Contains(m.Header.Get(layout.HeaderError), "1 report header(s) with names a NATS client cannot send") {
				t.Errorf("raw report's dead letter: %v", m.Header)
			}
		} else if m.Header.Get("Producer-Note") != "" || !strings.Contains(m.Header.Get(layout.HeaderError), "headers were dropped") {
			t.Errorf("large-header report's dead letter kept its headers or does not say so: %.200s", m.Header.Get(layout.HeaderError))
		}
	}
}

func TestUpstreamOutageThenRecovery(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.sim.SetFaults(sim.Faults{ReportErrorRate: 1})
	const n = 40
	e.publishN(n)
	c := e.start(e.js, e.config()) // backoff 20 ms .. 200 ms

	const outage = 1500 * time.Millisecond
	testutil.Eventually(t, 10*time.Second, "backing off", func() bool { return c.Stats().BackingOff })
	time.Sleep(outage) // the outage itself, not a synchronisation
	during := e.rec.count()
	e.sim.SetFaults(sim.Faults{})
	start := time.Now()

	testutil.Eventually(t, 20*time.Second, "all reports accepted", func() bool { return len(e.accepted()) == n })
	drain := time.Since(start)
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })

	// Without backoff the consumer would have made thousands of attempts. With it: the first round (up to
	// 16 in flight), then one probe per ProbeInterval.
	t.Logf("%d attempts during a %v outage, backlog drained %v after recovery", during, outage, drain)
	if during > 16+int(outage.Milliseconds()/10) {
		t.Errorf("%d attempts during the outage: not backing off", during)
	}
	keys := map[string]int{}
	for _, r := range e.accepted() {
		keys[r.IdempotencyKey]++
	}
	if len(keys) != n {
		t.Errorf("%d distinct reports accepted, want %d", len(keys), n)
	}
	if st := e.sim.Stats(); st.ReportsAccepted != n || st.ReportDuplicates != 0 {
		t.Errorf("simulator stats: %d accepted, %d duplicates", st.ReportsAccepted, st.ReportDuplicates)
	}
	st := c.Stats()
	if st.Holds != 1 || st.BackingOff || st.Retried == 0 || st.Accepted != n {
		t.Errorf("stats %+v: want one hold, retries and all accepted", st)
	}
	// One line per state change, not one per failure.
	if a, b := e.logs.Count(slog.LevelWarn, "upstream failing, backing off"), e.logs.Count(slog.LevelInfo, "upstream recovered"); a != 1 || b != 1 {
		t.Errorf("%d 'backing off' and %d 'recovered' lines, want 1 each", a, b)
	}
	if n := e.logs.Count(slog.LevelInfo, ""); n > 10 {
		t.Errorf("%d log lines at info or above:\n%s", n, e.logs.String())
	}
	if len(e.deadLetters()) != 0 {
		t.Error("dead letters after a transient outage")
	}
}

func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.sim.SetFaults(sim.Faults{Report429: true, RetryAfter: time.Second})
	c := e.start(e.js, e.config()) // backoff 20 ms .. 200 ms: far shorter than Retry-After
	e.publish(string(report(1)), jetstream.MsgIDHeader, "r-1")

	testutil.Eventually(t, 10*time.Second, "first attempt", func() bool { return e.rec.count() >= 1 })
	e.sim.SetFaults(sim.Faults{})
	testutil.Eventually(t, 10*time.Second, "report accepted", func() bool { return len(e.accepted()) == 1 })
	// The recorder notes a call once the simulator has answered it: it may lag the accepted report.
	testutil.Eventually(t, 10*time.Second, "two calls recorded", func() bool { return e.rec.count() >= 2 })

	calls := e.rec.all()
	if len(calls) != 2 || calls[0].status != http.StatusTooManyRequests || calls[1].status != http.StatusAccepted {
		t.Fatalf("calls %+v, want a 429 then a 202", calls)
	}
	if gap := calls[1].at.Sub(calls[0].at); gap < time.Second {
		t.Errorf("second attempt %v after the 429, before its Retry-After of 1s", gap)
	}
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	if st := c.Stats(); st.Retried != 1 || st.Accepted != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestUpstreamRejectionDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.sim.SetFaults(sim.Faults{RejectReports: func(body []byte) (int, []string, bool) {
		switch {
		case strings.Contains(string(body), "REJECT_400"):
			return 400, []string{"order o-1 is unknown", "event.type REJECT_400 is not allowed here"}, true
		case strings.Contains(string(body), "REJECT_409"):
			return 409, []string{"order o-1 is no longer open"}, true
		case strings.Contains(string(body), "REJECT_403"):
			return 403, nil, true
		}
		return 0, nil, false
	}})
	c := e.start(e.js, e.config())
	bodies := map[string]string{}
	for _, typ := range []string{"REJECT_400", "REJECT_409", "REJECT_403"} {
		bodies[typ] = `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"` + typ + `"}}`
		e.publish(bodies[typ], jetstream.MsgIDHeader, typ, "Producer", "scanner-7")
	}
	// A three-letter country code passes the bridge's check (JSON types and required fields); the
	// simulator is stricter and answers 400 itself.
	strict := `{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN"},"reporter":{"address":{"country":{"code":"DEU"}}}}`
	e.publish(strict, jetstream.MsgIDHeader, "strict")
	e.publish(string(report(1)), jetstream.MsgIDHeader, "good")

	testutil.Eventually(t, 10*time.Second, "dead letters", func() bool { return len(e.deadLetters()) == 4 })
	testutil.Eventually(t, 10*time.Second, "good report accepted", func() bool { return len(e.accepted()) == 1 })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })

	want := map[string][2]string{
		"REJECT_400": {"400", "order o-1 is unknown; event.type REJECT_400 is not allowed here"},
		"REJECT_409": {"409", "order o-1 is no longer open"},
		"REJECT_403": {"403", "HTTP 403 Forbidden"},
	}
	for _, m := range e.deadLetters() {
		id := m.Header.Get("Bridge-Original-Nats-Msg-Id")
		status, reason := m.Header.Get(layout.HeaderUpstreamStatus), m.Header.Get(layout.HeaderError)
		if id == "strict" {
			if status != "400" || !strings.Contains(reason, "reporter.address.country.code") {
				t.Errorf("strict: status %q, reason %q", status, reason)
			}
			continue
		}
		if w := want[id]; status != w[0] || reason != w[1] {
			t.Errorf("%s: status %q, Bridge-Error %q; want %q, %q", id, status, reason, w[0], w[1])
		}
		if string(m.Data) != bodies[id] || m.Header.Get("Producer") != "scanner-7" {
			t.Errorf("%s: body %q, headers %v", id, m.Data, m.Header)
		}
	}
	if n := e.rec.count(); n != 5 {
		t.Errorf("%d upstream calls, want 5 (one per report, no retries)", n)
	}
	if st := c.Stats(); st.Rejected != 4 || st.Retried != 0 || st.Holds != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestTokenExpiredBetweenReports(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	c := e.start(e.js, e.config())
	e.publish(string(report(1)), jetstream.MsgIDHeader, "r-1")
	testutil.Eventually(t, 10*time.Second, "first report accepted", func() bool { return len(e.accepted()) == 1 })

	e.sim.ExpireTokens()
	e.publish(string(report(2)), jetstream.MsgIDHeader, "r-2")
	testutil.Eventually(t, 10*time.Second, "second report accepted", func() bool { return len(e.accepted()) == 2 })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })

	calls := e.rec.all()
	if len(calls) != 3 || calls[1].status != http.StatusUnauthorized || calls[2].status != http.StatusAccepted {
		t.Fatalf("calls %+v; want 202, then 401 and 202 with a new token", calls)
	}
	if calls[1].auth == calls[2].auth || calls[0].auth != calls[1].auth {
		t.Error("the repeat after the 401 did not use a new token")
	}
	if st := c.Stats(); st.Accepted != 2 || st.Retried != 0 || st.Holds != 0 {
		t.Errorf("stats %+v: want both accepted without a redelivery", st)
	}
	if len(e.deadLetters()) != 0 {
		t.Error("dead letters after a token expiry")
	}
}

func TestStopAndRestartLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.sim.SetFaults(sim.Faults{ReportLatency: 30 * time.Millisecond})
	const n = 300
	e.publishN(n)
	cfg := e.config()
	cfg.Concurrency = 8
	cfg.AckWait = time.Hour // anything left unsettled at the stop would not come back during the test

	first := e.start(e.js, cfg)
	testutil.Eventually(t, 10*time.Second, "some reports accepted", func() bool { return len(e.accepted()) >= 20 })
	if first.Stats().InFlight == 0 {
		t.Log("no report in flight at the stop")
	}
	if err := first.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := first.Stats(); st.InFlight != 0 {
		t.Errorf("%d reports in flight after Run returned", st.InFlight)
	}
	done := len(e.accepted())
	if done == n {
		t.Fatal("everything was delivered before the stop; the test proves nothing")
	}
	if left := e.streamMsgs(e.layout.Reports()); int(left) != n-done {
		t.Errorf("%d reports left in the work queue after the stop, want %d", left, n-done)
	}

	// A new consumer, on a new connection, picks up the rest at once.
	js2, _ := jetstream.New(e.ns.Connect())
	second := e.start(js2, cfg)
	testutil.Eventually(t, 30*time.Second, "all reports accepted", func() bool { return len(e.accepted()) == n })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	keys := map[string]bool{}
	for _, r := range e.accepted() {
		keys[r.IdempotencyKey] = true
	}
	if len(keys) != n {
		t.Errorf("%d distinct reports accepted, want %d", len(keys), n)
	}
	if s := e.sim.Stats(); s.ReportDuplicates != 0 {
		t.Errorf("%d duplicates after a clean stop", s.ReportDuplicates)
	}
	t.Logf("first consumer: %+v; second: %+v", first.Stats(), second.Stats())
}

func TestCrashRedeliversInFlightReports(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.sim.SetFaults(sim.Faults{ReportLatency: 200 * time.Millisecond})
	const n = 20
	e.publishN(n)
	cfg := e.config()
	// An attempt may take a quarter of it: 1 s leaves the 200 ms answer room on a busy machine, where a
	// bound of 500 ms once ended attempts before their answer (and so before any acknowledgement).
	cfg.AckWait = 4 * time.Second

	// The first consumer's connection dies while reports are in flight: their 2xx arrives, the
	// acknowledgement cannot be sent.
	nc := e.ns.Connect()
	js, _ := jetstream.New(nc)
	first := e.start(js, cfg)
	testutil.Eventually(t, 10*time.Second, "reports in flight", func() bool { return first.Stats().InFlight > 0 })
	nc.Close()
	select {
	case err := <-first.done:
		first.done <- err
		if !connClosed(err) {
			t.Errorf("Run after the connection closed: %v, want a connection closed error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its connection closed")
	}
	if first.Stats().AckFailures == 0 {
		t.Error("no acknowledgement failed")
	}

	js2, _ := jetstream.New(e.ns.Connect())
	e.start(js2, cfg)
	testutil.Eventually(t, 20*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	keys := map[string]bool{}
	for _, r := range e.accepted() {
		keys[r.IdempotencyKey] = true
	}
	// Reports sent twice carried the same Idempotency-Key: the upstream kept each once.
	if len(keys) != n || len(e.accepted()) != n {
		t.Errorf("%d reports accepted, %d distinct, want %d", len(e.accepted()), len(keys), n)
	}
	t.Logf("upstream calls %d, duplicates answered %d", e.rec.count(), e.sim.Stats().ReportDuplicates)
}

func TestNATSRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.sim.SetFaults(sim.Faults{ReportLatency: 10 * time.Millisecond})
	const n = 300
	e.publishN(n)
	cfg := e.config()
	cfg.AckWait = 2 * time.Second
	c := e.start(e.js, cfg)
	testutil.Eventually(t, 10*time.Second, "some reports accepted", func() bool { return len(e.accepted()) >= 30 })
	e.ns.Restart()
	testutil.Eventually(t, 30*time.Second, "all reports accepted", func() bool { return len(e.accepted()) == n })
	testutil.Eventually(t, 30*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	keys := map[string]bool{}
	for _, r := range e.accepted() {
		keys[r.IdempotencyKey] = true
	}
	if len(keys) != n {
		t.Errorf("%d distinct reports accepted, want %d", len(keys), n)
	}
	if len(e.deadLetters()) != 0 {
		t.Error("dead letters after a NATS restart")
	}
	testutil.Eventually(t, 15*time.Second, "ready again", func() bool { return c.Ready() == nil })
	t.Logf("stats %+v; upstream calls %d", c.Stats(), e.rec.count())
}

func TestConsumerDeletedIsRecreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	c := e.start(e.js, e.config())
	e.publish(string(report(1)), jetstream.MsgIDHeader, "r-1")
	testutil.Eventually(t, 10*time.Second, "first report accepted", func() bool { return len(e.accepted()) == 1 })

	if err := e.js.DeleteConsumer(context.Background(), e.layout.Reports(), "bridge-reports"); err != nil {
		t.Fatal(err)
	}
	e.publish(string(report(2)), jetstream.MsgIDHeader, "r-2")
	testutil.Eventually(t, 20*time.Second, "report after the deletion accepted", func() bool { return len(e.accepted()) == 2 })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	if n := e.logs.Count(slog.LevelWarn, "report consumer was deleted; creating it again"); n < 1 {
		t.Error("the deletion was not logged")
	}
	testutil.Eventually(t, 10*time.Second, "ready", func() bool { return c.Ready() == nil })
}

func TestMaxAgeDeadLetters(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.sim.SetFaults(sim.Faults{ReportErrorRate: 1})
	cfg := e.config()
	cfg.MaxAge = 500 * time.Millisecond
	c := e.start(e.js, cfg)
	e.publish(string(report(1)), jetstream.MsgIDHeader, "r-1", "Producer", "scanner-7")

	testutil.Eventually(t, 10*time.Second, "dead letter", func() bool { return len(e.deadLetters()) == 1 })
	m := e.deadLetters()[0]
	reason := m.Header.Get(layout.HeaderError)
	if !strings.HasPrefix(reason, "the upstream still failed after") || !strings.Contains(reason, "max age 500ms") {
		t.Errorf("Bridge-Error %q", reason)
	}
	if s := m.Header.Get(layout.HeaderUpstreamStatus); len(s) != 3 || s[0] != '5' {
		t.Errorf("Bridge-Upstream-Status %q, want the last 5xx", s)
	}
	if m.Header.Get("Producer") != "scanner-7" {
		t.Errorf("original headers missing: %v", m.Header)
	}
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	if st := c.Stats(); st.Expired != 1 || st.Accepted != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestDeadLetterPublishFailureKeepsReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	cfg := e.config()
	cfg.DLQSubject = "nowhere.dlq.reports" // no stream captures it (yet)
	c := e.start(e.js, cfg)
	e.publish(`{"event":{}}`, jetstream.MsgIDHeader, "bad")

	testutil.Eventually(t, 10*time.Second, "failed dead-letter publishes", func() bool { return c.Stats().DeadLetterFailures >= 2 })
	if left := e.streamMsgs(e.layout.Reports()); left != 1 {
		t.Fatalf("%d reports in the work queue, want the report kept", left)
	}
	ctx := context.Background()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "NOWHERE", Subjects: []string{"nowhere.>"}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	s, _ := e.js.Stream(ctx, "NOWHERE")
	m, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get(layout.HeaderError) != "event.timestamp is missing; event.type is missing" {
		t.Errorf("dead letter %v", m.Header)
	}
	if n := e.logs.Count(slog.LevelWarn, "JetStream dead-letter publish failed; the report will be delivered again"); n != 1 {
		t.Errorf("%d warnings for the failing publishes, want 1:\n%s", n, e.logs.String())
	}
}

func TestTenThousandReports(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("10,000 reports")
	}
	e := newEnv(t, false)
	const n = 10_000
	e.publishN(n)
	start := time.Now()
	c := e.start(e.js, e.config())
	testutil.Eventually(t, 60*time.Second, "all reports accepted", func() bool { return e.sim.Stats().ReportsAccepted >= n })
	testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
	t.Logf("%d reports in %v", n, time.Since(start).Round(time.Millisecond))

	keys := make(map[string]bool, n)
	for _, r := range e.accepted() {
		keys[r.IdempotencyKey] = true
	}
	// A report is sent a second time only when its acknowledgement failed (on a machine busy enough that
	// JetStream's confirmation took longer than the consumer waits): then with the same key, which the
	// upstream answers as a repeat. Without a failed acknowledgement, none is sent twice.
	st, cs := e.sim.Stats(), c.Stats()
	if len(e.accepted()) != n || len(keys) != n || st.ReportCalls != n+st.ReportDuplicates {
		t.Errorf("simulator: %d accepted, %d distinct keys, %d calls, %d duplicates; want %d accepted under as many keys",
			len(e.accepted()), len(keys), st.ReportCalls, st.ReportDuplicates, n)
	}
	if cs.Accepted != n || st.ReportDuplicates > 0 && cs.AckFailures == 0 || cs.AckFailures == 0 && cs.Consumed != n {
		t.Errorf("consumer stats %+v; simulator %d duplicates", cs, st.ReportDuplicates)
	}
	if st.ReportDuplicates > 0 {
		t.Logf("%d reports sent twice after %d acknowledgements failed", st.ReportDuplicates, cs.AckFailures)
	}
}

// countingObserver counts Observer calls.
type countingObserver struct {
	consumed atomic.Int64
	outcomes [8]atomic.Int64
}

var outcomeIndex = map[string]int{"accepted": 0, "retry": 1, "rejected": 2, "invalid": 3, "expired": 4}

func (o *countingObserver) Consumed() { o.consumed.Add(1) }
func (o *countingObserver) Outcome(kind, class string) {
	o.outcomes[outcomeIndex[kind]].Add(1)
	if kind == "invalid" && class != "none" || kind == "accepted" && class != "2xx" {
		panic(fmt.Sprintf("outcome %s with status class %s", kind, class))
	}
}

func TestObserver(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	cfg := e.config()
	obs := &countingObserver{}
	cfg.Observer = obs
	e.start(e.js, cfg)
	e.publish(`nope`)
	e.publishN(3)
	testutil.Eventually(t, 10*time.Second, "outcomes", func() bool {
		return obs.outcomes[0].Load() == 3 && obs.outcomes[3].Load() == 1
	})
	if obs.consumed.Load() != 4 {
		t.Errorf("Consumed called %d times, want 4", obs.consumed.Load())
	}
}

// stubMsg is a received report with the given data and headers (deadLetterMsg reads nothing else).
type stubMsg struct {
	jetstream.Msg
	data []byte
	h    nats.Header
}

func (m stubMsg) Data() []byte         { return m.data }
func (m stubMsg) Headers() nats.Header { return m.h }

// TestDeadLetterMsgBounds: whatever the size of a report's headers near JetStream's 64 KiB header block,
// and with a body that takes the dead letter past max_payload, the dead letter's header block stays
// within what JetStream stores, and the message within max_payload: describing the body lengthens
// Bridge-Error, which must not push the header block over.
func TestDeadLetterMsgBounds(t *testing.T) {
	t.Parallel()
	const max = 256 << 10
	meta := &jetstream.MsgMetadata{Stream: "TRACKING_REPORTS", Sequence: jetstream.SequencePair{Stream: 7},
		Timestamp: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC), NumDelivered: 1}
	data := []byte(strings.Repeat("x", max-40<<10)) // with the headers, over max_payload
	for n := layout.MaxHeaderBlock - 600; n <= layout.MaxHeaderBlock-100; n++ {
		msg := stubMsg{data: data, h: nats.Header{"Producer-Note": {strings.Repeat("n", n)}}}
		dl := deadLetterMsg("tracking.dlq.reports", msg, meta, 0, "report body is not JSON", max)
		if hs, size := layout.HeaderSize(dl), layout.MsgSize(dl); hs > layout.MaxHeaderBlock || size > max {
			t.Fatalf("report header of %d bytes: dead letter header block %d bytes, message %d bytes", n, hs, size)
		}
	}
}

// TestDeadLettersFitStreamMaxMsgSize: a dead-letter stream whose max_msg_size is below the server's
// max_payload, set before the consumer starts or while it runs, or not readable by the consumer: a report whose dead letter would exceed it
// is dead-lettered as its description, and the work queue empties instead of redelivering it forever.
func TestDeadLettersFitStreamMaxMsgSize(t *testing.T) {
	t.Parallel()
	const dlqMax = 1024
	for _, whenSet := range []string{"before start", "while running", "unread"} {
		t.Run(whenSet, func(t *testing.T) {
			e := newEnv(t, false)
			setMax := func() {
				ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
				defer cancel()
				s, err := e.js.Stream(ctx, e.layout.DLQ())
				if err != nil {
					t.Fatal(err)
				}
				cfg := s.CachedInfo().Config
				cfg.MaxMsgSize = dlqMax
				if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
					t.Fatal(err)
				}
			}
			cfg := e.config()
			if whenSet == "unread" {
				cfg.DLQStream = "" // the limit is not known: the refusal alone must make the dead letter fit
			}
			if whenSet != "while running" {
				setMax()
			}
			e.start(e.js, cfg)
			if whenSet == "while running" {
				setMax()
			}
			big := `{"pad":"` + strings.Repeat("x", 3000) + `"}`
			e.publish(big, jetstream.MsgIDHeader, "big-body")
			e.publish(string(report(1)), jetstream.MsgIDHeader, "good-1")

			testutil.Eventually(t, 10*time.Second, "work queue empty", func() bool { return e.streamMsgs(e.layout.Reports()) == 0 })
			dl := e.deadLetters()
			if len(dl) != 1 {
				t.Fatalf("%d dead letters, want 1", len(dl))
			}
			if size := layout.MsgSize(&nats.Msg{Header: dl[0].Header, Data: dl[0].Data}); size > dlqMax {
				t.Errorf("dead letter of %d bytes, over the stream's max_msg_size", size)
			}
			var d struct{ Size int }
			if err := json.Unmarshal(dl[0].Data, &d); err != nil || d.Size != len(big) {
				t.Errorf("the dead letter is not the report's description: %v: %.200s", err, dl[0].Data)
			}
			if n := len(e.accepted()); n != 1 {
				t.Errorf("%d reports accepted upstream, want 1", n)
			}
		})
	}
}

// TestDeadLetterRenamesLookAlikes: a report's headers that would pass for the bridge's own (Bridge-*,
// in any case) are renamed in its dead letter, as Nats-* are, so that a reader looking headers up without
// regard to case finds the bridge's Bridge-Error, not a producer's. (Found by an outside review.)
func TestDeadLetterRenamesLookAlikes(t *testing.T) {
	t.Parallel()
	meta := &jetstream.MsgMetadata{Stream: "TRACKING_REPORTS", Sequence: jetstream.SequencePair{Stream: 7},
		Timestamp: time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC), NumDelivered: 1}
	msg := stubMsg{data: []byte(`{}`), h: nats.Header{"bridge-error": {"accepted upstream (202)"},
		"BRIDGE-UPSTREAM-STATUS": {"202"}, "Producer-Note": {"kept"}}}
	dl := deadLetterMsg("tracking.dlq.reports", msg, meta, 0, "event is missing", 0)
	for k := range dl.Header {
		if strings.EqualFold(k, "Bridge-Error") && k != "Bridge-Error" || strings.EqualFold(k, "Bridge-Upstream-Status") {
			t.Errorf("the producer's %s reached the dead letter as it was: %v", k, dl.Header)
		}
	}
	if dl.Header.Get("Bridge-Original-bridge-error") != "accepted upstream (202)" || dl.Header.Get("Producer-Note") != "kept" ||
		!strings.Contains(dl.Header.Get("Bridge-Error"), "event is missing") {
		t.Errorf("dead letter headers: %v", dl.Header)
	}
}
