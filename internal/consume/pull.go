package consume

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/retry"
)

// restartIterator makes loop replace its pull iterator, whose pull requests went to a deleted consumer.
func (c *Consumer) restartIterator() {
	c.mu.Lock()
	cancel := c.iterCancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// loop delivers reports until ctx is done, then waits for the reports in flight.
//
// A slot is taken before a report is fetched and given back when the upstream answered it (or it failed
// validation), so at most Concurrency reports are being sent at once. 2×Concurrency workers handle the
// reports: a worker whose report was answered goes on to settle it (acknowledge, dead-letter, hand back)
// while another sends the next one. While the circuit is closed, reports come from a pull iterator
// (jetstream Messages) that keeps at most Concurrency reports buffered ahead. When the circuit opens, the
// iterator is drained and its buffered reports handed back (Nak with the hold as delay): nothing is
// fetched during a hold. A probe is fetched alone (Fetch(1)).
func (c *Consumer) loop(ctx context.Context, cons jetstream.Consumer) error {
	slots := make(chan struct{}, c.cfg.Concurrency) // a token per report in flight
	work := make(chan task, c.cfg.Concurrency)
	var workers, probes sync.WaitGroup
	for range 2 * c.cfg.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			free := func() { <-slots }
			for t := range work {
				c.handle(t.msg, t.probe, free)
			}
		}()
	}
	var it *iterator
	defer func() {
		it.stop(0) // stopping: buffered reports go back at once
		probes.Wait()
		close(work)
		workers.Wait()
	}()
	for {
		probe, ok := c.circ.wait(ctx)
		if !ok {
			return nil
		}
		if probe {
			it.stop(c.circ.holdLeft())
			it = nil
			if err := c.probe(ctx, cons, slots, work, &probes); err != nil {
				return err
			}
			continue
		}
		if it == nil {
			var err error
			if it, err = c.iterate(ctx, cons); err != nil {
				if connClosed(err) {
					return fmt.Errorf("consume: fetching reports: %w", err)
				}
				c.fetchFailed(err)
				if !retry.Sleep(ctx, c.fetchBackoff()) {
					return nil
				}
				continue
			}
		}
		if !acquire(ctx, slots) {
			return nil
		}
		if it.ctx.Err() != nil { // the circuit opened (or the consumer was created again) meanwhile
			<-slots
			it.stop(c.circ.holdLeft())
			it = nil
			continue
		}
		// A bounded wait: the iterator issues its next pull request only from within Next, and under load
		// it can miss the moment (its previous request still being sent); a new Next call catches up.
		msg, err := it.msgs.Next(jetstream.NextMaxWait(nextWait))
		if err == nil && it.ctx.Err() != nil { // the circuit opened while waiting: hand it back
			_ = msg.NakWithDelay(c.circ.holdLeft())
			err = errIteratorStopped
		}
		if err != nil {
			<-slots
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.Is(err, nats.ErrTimeout):
				// Nothing within nextWait: look at the circuit and ctx, and wait again.
			case it.ctx.Err() != nil: // the circuit opened, or the consumer was created again
				it.stop(c.circ.holdLeft())
				it = nil
			case errors.Is(err, jetstream.ErrConsumerDeleted):
				it.stop(0)
				it = nil
				if rerr := c.recreate(ctx); rerr != nil {
					c.fetchFailed(rerr)
					retry.Sleep(ctx, c.fetchBackoff())
				}
			case connClosed(err):
				return fmt.Errorf("consume: fetching reports: %w", err)
			case errors.Is(err, jetstream.ErrMsgIteratorClosed):
				c.fetchFailed(err)
				it.stop(0)
				it = nil
				retry.Sleep(ctx, c.fetchBackoff())
			default: // missed heartbeats and the like: the iterator carries on
				c.fetchFailed(err)
				retry.Sleep(ctx, c.fetchBackoff())
			}
			continue
		}
		c.fetchSucceeded()
		work <- task{msg: msg}
	}
}

// errIteratorStopped stands for a report handed back because the iterator was being stopped.
var errIteratorStopped = errors.New("pull iterator stopped")

// connClosed reports whether err says that the NATS connection is closed for good.
func connClosed(err error) bool {
	return errors.Is(err, nats.ErrConnectionClosed) || errors.Is(err, jetstream.ErrConnectionClosed)
}

// task is a report for a worker; probe marks the circuit's probe.
type task struct {
	msg   jetstream.Msg
	probe bool
}

// iterator is a pull iterator and a context cancelled when it is to be stopped: the circuit opened or the
// consumer was created again.
type iterator struct {
	msgs    jetstream.MessagesContext
	ctx     context.Context
	cancel  context.CancelFunc
	timeout time.Duration
}

// iterate starts a pull iterator that buffers at most Concurrency reports. It asks for more as soon as
// fewer than three quarters remain, rather than nats.go's default of half: the buffer stays fuller, so a
// free slot rarely waits for the next pull request, and the bound on buffered reports stays (measured in
// docs/performance.md).
func (c *Consumer) iterate(ctx context.Context, cons jetstream.Consumer) (*iterator, error) {
	msgs, err := cons.Messages(jetstream.PullMaxMessages(c.cfg.Concurrency),
		jetstream.PullThresholdMessages(max(1, c.cfg.Concurrency*3/4)))
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithCancel(ctx)
	c.circ.onOpen(cancel)
	c.mu.Lock()
	c.iterCancel = cancel
	c.mu.Unlock()
	return &iterator{msgs: msgs, ctx: ictx, cancel: cancel, timeout: c.opTimeout}, nil
}

// stop drains the iterator and hands its buffered reports back to the stream, for redelivery after delay.
// A nil iterator is left alone.
func (it *iterator) stop(delay time.Duration) {
	if it == nil {
		return
	}
	it.cancel()
	it.msgs.Drain()
	for {
		msg, err := it.msgs.Next(jetstream.NextMaxWait(it.timeout))
		if err != nil {
			return
		}
		if delay > 0 {
			_ = msg.NakWithDelay(delay)
		} else {
			_ = msg.Nak()
		}
	}
}

// probe fetches one report on its own while the circuit is half-open, and hands it to a worker.
func (c *Consumer) probe(ctx context.Context, cons jetstream.Consumer, slots chan struct{}, work chan<- task, probes *sync.WaitGroup) error {
	if !acquire(ctx, slots) {
		c.circ.abandon(true)
		return nil
	}
	fctx, cancel := context.WithTimeout(ctx, fetchWait)
	batch, err := cons.Fetch(1, jetstream.FetchContext(fctx))
	if err != nil {
		cancel()
		<-slots
		c.circ.abandon(true)
		if connClosed(err) {
			return fmt.Errorf("consume: fetching reports: %w", err)
		}
		c.fetchFailed(err)
		retry.Sleep(ctx, c.fetchBackoff())
		return nil
	}
	probes.Add(1)
	go func() {
		defer probes.Done()
		defer cancel()
		c.dispatch(ctx, batch, 1, true, slots, work)
	}()
	return nil
}

// acquire takes a slot, waiting for it; it reports false when ctx ended first.
func acquire(ctx context.Context, slots chan struct{}) bool {
	select {
	case slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func release(slots chan struct{}, n int) {
	for range n {
		<-slots
	}
}

// dispatch hands every report of one pull request to the workers, and gives back the slots the request
// did not fill.
func (c *Consumer) dispatch(ctx context.Context, batch jetstream.MessageBatch, n int, probe bool, slots chan struct{}, work chan<- task) {
	got := 0
	for msg := range batch.Messages() {
		got++
		if ctx.Err() != nil {
			// Stopping: hand it back for immediate redelivery, to this bridge after a restart or another.
			_ = msg.Nak()
			c.circ.abandon(probe)
			<-slots
			continue
		}
		work <- task{msg: msg, probe: probe}
	}
	if got == 0 {
		c.circ.abandon(probe)
	}
	err := batch.Error()
	switch {
	case err == nil, errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrTimeout):
		c.fetchSucceeded()
	default:
		c.fetchFailed(err)
		// Keep the unfilled slots for a moment so that a failing pull request cannot spin.
		retry.Sleep(ctx, c.fetchBackoff())
	}
	release(slots, n-got)
}

func (c *Consumer) fetchFailed(err error) {
	c.stats.fetchErrors.Add(1)
	if c.fetchFails.Add(1) == 1 {
		c.log.Warn("fetching reports failed; retrying", "err", err)
	}
	c.setProblem(&c.fetchErr, "fetching reports: "+err.Error())
}

func (c *Consumer) fetchSucceeded() {
	if c.fetchFails.Swap(0) > 0 {
		c.log.Info("fetching reports works again")
		c.setProblem(&c.fetchErr, "")
	}
}

func (c *Consumer) fetchBackoff() time.Duration {
	return retry.Backoff(100*time.Millisecond, 5*time.Second, int(c.fetchFails.Load()))
}
