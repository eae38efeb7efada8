package lease

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

const bucket = "TEST_LEASES"

// change is one call of OnChange, stamped with the monotonic clock.
type change struct {
	leading bool
	at      time.Time
}

// overlap counts the competitors of a test that are leading by their OnChange calls, and the most at once.
type overlap struct {
	mu       sync.Mutex
	now, max int
}

func (o *overlap) add(d int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now += d
	o.max = max(o.max, o.now)
}

func (o *overlap) most() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.max
}

// competitor is one Lease running in the test, standing for one bridge.
type competitor struct {
	*Lease
	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned, with its error in err
	err    error

	mu      sync.Mutex
	changes []change
}

func (c *competitor) history() []change {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]change(nil), c.changes...)
}

// lastRenewal is when the last successful acquisition or renewal was sent.
func (c *competitor) lastRenewal() time.Time {
	c.Lease.mu.Lock()
	defer c.Lease.mu.Unlock()
	return c.renewedAt
}

// stop cancels Run and waits for it to return.
func (c *competitor) stop(t *testing.T) {
	t.Helper()
	c.cancel()
	select {
	case <-c.done:
		if c.err != nil {
			t.Errorf("Run: %v", c.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of its context ending")
	}
}

// start runs a Lease named name on nc with cfg (Bucket and OnChange are set here) until the test ends.
func start(t *testing.T, nc *nats.Conn, name string, cfg Config, o *overlap) *competitor {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := &competitor{nc: nc, done: make(chan struct{})}
	cfg.Bucket = bucket
	cfg.Name = name
	switch {
	case cfg.Logger != nil:
	case testing.Verbose():
		cfg.Logger = slog.Default().With("test", t.Name())
	default:
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	cfg.OnChange = func(leading bool) {
		c.mu.Lock()
		c.changes = append(c.changes, change{leading, time.Now()})
		c.mu.Unlock()
		if o != nil {
			if leading {
				o.add(1)
			} else {
				o.add(-1)
			}
		}
	}
	l, err := New(js, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.Lease = l
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		c.err = l.Run(ctx)
		close(c.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-c.done
	})
	return c
}

// waitLeader waits until exactly one of cs leads and returns it.
func waitLeader(t *testing.T, within time.Duration, cs ...*competitor) *competitor {
	t.Helper()
	var leader *competitor
	testutil.Eventually(t, within, "exactly one competitor leads", func() bool {
		n := 0
		for _, c := range cs {
			if c.Leading() {
				n++
				leader = c
			}
		}
		// Leading turns true just before OnChange(true) is called: wait for that too.
		return n == 1 && !becameLeader(leader).IsZero()
	})
	return leader
}

// becameLeader returns when c last became leader, zero when it never did.
func becameLeader(c *competitor) time.Time {
	var at time.Time
	for _, ch := range c.history() {
		if ch.leading {
			at = ch.at
		}
	}
	return at
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     Config
		wantErr error
	}{
		{"defaults", Config{Bucket: "B"}, nil},
		{"no bucket", Config{}, ErrConfig},
		{"sub-second TTL", Config{Bucket: "B", TTL: 500 * time.Millisecond}, ErrConfig},
		{"fractional TTL", Config{Bucket: "B", TTL: 1500 * time.Millisecond}, ErrConfig},
		{"renewal too late", Config{Bucket: "B", TTL: 2 * time.Second, RenewInterval: 1800 * time.Millisecond}, ErrConfig},
		{"replicas", Config{Bucket: "B", Replicas: 7}, ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(nil, tt.cfg)
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("New = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// TestOneLeaderAndCleanHandover runs three competitors on one server and on a 3-node cluster (an R3 bucket):
// exactly one leads, all agree on the holder, and a clean stop hands over in well under the TTL.
func TestOneLeaderAndCleanHandover(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"server", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			var connect func() *nats.Conn
			replicas := 1
			if backend == "server" {
				connect = testutil.StartNATS(t, nil).Connect
			} else {
				connect = testutil.StartCluster(t).Connect
				replicas = 3
			}
			cfg := Config{TTL: 5 * time.Second, Replicas: replicas}
			o := &overlap{}
			cs := []*competitor{
				start(t, connect(), "a", cfg, o), start(t, connect(), "b", cfg, o), start(t, connect(), "c", cfg, o),
			}
			leader := waitLeader(t, 30*time.Second, cs...)
			self := leader.Self()
			testutil.Eventually(t, 10*time.Second, "every competitor knows the holder", func() bool {
				for _, c := range cs {
					if h, ok := c.Holder(); !ok || h.Instance != self.Instance || h.Epoch == 0 {
						return false
					}
				}
				return true
			})

			stopped := time.Now()
			leader.stop(t)
			var rest []*competitor
			for _, c := range cs {
				if c != leader {
					rest = append(rest, c)
				}
			}
			next := waitLeader(t, 4*time.Second, rest...)
			handover := becameLeader(next).Sub(stopped)
			t.Logf("%s: handover after a clean stop took %v", backend, handover)
			if handover >= 2*time.Second {
				t.Errorf("handover took %v, want under 2s (the TTL is %v)", handover, cfg.TTL)
			}
			if h := leader.history(); len(h) != 2 || !h[0].leading || h[1].leading {
				t.Errorf("stopped leader's changes = %v, want [true false]", h)
			}
			if n := o.most(); n != 1 {
				t.Errorf("%d competitors led at once", n)
			}
		})
	}
}

// leaderAndStandby starts a leader a and a standby b that knows it, with a 2 s TTL.
func leaderAndStandby(t *testing.T) (ns *testutil.NATS, cfg Config, o *overlap, a, b *competitor) {
	t.Helper()
	ns = testutil.StartNATS(t, nil)
	cfg = Config{TTL: 2 * time.Second}
	o = &overlap{}
	a = start(t, ns.Connect(), "a", cfg, o)
	waitLeader(t, 10*time.Second, a)
	b = start(t, ns.Connect(), "b", cfg, o)
	testutil.Eventually(t, 5*time.Second, "the standby knows the holder", func() bool {
		h, ok := b.Holder()
		return ok && h.Instance == a.Self().Instance
	})
	return ns, cfg, o, a, b
}

// TestKilledLeaderReplacedAfterTTL plays a leader killed with SIGKILL: its connection goes away without a
// release, and a standby takes over once the key has expired, not before.
func TestKilledLeaderReplacedAfterTTL(t *testing.T) {
	t.Parallel()
	_, cfg, o, a, b := leaderAndStandby(t)

	a.nc.Close()
	killed := time.Now()
	waitLeader(t, cfg.TTL+3*time.Second, b)
	took := becameLeader(b)
	t.Logf("takeover %v after the kill", took.Sub(killed))
	if expiry := a.lastRenewal().Add(cfg.TTL); took.Before(expiry) {
		t.Errorf("standby took over %v before the killed leader's lease could expire", expiry.Sub(took))
	}
	if n := o.most(); n != 1 {
		t.Errorf("%d competitors led at once", n)
	}
}

// TestFrozenLeaderDemotesBeforeExpiry cuts the leader off from NATS without closing anything (a frozen
// proxy): it must stop leading before its lease can expire, and the standby must take over only after.
func TestFrozenLeaderDemotesBeforeExpiry(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	px := testutil.StartProxy(t, ns.URL())
	nc, err := nats.Connect(px.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	cfg := Config{TTL: 2 * time.Second}
	o := &overlap{}
	a := start(t, nc, "a", cfg, o)
	waitLeader(t, 10*time.Second, a)
	b := start(t, ns.Connect(), "b", cfg, o)
	testutil.Eventually(t, 5*time.Second, "the leader has renewed", func() bool {
		h, ok := a.Holder()
		return ok && h.Revision > h.Epoch
	})

	px.Freeze()
	t.Cleanup(px.Thaw)
	waitLeader(t, cfg.TTL+3*time.Second, b)
	h := a.history()
	if len(h) != 2 || h[1].leading {
		t.Fatalf("frozen leader's changes = %v, want [true false]", h)
	}
	demoted, renewed := h[1].at, a.lastRenewal()
	t.Logf("demoted %v after the last renewal was sent; the standby took over %v after that",
		demoted.Sub(renewed), becameLeader(b).Sub(renewed))
	if expiry := renewed.Add(cfg.TTL); !demoted.Before(expiry) {
		t.Errorf("demoted %v after the lease could have expired", demoted.Sub(expiry))
	}
	if !demoted.Before(becameLeader(b)) {
		t.Error("the standby took over before the frozen leader had stopped leading")
	}

	// Back in touch, the old leader stays a standby and agrees on the new holder.
	px.Thaw()
	testutil.Eventually(t, 10*time.Second, "the old leader sees the new holder", func() bool {
		h, ok := a.Holder()
		return ok && h.Instance == b.Self().Instance
	})
	if a.Leading() || !b.Leading() {
		t.Errorf("after the thaw: a leading %v, b leading %v", a.Leading(), b.Leading())
	}
	if n := o.most(); n != 1 {
		t.Errorf("%d competitors led at once", n)
	}
}

// TestRenewalKeepsTTL checks the trap of nats.go #1994: after several renewals the key still expires when
// renewals stop, and a standby learns of the expiry from its watch alone.
func TestRenewalKeepsTTL(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	cfg := Config{TTL: time.Second, RenewInterval: 250 * time.Millisecond, Margin: 300 * time.Millisecond}
	a := start(t, ns.Connect(), "a", cfg, nil)
	waitLeader(t, 10*time.Second, a)
	testutil.Eventually(t, 10*time.Second, "the leader has renewed for longer than the TTL", func() bool {
		h, _ := a.Holder()
		return h.Revision >= h.Epoch+6
	})
	standby := cfg
	standby.RetryInterval = time.Hour // only the watch can tell it the key expired
	b := start(t, ns.Connect(), "b", standby, nil)

	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "$KV."+bucket+"."+DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Header.Get(jetstream.MsgTTLHeader); got != "1s" {
		t.Errorf("renewed key has %s %q, want 1s", jetstream.MsgTTLHeader, got)
	}

	a.nc.Close()
	waitLeader(t, 5*time.Second, b)
}

// TestUpdateDropsTTL pins down nats.go #1994, the reason renewals do not use kv.Update: the key it writes
// has no TTL and never expires. Should a later nats.go keep the TTL, this test says so.
func TestUpdateDropsTTL(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, LimitMarkerTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Create(ctx, "k", []byte("1"), jetstream.KeyTTL(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Update(ctx, "k", []byte("2"), rev); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // the absence of an expiry can only be waited for
	if _, err := kv.Get(ctx, "k"); err != nil {
		t.Errorf("key written by Update: %v; kv.Update now keeps the TTL (nats.go #1994 fixed?)", err)
	}
}

// TestLeaderSurvivesLossOfBucketLeader kills the cluster node that leads the R3 lease bucket: the lease
// survives with the same epoch and renewals resume after the bucket's new leader is elected.
func TestLeaderSurvivesLossOfBucketLeader(t *testing.T) {
	t.Parallel()
	cl := testutil.StartCluster(t)
	// A stream leader election after a lost node waits for the followers' election timeout (seconds), so
	// this lease tolerates a long pause in renewals without demotion.
	cfg := Config{TTL: 15 * time.Second, RenewInterval: time.Second, Margin: 3 * time.Second, Replicas: 3}
	o := &overlap{}
	a := start(t, cl.Connect(), "a", cfg, o)
	leader := waitLeader(t, 30*time.Second, a)
	b := start(t, cl.Connect(), "b", cfg, o)
	testutil.Eventually(t, 10*time.Second, "the standby knows the holder", func() bool {
		h, ok := b.Holder()
		return ok && h.Instance == leader.Self().Instance
	})
	before, _ := leader.Holder()
	node := cl.WaitStreamLeader("KV_" + bucket)

	cl.StopNode(node)
	killed := time.Now()
	testutil.Eventually(t, 20*time.Second, "renewals resume", func() bool {
		h, _ := leader.Holder()
		return h.Revision > before.Revision+1
	})
	t.Logf("renewals resumed %v after the bucket's leader node was stopped", time.Since(killed))
	after, _ := leader.Holder()
	if !leader.Leading() || after.Epoch != before.Epoch {
		t.Errorf("leading %v, epoch %d -> %d; want the same lease", leader.Leading(), before.Epoch, after.Epoch)
	}
	if h := leader.history(); len(h) != 1 {
		t.Errorf("leader's changes = %v, want one (no demotion)", h)
	}
	if n := o.most(); n != 1 {
		t.Errorf("%d competitors led at once", n)
	}
}

// TestResignHandsOver: a leader that resigns stops leading at once and releases the key, so that a
// standby (or itself) takes over without waiting for the TTL.
func TestResignHandsOver(t *testing.T) {
	t.Parallel()
	connect := testutil.StartNATS(t, nil).Connect
	cfg := Config{TTL: 10 * time.Second}
	o := &overlap{}
	a, b := start(t, connect(), "a", cfg, o), start(t, connect(), "b", cfg, o)
	leader := waitLeader(t, 10*time.Second, a, b)
	first, _ := leader.Holder()
	resigned := time.Now()
	leader.Resign(first.Epoch, "test", 0)
	var next *competitor
	testutil.Eventually(t, 3*time.Second, "a new epoch leads", func() bool {
		for _, c := range []*competitor{a, b} {
			if h, ok := c.Holder(); ok && c.Leading() && h.Epoch > first.Epoch {
				next = c
				return true
			}
		}
		return false
	})
	t.Logf("a new leader %v after resigning", time.Since(resigned))
	// A resignation that comes late, for the term before, does not end the new one.
	changes := len(next.history())
	next.Resign(first.Epoch, "late", 0)
	taken := func() bool { return len(next.resign) == 0 }
	testutil.Eventually(t, 3*time.Second, "Run took the late resignation", taken)
	// Run handles one request per turn of its loop: once it took a second, it is done with the first.
	next.Resign(first.Epoch, "late again", 0)
	testutil.Eventually(t, 3*time.Second, "Run took the second late resignation", taken)
	if !next.Leading() || len(next.history()) != changes {
		t.Errorf("a resignation for epoch %d ended a later term: %v", first.Epoch, next.history())
	}
	if h := leader.history(); len(h) < 2 || !h[0].leading || h[1].leading {
		t.Errorf("resigned leader's changes = %v, want [true false ...]", h)
	}
	if n := o.most(); n != 1 {
		t.Errorf("%d competitors led at once", n)
	}
}

// writeForeign stores value in the lease key as another client would, without a TTL, and returns its
// revision and when it was sent: no bridge can see it before, while its watch may well see it before the
// acknowledgement reaches the test.
func writeForeign(t *testing.T, nc *nats.Conn, value []byte) (uint64, time.Time) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	sent := time.Now()
	ack, err := js.Publish(ctx, "$KV."+bucket+"."+DefaultKey, value)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence, sent
}

// keyTTL returns the Nats-TTL header of the lease key's last message.
func keyTTL(t *testing.T, nc *nats.Conn) string {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, "$KV."+bucket+"."+DefaultKey)
	if err != nil {
		t.Fatal(err)
	}
	return m.Header.Get(jetstream.MsgTTLHeader)
}

// TestForeignWritesWhileLeading: values in the lease key that no bridge wrote (a JetStream
// acknowledgement a client aimed at the key, garbage), written while a bridge leads, do not end its term:
// it writes its lease back over each within a round trip, with the lease's TTL and the same epoch, and
// counts every one; the log shows one line for them all, with the value cut short. The standby never
// leads meanwhile.
func TestForeignWritesWhileLeading(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	cfg := Config{TTL: 2 * time.Second}
	o := &overlap{}
	var counted [2]atomic.Int64
	logs := &testutil.Logs{}
	ca, cb := cfg, cfg
	ca.Logger, cb.Logger = slog.New(logs).With("who", "a"), slog.New(logs).With("who", "b")
	ca.OnForeignWrite = func() { counted[0].Add(1) }
	cb.OnForeignWrite = func() { counted[1].Add(1) }
	a, b := start(t, ns.Connect(), "a", ca, o), start(t, ns.Connect(), "b", cb, o)
	leader := waitLeader(t, 10*time.Second, a, b)
	first, _ := leader.Holder()
	li := 0
	if leader == b {
		li = 1
	}

	attacker := ns.Connect()
	garbage := append([]byte("{}\x1b[31m\n"), strings.Repeat("x", 1000)...)
	const writes = 20
	var last uint64
	for i := range writes {
		v := []byte(`{"stream":"TRACKING_REPORTS","seq":` + strconv.Itoa(i) + `}`)
		if i == 0 {
			v = garbage
		}
		last, _ = writeForeign(t, attacker, v)
		if i%5 == 4 { // some in a burst, some after the leader wrote its lease back
			testutil.Eventually(t, 5*time.Second, "the leader's lease is back in the key", func() bool {
				h, ok, err := Read(context.Background(), leader.js, bucket, DefaultKey)
				return err == nil && ok && h.Instance == leader.Self().Instance && h.Revision > last
			})
		}
	}
	// Past two TTLs: a foreign value left in the key would have let the standby take it over by now.
	deadline := time.Now().Add(2*cfg.TTL + 500*time.Millisecond)
	for time.Now().Before(deadline) {
		if !leader.Leading() {
			t.Fatalf("the leader stopped leading after foreign writes; changes %v", leader.history())
		}
		time.Sleep(50 * time.Millisecond) // sampling the state, not waiting for it
	}
	if h := leader.history(); len(h) != 1 || !h[0].leading {
		t.Errorf("leader's changes = %v, want [true]", h)
	}
	if n := o.most(); n != 1 {
		t.Errorf("%d competitors led at once", n)
	}
	h, ok, err := Read(context.Background(), leader.js, bucket, DefaultKey)
	if err != nil || !ok || h.Instance != leader.Self().Instance || h.Epoch != first.Epoch {
		t.Errorf("key holds %+v (ok %v, err %v), want the leader's lease of epoch %d", h, ok, err, first.Epoch)
	}
	if got := keyTTL(t, ns.Connect()); got != "2s" {
		t.Errorf("the lease written back has %s %q, want 2s", jetstream.MsgTTLHeader, got)
	}
	if n := counted[li].Load(); n < 4 || n > writes {
		t.Errorf("the leader counted %d foreign writes, want between 4 (one per burst) and %d", n, writes)
	}
	var lines int
	for _, r := range logs.Records() {
		if r.Message == foreignWriteLog {
			lines++
		}
	}
	if lines > 2 { // at most one a minute per process
		t.Errorf("%d log lines for foreign writes, want at most one per process", lines)
	}
	v, ok := logs.Attr(foreignWriteLog, "value")
	if q := v.String(); !ok || !strings.HasPrefix(q, "{}[31mxxx") || !strings.HasSuffix(q, "…") || len(q) > maxQuotedValue+len("…") {
		t.Errorf("logged value %q (found %v), want it without control characters and cut short", q, ok)
	}
}

// TestForeignWritesDoNotDelayTakeover: a killed leader's lease replaced by a foreign value, and more
// foreign values written every few hundred milliseconds, do not keep the standby from taking over: it
// leads one TTL after it last saw the leader's lease, as if the lease had simply expired (each foreign
// revision used to restart that clock, so a client writing now and then kept every bridge from leading).
func TestForeignWritesDoNotDelayTakeover(t *testing.T) {
	t.Parallel()
	ns, cfg, o, a, b := leaderAndStandby(t)

	a.nc.Close()
	attacker := ns.Connect()
	stop := make(chan struct{})
	writing := make(chan struct{})
	js, err := jetstream.New(attacker)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(writing)
		for i := 0; i < 100; i++ { // bounded: 100 writes, 30 s at most
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = js.Publish(ctx, "$KV."+bucket+"."+DefaultKey, []byte(`{"stream":"TRACKING_REPORTS","seq":`+strconv.Itoa(i)+`}`))
			cancel()
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-writing }()
	waitLeader(t, 2*cfg.TTL+3*time.Second, b)
	took := becameLeader(b)
	expiry := a.lastRenewal().Add(cfg.TTL)
	t.Logf("takeover %v after the killed leader's lease could expire, foreign writes going on", took.Sub(expiry))
	if took.Before(expiry) {
		t.Errorf("standby took over %v before the killed leader's lease could expire", expiry.Sub(took))
	}
	if n := o.most(); n != 1 {
		t.Errorf("%d competitors led at once", n)
	}
	// The new leader holds on while the foreign writes go on.
	for i := 0; i < 10; i++ {
		writeForeign(t, attacker, []byte("x"))
	}
	testutil.Eventually(t, 5*time.Second, "the new leader's lease is back in the key", func() bool {
		h, ok, err := Read(context.Background(), b.js, bucket, DefaultKey)
		return err == nil && ok && h.Instance == b.Self().Instance
	})
	if !b.Leading() || len(b.history()) != 1 {
		t.Errorf("the new leader's changes %v after more foreign writes, want it leading still", b.history())
	}
}

// TestForeignValueAtStart: a foreign value found in the key at start-up keeps no bridge from leading for
// longer than a TTL.
func TestForeignValueAtStart(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	cfg := Config{TTL: 2 * time.Second}
	// The bucket as a bridge makes it, before any bridge runs.
	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1,
		LimitMarkerTTL: cfg.TTL}); err != nil {
		t.Fatal(err)
	}
	_, written := writeForeign(t, ns.Connect(), []byte("not a lease"))
	o := &overlap{}
	a, b := start(t, ns.Connect(), "a", cfg, o), start(t, ns.Connect(), "b", cfg, o)
	leader := waitLeader(t, 2*cfg.TTL+2*time.Second, a, b)
	t.Logf("a leader %v after start-up", time.Since(written))
	if got := keyTTL(t, ns.Connect()); got != "2s" {
		t.Errorf("the key taken over has %s %q, want 2s", jetstream.MsgTTLHeader, got)
	}
	if h, ok := leader.Holder(); !ok || h.Instance != leader.Self().Instance {
		t.Errorf("holder %+v, want the leader", h)
	}
	if n := o.most(); n != 1 {
		t.Errorf("%d competitors led at once", n)
	}
}

func TestQuoteValue(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"{}", "{}"},
		{"a\x00b\tc\u2028d", "ab" + "c\u2028d"},
		{"\xff\xfe", "\uFFFD"}, // a run of invalid bytes is one replacement
		{strings.Repeat("é", 100), strings.Repeat("é", maxQuotedValue/2) + "…"},
		{strings.Repeat("\x00", 10000), "…"},
	} {
		if got := quoteValue([]byte(tt.in)); got != tt.want {
			t.Errorf("quoteValue(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestReleaseAfterUnansweredRenewal: a renewal the server stored but whose answer Run did not wait for
// (it was stopping) leaves the key one revision past the process's own. The release finds its own value
// there and deletes it, so the next leader does not wait out the TTL; a key another holder wrote since
// stays.
func TestReleaseAfterUnansweredRenewal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	js, err := jetstream.New(testutil.StartNATS(t, nil).Connect())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		next     func(self Holder) Holder // the value of the write after the process's own
		released bool
	}{
		{"own renewal", func(self Holder) Holder { return self }, true},
		{"another holder", func(Holder) Holder { return Holder{Name: "b", PID: 2, Instance: "0123456789abcdef"} }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(js, Config{Bucket: bucket, Key: strings.ReplaceAll(tc.name, " ", "_"), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			kv, err := l.bucket(ctx)
			if err != nil {
				t.Fatal(err)
			}
			rev, err := kv.Create(ctx, l.cfg.Key, valueFor(l.self))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := kv.Put(ctx, l.cfg.Key, valueFor(tc.next(l.self))); err != nil {
				t.Fatal(err)
			}
			r := &runner{Lease: l, kv: kv}
			r.rev = rev // the process's last revision it knows of
			r.release(ctx)
			_, err = kv.Get(ctx, l.cfg.Key)
			if gone := errors.Is(err, jetstream.ErrKeyNotFound); gone != tc.released {
				t.Errorf("key gone = %v (Get: %v), want %v", gone, err, tc.released)
			}
		})
	}
}

// TestSeizeRelease: an operator's hold stops the leader and keeps it out; Confirm renews it, Release
// frees the key at once; a hold that ran out can be neither confirmed nor released: the key is left to
// whoever holds it since, with ErrNotHeld.
func TestSeizeRelease(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	cfg := Config{TTL: time.Second}
	o := &overlap{}
	a := start(t, ns.Connect(), "a", cfg, o)
	waitLeader(t, 10*time.Second, a)
	js, err := jetstream.New(ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	prev, held, rev, err := Seize(ctx, js, bucket, "operator", time.Minute)
	if err != nil || !held || prev.Instance != a.Self().Instance {
		t.Fatalf("Seize: holder %+v (held %v), %v; want a's", prev, held, err)
	}
	testutil.Eventually(t, 10*time.Second, "the leader stops leading", func() bool { return !a.Leading() })
	// Confirmed, the hold goes on under a new revision, which the release names.
	next, err := Confirm(ctx, js, bucket, rev, time.Minute)
	if err != nil || next <= rev {
		t.Fatalf("Confirm: revision %d after %d, %v", next, rev, err)
	}
	if err := Release(ctx, js, bucket, rev); !errors.Is(err, ErrNotHeld) {
		t.Errorf("Release of the revision before the confirmation: %v, want ErrNotHeld", err)
	}
	if err := Release(ctx, js, bucket, next); err != nil {
		t.Fatal(err)
	}
	waitLeader(t, 10*time.Second, a)

	// A hold of a second, not released in time: the leader takes the lease back after it.
	before := len(a.history())
	if _, _, rev, err = Seize(ctx, js, bucket, "operator", time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 15*time.Second, "the leader stops leading and leads again", func() bool {
		return len(a.history()) >= before+2 && a.Leading()
	})
	if _, err := Confirm(ctx, js, bucket, rev, time.Minute); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Confirm after the hold ran out: %v, want ErrNotHeld", err)
	}
	err = Release(ctx, js, bucket, rev)
	if !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Release after the hold ran out: %v, want ErrNotHeld", err)
	}
	h, ok, err := Read(ctx, js, bucket, "")
	if err != nil || !ok || h.Instance != a.Self().Instance {
		t.Errorf("after the refused release the key holds %+v (%v, %v), want a's", h, ok, err)
	}
}
