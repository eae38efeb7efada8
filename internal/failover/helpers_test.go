package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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

// Names of the default prefix "tracking" (contract §3 and §6).
const (
	eventsStream  = "TRACKING_EVENTS"
	reportsStream = "TRACKING_REPORTS"
	dlqStream     = "TRACKING_DLQ"
	fenceSubject  = "tracking.leader"
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

// start starts a new run of the bridge; the previous one must have exited.
func (b *bridge) start() {
	t := b.r.t
	t.Helper()
	if b.proc != nil && !b.proc.Exited() {
		t.Fatalf("bridge %s: started while its pid %d runs", b.name, b.proc.PID())
	}
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

// status is the part of GET /status the tests read (contract §6).
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
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(fenceSubject))
	if err != nil {
		return 0, err
	}
	return int(info.State.Msgs) - int(info.State.Subjects[fenceSubject]), nil
}

// waitEvents waits until the events stream holds at least n events, and returns how many it holds.
func (r *rig) waitEvents(n int, within time.Duration) int {
	r.t.Helper()
	var got int
	testutil.EventuallyState(r.t, within, fmt.Sprintf("%d events stored", n), func() (bool, string) {
		c, err := r.events()
		got = c
		return err == nil && c >= n, fmt.Sprintf("%d events, err %v", c, err)
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

// lastMarker returns the sequence of the last fence marker, 0 when there is none.
func (r *rig) lastMarker() (uint64, error) {
	ctx, cancel := opCtx()
	defer cancel()
	s, err := r.js.Stream(ctx, eventsStream)
	if err != nil {
		return 0, err
	}
	m, err := s.GetLastMsgForSubject(ctx, fenceSubject)
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

// stored is one message of the events stream, fence markers included.
type stored struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
}

// readStream returns every message of the events stream, fence markers included, in sequence order.
func (r *rig) readStream() []stored {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	s, err := r.js.Stream(ctx, eventsStream)
	if err != nil {
		r.t.Fatal(err)
	}
	last := s.CachedInfo().State.LastSeq
	if last == 0 {
		return nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		r.t.Fatal(err)
	}
	var out []stored
	for len(out) == 0 || out[len(out)-1].seq < last {
		// No more than remain, so that the fetch returns as soon as they arrived.
		remain := last
		if len(out) > 0 {
			remain -= out[len(out)-1].seq
		}
		batch, err := c.Fetch(int(min(1000, remain)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			r.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				r.t.Fatal(err)
			}
			out = append(out, stored{seq: md.Sequence.Stream, subject: m.Subject(), header: m.Headers(), data: m.Data()})
			n++
		}
		if err := batch.Error(); err != nil {
			r.t.Fatal(err)
		}
		if n == 0 {
			r.t.Fatalf("events stream: read %d messages up to sequence %d of %d, then nothing", len(out),
				out[len(out)-1].seq, last)
		}
	}
	return out
}

// term is one leader's period as the events stream records it: its marker and the events stored under it.
type term struct {
	seq    uint64 // the marker's sequence
	leader string // Bridge-Leader: the holder's name, or "operator" for a restart directive
	holder holder // the marker's body, for a leader's marker
	events int
}

// checkFencing checks that every event in msgs was stored under the latest fence marker before it: its
// Nats-Expected-Last-Subject-Sequence names that marker, on the fence subject. JetStream checks this at
// store time; the test checks that the publisher asked for it on every event, and that the server kept
// to it across every failover. It returns the terms in order.
func checkFencing(t *testing.T, msgs []stored) []term {
	t.Helper()
	var terms []term
	bad := 0
	for _, m := range msgs {
		if m.subject == fenceSubject {
			tm := term{seq: m.seq, leader: m.header.Get("Bridge-Leader")}
			_ = json.Unmarshal(m.data, &tm.holder)
			terms = append(terms, tm)
			continue
		}
		id := m.header.Get("Nats-Msg-Id")
		fenceSeq := m.header.Get(jetstream.ExpectedLastSubjSeqHeader)
		fenceSubj := m.header.Get(jetstream.ExpectedLastSubjSeqSubjHeader)
		var want uint64
		if len(terms) > 0 {
			want = terms[len(terms)-1].seq
			terms[len(terms)-1].events++
		}
		if fenceSubj != fenceSubject || fenceSeq != strconv.FormatUint(want, 10) {
			if bad++; bad <= 20 {
				t.Errorf("event %s at sequence %d stored under the fence %s=%q, %s=%q; the last marker before it is at %d",
					id, m.seq, jetstream.ExpectedLastSubjSeqSubjHeader, fenceSubj, jetstream.ExpectedLastSubjSeqHeader,
					fenceSeq, want)
			}
		}
	}
	if bad > 20 {
		t.Errorf("... %d events stored under a fence other than the last marker's", bad)
	}
	return terms
}

// logTerms logs the terms the events stream records.
func logTerms(t *testing.T, terms []term) {
	t.Helper()
	var b strings.Builder
	for _, tm := range terms {
		fmt.Fprintf(&b, "  marker %6d  %-8s pid %-7d epoch %-5d %6d events\n", tm.seq, tm.leader, tm.holder.PID,
			tm.holder.Epoch, tm.events)
	}
	t.Logf("terms (fence markers and the events stored under each):\n%s", b.String())
}

// emitted returns the ids of the simulator's event log for user, in log order: each generated event and
// each accepted report's event, from sequence 1 up to the first sequence that is neither (yet). Generated
// events map to their data, reports to nil.
func emitted(s *sim.Server) (ids []string, data map[string][]byte) {
	reported := map[string]bool{}
	for _, rep := range s.Reports(user) {
		reported[rep.EventID] = true
	}
	data = map[string][]byte{}
	for seq := 1; ; seq++ {
		id, d := s.GeneratedEvent(user, seq)
		switch {
		case id != "":
			data[id] = d
		case reported[sim.EventID(seq)]:
			id = sim.EventID(seq)
		default:
			return ids, data
		}
		ids = append(ids, id)
	}
}

// checkExactlyOnce checks that the events stream holds each of ids exactly once (a generated event with
// its data byte for byte), and nothing else but ids of the simulator's log beyond them (stored after the
// list was taken), each once. It returns the number of events checked.
func checkExactlyOnce(t *testing.T, msgs []stored, ids []string, data map[string][]byte) int {
	t.Helper()
	count := map[string]int{}
	var extra []string
	events := 0
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	problems := 0
	report := func(format string, args ...any) {
		if problems++; problems <= 20 {
			t.Errorf(format, args...)
		}
	}
	for _, m := range msgs {
		if m.subject == fenceSubject {
			continue
		}
		events++
		id := m.header.Get("Nats-Msg-Id")
		if count[id]++; count[id] == 2 {
			report("event %s stored twice (again at sequence %d)", id, m.seq)
		}
		if !want[id] {
			extra = append(extra, id)
		} else if d, ok := data[id]; ok && string(d) != string(m.data) {
			report("event %s stored as %.80q..., want %.80q...", id, m.data, d)
		}
	}
	missing := 0
	for _, id := range ids {
		if count[id] == 0 {
			if missing++; missing <= 10 {
				report("event %s missing", id)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d events missing", missing, len(ids))
	}
	if problems > 20 {
		t.Errorf("... %d problems in all", problems)
	}
	// Stored after the list was taken: they must follow it in the log.
	last := ""
	if len(ids) > 0 {
		last = ids[len(ids)-1]
	}
	for _, id := range extra {
		if !strings.HasPrefix(id, "ev-") || id <= last {
			t.Errorf("event %s stored, which the simulator did not emit", id)
		}
	}
	return events
}

// reporter publishes reports to P.reports at a steady pace, each with a Nats-Msg-Id of its own, sent
// again with the same id until JetStream acknowledged it (README, "Reporting events").
type reporter struct {
	t      *testing.T
	js     jetstream.JetStream
	sim    func() *sim.Server
	orders []sim.TrackingOrder
	stop   chan struct{}
	done   chan struct{}

	mu      sync.Mutex // held while a report is being published, so that pause waits for it
	paused  bool
	keys    []string          // acknowledged, in order
	bodies  map[string][]byte // by key
	retries int               // publishes sent again after an error or a timeout
}

// startReporter publishes a report every `every` until finish.
func (r *rig) startReporter(every time.Duration) *reporter {
	rp := &reporter{t: r.t, js: r.js, sim: r.up.Sim, orders: r.up.Sim().TrackedOrders(user),
		stop: make(chan struct{}), done: make(chan struct{}), bodies: map[string][]byte{}}
	go rp.run(every)
	r.t.Cleanup(rp.halt)
	return rp
}

func (rp *reporter) run(every time.Duration) {
	defer close(rp.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for k := 0; ; {
		select {
		case <-rp.stop:
			return
		case <-tick.C:
		}
		rp.mu.Lock()
		if !rp.paused {
			if !rp.publish(k) {
				rp.mu.Unlock()
				return
			}
			k++
		}
		rp.mu.Unlock()
	}
}

// publish publishes report k until JetStream acknowledges it; false when stopped first.
func (rp *reporter) publish(k int) bool {
	key := fmt.Sprintf("failover-report-%05d", k)
	o := rp.orders[k%len(rp.orders)]
	body, _ := json.Marshal(map[string]any{
		"order": map[string]any{"orderId": o.OrderID, "positionId": o.PositionID},
		"event": map[string]any{
			"timestamp": time.Now().UTC().Format(time.RFC3339Nano),
			"type":      "GATE_IN",
			"observation": map[string]any{
				"observedLoadingUnit": map[string]any{
					"loadingUnit":  map[string]any{"containerClass": "CONTAINER", "number": "MSCU1234565"},
					"loadingState": "FULL",
				},
			},
		},
		"reporter": map[string]any{"id": "failover-test", "name": fmt.Sprintf("report %d", k)},
	})
	msg := &nats.Msg{Subject: reportSubject, Data: body, Header: nats.Header{"Nats-Msg-Id": {key}}}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := rp.js.PublishMsg(ctx, msg)
		cancel()
		if err == nil {
			rp.keys = append(rp.keys, key)
			rp.bodies[key] = body
			return true
		}
		rp.retries++
		select {
		case <-rp.stop:
			return false
		case <-time.After(100 * time.Millisecond): // the pace of a producer's retries
		}
	}
}

// pause stops publishing (after the report being published, if any) and waits until the simulator
// accepted every report published so far: no report is in flight in a bridge then.
func (rp *reporter) pause(within time.Duration) {
	rp.t.Helper()
	rp.mu.Lock()
	rp.paused = true
	keys := slices.Clone(rp.keys)
	rp.mu.Unlock()
	rp.waitAccepted(keys, within)
}

// resume publishes again after pause.
func (rp *reporter) resume() {
	rp.mu.Lock()
	rp.paused = false
	rp.mu.Unlock()
}

// halt stops publishing for good.
func (rp *reporter) halt() {
	select {
	case <-rp.stop:
	default:
		close(rp.stop)
	}
	<-rp.done
}

// waitAccepted waits until the simulator accepted a report of each key.
func (rp *reporter) waitAccepted(keys []string, within time.Duration) {
	rp.t.Helper()
	testutil.EventuallyState(rp.t, within, fmt.Sprintf("the simulator accepted %d reports", len(keys)), func() (bool, string) {
		got := map[string]bool{}
		for _, rep := range rp.sim().Reports(user) {
			got[rep.IdempotencyKey] = true
		}
		var missing []string
		for _, k := range keys {
			if !got[k] {
				missing = append(missing, k)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d missing: %v", len(missing), missing[:min(len(missing), 10)])
	})
}

// finish stops publishing, waits until every report was accepted upstream, and checks that each was
// accepted exactly once, with the body published, and that none was dead-lettered. It returns how many
// reports were published.
func (rp *reporter) finish(r *rig, within time.Duration) int {
	t := rp.t
	t.Helper()
	rp.halt()
	rp.mu.Lock()
	keys := slices.Clone(rp.keys)
	retries := rp.retries
	rp.mu.Unlock()
	rp.waitAccepted(keys, within)
	accepted := map[string]int{}
	for _, rep := range rp.sim().Reports(user) {
		accepted[rep.IdempotencyKey]++
		if want, ok := rp.bodies[rep.IdempotencyKey]; !ok {
			t.Errorf("report with Idempotency-Key %q accepted upstream, which the test did not publish", rep.IdempotencyKey)
		} else if string(rep.Body) != string(want) {
			t.Errorf("report %s accepted upstream as %s, published as %s", rep.IdempotencyKey, rep.Body, want)
		}
	}
	for _, k := range keys {
		if accepted[k] != 1 {
			t.Errorf("report %s accepted upstream %d times, want once", k, accepted[k])
		}
	}
	st := rp.sim().Stats()
	t.Logf("reports: %d published (%d publishes sent again), %d accepted upstream, %d repeats of an "+
		"Idempotency-Key answered as duplicates, %d report calls", len(keys), retries, st.ReportsAccepted,
		st.ReportDuplicates, st.ReportCalls)
	if n := r.dlqReports(); n != 0 {
		t.Errorf("%d reports dead-lettered", n)
	}
	return len(keys)
}

// dlqReports returns how many messages P.dlq.reports holds.
func (r *rig) dlqReports() int {
	ctx, cancel := opCtx()
	defer cancel()
	s, err := r.js.Stream(ctx, dlqStream)
	if err != nil {
		r.t.Fatalf("stream %s: %v", dlqStream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("tracking.dlq.reports"))
	if err != nil {
		r.t.Fatalf("stream %s: %v", dlqStream, err)
	}
	return int(info.State.Subjects["tracking.dlq.reports"])
}

// verify waits until the events stream holds every event the simulator's log holds now, then stops
// every bridge with SIGTERM (each must exit 0) and checks the stream: every event exactly once, every
// event under the fence of its leader. It returns the stream's messages.
func (r *rig) verify(within time.Duration) []stored {
	r.t.Helper()
	ids, data := emitted(r.up.Sim())
	r.t.Logf("the simulator's log holds %d events", len(ids))
	r.waitEvents(len(ids), within)
	// Every id of the list stored, not only as many: a duplicate would make up for a missing one.
	testutil.EventuallyState(r.t, within, "every emitted event stored", func() (bool, string) {
		msgs := r.readStream()
		have := map[string]bool{}
		for _, m := range msgs {
			have[m.header.Get("Nats-Msg-Id")] = true
		}
		var missing []string
		for _, id := range ids {
			if !have[id] {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d missing, first %v", len(missing), missing[:min(10, len(missing))])
	})
	r.phase("every emitted event stored; stopping the bridges")
	for _, b := range r.bridges {
		if b.pause {
			b.signal(syscall.SIGCONT)
		}
		if b.running() {
			b.stop()
		}
	}
	r.phase("checking the stream")
	msgs := r.readStream()
	terms := checkFencing(r.t, msgs)
	n := checkExactlyOnce(r.t, msgs, ids, data)
	logTerms(r.t, terms)
	r.t.Logf("events stream: %d events, %d fence markers; %d emitted events checked", n, len(terms), len(ids))
	return msgs
}
