package consume

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Stats is a snapshot of the consumer's counters since New.
type Stats struct {
	Consumed int64 // deliveries taken from the stream, redeliveries included
	Accepted int64 // reports the upstream accepted (2xx), acknowledged or not
	Retried  int64 // deliveries handed back for a later redelivery after a transient failure
	Rejected int64 // reports the upstream rejected, dead-lettered
	Invalid  int64 // reports that failed validation, dead-lettered
	Expired  int64 // reports dead-lettered after MaxAge
	// HandedBack counts the reports in flight handed back for an immediate redelivery when a stop was
	// cut short at StopTimeout.
	HandedBack int64

	DeadLetterFailures int64 // dead-letter publishes that failed (the report is retried)
	AckFailures        int64 // acknowledgements that failed (the report will be delivered again)
	FetchErrors        int64 // pull requests that failed

	Holds      int64 // times the consumer started backing off from a failing upstream
	BackingOff bool  // the upstream is failing: fetches are held
	InFlight   int   // reports being sent or settled now
}

type counters struct {
	consumed, accepted, retried, rejected, invalid, expired atomic.Int64
	dlqFailures, ackFailures, fetchErrors, holds            atomic.Int64
	inFlight, handedBack                                    atomic.Int64
}

// Run phases, for Ready.
const (
	phaseNew = iota
	phaseSetup
	phaseRunning
	phaseStopped
)

// watch refreshes Pending and the consumer's health every infoInterval, and creates the consumer again
// when it was deleted behind the bridge's back.
func (c *Consumer) watch(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(infoInterval)
	defer t.Stop()
	for {
		ictx, cancel := context.WithTimeout(ctx, opTimeoutMax)
		info, err := cons.Info(ictx)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			if err = c.recreate(ictx); err == nil {
				c.restartIterator()
				info, err = cons.Info(ictx)
			}
		}
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			c.setProblem(&c.infoErr, "report consumer info: "+err.Error())
		default:
			c.pending.Store(info.NumPending + uint64(max(info.NumAckPending, 0)))
			c.setProblem(&c.infoErr, "")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Consumer) setPhase(p int) {
	c.mu.Lock()
	c.phase = p
	c.mu.Unlock()
}

func (c *Consumer) setProblem(field *string, s string) {
	c.mu.Lock()
	*field = s
	c.mu.Unlock()
}

// Ready returns nil while the consumer is running with its durable consumer in place and JetStream
// answering, else why not. A failing upstream does not make it unready (the reports wait in the stream;
// Stats says whether it is backing off).
func (c *Consumer) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.phase {
	case phaseNew:
		return errors.New("report consumer not started")
	case phaseSetup:
		if c.setupErr != "" {
			return errors.New(c.setupErr)
		}
		return errors.New("report consumer starting")
	case phaseStopped:
		return errors.New("report consumer stopped")
	}
	if c.infoErr != "" {
		return errors.New(c.infoErr)
	}
	if c.fetchErr != "" {
		return errors.New(c.fetchErr)
	}
	return nil
}

// Pending returns the number of reports in the stream not yet settled: waiting to be fetched, in flight,
// or waiting for a delayed redelivery. It is refreshed every 5 s while Run runs.
func (c *Consumer) Pending() uint64 { return c.pending.Load() }

// Stats returns a snapshot of the counters.
func (c *Consumer) Stats() Stats {
	s := &c.stats
	return Stats{
		Consumed:           s.consumed.Load(),
		Accepted:           s.accepted.Load(),
		Retried:            s.retried.Load(),
		Rejected:           s.rejected.Load(),
		Invalid:            s.invalid.Load(),
		Expired:            s.expired.Load(),
		HandedBack:         s.handedBack.Load(),
		DeadLetterFailures: s.dlqFailures.Load(),
		AckFailures:        s.ackFailures.Load(),
		FetchErrors:        s.fetchErrors.Load(),
		Holds:              s.holds.Load(),
		BackingOff:         c.circ.isOpen(),
		InFlight:           int(s.inFlight.Load()),
	}
}
