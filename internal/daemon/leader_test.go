package daemon

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestTwoBridgesOneLeader runs two bridges on one NATS server: exactly one reads the upstream stream and
// publishes; both are ready, and say which role they have in /status and bridge_leader. A clean stop of
// the leader hands over within about a second, and the stream holds every event once.
func TestTwoBridgesOneLeader(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	const n = 3000
	up := simtest.Start(t, false, sim.Options{EventRate: 400, EventLimit: n})
	cfg := up.Config(ns.URL(), func(c *config.Config) { c.DuplicateWindow = 100 * time.Millisecond; c.LeaseTTL = 5 * time.Second })
	a := opsStartBridge(t, cfg)
	a.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	b := opsStartBridge(t, cfg)
	b.waitReady(t, 15*time.Second, http.StatusOK, allReady...)

	leader, standby := a, b
	if a.status(t).Role != "leader" {
		leader, standby = b, a
	}
	ls, ss := leader.status(t), standby.status(t)
	if ls.Role != "leader" || ss.Role != "standby" {
		t.Fatalf("roles %q and %q, want one leader and one standby", ls.Role, ss.Role)
	}
	for _, st := range []statusDoc{ls, ss} {
		if st.Lease.Holder == nil || st.Lease.Holder.Instance != ls.Lease.Self.Instance || st.Lease.Holder.Epoch == 0 {
			t.Errorf("lease holder %+v, want the leader %+v with its epoch", st.Lease.Holder, ls.Lease.Self)
		}
	}
	if got := leader.counter(t, "bridge_leader", nil); got != 1 {
		t.Errorf("leader's bridge_leader = %v", got)
	}
	if got := standby.counter(t, "bridge_leader", nil); got != 0 {
		t.Errorf("standby's bridge_leader = %v", got)
	}
	if got := standby.counter(t, "bridge_stream_connects_total", nil); got != 0 {
		t.Errorf("the standby connected to the upstream stream %v times", got)
	}

	testutil.EventuallyState(t, 30*time.Second, "some events stored", func() (bool, string) {
		got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return got >= n/4, ""
	})
	stopped := time.Now()
	if err := leader.stop(t); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyState(t, 5*time.Second, "the standby leads", func() (bool, string) {
		return standby.status(t).Role == "leader", ""
	})
	t.Logf("handover after a clean stop: %v", time.Since(stopped))
	standby.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	testutil.EventuallyState(t, 60*time.Second, "every event stored", func() (bool, string) {
		got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return got >= n, ""
	})
	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	msgs := testutil.StreamContents(t, js, "TRACKING_EVENTS")
	seen := map[string]bool{}
	for _, m := range msgs {
		id := m.Header.Get("Nats-Msg-Id")
		if seen[id] {
			t.Errorf("event %s stored twice", id)
		}
		seen[id] = true
	}
	for seq := 1; seq <= n; seq++ {
		if id, _ := up.Sim().GeneratedEvent("demo", seq); !seen[id] {
			t.Errorf("event %s (seq %d) missing", id, seq)
		}
	}
	if len(msgs) != n {
		t.Errorf("events stream holds %d events, want %d", len(msgs), n)
	}
}

// TestCursorShowAndRestart: `bridge cursor show` reads the resume point and the holder while a bridge
// runs, and `bridge cursor restart -after ID` makes the running leader step down and the next leader (here
// the same bridge) resume after ID: the upstream's replay is stored again, past the duplicate window.
func TestCursorShowAndRestart(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	const n = 200
	up := simtest.Start(t, false, sim.Options{EventRate: 400, EventLimit: n})
	cfg := up.Config(ns.URL(), func(c *config.Config) { c.DuplicateWindow = 100 * time.Millisecond; c.LeaseTTL = 5 * time.Second })
	b := opsStartBridge(t, cfg)
	b.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	last := sim.EventID(n) // the simulator generates it later: GeneratedEvent would still say ""
	testutil.EventuallyState(t, 30*time.Second, "every event stored", func() (bool, string) {
		return b.status(t).Stream.ResumeAfter == last, b.status(t).Stream.ResumeAfter
	})
	cfg = b.b.cfg
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	c, err := ShowCursor(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	self := b.status(t).Lease.Self
	if c.LastEvent != last || c.ResumeAfter == "" || c.ResumeAfter > last || c.Holder == nil ||
		c.Holder.Instance != self.Instance || c.Stream != "TRACKING_EVENTS" {
		t.Fatalf("cursor show = %+v (holder %+v), want the last event %s held by %+v", c, c.Holder, last, self)
	}

	const from = 150
	after := sim.EventID(from)
	epoch := c.Holder.Epoch
	msg, err := RequestRestart(ctx, cfg, after, false)
	if err != nil {
		t.Fatalf("cursor restart: %v (%s)", err, msg)
	}
	t.Log(msg)
	testutil.EventuallyState(t, 30*time.Second, "the replay after "+after+" stored", func() (bool, string) {
		got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return got == n+n-from, fmt.Sprint(got)
	})
	st := b.status(t)
	if st.Role != "leader" || st.Lease.Holder == nil || st.Lease.Holder.Epoch <= epoch {
		t.Errorf("after the restart: role %s, holder %+v; want a new epoch after %d", st.Role, st.Lease.Holder, epoch)
	}
	if !strings.Contains(b.logs.String(), "restarting the upstream stream after the requested id") {
		t.Error("no log line says the stream restarts after the requested id")
	}
	// The replay's messages name a resume point from the requested id on (the window's lag).
	if c, err = ShowCursor(ctx, cfg); err != nil || c.LastEvent != last || c.ResumeAfter < after {
		t.Errorf("cursor show after the replay = %+v, %v; want the last event %s and a resume point from %s on", c, err, last, after)
	}
	if _, err := RequestRestart(ctx, cfg, "", false); err == nil {
		t.Error("a restart with neither an id nor the beginning was accepted")
	}
}

// TestForeignLeaseValue: a value in the lease key that is not a bridge's lease (another client's write,
// with no TTL) keeps no bridge from leading for long: one found at start-up counts as expired one TTL
// after the bridge saw it; one written while the bridge leads is written over at once, and the bridge
// leads on. Every event is stored once.
func TestForeignLeaseValue(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	const ttl = 2 * time.Second
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "TRACKING_LEASES", History: 1,
		Storage: jetstream.FileStorage, LimitMarkerTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	// forge returns when it sent the value: the bridge's watch may see it before the acknowledgement
	// reaches the test.
	forge := func(value string) time.Time {
		t.Helper()
		sent := time.Now()
		if _, err := js.Publish(ctx, "$KV.TRACKING_LEASES.events", []byte(value)); err != nil {
			t.Fatal(err)
		}
		return sent
	}
	const n = 1500
	up := simtest.Start(t, false, sim.Options{EventRate: 200, EventLimit: n})
	cfg := up.Config(ns.URL(), func(c *config.Config) { c.DuplicateWindow = 100 * time.Millisecond; c.LeaseTTL = ttl })
	written := forge("{}")
	b := opsStartBridge(t, cfg)
	testutil.EventuallyState(t, 2*ttl+3*time.Second, "the bridge leads despite the value found", func() (bool, string) {
		return b.status(t).Role == "leader", ""
	})
	t.Logf("leading %v after the foreign value found at start was written", time.Since(written))
	testutil.EventuallyState(t, 30*time.Second, "some events stored", func() (bool, string) {
		return opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS") >= n/5, ""
	})

	// A foreign value while the bridge leads: it writes its lease back at once and leads on.
	forge("\x00garbage")
	testutil.EventuallyState(t, 5*time.Second, "the lease written back", func() (bool, string) {
		e, err := kv.Get(ctx, "events")
		if err != nil {
			return false, err.Error()
		}
		return strings.Contains(string(e.Value()), b.b.events.Self().Instance), string(e.Value())
	})
	if st := b.status(t); st.Role != "leader" {
		t.Errorf("role %q after a foreign value was written while leading, want leader", st.Role)
	}
	if logs := b.logs.String(); strings.Contains(logs, "stopped leading") {
		t.Errorf("the leader stopped leading over a foreign value:\n%s", logs)
	}
	// An event the upstream sends after the foreign write is stored too: the event path runs on.
	up.Sim().Inject("demo", "after-takeover", "GATE_IN",
		[]byte(`{"id":"after-takeover","timestamp":"2026-11-25T08:30:00Z","type":"GATE_IN"}`))
	testutil.EventuallyState(t, 60*time.Second, "every event stored", func() (bool, string) {
		got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return got >= n+1, fmt.Sprint(got)
	})
	seen := map[string]bool{}
	for _, m := range testutil.StreamContents(t, js, "TRACKING_EVENTS") {
		if id := m.Header.Get("Nats-Msg-Id"); seen[id] {
			t.Errorf("event %s stored twice", id)
		} else {
			seen[id] = true
		}
	}
	if len(seen) != n+1 || !seen["after-takeover"] {
		t.Errorf("%d events stored (the one after the takeover: %v), want %d", len(seen), seen["after-takeover"], n+1)
	}
	// One line for both: foreign writes are logged at most once a minute.
	if got := strings.Count(b.logs.String(), "the lease key holds a value no bridge wrote"); got != 1 {
		t.Errorf("%d log lines name a foreign value, want 1", got)
	}
}
