package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestSameAccountAcknowledgementSteering: a report producer in the bridges' own NATS account aims
// JetStream's acknowledgements of its reports at the fence subjects (all 1,024, in bursts) and at the lease
// key, as a hostile client may: JetStream stores each acknowledgement there, whatever the producer's
// permissions. The leader leads on and the events keep flowing, exactly once; every foreign write is
// counted (bridge_foreign_writes_total), and logged at most once a minute per process. (The shipped NATS
// configurations keep clients in accounts of their own, where such replies cannot reach the bridge's.)
func TestSameAccountAcknowledgementSteering(t *testing.T) {
	t.Parallel()
	const n = 3000
	h := newHarness(t, sim.Options{EventRate: 250, EventLimit: n})
	// A lease that a busy machine's pauses do not end: the test is about foreign writes, not the clock.
	h.cfg.LeaseTTL = 6 * time.Second
	a := opsStartBridge(t, h.cfg)
	testutil.Eventually(t, 20*time.Second, "the first bridge leads", a.b.events.Leading)
	b := opsStartBridge(t, h.cfg)
	h.waitStored("TRACKING_EVENTS", 200, 30*time.Second)

	producer := h.ns.Connect()
	start := time.Now()
	before := h.storedCount("TRACKING_EVENTS")
	// The attack lasts past a lease TTL, and until the leader has stored 100 events meanwhile (a busy
	// machine stores them slowly while every event meets a foreign write); not stopping is the point.
	attackUntil := time.Now().Add(8 * time.Second)
	giveUp := time.Now().Add(testutil.Scale(60 * time.Second))
	bursts, during := 0, 0
	for time.Now().Before(attackUntil) || (during < 100 && time.Now().Before(giveUp)) {
		for j := range 1024 {
			m := &nats.Msg{Subject: "tracking.reports", Reply: fmt.Sprintf("tracking.leader.%d", j), Data: []byte(`{}`)}
			if err := producer.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
		if err := producer.PublishMsg(&nats.Msg{Subject: "tracking.reports", Reply: "$KV.TRACKING_LEASES.events",
			Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if err := producer.Flush(); err != nil {
			t.Fatal(err)
		}
		bursts++
		// The next burst once the leader found this one (or after a while): on a loaded machine the
		// bursts must not simply pile up faster than anything can be handled.
		testutil.EventuallyState(t, 30*time.Second, "the burst found", func() (bool, string) {
			fence := a.counter(t, "bridge_foreign_writes_total", map[string]string{"target": "fence"})
			return fence >= float64(bursts)*100, fmt.Sprintf("%v fence writes found", fence)
		})
		time.Sleep(300 * time.Millisecond) // pacing the attack, not waiting for a result
		during = h.storedCount("TRACKING_EVENTS") - before
	}
	t.Logf("%d bursts; %d events stored during the attack", bursts, during)
	if during < 100 {
		t.Errorf("only %d events stored during the attack", during)
	}

	h.waitStored("TRACKING_EVENTS", n, 60*time.Second)
	h.assertGenerated(n)
	if !a.b.events.Leading() || b.b.events.Leading() {
		t.Errorf("after the attack the first bridge leads %v, the second %v; want the first on", a.b.events.Leading(), b.b.events.Leading())
	}
	for _, x := range []*opsBridge{a, b} {
		if logs := x.logs.String(); strings.Contains(logs, "stopped leading") || strings.Contains(logs, "refused by the fence") {
			t.Errorf("a bridge stopped leading or was fenced:\n%s", logs)
		}
		minutes := 1 + int(time.Since(start)/time.Minute) // a busy machine takes more than one
		for _, line := range []string{"a fence subject held a message no bridge wrote", "the lease key holds a value no bridge wrote"} {
			if c := strings.Count(x.logs.String(), line); c > minutes {
				t.Errorf("%q logged %d times by one bridge in %v, want at most once a minute", line, c, time.Since(start).Round(time.Second))
			}
		}
	}
	fence := a.counter(t, "bridge_foreign_writes_total", map[string]string{"target": "fence"})
	lease := a.counter(t, "bridge_foreign_writes_total", map[string]string{"target": "lease"})
	t.Logf("the leader counted %v foreign writes on the fence, %v on the lease key", fence, lease)
	if fence < float64(bursts)*100 || lease < 1 {
		t.Errorf("foreign writes counted: fence %v, lease %v; want every burst's and the lease key's", fence, lease)
	}
}
