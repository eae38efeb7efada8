package consume

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// clock is a settable time for a logging.Limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestDeadLetterFloodLogsBounded: a flood of invalid and refused reports, of a few kinds, costs the log
// one line per kind and upstream status an interval, the next line counting the ones held back; the
// metric and the dead-letter stream still count every report.
func TestDeadLetterFloodLogsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false)
	e.sim.SetFaults(sim.Faults{RejectReports: func(body []byte) (int, []string, bool) {
		if strings.Contains(string(body), "REJECT_409") {
			return 409, []string{"order is no longer open"}, true
		}
		return 0, nil, false
	}})
	cfg := e.config()
	obs := &countingObserver{}
	cfg.Observer = obs
	c := New(e.js, e.client, cfg)
	clk := &clock{t: time.Now()}
	c.dlqLog = logging.NewLimiter(time.Minute, clk.now)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	const each = 100
	bodies := []string{
		"x", // not JSON
		`{"event":{}}`,
		`{"event":{"timestamp":"2024-05-01T12:30:00Z","type":"REJECT_409"}}`,
	}
	for i := range each {
		for k, body := range bodies {
			m := nats.NewMsg(e.layout.ReportsSubject())
			m.Data = []byte(body)
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("bad-%d-%d", k, i))
			if _, err := e.js.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	select {
	case <-e.js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("reports not stored")
	}
	total := each * len(bodies)
	testutil.Eventually(t, 30*time.Second, "every report dead-lettered", func() bool {
		return obs.outcomes[outcomeIndex["invalid"]].Load()+obs.outcomes[outcomeIndex["rejected"]].Load() == int64(total)
	})
	if n := e.streamMsgs(e.layout.DLQ()); n != uint64(total) {
		t.Errorf("%d dead letters stored, want %d", n, total)
	}
	if st := c.Stats(); st.Invalid != 2*each || st.Rejected != each {
		t.Errorf("stats %+v; want %d invalid, %d rejected", st, 2*each, each)
	}
	if got := deadLetterLines(e.logs); len(got) != 2 {
		t.Fatalf("%d dead-letter log lines for %d dead letters of two kinds, want 2:\n%s", len(got), total, e.logs)
	}

	// An interval on, the next dead letter of a kind is logged with the count of those held back.
	clk.add(time.Minute)
	e.publish("y", jetstream.MsgIDHeader, "after")
	testutil.Eventually(t, 10*time.Second, "the next line", func() bool { return len(deadLetterLines(e.logs)) == 3 })
	last := deadLetterLines(e.logs)[2]
	if last["kind"] != "invalid" || last["suppressed"] != fmt.Sprint(2*each-1) {
		t.Errorf("line after the interval %v; want kind invalid, suppressed %d", last, 2*each-1)
	}
}

// deadLetterLines returns the attributes of every "report dead-lettered" line, in order.
func deadLetterLines(logs *testutil.Logs) []map[string]string {
	var out []map[string]string
	for _, r := range logs.Records() {
		if r.Message != "report dead-lettered" || r.Level != slog.LevelWarn {
			continue
		}
		m := map[string]string{}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

// TestAmbiguousReportsDeadLettered: a report readers may read in different ways (a key given twice, an
// id that is not UTF-8, raw or escaped) or with a Nats-Msg-Id that is not UTF-8 is dead-lettered with the
// reason, and never reaches the upstream.
func TestAmbiguousReportsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	e.start(e.js, e.config())
	o := demoOrders[0]
	ev := `"event":{"timestamp":"2024-05-01T12:30:00Z","type":"GATE_IN"}`
	tests := []struct{ name, id, body, want string }{
		{"order twice", "dup-1",
			fmt.Sprintf(`{"order":{"orderId":%q,"positionId":%q},"order":{"orderId":"BO-OTHER","positionId":"1"},%s}`, o.OrderID, o.PositionID, ev),
			`the report gives the key "order" twice; a key may appear only once in an object, or readers differ on its value`},
		{"order id twice, escaped", "dup-2",
			fmt.Sprintf(`{"order":{"orderId":%q,"positionId":%q,"order\u0049d":"BO-OTHER"},%s}`, o.OrderID, o.PositionID, ev),
			`the report gives the key "orderId" twice in order; a key may appear only once in an object, or readers differ on its value`},
		{"order id not UTF-8", "utf8-1",
			fmt.Sprintf("{\"order\":{\"orderId\":\"%s\xc0\xaf\",\"positionId\":%q},%s}", o.OrderID, o.PositionID, ev),
			"the report is not valid UTF-8"},
		{"order id with an unpaired surrogate", "utf8-2",
			fmt.Sprintf(`{"order":{"orderId":"%s\udbff","positionId":%q},%s}`, o.OrderID, o.PositionID, ev),
			`the report is not valid UTF-8: the escape \udbff in order.orderId is half of a UTF-16 surrogate pair without the other half`},
		{"Nats-Msg-Id not UTF-8", "msg-\xff\xfe", string(report(3)), "the Nats-Msg-Id header is not valid UTF-8"},
	}
	for _, tt := range tests {
		e.publish(tt.body, jetstream.MsgIDHeader, tt.id)
	}
	testutil.Eventually(t, 10*time.Second, "dead letters", func() bool { return len(e.deadLetters()) == len(tests) })
	byID := map[string]*jetstream.RawStreamMsg{}
	for _, m := range e.deadLetters() {
		byID[m.Header.Get("Bridge-Original-Nats-Msg-Id")] = m
	}
	for _, tt := range tests {
		m := byID[tt.id]
		switch {
		case m == nil:
			t.Errorf("%s: no dead letter", tt.name)
		case m.Header.Get("Bridge-Error") != tt.want || string(m.Data) != tt.body:
			t.Errorf("%s: Bridge-Error %q, body %q\nwant %q and the report", tt.name, m.Header.Get("Bridge-Error"), m.Data, tt.want)
		}
	}
	if n := e.rec.count(); n != 0 {
		t.Errorf("%d upstream calls, want none", n)
	}
}
