package consume

import (
	"context"
	"testing"
	"time"
)

// fakeClock is a settable clock for the circuit.
type fakeClock struct{ t time.Time }

func (f *fakeClock) now() time.Time          { return f.t }
func (f *fakeClock) advance(d time.Duration) { f.t = f.t.Add(d) }

func newTestCircuit(threshold int) (*circuit, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	c := newCircuit(100*time.Millisecond, threshold)
	c.now = clk.now
	return c, clk
}

// mustPass checks that wait returns at once with the given probe flag.
func mustPass(t *testing.T, c *circuit, wantProbe bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	probe, ok := c.wait(ctx)
	if !ok || probe != wantProbe {
		t.Fatalf("wait() = probe %v, ok %v; want probe %v, ok true", probe, ok, wantProbe)
	}
}

// mustBlock checks that wait does not return within a short time.
func mustBlock(t *testing.T, c *circuit) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if probe, ok := c.wait(ctx); ok {
		t.Fatalf("wait() passed (probe %v) while it should hold", probe)
	}
}

func TestCircuitOpensAfterThreshold(t *testing.T) {
	t.Parallel()
	c, clk := newTestCircuit(4)
	hooked := 0
	c.onOpen(func() { hooked++ })
	for i := range 3 {
		if opened, _ := c.failure(false, 0); opened {
			t.Fatalf("opened after %d failures", i+1)
		}
	}
	c.success(false) // resets the count
	for range 3 {
		c.failure(false, 0)
	}
	mustPass(t, c, false)
	opened, hold := c.failure(false, 0)
	if !opened || hold != 100*time.Millisecond || hooked != 1 {
		t.Fatalf("failure 4: opened %v, hold %v, hook called %d times", opened, hold, hooked)
	}
	if !c.isOpen() || c.holdLeft() != hold {
		t.Fatalf("isOpen %v, holdLeft %v", c.isOpen(), c.holdLeft())
	}
	mustBlock(t, c)

	// A report already in flight fails too: no new state change, no longer hold.
	if opened, _ := c.failure(false, 0); opened {
		t.Fatal("opened twice")
	}
	clk.advance(hold)
	mustPass(t, c, true) // the probe
	mustBlock(t, c)      // only one probe at a time
	c.abandon(true)      // the fetch brought nothing
	mustPass(t, c, true)

	// The probe fails: another hold of the same length.
	_, hold2 := c.failure(true, 0)
	if hold2 != 100*time.Millisecond {
		t.Fatalf("second hold %v, want 100ms", hold2)
	}
	mustBlock(t, c)
	clk.advance(hold2)
	mustPass(t, c, true)
	recovered, openFor, failed := c.success(true)
	if !recovered || openFor != hold+hold2 || failed != 3 {
		t.Fatalf("success: recovered %v after %v with %d failures", recovered, openFor, failed)
	}
	mustPass(t, c, false)
	if hooked != 1 {
		t.Fatalf("hook called %d times, want once", hooked)
	}
}

func TestCircuitRetryAfter(t *testing.T) {
	t.Parallel()
	c, clk := newTestCircuit(16)
	opened, hold := c.failure(false, 3*time.Second)
	if !opened || hold != 3*time.Second {
		t.Fatalf("Retry-After 3s: opened %v, hold %v", opened, hold)
	}
	// An in-flight report with a longer Retry-After extends the hold.
	clk.advance(time.Second)
	c.failure(false, 5*time.Second)
	if left := c.holdLeft(); left != 5*time.Second {
		t.Fatalf("hold left %v, want 5s", left)
	}
	clk.advance(4 * time.Second)
	mustBlock(t, c)
	clk.advance(time.Second)
	mustPass(t, c, true)

	// A hook set while open is called at once.
	called := false
	c.onOpen(func() { called = true })
	if !called {
		t.Fatal("hook not called while open")
	}
}

func TestCircuitWakesWaiters(t *testing.T) {
	t.Parallel()
	c, _ := newTestCircuit(3)
	for range 3 {
		c.failure(false, time.Hour)
	}
	done := make(chan bool)
	go func() {
		probe, ok := c.wait(context.Background())
		done <- ok && !probe
	}()
	c.success(false) // a report in flight got through: closed, the waiter passes
	if !<-done {
		t.Fatal("waiter did not pass after the circuit closed")
	}
}

// TestCircuitHoldDoesNotGrow pins the pace of the probes during a long outage: one per interval, however
// many failed before, and a Retry-After only ever lengthens the hold it came with.
func TestCircuitHoldDoesNotGrow(t *testing.T) {
	t.Parallel()
	c, clk := newTestCircuit(3)
	for range 3 {
		c.failure(false, 0)
	}
	for i := range 1000 {
		clk.advance(c.holdLeft())
		mustPass(t, c, true)
		retryAfter := time.Duration(0)
		if i == 500 {
			retryAfter = 3 * time.Second
		}
		if _, hold := c.failure(true, retryAfter); hold != max(100*time.Millisecond, retryAfter) {
			t.Fatalf("hold after %d failed probes: %v", i+1, hold)
		}
	}
}

// TestCircuitTokenObtained pins that a new token ends a hold at once, but not before a Retry-After.
func TestCircuitTokenObtained(t *testing.T) {
	t.Parallel()
	c, clk := newTestCircuit(3)
	c.tokenObtained() // closed: nothing to end
	mustPass(t, c, false)
	for range 3 {
		c.failure(false, 0)
	}
	mustBlock(t, c)
	done := make(chan bool)
	go func() {
		probe, ok := c.wait(context.Background())
		done <- ok && probe
	}()
	c.tokenObtained()
	if !<-done {
		t.Fatal("the waiter did not probe after a token was obtained")
	}
	c.tokenObtained() // the probe is out: nothing changes
	mustBlock(t, c)

	_, hold := c.failure(true, 2*time.Second)
	clk.advance(time.Second)
	c.tokenObtained()
	if left := c.holdLeft(); left != hold-time.Second {
		t.Fatalf("hold left %v after a token within a Retry-After of %v, want %v", left, hold, hold-time.Second)
	}
	clk.advance(time.Second)
	mustPass(t, c, true)
}
