package publish

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/lease"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestRestartCursorHoldRanOut: `bridge cursor restart` whose connection stalls in the middle of its
// markers (a slow link from the operator's machine) for longer than its hold on the lease. Meanwhile a
// bridge takes the lease, claims the fence and reads its cursor: no directive yet. When the operator's
// last markers and its directive arrive, the directive would sit in that leader's term, never taken, and
// a later leader would find it older than the events and ignore it. The command must fail instead, with
// the directive withdrawn, and no leader may resume after it.
func TestRestartCursorHoldRanOut(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	lay := layout.Streams{Prefix: "tracking", DuplicateWindow: 100 * time.Millisecond}
	nc := ns.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	if err := lay.Ensure(ctx, js, true, discard()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: lay.Leases(), History: 1,
		Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	p0 := fencedPublisher(t, nc, lay, 16)
	if err := p0.Claim(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p0.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := p0.Handle(ctx, ev(fmt.Sprintf("e-%02d", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p0.Resume(ctx); err != nil { // settles them
		t.Fatal(err)
	}

	// The operator's connection stalls before its 400th marker.
	g := startStall(t, ns.Srv.Addr().String(), "HPUB "+lay.FenceSubject()+".", 400)
	opnc, err := nats.Connect("nats://" + g.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer opnc.Close()
	type result struct {
		msg string
		err error
	}
	done := make(chan result, 1)
	go func() {
		msg, err := RestartCursor(ctx, opnc, lay, time.Second, "e-01", false)
		done <- result{msg, err}
	}()
	select {
	case <-g.stalled:
	case r := <-done:
		t.Fatalf("the command ended before its connection stalled: %q, %v", r.msg, r.err)
	}
	// The hold runs out; a bridge takes the lease and begins its term: Claim, then Resume.
	testutil.Eventually(t, 10*time.Second, "the operator's hold runs out", func() bool {
		_, ok, err := lease.Read(ctx, js, lay.Leases(), "")
		return err == nil && !ok
	})
	if _, _, _, err := lease.Seize(ctx, js, lay.Leases(), "bridge-b", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	p1 := fencedPublisher(t, nc, lay, 16)
	if err := p1.Claim(ctx, "b", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := p1.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	g.open()
	r := <-done
	if !errors.Is(r.err, ErrRestartWithdrawn) {
		t.Fatalf("cursor restart: %q, %v; want ErrRestartWithdrawn", r.msg, r.err)
	}
	s, err := js.Stream(ctx, lay.Events())
	if err != nil {
		t.Fatal(err)
	}
	d, err := s.GetLastMsgForSubject(ctx, restartSubject(lay.FenceSubject()))
	if err != nil || d.Header.Get(HeaderRestart) != restartTaken {
		t.Fatalf("%s after the command: %v, %v; want the directive withdrawn", restartSubject(lay.FenceSubject()), d, err)
	}
	// Leader b leads on where it holds the fence, then is fenced out; the next leader resumes after b's
	// last event, not after e-01.
	last := "e-04"
	for i := 5; i < 2000; i++ {
		id := fmt.Sprintf("e-%04d", i)
		err := p1.Handle(ctx, ev(id, "GATE_IN"))
		if err == nil {
			_, err = p1.Resume(ctx)
		}
		if errors.Is(err, ErrFenced) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}
	p2 := fencedPublisher(t, nc, lay, 16)
	if err := p2.Claim(ctx, "c", nil); err != nil {
		t.Fatal(err)
	}
	after, err := p2.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, stored := p2.cursor.skip[last]; after != last && !stored {
		t.Errorf("the next leader resumes after %q, skipping %d, not past b's last event %s: it restarted", after,
			len(p2.cursor.skip), last)
	}
}

// TestRestartCursor: with the hold intact the directive stands and the next leader resumes after it.
func TestRestartCursor(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	lay := layout.Streams{Prefix: "tracking", DuplicateWindow: 100 * time.Millisecond}
	nc := ns.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	if err := lay.Ensure(ctx, js, true, discard()); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: lay.Leases(), History: 1,
		Storage: jetstream.FileStorage, LimitMarkerTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	p0 := fencedPublisher(t, nc, lay, 16)
	if err := p0.Claim(ctx, "a", nil); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := p0.Handle(ctx, ev(fmt.Sprintf("e-%02d", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p0.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	msg, err := RestartCursor(ctx, nc, lay, testutil.Scale(10*time.Second), "e-01", false)
	if err != nil || !strings.Contains(msg, "restart directive stored") {
		t.Fatalf("cursor restart: %q, %v", msg, err)
	}
	if _, ok, err := lease.Read(ctx, js, lay.Leases(), ""); err != nil || ok {
		t.Errorf("the lease after the command: held %v, %v; want released", ok, err)
	}
	p1 := fencedPublisher(t, nc, lay, 16)
	if err := p1.Claim(ctx, "b", nil); err != nil {
		t.Fatal(err)
	}
	if after, err := p1.Resume(ctx); err != nil || after != "e-01" || len(p1.cursor.skip) > 0 {
		t.Errorf("the next leader resumes after %q skipping %d (%v); want e-01, skipping nothing", after, len(p1.cursor.skip), err)
	}
}

// stallProxy forwards connections to a NATS server; a client's bytes stop just before the n-th occurrence
// of prefix (counted over the whole connection) until open is called: a stalled link.
type stallProxy struct {
	ln      net.Listener
	prefix  []byte
	n       int
	stalled chan struct{} // closed once the stall began
	release chan struct{}
	once    sync.Once
}

func startStall(t *testing.T, target, prefix string, n int) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &stallProxy{ln: ln, prefix: []byte(prefix), n: n, stalled: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { _ = ln.Close(); g.open() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			t.Cleanup(func() { _ = c.Close(); _ = s.Close() })
			go func() { _, _ = copyAll(c, s) }() // server to client, untouched
			go g.pump(c, s)
		}
	}()
	return g
}

func (g *stallProxy) open() { g.once.Do(func() { close(g.release) }) }

// pump copies client to server, holding the bytes from the n-th prefix on until open. A prefix split
// across two reads is not counted: the client's markers come in large writes, and the test needs only
// some stall among them.
func (g *stallProxy) pump(c, s net.Conn) {
	buf := make([]byte, 32<<10)
	seen := 0
	for {
		k, err := c.Read(buf)
		chunk := buf[:k]
		for seen < g.n && len(chunk) > 0 {
			i := bytes.Index(chunk, g.prefix)
			if i < 0 {
				break
			}
			if seen++; seen == g.n {
				if _, werr := s.Write(chunk[:i]); werr != nil {
					return
				}
				close(g.stalled)
				<-g.release
				chunk = chunk[i:]
				break
			}
			if _, werr := s.Write(chunk[:i+1]); werr != nil {
				return
			}
			chunk = chunk[i+1:]
		}
		if len(chunk) > 0 {
			if _, werr := s.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			_ = s.Close()
			return
		}
	}
}

func copyAll(dst, src net.Conn) (int64, error) {
	buf := make([]byte, 32<<10)
	var n int64
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return n, werr
			}
			n += int64(k)
		}
		if err != nil {
			return n, err
		}
	}
}

// TestWithdrawRestart: a directive still pending is withdrawn, and the next leader does not restart; one a
// leader took first stays taken, and withdrawRestart says so.
func TestWithdrawRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 100*time.Millisecond)
	ctx := context.Background()
	base := e.layout.FenceSubject()
	lead := func(name string) (*Publisher, string) {
		p := fencedPublisher(t, e.nc, e.layout, 16)
		if err := p.Claim(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
		after, err := p.Resume(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return p, after
	}
	p, _ := lead("a")
	for i := range 5 {
		if err := p.Handle(ctx, ev(fmt.Sprintf("e-%02d", i), "GATE_IN")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	seq, err := RequestRestart(ctx, e.js, e.layout.Events(), base, "e-01", false)
	if err != nil {
		t.Fatal(err)
	}
	if taken, err := withdrawRestart(ctx, e.js, e.layout.Events(), base, seq); err != nil || taken {
		t.Fatalf("withdrawing a pending directive: taken %v, %v", taken, err)
	}
	if b, after := lead("b"); after == "e-01" && len(b.cursor.skip) == 0 {
		t.Error("the next leader restarted after a withdrawn directive")
	}

	seq, err = RequestRestart(ctx, e.js, e.layout.Events(), base, "e-01", false)
	if err != nil {
		t.Fatal(err)
	}
	if c, after := lead("c"); after != "e-01" || len(c.cursor.skip) > 0 {
		t.Fatalf("the next leader resumes after %q skipping %d; want the directive's e-01", after, len(c.cursor.skip))
	}
	if taken, err := withdrawRestart(ctx, e.js, e.layout.Events(), base, seq); err != nil || !taken {
		t.Errorf("withdrawing a directive a leader took: taken %v, %v; want taken", taken, err)
	}
}
