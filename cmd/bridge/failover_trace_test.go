package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// traceparentForm is a traceparent as the bridge writes it: version 00, a trace id and a span id that
// are not all zeros (checked apart), sampled or not.
var traceparentForm = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$`)

// TestTracedFailover: two bridges with tracing on (every event sampled, spans to an OTLP/HTTP receiver);
// the leader is killed with SIGKILL while events flow. Every event is stored once (verify) and carries
// exactly one whole traceparent under its lower-case name, no two events name one span, and the spans of
// events the next leader stored after the takeover reach the receiver. What the killed bridge had not
// exported yet is lost with it, as a crash loses it.
func TestTracedFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover run")
	}
	t.Parallel()
	rcv := testutil.NewOTLPReceiver(t)
	ns := testutil.StartNATS(t, nil)
	r := newRig(t, sim.Options{EventRate: 200}, ns.Connect(), map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": rcv.Base,
		"OTEL_TRACES_SAMPLER":         "always_on",
		"OTEL_SERVICE_NAME":           "failover-trace",
	})
	r.addBridge("a", ns.URL(), false)
	r.addBridge("b", ns.URL(), false)
	leader := r.waitRoles(30 * time.Second)
	r.waitEvents(400, 30*time.Second)

	r.phase("SIGKILL to %s", leader.name)
	from := time.Now()
	leader.kill()
	r.takeover("one server, traced, SIGKILL", leader, from, failoverBound)
	// Every event stored after this one is the next leader's: the killed bridge exported spans before the
	// kill, which say nothing of the next leader's.
	tookOver, err := r.lastSeq()
	if err != nil {
		t.Fatal(err)
	}
	r.waitMoreEvents(400, 30*time.Second)

	r.phase("verifying")
	r.verify(60 * time.Second)
	seen := map[string]string{} // span id -> the event id whose traceparent named it
	var after []string          // the span ids of the events stored after the takeover
	for _, m := range r.readStream() {
		if strings.Contains(m.subject, ".leader.") {
			continue // a fence marker or a restart record
		}
		id := m.header.Get("Nats-Msg-Id")
		values := m.header["traceparent"]
		if len(values) != 1 || !traceparentForm.MatchString(values[0]) || strings.Contains(values[0], strings.Repeat("0", 32)) {
			t.Errorf("event %s (seq %d): traceparent %q, want one whole traceparent", id, m.seq, values)
			continue
		}
		if _, canonical := m.header["Traceparent"]; canonical {
			t.Errorf("event %s carries a Traceparent header besides traceparent", id)
		}
		span := values[0][36:52]
		if other, dup := seen[span]; dup && other != id {
			t.Errorf("events %s and %s name one span %s", other, id, span)
		}
		seen[span] = id
		if m.seq > tookOver {
			after = append(after, span)
		}
	}
	if len(seen) == 0 {
		t.Fatal("no event stored")
	}
	if len(after) == 0 {
		t.Fatalf("no event stored after the takeover (sequence %d)", tookOver)
	}
	// The next leader exports as it goes: spans of the events it stored after the takeover arrive (the
	// rest when it is stopped at the end of the test; those the killed bridge held are lost with it).
	testutil.EventuallyState(t, 30*time.Second, "spans of events stored after the takeover received", func() (bool, string) {
		got := rcv.BySpanID()
		n := 0
		for _, span := range after {
			if _, ok := got[span]; ok {
				n++
			}
		}
		return n > 0, fmt.Sprintf("%d of the %d stored after sequence %d received", n, len(after), tookOver)
	})
	r.summary()
}
