package publish

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/lease"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// restartEnv is a test environment with the lease bucket and five events, e-00 to e-04, stored by a
// first leader.
func restartEnv(t *testing.T) *testEnv {
	t.Helper()
	e := newEnv(t, 100*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if _, err := e.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: e.layout.Leases(), History: 1,
		Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	p, _ := e.lead("a")
	for i := range 5 {
		if err := p.Handle(ctx, ev(fmt.Sprintf("e-%02d", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil { // settles them
		t.Fatal(err)
	}
	return e
}

// lead begins a leader's term as a bridge does, Claim then Resume, and returns its publisher and where it
// resumes.
func (e *testEnv) lead(name string) (*Publisher, string) {
	e.t.Helper()
	p := fencedPublisher(e.t, e.nc, e.layout, 16)
	if err := p.Claim(context.Background(), name, nil); err != nil {
		e.t.Fatal(err)
	}
	after, err := p.Resume(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return p, after
}

// stalledRestart runs RestartCursor (after e-01, holding the lease for ttl) on a connection of its own
// through a proxy that freezes just before the n-th occurrence of prefix in what the command sends. It
// returns once the connection stalled: the proxy, to thaw, and the command's error to come.
func stalledRestart(t *testing.T, ctx context.Context, e *testEnv, ttl time.Duration, prefix string, n int) (*testutil.Proxy, <-chan error) {
	t.Helper()
	px := testutil.StartProxy(t, e.ns.URL())
	stalled := px.FreezeAt(prefix, n)
	nc, err := nats.Connect(px.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	done := make(chan error, 1)
	go func() {
		_, err := RestartCursor(ctx, nc, e.layout, ttl, "e-01", false)
		done <- err
	}()
	select {
	case <-stalled:
	case err := <-done:
		t.Fatalf("the command ended before its connection stalled: %v", err)
	}
	return px, done
}

// restarted reports whether a leader's cursor is a restart after id: resuming after it, nothing to skip.
func restarted(p *Publisher, after, id string) bool { return after == id && len(p.cursor.skip) == 0 }

// TestRestartCursor: with the hold intact the directive stands, the lease is released, and the next
// leader resumes after the directive's id.
func TestRestartCursor(t *testing.T) {
	t.Parallel()
	e := restartEnv(t)
	ctx := context.Background()
	msg, err := RestartCursor(ctx, e.nc, e.layout, testutil.Scale(10*time.Second), "e-01", false)
	if err != nil || !strings.Contains(msg, "restart directive stored") {
		t.Fatalf("cursor restart: %q, %v", msg, err)
	}
	if _, held, err := lease.Read(ctx, e.js, e.layout.Leases(), ""); err != nil || held {
		t.Errorf("the lease after the command: held %v, %v; want released", held, err)
	}
	if p, after := e.lead("b"); !restarted(p, after, "e-01") {
		t.Errorf("the next leader resumes after %q skipping %d; want e-01, skipping nothing", after, len(p.cursor.skip))
	}
}

// TestRestartCursorHoldRanOut: `bridge cursor restart` whose connection stalls in the middle of its
// markers (a slow link from the operator's machine) for longer than its hold on the lease. Meanwhile a
// bridge takes the lease, claims the fence and reads its cursor: no directive yet. When the operator's
// last markers and its directive arrive, the directive would sit in that leader's term, never taken, and
// a later leader would find it older than the events and ignore it. The command must fail instead, with
// the directive withdrawn, and no leader may restart.
func TestRestartCursorHoldRanOut(t *testing.T) {
	t.Parallel()
	e := restartEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	px, done := stalledRestart(t, ctx, e, time.Second, "HPUB "+e.layout.FenceSubject()+".", 400) // the 400th marker
	// The hold runs out; a bridge takes the lease and begins its term.
	testutil.Eventually(t, 10*time.Second, "the operator's hold runs out", func() bool {
		_, held, err := lease.Read(ctx, e.js, e.layout.Leases(), "")
		return err == nil && !held
	})
	if _, _, _, err := lease.Seize(ctx, e.js, e.layout.Leases(), "bridge-b", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	b, _ := e.lead("b")

	px.Thaw()
	if err := <-done; !errors.Is(err, ErrRestartWithdrawn) {
		t.Fatalf("cursor restart: %v; want ErrRestartWithdrawn", err)
	}
	s, err := e.js.Stream(ctx, e.layout.Events())
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.GetLastMsgForSubject(ctx, restartSubject(e.layout.FenceSubject()))
	if err != nil || d.Header.Get(HeaderRestart) != restartTaken {
		t.Fatalf("%s after the command: %v, %v; want the directive withdrawn", restartSubject(e.layout.FenceSubject()), d, err)
	}
	// b leads on where it still holds the fence, until an event meets an operator's marker; the next leader
	// resumes past b's last event, not after e-01.
	last := ""
	for i := 5; i < 2000; i++ {
		id := fmt.Sprintf("e-%04d", i)
		err := b.Handle(ctx, ev(id, "GATE_IN"))
		if err == nil {
			_, err = b.Resume(ctx)
		}
		if errors.Is(err, ErrFenced) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	c, after := e.lead("c")
	if _, stored := c.cursor.skip[last]; restarted(c, after, "e-01") || last != "" && after != last && !stored {
		t.Errorf("the next leader resumes after %q skipping %d, not past b's last event %q", after, len(c.cursor.skip), last)
	}
}

// TestWithdrawRestart: a directive still pending is withdrawn, and the next leader does not restart; one
// a leader took first stays taken, and withdrawRestart says so; one followed by another directive is
// superseded.
func TestWithdrawRestart(t *testing.T) {
	t.Parallel()
	e := restartEnv(t)
	ctx := context.Background()
	base := e.layout.FenceSubject()
	request := func() uint64 {
		t.Helper()
		_, seq, err := storeRestart(ctx, e.js, e.layout.Events(), base, "e-01", false)
		if err != nil {
			t.Fatal(err)
		}
		return seq
	}

	seq := request()
	if taken, err := withdrawRestart(ctx, e.js, e.layout.Events(), base, seq); err != nil || taken {
		t.Fatalf("withdrawing a pending directive: taken %v, %v", taken, err)
	}
	if p, after := e.lead("b"); restarted(p, after, "e-01") {
		t.Error("the next leader restarted after a withdrawn directive")
	}

	seq = request()
	if p, after := e.lead("c"); !restarted(p, after, "e-01") {
		t.Fatalf("the next leader resumes after %q skipping %d; want the directive's e-01", after, len(p.cursor.skip))
	}
	if taken, err := withdrawRestart(ctx, e.js, e.layout.Events(), base, seq); err != nil || !taken {
		t.Errorf("withdrawing a directive a leader took: taken %v, %v; want taken", taken, err)
	}

	seq = request()
	request() // another operator's
	if _, err := withdrawRestart(ctx, e.js, e.layout.Events(), base, seq); !errors.Is(err, ErrRestartSuperseded) {
		t.Errorf("withdrawing a directive another followed: %v, want ErrRestartSuperseded", err)
	}
}

// TestRestartCursorLeaderClaiming: the leader that steps down when the operator seizes the lease may be
// claiming the fence just then, and read its cursor before the directive is stored. Here it claims and
// reads while the operator's directive is held back: its markers follow the operator's, so it holds the
// fence. The command must withdraw the directive and fail, though its hold never lapsed.
func TestRestartCursorLeaderClaiming(t *testing.T) {
	t.Parallel()
	e := restartEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	px, done := stalledRestart(t, ctx, e, testutil.Scale(30*time.Second), "HPUB "+restartSubject(e.layout.FenceSubject())+" ", 1)
	b, _ := e.lead("b") // claims over the operator's markers, reads no directive
	px.Thaw()
	if err := <-done; !errors.Is(err, ErrRestartWithdrawn) || !errors.Is(err, ErrLeaderCrossed) {
		t.Fatalf("cursor restart: %v; want ErrRestartWithdrawn for a leader's crossing", err)
	}
	if err := b.Handle(ctx, ev("e-05", "GATE_IN")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resume(ctx); err != nil {
		t.Fatalf("leader b, holding the fence: %v", err)
	}
	if c, after := e.lead("c"); restarted(c, after, "e-01") {
		t.Error("the next leader restarted after a withdrawn directive")
	}
}

// TestRestartDirectiveAfterClaim: a leader that claimed the fence before an operator's restart (its lease
// check came just before the seizure, and it was slow to read its cursor) finds the directive newer than
// its claim. It must not take it, fenced out as it is: it stops (ErrFenced), and the next leader restarts.
func TestRestartDirectiveAfterClaim(t *testing.T) {
	t.Parallel()
	e := restartEnv(t)
	ctx := context.Background()
	b := fencedPublisher(t, e.nc, e.layout, 16)
	if err := b.Claim(ctx, "b", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := storeRestart(ctx, e.js, e.layout.Events(), e.layout.FenceSubject(), "e-01", false); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Resume(ctx); !errors.Is(err, ErrFenced) {
		t.Fatalf("leader b, claimed before the directive: %v, want ErrFenced", err)
	}
	if c, after := e.lead("c"); !restarted(c, after, "e-01") {
		t.Errorf("the next leader resumes after %q skipping %d; want the directive's e-01", after, len(c.cursor.skip))
	}
}

// TestRestartCursorCancelled: a command stopped (Ctrl-C) while it confirms its restart cannot tell whether
// a bridge read its cursor before the directive: it withdraws the directive and fails.
func TestRestartCursorCancelled(t *testing.T) {
	t.Parallel()
	e := restartEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Held back: lease.Confirm's write, the second on the key after Seize's.
	px, done := stalledRestart(t, ctx, e, testutil.Scale(30*time.Second), "HPUB $KV."+e.layout.Leases()+".", 2)
	cancel()
	px.Thaw()
	if err := <-done; !errors.Is(err, ErrRestartWithdrawn) {
		t.Fatalf("cursor restart stopped while confirming: %v; want ErrRestartWithdrawn", err)
	}
	if c, after := e.lead("c"); restarted(c, after, "e-01") {
		t.Error("the next leader restarted after a withdrawn directive")
	}
}
