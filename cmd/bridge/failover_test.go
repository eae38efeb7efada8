package main

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// The timing of every test: BRIDGE_LEASE_TTL and BRIDGE_DUPLICATE_WINDOW as newRig sets them.
const (
	leaseTTL  = 2 * time.Second
	dupWindow = time.Second
	// failoverBound is the generous bound on a failover after SIGKILL, SIGSTOP or a cut: the lease's TTL
	// and 5 s for a shared, noisy machine.
	failoverBound = leaseTTL + 5*time.Second
	// cleanStopBound bounds a handover after SIGTERM: the old leader releases the lease as it stops.
	cleanStopBound = 5 * time.Second
)

// TestFailoverOnCluster is the long failover run on a 3-node cluster: three bridges with R3 streams and
// lease bucket, each connected to a node of its own through a proxy of its own, the simulator streaming
// 50 events a second and a producer publishing 10 reports a second. In turn the leader is killed with
// SIGKILL, stopped with SIGTERM, paused with SIGSTOP past the lease's TTL and the duplicate window, and cut
// off from NATS (its proxy frozen) as long; then the node leading the events stream's raft group is
// stopped and started again. Reports flow throughout but around each fault, where one in flight could
// wait out the report consumer's ack wait (2 minutes at least) to come back. At the end every event the
// simulator emitted is in the events stream exactly once, every event was stored under the fence marker
// of the leader in office, every report was accepted upstream once, and an event carrying a former
// leader's fence is refused.
func TestFailoverOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("the long failover run on a 3-node cluster")
	}
	// Not parallel: it runs alone before the others. With them beside it on a busy machine, a report in
	// flight was once not accepted within the 30 s its pauses wait.
	c := testutil.StartCluster(t)
	r := newRig(t, sim.Options{EventRate: 50}, c.Connect(), map[string]string{"BRIDGE_STREAM_REPLICAS": "3"})
	start := time.Now()
	for i, name := range []string{"a", "b", "c"} {
		r.addBridge(name, c.NodeURL(i), true)
	}
	leader := r.waitLeader(60*time.Second, nil)
	r.measure("first leader after start-up", time.Since(start))
	for _, b := range r.bridges {
		if b != leader {
			b.waitStandby(60 * time.Second)
		}
	}
	r.waitEvents(300, 60*time.Second)
	rp := r.startReporter(100 * time.Millisecond)

	r.phase("SIGKILL to %s", leader.name)
	// SIGKILL. No report may be in flight in the killed bridge: it would come back only after the report
	// consumer's ack wait (2 minutes at least), which no test waits for.
	rp.pause(30 * time.Second)
	from := time.Now()
	leader.kill()
	next := r.takeover("SIGKILL", leader, from, failoverBound)
	rp.resume()
	leader.start()
	leader.waitStandby(30 * time.Second)
	r.waitMoreEvents(100, 30*time.Second)
	leader = next

	r.phase("SIGTERM to %s", leader.name)
	// SIGTERM: a clean stop hands the lease over at once. A stopping bridge hands back the reports it
	// fetched, but on a cluster the consumer's leader can send one to its pull request in the instant the
	// bridge withdraws it (the withdrawal reaches that node over a route): that report comes back only
	// after the ack wait. So none is published meanwhile.
	rp.pause(30 * time.Second)
	from = time.Now()
	leader.signal(syscall.SIGTERM)
	next = r.takeover("SIGTERM", leader, from, cleanStopBound)
	rp.resume()
	leader.waitExit()
	leader.start()
	leader.waitStandby(30 * time.Second)
	r.waitMoreEvents(100, 30*time.Second)
	leader = next

	r.phase("SIGSTOP to %s", leader.name)
	// SIGSTOP for longer than the lease's TTL and the duplicate window: whatever it had on its way to
	// NATS must be refused once it runs again. No report may be in flight in the paused bridge either:
	// once it runs again its client finds its pings long unanswered and reconnects, and the
	// acknowledgement of a report in flight is lost with the old connection (back after the ack wait).
	rp.pause(30 * time.Second)
	from = time.Now()
	leader.signal(syscall.SIGSTOP)
	next = r.takeover("SIGSTOP", leader, from, failoverBound)
	rp.resume()
	pastWindow(t, r, from)
	cont := time.Now()
	leader.signal(syscall.SIGCONT)
	leader.waitStandby(30 * time.Second)
	r.measure("SIGSTOP: the paused leader a standby again after SIGCONT", time.Since(cont))
	r.waitMoreEvents(100, 30*time.Second)
	if !next.leads() {
		t.Errorf("bridge %s no longer leads after the paused bridge came back", next.name)
	}
	leader = next

	r.phase("%s cut off from NATS", leader.name)
	// Cut off from NATS: the proxy stops forwarding, in both directions, without closing anything. The
	// bridge's client finds the connection stale after two unanswered pings and reconnects (to another
	// node it learnt of, past the proxy): a report on its way to it in the old connection is lost with it
	// and comes back only after the ack wait, as after SIGKILL. So none is published meanwhile.
	rp.pause(30 * time.Second)
	from = time.Now()
	leader.px.Freeze()
	next = r.takeover("NATS cut off (proxy frozen)", leader, from, failoverBound)
	pastWindow(t, r, from)
	thaw := time.Now()
	leader.px.Thaw()
	leader.waitStandby(30 * time.Second)
	r.measure("NATS cut off: the old leader a standby again after the thaw", time.Since(thaw))
	rp.resume()
	r.waitMoreEvents(100, 30*time.Second)
	leader = next

	r.phase("stopping the events stream's leader node")
	// The node that leads the events stream's raft group stops, and comes back. No report may be on its
	// way through that node: one lost with it would come back only after the ack wait, as after SIGKILL.
	rp.pause(30 * time.Second)
	node := streamLeaderNode(t, r, c)
	t.Logf("stopping node %s, the events stream's leader; bridge %s leads", c.Name(node), leader.name)
	from = time.Now()
	c.StopNode(node)
	r.waitMoreEvents(1, 60*time.Second)
	r.measure("stream leader's node stopped: first event stored after", time.Since(from))
	rp.resume()
	r.waitMoreEvents(100, 60*time.Second)
	c.StartNode(node)
	c.WaitReady()
	r.waitMoreEvents(100, 60*time.Second)
	r.waitLeader(30*time.Second, nil)

	r.phase("finishing the reports")
	rp.finish(r, 60*time.Second)
	r.phase("verifying")
	terms := r.verify(90 * time.Second)
	// A write that carries a former leader's fence, as a stale leader's would, is refused, and stores
	// nothing.
	r.checkStaleWriteRefused(terms)
	r.summary()
}

// pastWindow waits until the lease's TTL and the duplicate window have passed since from, with a second
// to spare, while the next leader stores events: whatever the old leader sent before from is then beyond
// JetStream's deduplication.
func pastWindow(t *testing.T, r *rig, from time.Time) {
	t.Helper()
	n, _ := r.events()
	testutil.Eventually(t, 30*time.Second, "the TTL and the duplicate window passed, events stored meanwhile", func() bool {
		c, err := r.events()
		return err == nil && c > n && time.Since(from) > leaseTTL+dupWindow+time.Second
	})
}

// streamLeaderNode returns the index of the node that leads the events stream, from the stream's
// cluster information.
func streamLeaderNode(t *testing.T, r *rig, c *testutil.Cluster) int {
	t.Helper()
	node := -1
	testutil.EventuallyState(t, 30*time.Second, "the events stream has a leader", func() (bool, string) {
		ctx, cancel := opCtx()
		defer cancel()
		s, err := r.js.Stream(ctx, eventsStream)
		if err != nil {
			return false, err.Error()
		}
		info := s.CachedInfo()
		if info.Cluster == nil {
			return false, "no cluster information"
		}
		for i := range c.Size() {
			if c.Name(i) == info.Cluster.Leader {
				node = i
			}
		}
		return node >= 0, fmt.Sprintf("leader %q", info.Cluster.Leader)
	})
	return node
}

// TestRollingUpdate: a new replica starts and becomes ready as a standby, then the old one gets SIGTERM,
// as a Kubernetes rolling update does it; three times over, on one server, while events stream at 200 a
// second and reports are published. Nothing is lost, nothing doubled; the handover times are logged.
func TestRollingUpdate(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	r := newRig(t, sim.Options{EventRate: 200}, ns.Connect(), nil)
	old := r.addBridge("v1", ns.URL(), false)
	if l := r.waitLeader(30*time.Second, nil); l != old {
		t.Fatalf("bridge %s leads, want %s", l.name, old.name)
	}
	r.waitEvents(200, 30*time.Second)
	rp := r.startReporter(20 * time.Millisecond)
	rounds := 3
	if testing.Short() {
		rounds = 1
	}
	for i := range rounds {
		nw := r.addBridge(fmt.Sprintf("v%d", i+2), ns.URL(), false)
		nw.waitReady(30 * time.Second)
		nw.waitStandby(30 * time.Second)
		r.phase("SIGTERM to %s", old.name)
		from := time.Now()
		old.signal(syscall.SIGTERM)
		if next := r.takeover(fmt.Sprintf("rolling update %d (SIGTERM to the old replica)", i+1), old, from,
			cleanStopBound); next != nw {
			t.Fatalf("bridge %s leads, want %s", next.name, nw.name)
		}
		old.waitExit()
		r.waitMoreEvents(100, 30*time.Second)
		old = nw
	}
	r.phase("finishing the reports")
	rp.finish(r, 30*time.Second)
	r.phase("verifying")
	r.verify(60 * time.Second)
	r.summary()
}

// TestFencingOnOneServer: on one server the publisher keeps a window of up to 1,024 publishes in flight,
// so a leader that is cut off or paused has many of them on their way when the next leader takes over
// (without the fence, one 20 s pause once left 6,290 duplicates: docs/replicas.md). Two bridges, each through a
// proxy of its own, 400 events a second; the leader's proxy is frozen, then the next leader is paused with
// SIGSTOP, each past the lease's TTL and the duplicate window. Whatever they had on the way reaches the
// server after the takeover and must be refused: every event exactly once, each under its leader's fence.
func TestFencingOnOneServer(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover run")
	}
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	r := newRig(t, sim.Options{EventRate: 400}, ns.Connect(), nil)
	r.addBridge("a", ns.URL(), true)
	r.addBridge("b", ns.URL(), true)
	leader := r.waitRoles(30 * time.Second)
	r.waitEvents(600, 30*time.Second)

	r.phase("%s cut off from NATS", leader.name)
	from := time.Now()
	leader.px.Freeze()
	next := r.takeover("one server, NATS cut off (proxy frozen)", leader, from, failoverBound)
	pastWindow(t, r, from)
	leader.px.Thaw()
	leader.waitStandby(30 * time.Second)
	r.waitMoreEvents(300, 30*time.Second)
	leader = next

	r.phase("SIGSTOP to %s", leader.name)
	from = time.Now()
	leader.signal(syscall.SIGSTOP)
	r.takeover("one server, SIGSTOP", leader, from, failoverBound)
	pastWindow(t, r, from)
	leader.signal(syscall.SIGCONT)
	leader.waitStandby(30 * time.Second)
	r.waitMoreEvents(300, 30*time.Second)

	r.phase("verifying")
	r.verify(60 * time.Second)
	for _, b := range r.bridges {
		if n := strings.Count(b.out.String(), "events refused by the fence"); n > 0 {
			t.Logf("bridge %s logged %d refusals by the fence", b.name, n)
		}
	}
	r.summary()
}

// TestStopDuringTakeover: a bridge that has just taken over is stopped with SIGTERM once it stored its
// fence markers, while it is still reading the resume cursor (a few thousand events in the stream make
// that read take a second or more).
// It has published nothing, so a clean stop should release the lease at once, as any clean stop does:
// without reading the cursor again first, and the third bridge should take over within a fraction of a
// second (bounded here by 2 s; a release after the lease's TTL is what a crash costs).
func TestStopDuringTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover run")
	}
	t.Parallel()
	const n = 3000
	ns := testutil.StartNATS(t, nil)
	r := newRig(t, sim.Options{EventRate: -1, EventLimit: n}, ns.Connect(), nil)
	for _, name := range []string{"a", "b", "c"} {
		r.addBridge(name, ns.URL(), false)
	}
	first := r.waitLeader(30*time.Second, nil)
	r.waitEvents(n, 60*time.Second)
	for _, b := range r.bridges {
		if b != first {
			b.waitStandby(30 * time.Second)
		}
	}
	first.signal(syscall.SIGTERM)
	second := r.waitLeader(30*time.Second, first)
	// Its markers stored, its cursor being read.
	testutil.Eventually(t, 30*time.Second, second.name+" claimed the fence", func() bool {
		return strings.Contains(second.out.String(), `"msg":"fence claimed"`)
	})
	if strings.Contains(second.out.String(), `"msg":"resuming"`) {
		t.Fatalf("bridge %s read the cursor before the test could stop it", second.name)
	}
	from := time.Now()
	second.signal(syscall.SIGTERM)
	var third *bridge
	testutil.EventuallyState(t, 30*time.Second, "a third bridge leads", func() (bool, string) {
		for _, b := range r.bridges {
			if b != first && b != second && b.leads() {
				third = b
				return true, ""
			}
		}
		return false, grepLines(second.out.String(), 6, `"component":"lease"`, `"component":"leader"`)
	})
	d := time.Since(from)
	r.measure("SIGTERM during the takeover's cursor read: next leader", d)
	first.waitExit()
	second.waitExit()
	if d > 2*time.Second {
		t.Errorf("the bridge stopped during its takeover handed over after %v; its lease and leader lines:\n%s", d,
			grepLines(second.out.String(), 8, `"component":"lease"`, `"component":"leader"`, `"msg":"fence claimed"`,
				`"msg":"resuming"`))
	}
	// The term that was reading the cursor ends with its stream; nothing was published, so nothing needs
	// settling: reading the cursor again before the release only delays the next leader (and outlasts the
	// publish timeout on a replicated stream: "publishes unsettled", and the key expires instead).
	out := second.out.String()
	if stopped := strings.Index(out, `"msg":"stopped leading"`); stopped >= 0 &&
		strings.Contains(out[stopped:], `"msg":"resuming"`) {
		t.Errorf("the bridge stopped during its takeover read the resume cursor again after it stopped leading, "+
			"before releasing the lease:\n%s", grepLines(out, 6, `"msg":"stopped leading"`, `"msg":"resuming"`,
			`"msg":"in-flight publishes completed"`, `"msg":"released the lease"`, `"msg":"cannot release`))
	}
	if strings.Contains(out, "stopped leading with publishes unsettled") {
		t.Errorf("the bridge stopped during its takeover, which published nothing, reported publishes unsettled")
	}
	testutil.EventuallyState(t, 30*time.Second, "the third leader settled every event", func() (bool, string) {
		st, err := third.status()
		return err == nil && st.Stream.ResumeAfter == sim.EventID(n), fmt.Sprintf("%+v %v", st, err)
	})
	r.verify(30 * time.Second)
	r.summary()
}
