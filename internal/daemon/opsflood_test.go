package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// The flood tests' helpers carry a "flood" prefix.

// floodMemory reads the memory the Go runtime holds from the OS (mapped, less what it released) and the
// bytes of heap objects, from runtime/metrics.
func floodMemory() (held, heap uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	metrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64(), s[2].Value.Uint64()
}

// floodRSS returns the process's resident set from /proc/self/status, "" where there is none.
func floodRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// floodOutcome is how the endpoint ended one hostile connection.
type floodOutcome int

const (
	floodAnswered431 floodOutcome = iota // a 431 status line
	floodClosed                          // closed or reset without an answer
	floodOther                           // another answer, or none in time: a failure
)

// floodEndless opens a connection to addr that sends a request whose header line never ends: up to
// limit bytes in chunks of chunk, until the endpoint answers or closes the connection, ctx ends, or
// deadline passes. It returns how the endpoint ended it, and the first line it answered.
func floodEndless(ctx context.Context, addr string, chunk []byte, limit int, deadline time.Time) (floodOutcome, string) {
	c, err := net.DialTimeout("tcp", addr, time.Until(deadline))
	if err != nil {
		return floodOther, "dial: " + err.Error()
	}
	defer c.Close()
	_ = c.SetDeadline(deadline)
	answered := make(chan struct{})
	var line string
	var readErr error
	go func() {
		defer close(answered)
		line, readErr = bufio.NewReader(c).ReadString('\n')
	}()
	_, err = io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: bridge\r\nX-Endless: ")
	for sent := 0; err == nil && sent < limit && ctx.Err() == nil; sent += len(chunk) {
		select {
		case <-answered:
			err = io.EOF // answered: stop sending
		default:
			_, err = c.Write(chunk)
		}
	}
	select {
	case <-answered:
	case <-ctx.Done():
		return floodOther, "stopped"
	}
	switch {
	case strings.HasPrefix(line, "HTTP/1.1 431 "):
		return floodAnswered431, line
	case line == "" && readErr != nil && !errors.Is(readErr, os.ErrDeadlineExceeded):
		return floodClosed, readErr.Error()
	case readErr != nil:
		return floodOther, "no answer: " + readErr.Error()
	}
	return floodOther, line
}

// TestOpsPortFlood: hostile connections cannot exhaust the bridge through its HTTP endpoint. Connections
// that hold a request's header open are closed, the oldest first, so that at most BRIDGE_HTTP_MAX_CONNS
// stay open, and /healthz still answers while they hold; 600 connections each sending a header line
// without end are answered 431 or closed, the process's memory grows by a few MB (not by a mebibyte or
// more per connection), and /healthz answers once they are gone. A header larger than the endpoint needs
// is answered 431 without waiting for the header timeout.
//
// It does not run in parallel with other tests, so that the memory it reads is this test's.
func TestOpsPortFlood(t *testing.T) {
	const (
		holders   = 200
		endless   = 600
		bound     = 64 << 20 // the growth allowed, in bytes
		sendLimit = 2 << 20  // bytes one endless connection sends at most: past net/http's default limit
	)
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{EventRate: 0})
	ob := opsStartBridge(t, up.Config(ns.URL(), func(c *config.Config) { c.LogLevel = "info" }))
	maxConns := ob.b.cfg.HTTPMaxConns // the default
	ob.waitReady(t, 20*time.Second, http.StatusOK)
	probe := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	healthz := func() error {
		resp, err := probe.Get("http://" + ob.addr + "/healthz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz answered %d", resp.StatusCode)
		}
		return nil
	}

	// Holders: each sends the start of a request and nothing more. The endpoint keeps the newest
	// maxConns open and closes the others as they arrive, long before the header timeout (5 s).
	var closed atomic.Int32
	var wg sync.WaitGroup
	holdUntil := time.Now().Add(20 * time.Second)
	conns := make([]net.Conn, 0, holders)
	for range holders {
		c, err := net.DialTimeout("tcp", ob.addr, 5*time.Second)
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		conns = append(conns, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: bridge\r\nX-Hold: "); err != nil {
			t.Fatalf("holder: %v", err)
		}
		_ = c.SetReadDeadline(holdUntil)
		wg.Go(func() {
			if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
				closed.Add(1)
			}
		})
	}
	dialed := time.Now()
	testutil.EventuallyState(t, 10*time.Second, "the endpoint closed all but the newest holders", func() (bool, string) {
		n := int(closed.Load())
		return n >= holders-maxConns, fmt.Sprintf("%d of %d holders closed", n, holders)
	})
	if took := time.Since(dialed); took >= 4*time.Second {
		t.Errorf("the holders beyond the limit were closed %v after they connected: the header timeout (5 s) did it, not a limit", took)
	}
	if ln := ob.b.ops.conns.Load(); ln == nil || ln.open() > maxConns {
		t.Errorf("the endpoint holds more than %d connections open", maxConns)
	}
	// A probe gets in while the holders hold: it pushes the oldest holder out instead of waiting.
	if err := healthz(); err != nil {
		t.Fatalf("/healthz while %d connections hold their headers open: %v", maxConns, err)
	}

	// Endless header lines, all at once, while the memory is sampled.
	runtime.GC()
	baseHeld, baseHeap := floodMemory()
	t.Logf("before the flood: runtime holds %d MB, heap objects %d MB, RSS %s", baseHeld>>20, baseHeap>>20, floodRSS())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var peakHeld, peakHeap atomic.Uint64
	var peakOpen atomic.Int64
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			held, heap := floodMemory()
			peakHeld.Store(max(peakHeld.Load(), held))
			peakHeap.Store(max(peakHeap.Load(), heap))
			if ln := ob.b.ops.conns.Load(); ln != nil {
				peakOpen.Store(max(peakOpen.Load(), int64(ln.open())))
			}
			if held > baseHeld+bound {
				cancel() // the bound is broken already: stop the flood before it takes the machine's memory
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	chunk := []byte(strings.Repeat("a", 16<<10))
	var counts [3]atomic.Int32
	var failures sync.Map // one example per outcome that is a failure
	deadline := time.Now().Add(30 * time.Second)
	var flood sync.WaitGroup
	for range endless {
		flood.Go(func() {
			o, line := floodEndless(ctx, ob.addr, chunk, sendLimit, deadline)
			counts[o].Add(1)
			if o == floodOther {
				failures.LoadOrStore(line, true)
			}
		})
	}
	flood.Wait()
	cancel()
	<-sampled
	t.Logf("flood: %d answered 431, %d closed, %d other; peak: runtime holds %d MB, heap objects %d MB, %d connections open",
		counts[floodAnswered431].Load(), counts[floodClosed].Load(), counts[floodOther].Load(),
		peakHeld.Load()>>20, peakHeap.Load()>>20, peakOpen.Load())
	if grew := peakHeld.Load() - min(peakHeld.Load(), baseHeld); grew > bound {
		t.Errorf("600 endless header lines made the runtime take %d MB more from the OS; want at most %d MB", grew>>20, bound>>20)
	}
	if n := counts[floodOther].Load(); n > 0 {
		failures.Range(func(k, _ any) bool { t.Logf("example: %q", k); return true })
		t.Errorf("%d of %d endless header lines were neither answered 431 nor closed", n, endless)
	}
	if counts[floodAnswered431].Load() == 0 {
		t.Errorf("no endless header line was answered 431")
	}
	if n := peakOpen.Load(); n > int64(maxConns)+1 {
		t.Errorf("%d connections open at once; want at most %d (and the one just accepted)", n, maxConns)
	}

	// The holders and the flood gone, /healthz answers, and the heap is back near where it was.
	for _, c := range conns {
		c.Close()
	}
	wg.Wait()
	testutil.EventuallyState(t, 10*time.Second, "/healthz answers after the flood", func() (bool, string) {
		err := healthz()
		return err == nil, fmt.Sprint(err)
	})
	runtime.GC()
	held, heap := floodMemory()
	t.Logf("after the flood: runtime holds %d MB, heap objects %d MB, RSS %s", held>>20, heap>>20, floodRSS())
	if heap > baseHeap+16<<20 {
		t.Errorf("after the flood the heap holds %d MB of objects, %d MB before it", heap>>20, baseHeap>>20)
	}

	// A header of 64 KiB, then silence: answered 431 at once, not left for the header timeout.
	c, err := net.DialTimeout("tcp", ob.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_ = c.SetDeadline(start.Add(4 * time.Second))
	if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: bridge\r\nX-Large: %s", strings.Repeat("a", 64<<10)); err != nil {
		t.Fatalf("sending a 64 KiB header: %v", err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if !strings.HasPrefix(line, "HTTP/1.1 431 ") {
		t.Errorf("a 64 KiB header was answered %q (%v) after %v; want 431 at once", line, err, time.Since(start))
	}
}

// TestConnLimitSparesRequests: when the connections are at their limit, a new one closes the oldest
// connection that is not serving a request: a request already in its handler (a /readyz whose check
// hangs for seconds) is answered however many connections arrive meanwhile; only when every connection
// serves one does the oldest go.
func TestConnLimitSparesRequests(t *testing.T) {
	t.Parallel()
	const limit = 4
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := newConnLimit(tcp, limit)
	release := make(chan struct{})
	entered := make(chan struct{}, 2*limit)
	srv := &http.Server{
		Handler: markServing(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			entered <- struct{}{}
			<-release
			_, _ = io.WriteString(w, "ok")
		})),
		ConnContext:       connContext,
		ConnState:         connState,
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := tcp.Addr().String()

	// The oldest connection serves a request; 3*limit connections that never finish their header follow.
	slow := make(chan error, 1)
	go func() {
		c := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		slow <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first request did not reach its handler")
	}
	var holders []net.Conn
	for range 3 * limit {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, c)
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nX-Hold: "); err != nil {
			t.Fatal(err)
		}
	}
	testutil.EventuallyState(t, 10*time.Second, "the holders beyond the limit are closed", func() (bool, string) {
		return ln.shed.Load() == 2*limit+1, fmt.Sprintf("%d closed, %d open", ln.shed.Load(), ln.open())
	})
	close(release)
	if err := <-slow; err != nil {
		t.Errorf("the request in its handler while %d connections arrived: %v; want its answer", 3*limit, err)
	}
	for _, c := range holders {
		c.Close()
	}
	if n := ln.open(); n > limit {
		t.Errorf("%d connections open, want at most %d", n, limit)
	}
}

// TestConnLimitVictimOrder: the connection closed to make room is the oldest part way through a request,
// else the oldest silent one, never one the server has not read yet while it can wait for it, and the
// oldest of all only when every other is serving a request (or the wait has run out).
func TestConnLimitVictimOrder(t *testing.T) {
	t.Parallel()
	type st struct {
		read     bool
		serving  bool
		unserved int64
	}
	var (
		unread  = st{}
		partway = st{read: true, unserved: 40}
		silent  = st{read: true}
		serving = st{read: true, serving: true, unserved: 90}
	)
	for _, tt := range []struct {
		name    string
		conns   []st // oldest first; the last is the one just accepted
		canWait bool
		want    int // index of the victim, -1 for none (wait)
	}{
		{"part way before silent", []st{silent, partway, partway, unread}, true, 1},
		{"silent before serving", []st{serving, silent, silent, unread}, true, 1},
		{"unread kept while it can wait", []st{unread, serving, unread}, true, -1},
		{"unread taken once the wait ran out", []st{unread, serving, unread}, false, 0},
		{"every one serving", []st{serving, serving, unread}, true, 0},
		{"the newest is never taken", []st{serving, partway}, true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newConnLimit(nil, len(tt.conns)-1)
			var cs []*limitedConn
			for _, s := range tt.conns {
				c := &limitedConn{l: l}
				c.read.Store(s.read)
				if s.serving {
					c.serving.Store(1)
				}
				c.unserved.Store(s.unserved)
				c.elem = l.conns.PushBack(c)
				cs = append(cs, c)
			}
			got := l.victimLocked(tt.canWait)
			want := (*limitedConn)(nil)
			if tt.want >= 0 {
				want = cs[tt.want]
			}
			if got != want {
				idx := -1
				for i, c := range cs {
					if c == got {
						idx = i
					}
				}
				t.Errorf("victim = connection %d, want %d", idx, tt.want)
			}
		})
	}
}
