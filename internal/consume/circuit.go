package consume

import (
	"context"
	"sync"
	"time"
)

// minFailThreshold is the least number of consecutive transient failures that opens the circuit.
const minFailThreshold = 3

// circuit is the consumer's shared view of the upstream's health. While it is closed, reports are fetched
// as fast as slots free up. It opens after threshold consecutive transient failures (the consumer's
// concurrency, at least 3: a real outage fails every report in flight at once, while an upstream failing
// one request in ten does not stop the flow), or after a single one with a Retry-After (the upstream asked
// its clients to wait). While it is open, no report is fetched until a hold has passed: the probe
// interval, or the upstream's Retry-After when that is longer. Then exactly one report is let through as a
// probe (half-open): its success closes the circuit, its failure opens it again for another hold. Any
// report the upstream answers (accepted or rejected) closes it. The hold does not grow with the length of
// the outage: a failing upstream sees about one attempt per probe interval, and a recovered one is found
// within one. A new access token (tokenObtained) ends the hold early, though never before a Retry-After.
// Per-report delays are JetStream's (NakWithDelay); the circuit only paces fetching.
type circuit struct {
	interval  time.Duration // the hold between probes, unless a Retry-After asks for longer
	threshold int
	now       func() time.Time

	mu      sync.Mutex
	fails   int       // consecutive transient failures
	open    bool      // holding fetches
	until   time.Time // end of the current hold
	asked   time.Time // end of the upstream's last Retry-After: no probe before
	probing bool      // the probe is out
	since   time.Time // when it opened
	failed  int       // transient failures since it opened
	changed chan struct{}
	hook    func() // called once when the circuit opens next
}

func newCircuit(interval time.Duration, threshold int) *circuit {
	return &circuit{interval: interval, threshold: max(threshold, minFailThreshold), now: time.Now,
		changed: make(chan struct{})}
}

// notify wakes every waiter. Caller holds mu.
func (c *circuit) notify() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// wait blocks until a fetch may be made. It returns probe = true when the circuit is half-open: the caller
// fetches one report, and reports its outcome with success, failure or abandon (abandon also when the
// fetch brought nothing). ok is false when ctx ended first.
func (c *circuit) wait(ctx context.Context) (probe, ok bool) {
	for {
		c.mu.Lock()
		if !c.open {
			c.mu.Unlock()
			return false, true
		}
		now := c.now()
		if !c.probing && !now.Before(c.until) {
			c.probing = true
			c.mu.Unlock()
			return true, true
		}
		ch := c.changed
		var t *time.Timer
		var timer <-chan time.Time
		if !c.probing {
			t = time.NewTimer(c.until.Sub(now))
			timer = t.C
		}
		c.mu.Unlock()
		select {
		case <-ch:
		case <-timer:
		case <-ctx.Done():
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return false, false
		}
	}
}

// success records an answer of the upstream (accepted or rejected). It reports whether this closed the
// circuit, and for how long it was open with how many failed attempts.
func (c *circuit) success(probe bool) (recovered bool, openFor time.Duration, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fails = 0
	if probe {
		c.probing = false
	}
	if !c.open {
		return false, 0, 0
	}
	recovered, openFor, failed = true, c.now().Sub(c.since), c.failed
	c.open, c.probing, c.failed = false, false, 0
	c.notify()
	return recovered, openFor, failed
}

// failure records a transient failure, with the upstream's Retry-After. It reports whether this opened the
// circuit, and the hold that follows.
func (c *circuit) failure(probe bool, retryAfter time.Duration) (opened bool, hold time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fails++
	now := c.now()
	if asked := now.Add(retryAfter); asked.After(c.asked) {
		c.asked = asked
	}
	switch {
	case c.open && probe:
		c.probing = false
		c.failed++
		hold = max(c.interval, retryAfter)
		c.until = now.Add(hold)
		c.notify()
	case c.open:
		// A report that was already on its way when the circuit opened.
		c.failed++
		if c.asked.After(c.until) {
			c.until = c.asked
		}
		hold = c.until.Sub(now)
	case c.fails >= c.threshold || retryAfter > 0:
		opened = true
		c.open, c.since, c.failed = true, now, 1
		hold = max(c.interval, retryAfter)
		c.until = now.Add(hold)
		c.notify()
		if c.hook != nil {
			c.hook()
			c.hook = nil
		}
	}
	return opened, hold
}

// tokenObtained ends the current hold, though not before the upstream's last Retry-After: a new access
// token is a sign that the failures (often the token endpoint's own) may be over, so the next probe goes
// at once.
func (c *circuit) tokenObtained() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open || c.probing {
		return
	}
	until := c.now()
	if c.asked.After(until) {
		until = c.asked
	}
	if until.Before(c.until) {
		c.until = until
		c.notify()
	}
}

// abandon gives the probe back without an outcome (the fetch brought no report, the report was invalid, or
// it could not be settled), so that the next fetch probes again.
func (c *circuit) abandon(probe bool) {
	if !probe {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.probing {
		c.probing = false
		c.notify()
	}
}

// onOpen makes the circuit call f (once) when it opens next; at once when it is open now. It replaces an
// earlier f.
func (c *circuit) onOpen(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open {
		f()
		return
	}
	c.hook = f
}

// holdLeft returns the time left of the current hold, 0 when there is none.
func (c *circuit) holdLeft() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.open {
		return 0
	}
	return max(c.until.Sub(c.now()), 0)
}

// isOpen reports whether fetches are held or probing.
func (c *circuit) isOpen() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open
}
