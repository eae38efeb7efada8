package consume

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// publishEvery stores a new valid report every interval until the test ends, as live producers do.
func (e *env) publishEvery(interval time.Duration) {
	e.tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	e.tb.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for i := 0; ; i++ {
			m := nats.NewMsg(e.layout.ReportsSubject())
			m.Data = report(i)
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("live-%d", i))
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = e.js.PublishMsg(pctx, m)
			pcancel()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// firstAcceptedAfter returns when the upstream first accepted a report after t, and whether it did.
func (e *env) firstAcceptedAfter(t time.Time) (time.Time, bool) {
	for _, c := range e.rec.all() {
		if c.status == http.StatusAccepted && c.at.After(t) {
			return c.at, true
		}
	}
	return time.Time{}, false
}

// TestRecoveryAfterLongOutage pins the consumer's pace during an outage of the report operation and its
// recovery after it, with the production backoffs: about one probe per second however long the outage
// lasts (not faster than the Retry-After of 1 s), and reports flowing again within about a second of the
// upstream's recovery. The bounds are loose enough for a loaded machine.
func TestRecoveryAfterLongOutage(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("a 12 s outage")
	}
	e := newEnv(t, true)
	cfg := e.config()
	cfg.BackoffMin, cfg.BackoffMax = DefaultBackoffMin, DefaultBackoffMax
	e.publishEvery(100 * time.Millisecond)
	c := e.start(e.js, cfg)
	testutil.Eventually(t, 10*time.Second, "reports flowing", func() bool { return len(e.accepted()) >= 3 })

	const outage = 12 * time.Second
	e.sim.SetFaults(sim.Faults{ReportErrorRate: 1, RetryAfter: time.Second})
	down := time.Now()
	testutil.Eventually(t, 10*time.Second, "backing off", func() bool { return c.Stats().BackingOff })
	time.Sleep(outage - time.Since(down)) // the outage itself, not a synchronisation
	e.sim.SetFaults(sim.Faults{})
	up := time.Now()

	testutil.Eventually(t, 30*time.Second, "a report accepted after the recovery", func() bool {
		_, ok := e.firstAcceptedAfter(up)
		return ok
	})
	first, _ := e.firstAcceptedAfter(up)
	recovery := first.Sub(up)

	// Probes: the attempts after the first burst (reports in flight when it began) until the recovery.
	from := down.Add(2 * time.Second)
	probes, last := 0, time.Time{}
	minGap := time.Hour
	for _, call := range e.rec.all() {
		if call.at.After(from) && call.at.Before(up) {
			probes++
			if !last.IsZero() {
				minGap = min(minGap, call.at.Sub(last))
			}
			last = call.at
		}
	}
	window := up.Sub(from).Seconds()
	t.Logf("outage %v: %d probes in the last %.1fs (%.2f/s, closest %v apart); reports accepted again %v after the recovery",
		outage, probes, window, float64(probes)/window, minGap.Round(time.Millisecond), recovery.Round(time.Millisecond))
	if recovery > 4*time.Second {
		t.Errorf("reports flowed again only %v after the upstream recovered", recovery)
	}
	if rate := float64(probes) / window; rate > 1.25 || rate < 0.4 {
		t.Errorf("%.2f probes per second during the outage, want about one", rate)
	}
	if probes > 1 && minGap < 900*time.Millisecond {
		t.Errorf("two probes %v apart: faster than the Retry-After of 1s", minGap)
	}
}

// TestTokenObtainedEndsHold pins that a token obtained elsewhere in the bridge (here: a caller of the
// shared token source, as the event stream is) ends the hold at once, long before the next probe.
func TestTokenObtainedEndsHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true)
	var cons atomic.Pointer[Consumer]
	tokens := upstream.NewTokenSource(upstream.TokenConfig{
		TokenURL: e.http.URL + sim.TokenPath, ClientID: sim.DefaultClientID, Username: "demo",
		Password: func() string { return "demo" }, Client: e.hc,
		Observe: func(_ string, err error) {
			if c := cons.Load(); c != nil && err == nil {
				c.TokenObtained()
			}
		},
	})
	e.client = upstream.NewReportClient(upstream.ReportConfig{URL: e.reportURL(), Tokens: tokens, Client: e.hc})
	cfg := e.config()
	cfg.ProbeInterval = time.Minute // only the token can end the hold within the test
	e.publishEvery(100 * time.Millisecond)
	c := e.start(e.js, cfg)
	cons.Store(c.Consumer)
	testutil.Eventually(t, 10*time.Second, "reports flowing", func() bool { return len(e.accepted()) >= 3 })

	// The token endpoint fails and every token expires: each report fails for want of a token.
	e.sim.SetFaults(sim.Faults{TokenErrorRate: 1})
	e.sim.ExpireTokens()
	testutil.Eventually(t, 20*time.Second, "backing off", func() bool { return c.Stats().BackingOff })
	time.Sleep(time.Second) // the outage goes on a little, not a synchronisation
	e.sim.SetFaults(sim.Faults{})

	// Another part of the bridge obtains a token.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if _, err := tokens.Token(ctx); err != nil {
		t.Fatal(err)
	}
	got := time.Now()
	testutil.Eventually(t, 10*time.Second, "a report accepted after the token", func() bool {
		_, ok := e.firstAcceptedAfter(got)
		return ok
	})
	first, _ := e.firstAcceptedAfter(got)
	t.Logf("reports accepted again %v after the token was obtained", first.Sub(got).Round(time.Millisecond))
	if d := first.Sub(got); d > 5*time.Second {
		t.Errorf("reports flowed again only %v after a token was obtained", d)
	}
	// The upstream's answer reaches the consumer a moment after the recorder saw it.
	testutil.Eventually(t, 5*time.Second, "the hold ended", func() bool { return !c.Stats().BackingOff })
}
