package publish

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// TestEventsOneLeader runs two event paths, as two bridges would, on one NATS server and one simulator,
// built from nothing but their parts: exactly one leads and reads the upstream stream, its Status names
// it as the lease's holder; when its Run ends the other takes over, and the stream holds every event
// once.
func TestEventsOneLeader(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	const n = 400
	up := simtest.Start(t, false, sim.Options{EventRate: 200, EventLimit: n})
	streams := layout.Streams{Prefix: "tracking", DuplicateWindow: time.Minute}
	nc := ns.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(time.Minute))
	defer cancel()
	if err := streams.Ensure(ctx, js, true, discard()); err != nil {
		t.Fatal(err)
	}

	start := func() (*Events, context.CancelFunc, chan error) {
		conn := ns.Connect()
		cjs, err := jetstream.New(conn)
		if err != nil {
			t.Fatal(err)
		}
		tokens := upstream.NewTokenSource(upstream.TokenConfig{TokenURL: up.Srv.URL + sim.TokenPath,
			ClientID: sim.DefaultClientID, Username: "demo", Password: func() string { return "demo" },
			Client: &http.Client{Timeout: 10 * time.Second}, Logger: discard()})
		e, err := NewEvents(EventsConfig{NC: conn, JS: cjs, Streams: streams,
			Stream: upstream.StreamConfig{URL: up.Srv.URL + sim.DefaultBasePath + "/tracking/events/stream", Tokens: tokens, Client: &http.Client{},
				ReconnectMin: 100 * time.Millisecond, ReconnectMax: 500 * time.Millisecond, Logger: discard()},
			StreamMetrics: upstream.NewStreamMetrics(prometheus.NewRegistry()),
			Metrics:       NewMetrics(prometheus.NewRegistry()),
			Window:        64, Timeout: 5 * time.Second, Source: "test", LeaseTTL: 5 * time.Second,
			ShutdownTimeout: 5 * time.Second, ReconnectGrace: time.Second, Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(rctx); close(done) }() // closed after its one value: the cleanup may read it again
		t.Cleanup(func() { stop(); <-done })
		return e, stop, done
	}
	a, stopA, doneA := start()
	b, stopB, doneB := start()
	testutil.Eventually(t, 20*time.Second, "one of the two leads", func() bool { return a.Leading() != b.Leading() })
	leader, standby, stopLeader, leaderDone := a, b, stopA, doneA
	if b.Leading() {
		leader, standby, stopLeader, leaderDone = b, a, stopB, doneB
	}
	testutil.EventuallyState(t, 20*time.Second, "the leader's stream connected", func() (bool, string) {
		st := leader.Status()
		return st.StreamState == upstream.StateConnected, st.StreamState.String()
	})
	st := leader.Status()
	if !st.Leading || st.Holder == nil || st.Holder.Instance != leader.Self().Instance || st.Holder.Epoch == 0 {
		t.Errorf("leader's status %+v (holder %+v), want itself as the holder with its epoch", st, st.Holder)
	}
	if s := standby.Status(); s.Leading || s.StreamState == upstream.StateConnected {
		t.Errorf("standby's status %+v: it leads or reads the stream", s)
	}
	testutil.Eventually(t, 30*time.Second, "some events stored", func() bool {
		return testutil.StreamMsgs(t, js, streams.Events()) >= n/4
	})

	stopLeader()
	if err := <-leaderDone; err != nil {
		t.Fatalf("the leader's Run: %v", err)
	}
	testutil.Eventually(t, 20*time.Second, "the standby leads", standby.Leading)
	testutil.EventuallyState(t, 60*time.Second, "every event stored", func() (bool, string) {
		return standby.ResumeAfter() == sim.EventID(n), standby.ResumeAfter()
	})
	seen := map[string]int{}
	for _, m := range testutil.StreamContents(t, js, streams.Events()) {
		if id := m.Header.Get(HeaderMsgID); id != "" && m.Header.Get(HeaderLeader) == "" {
			seen[id]++
		}
	}
	if len(seen) != n {
		t.Errorf("%d distinct events stored, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s stored %d times", id, k)
		}
	}
}
