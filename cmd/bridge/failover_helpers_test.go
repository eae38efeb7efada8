package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// Names of the default prefix "tracking" (docs/subjects.md#streams).
const (
	eventsStream  = "TRACKING_EVENTS"
	reportsStream = "TRACKING_REPORTS"
	dlqStream     = "TRACKING_DLQ"
	fenceBase     = "tracking.leader" // the fence subjects are P.leader.<n>, restart directives P.leader.restart
	fenceFilter   = fenceBase + ".>"
	reportSubject = "tracking.reports"
	user          = "demo" // the simulator's default user, whom simtest's environment logs in as
)

// rig is one set-up: the simulator over HTTP on loopback, NATS (one server or a cluster), the test's own
// NATS connection, and the bridges, each a child process of the built binary.
type rig struct {
	t   *testing.T
	bin string
	up  *simtest.Upstream
	nc  *nats.Conn
	js  jetstream.JetStream
	// env is every bridge's configuration but BRIDGE_NATS_URL and BRIDGE_HTTP_ADDR.
	env     map[string]string
	bridges []*bridge

	start    time.Time // when the rig was set up, for phase
	mu       sync.Mutex
	measured []string // the failover times, logged again at the end
}

// bridge is one bridge replica: its HTTP address, its NATS URL (a proxy's when it has one) and its runs.
// A restart is a new process with the same configuration.
type bridge struct {
	r     *rig
	name  string
	addr  string
	nats  string
	px    *testutil.Proxy // nil when the bridge connects to NATS directly
	out   *testutil.Buffer
	env   map[string]string // the current run's configuration
	proc  *testutil.Process
	runs  int
	pause bool // stopped with SIGSTOP: it answers nothing until SIGCONT
}

// newRig starts the simulator with options o and prepares the bridges' common configuration; nc is the
// test's own connection to NATS (a cluster connection or a single server's).
func newRig(t *testing.T, o sim.Options, nc *nats.Conn, extra map[string]string) *rig {
	t.Helper()
	r := &rig{t: t, bin: bridgeBinary(t), nc: nc, start: time.Now()}
	r.up = simtest.Start(t, false, o)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	r.js = js
	r.env = r.up.Env("", map[string]string{
		"BRIDGE_LOG_LEVEL":        "info",
		"BRIDGE_LEASE_TTL":        "2s",
		"BRIDGE_DUPLICATE_WINDOW": "1s",
		"BRIDGE_PUBLISH_TIMEOUT":  "3s",
		"BRIDGE_SHUTDOWN_TIMEOUT": "5s",
		"BRIDGE_RECONNECT_MIN":    "50ms",
		"BRIDGE_RECONNECT_MAX":    "500ms",
		// One report in flight per bridge: a bridge killed with SIGKILL holds back only what it fetched,
		// for the consumer's ack wait (at least 2 minutes).
		"BRIDGE_REPORT_CONCURRENCY": "1",
		"BRIDGE_REPORT_BACKOFF_MIN": "100ms",
		"BRIDGE_REPORT_BACKOFF_MAX": "1s",
	})
	for k, v := range extra {
		r.env[k] = v
	}
	t.Cleanup(r.dumpLogs)
	return r
}

// addBridge adds and starts a bridge that connects to natsURL, through a proxy of its own when proxied.
func (r *rig) addBridge(name, natsURL string, proxied bool) *bridge {
	r.t.Helper()
	b := &bridge{r: r, name: name, addr: testutil.FreeAddr(r.t), nats: natsURL, out: &testutil.Buffer{}}
	if proxied {
		b.px = testutil.StartProxy(r.t, natsURL)
		b.nats = b.px.URL()
	}
	r.bridges = append(r.bridges, b)
	b.start()
	return b
}

// start starts a new run of the bridge, the previous one having exited, and waits until its /status
// answers for its own pid. The HTTP port was free when it was picked, but another process may take it
// before the bridge binds it; the bridge then exits, and starts again on another port.
func (b *bridge) start() {
	t := b.r.t
	t.Helper()
	if b.proc != nil && !b.proc.Exited() {
		t.Fatalf("bridge %s: started while its pid %d runs", b.name, b.proc.PID())
	}
	for attempt := 0; ; attempt++ {
		env := make(map[string]string, len(b.r.env)+2)
		for k, v := range b.r.env {
			env[k] = v
		}
		env["BRIDGE_NATS_URL"] = b.nats
		env["BRIDGE_HTTP_ADDR"] = b.addr
		b.env = env
		b.runs++
		fmt.Fprintf(b.out, "=== %s run %d\n", b.name, b.runs)
		b.proc = testutil.StartProcess(t, b.out, b.r.bin, []string{"run"}, env)
		b.pause = false
		var up bool
		testutil.Eventually(t, 30*time.Second, b.name+" answers /status", func() bool {
			st, err := b.status()
			up = err == nil && st.Lease.Self.PID == b.proc.PID()
			return up || b.proc.Exited()
		})
		if up {
			return
		}
		if attempt == 3 || !strings.Contains(b.out.String(), "address already in use") {
			t.Fatalf("bridge %s exited at start-up:\n%s", b.name, tail(b.out.String(), 20))
		}
		b.addr = testutil.FreeAddr(t)
	}
}

// running reports whether the bridge's process runs and answers (not stopped with SIGSTOP).
func (b *bridge) running() bool { return b.proc != nil && !b.proc.Exited() && !b.pause }

// signal sends sig to the bridge's current process.
func (b *bridge) signal(sig syscall.Signal) {
	b.r.t.Helper()
	if err := b.proc.Signal(sig); err != nil {
		b.r.t.Fatal(err)
	}
	switch sig {
	case syscall.SIGSTOP:
		b.pause = true
	case syscall.SIGCONT:
		b.pause = false
	}
}

// kill kills the bridge with SIGKILL and waits until the process is gone.
func (b *bridge) kill() {
	b.r.t.Helper()
	b.signal(syscall.SIGKILL)
	if exited, _ := b.proc.Wait(10 * time.Second); !exited {
		b.r.t.Fatalf("bridge %s: pid %d still there 10s after SIGKILL", b.name, b.proc.PID())
	}
}

// stop stops the bridge with SIGTERM and checks that it exits 0 within its shutdown timeout and a margin.
func (b *bridge) stop() {
	b.r.t.Helper()
	b.signal(syscall.SIGTERM)
	b.waitExit()
}

// waitExit waits until the bridge exits after SIGTERM, and checks that it exits 0 within its shutdown
// timeout and a margin.
func (b *bridge) waitExit() {
	b.r.t.Helper()
	exited, err := b.proc.Wait(20 * time.Second)
	switch {
	case !exited:
		b.r.t.Fatalf("bridge %s: pid %d still running 20s after SIGTERM", b.name, b.proc.PID())
	case err != nil:
		b.r.t.Errorf("bridge %s: pid %d exited with %v after SIGTERM, want 0", b.name, b.proc.PID(), err)
	}
}

// status is the part of GET /status the tests read (docs/delivery.md#replicas-one-leader-fenced).
type status struct {
	Ready bool   `json:"ready"`
	Role  string `json:"role"`
	Lease struct {
		Self   holder  `json:"self"`
		Holder *holder `json:"holder"`
	} `json:"lease"`
	Stream struct {
		State          string `json:"state"`
		LastReceivedID string `json:"last_received_id"`
		ResumeAfter    string `json:"resume_after"`
		Duplicates     uint64 `json:"duplicates"`
	} `json:"stream"`
	NATS struct {
		Connected bool `json:"connected"`
	} `json:"nats"`
}

type holder struct {
	Name     string `json:"name"`
	PID      int    `json:"pid"`
	Instance string `json:"instance"`
	Epoch    uint64 `json:"epoch"`
}

var statusClient = &http.Client{Timeout: 2 * time.Second}

// status reads the bridge's /status.
func (b *bridge) status() (status, error) {
	var st status
	resp, err := statusClient.Get("http://" + b.addr + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET /status: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// leads reports whether the bridge answers /status as the leader, and is the lease's holder by its pid.
func (b *bridge) leads() bool {
	if !b.running() {
		return false
	}
	st, err := b.status()
	return err == nil && st.Role == "leader" && st.Lease.Self.PID == b.proc.PID()
}

// waitLeader waits until one of the running bridges but except leads, and returns it; with more than
// one, the test fails.
func (r *rig) waitLeader(within time.Duration, except *bridge) *bridge {
	r.t.Helper()
	var leader *bridge
	testutil.EventuallyState(r.t, within, "a bridge leads", func() (bool, string) {
		var leaders []*bridge
		var state []string
		for _, b := range r.bridges {
			if b == except || !b.running() {
				continue
			}
			st, err := b.status()
			state = append(state, fmt.Sprintf("%s: role %q err %v", b.name, st.Role, err))
			if err == nil && st.Role == "leader" {
				leaders = append(leaders, b)
			}
		}
		if len(leaders) > 1 {
			r.t.Fatalf("two bridges answer as the leader at once: %s", strings.Join(state, "; "))
		}
		if len(leaders) == 1 {
			leader = leaders[0]
		}
		return leader != nil, strings.Join(state, "\n")
	})
	return leader
}

// waitRoles waits for a leader among the bridges, then for every other to stand by, each within within,
// and returns the leader.
func (r *rig) waitRoles(within time.Duration) *bridge {
	r.t.Helper()
	leader := r.waitLeader(within, nil)
	for _, b := range r.bridges {
		if b != leader {
			b.waitStandby(within)
		}
	}
	return leader
}

// waitStandby waits until the bridge runs as a ready standby that knows the lease's holder (another
// bridge): it competes for the lease then, and takes over when the holder goes.
func (b *bridge) waitStandby(within time.Duration) {
	b.r.t.Helper()
	testutil.EventuallyState(b.r.t, within, b.name+" is a standby", func() (bool, string) {
		st, err := b.status()
		return err == nil && st.Role == "standby" && st.Ready && st.NATS.Connected && st.Lease.Holder != nil &&
			st.Lease.Holder.PID != b.proc.PID(), fmt.Sprintf("%+v %v", st, err)
	})
}

// waitReady waits until the bridge answers /readyz with 200.
func (b *bridge) waitReady(within time.Duration) {
	b.r.t.Helper()
	testutil.Eventually(b.r.t, within, b.name+" is ready", func() bool {
		resp, err := statusClient.Get("http://" + b.addr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// measure logs a measured time and keeps it for the summary.
func (r *rig) measure(what string, d time.Duration) {
	r.t.Helper()
	line := fmt.Sprintf("%-58s %8.3fs", what, d.Seconds())
	r.t.Log(line)
	r.mu.Lock()
	r.measured = append(r.measured, line)
	r.mu.Unlock()
}

// phase logs the start of a phase of the test, with the time since the rig was set up.
func (r *rig) phase(format string, args ...any) {
	r.t.Helper()
	r.t.Logf("[%6.2fs] %s", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

// summary logs every measured time again, together.
func (r *rig) summary() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.t.Logf("measured:\n%s", strings.Join(r.measured, "\n"))
}

// dumpLogs writes every bridge's log to FAILOVER_LOG_DIR when set, and the tail of each to the test log
// when the test failed.
func (r *rig) dumpLogs() {
	dir := os.Getenv("FAILOVER_LOG_DIR")
	for _, b := range r.bridges {
		logs := b.out.String()
		if dir != "" {
			name := strings.NewReplacer("/", "_", " ", "_").Replace(r.t.Name()) + "-" + b.name + ".log"
			_ = os.WriteFile(filepath.Join(dir, name), []byte(logs), 0o644)
		}
		if r.t.Failed() {
			r.t.Logf("bridge %s, last lines:\n%s", b.name, tail(logs, 40))
		}
	}
}

// grepLines returns the last n lines of s that contain any of parts.
func grepLines(s string, n int, parts ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, p := range parts {
			if strings.Contains(line, p) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out[max(0, len(out)-n):], "\n")
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// opCtx is the context of one request to NATS made by the test.
func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// lastSeq returns the events stream's last sequence, or an error while it cannot be read (a cluster
// electing a leader).
func (r *rig) lastSeq() (uint64, error) {
	ctx, cancel := opCtx()
	defer cancel()
	s, err := r.js.Stream(ctx, eventsStream)
	if err != nil {
		return 0, err
	}
	return s.CachedInfo().State.LastSeq, nil
}

// events returns how many events the events stream holds (fence markers left out), or an error while it
// cannot be read.
func (r *rig) events() (int, error) {
	ctx, cancel := opCtx()
	defer cancel()
	s, err := r.js.Stream(ctx, eventsStream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(fenceFilter))
	if err != nil {
		return 0, err
	}
	n := int(info.State.Msgs)
	for _, c := range info.State.Subjects {
		n -= int(c)
	}
	return n, nil
}

// waitEvents waits until the events stream holds at least n events, and returns how many it holds; it
// fails when their number has not grown for stall (a busy machine stores them several times slower).
func (r *rig) waitEvents(n int, stall time.Duration) int {
	r.t.Helper()
	var got int
	testutil.EventuallyCount(r.t, stall, fmt.Sprintf("%d events stored", n), n, func() int {
		if c, err := r.events(); err == nil {
			got = c
		}
		return got
	})
	return got
}

// waitMoreEvents waits until the events stream holds more events than now by at least n.
func (r *rig) waitMoreEvents(n int, within time.Duration) int {
	r.t.Helper()
	var now int
	testutil.Eventually(r.t, within, "the events stream can be read", func() bool {
		c, err := r.events()
		now = c
		return err == nil
	})
	return r.waitEvents(now+n, within)
}

// lastMarker returns the sequence of the newest message on the fence subjects, 0 when there is none.
func (r *rig) lastMarker() (uint64, error) {
	ctx, cancel := opCtx()
	defer cancel()
	s, err := r.js.Stream(ctx, eventsStream)
	if err != nil {
		return 0, err
	}
	m, err := s.GetLastMsgForSubject(ctx, fenceFilter)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// takeover waits for the next leader after the leader old stopped leading at from, and returns it. It
// measures the time from `from` to the first /status that names the new leader, which must come within
// bound, and to the first event stored under the new leader's marker; what names the failover in the log.
func (r *rig) takeover(what string, old *bridge, from time.Time, bound time.Duration) *bridge {
	r.t.Helper()
	const within = 30 * time.Second
	next := r.waitLeader(within, old)
	d := time.Since(from)
	r.measure(what+": next leader's /status says leader", d)
	if d > bound {
		r.t.Errorf("%s: the next leader took over after %v, want within %v", what, d, bound)
	}
	if bound == cleanStopBound && d > time.Second {
		// A clean stop releases the lease at once: show why this one did not.
		r.t.Logf("%s: slow handover; the old leader's last lines of the lease and the event path:\n%s", what,
			grepLines(old.out.String(), 8, `"component":"lease"`, `"component":"leader"`, `"component":"publish"`))
	}
	var marker uint64
	testutil.Eventually(r.t, within, "the new leader's fence marker", func() bool {
		m, err := r.lastMarker()
		marker = m
		return err == nil && m > 0
	})
	testutil.Eventually(r.t, within, "an event stored by the new leader", func() bool {
		last, err := r.lastSeq()
		if err != nil {
			return false
		}
		if m, err := r.lastMarker(); err == nil && m > marker {
			marker = m // the marker read first was an older term's
		}
		return last > marker
	})
	r.measure(what+": first event stored by the next leader", time.Since(from))
	return next
}
