package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/component"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
)

// Consumer delivers the reports producers publish to P.reports to the upstream's report operation. It
// is a durable JetStream pull consumer with explicit acknowledgements on the work-queue stream:
//
//   - Each report is validated (validate.Report); an invalid one is dead-lettered without an upstream call.
//   - A valid one is sent verbatim with Sender.Send, with the producer's Nats-Msg-Id as Idempotency-Key
//     (or "<stream>-<sequence>-<timestamp>" when it has none, the same for every redelivery).
//   - Accepted (2xx): acknowledged with a double acknowledgement (AckSync), which the server confirms, so
//     a report is removed from the work queue only when JetStream knows it was delivered. If the bridge
//     stops between the 2xx and that confirmation, the report is delivered again and reaches the
//     upstream a second time, with the same Idempotency-Key.
//   - Retry (transient): handed back with NakWithDelay, the delay growing exponentially with the number
//     of deliveries from BackoffMin to BackoffMax, and never shorter than the upstream's Retry-After.
//     The consumer's MaxDeliver is unlimited (-1), so a report is never dropped by JetStream; MaxAge,
//     when set, is the only limit: a report still failing after it is dead-lettered with its reason.
//   - Reject (permanent 4xx): dead-lettered with the upstream's status and messages.
//
// A dead letter is the original body and headers (JetStream's own Nats-* headers renamed with
// Bridge-Original-) on DLQSubject with Bridge-Error, Bridge-Upstream-Status when the upstream answered,
// and Bridge-Report-Sequence, Bridge-Report-Time and Bridge-Deliveries (see internal/layout). It is
// published with JetStream and its acknowledgement awaited before the report is acknowledged; its
// Nats-Msg-Id is "<stream>-<sequence>-<timestamp>-dlq", so a crash in between gives a second dead letter
// the DLQ stream's duplicate window drops, never a lost report. When the dead letter cannot be published,
// the report stays in the work queue and is tried again later.
//
// At most Config.Concurrency reports are sent upstream at the same time. While the upstream is failing,
// the consumer holds new fetches after a burst of transient failures and probes with one report per
// Config.ProbeInterval (or per Retry-After, when the upstream asks for longer; see circuit): one log line
// when it starts backing off, one when the upstream recovered, counters in between. When a probe
// succeeds, fetching resumes at full concurrency. TokenObtained ends a hold early.
//
// It is a component.Component. Its methods are safe for concurrent use; Run may be called once.
type Consumer struct {
	js   jetstream.JetStream
	send Sender
	cfg  Config
	log  *slog.Logger
	circ *circuit

	attemptTimeout time.Duration
	opTimeout      time.Duration
	// dlqMax is the dead-letter stream's max_msg_size (0: none), read at start-up and again when
	// JetStream refuses a dead letter as too large.
	dlqMax atomic.Int64

	started    atomic.Bool
	pending    atomic.Uint64
	stats      counters
	natsFailed atomic.Bool      // an acknowledgement or dead-letter publish failed, logged once
	dlqLog     *logging.Limiter // one dead-letter log line per kind and status an interval
	fetchFails atomic.Int64

	// aborted ends when a stop is cut short at StopTimeout: the attempts in flight are cancelled and
	// their reports handed back.
	aborted context.Context
	abort   context.CancelFunc

	mu         sync.Mutex
	iterCancel context.CancelFunc // of loop's current pull iterator
	phase      int
	setupErr   string
	infoErr    string
	fetchErr   string
}

// New returns a Consumer of the reports in cfg.Stream that delivers them with client. Zero fields of cfg
// take their defaults. Nothing is contacted before Run.
func New(js jetstream.JetStream, client Sender, cfg Config) *Consumer {
	cfg = cfg.withDefaults()
	aborted, abort := context.WithCancel(context.Background())
	return &Consumer{
		aborted:        aborted,
		abort:          abort,
		js:             js,
		send:           client,
		cfg:            cfg,
		log:            cfg.Logger,
		circ:           newCircuit(cfg.ProbeInterval, cfg.Concurrency),
		dlqLog:         logging.NewLimiter(cfg.DeadLetterLogEvery, nil),
		attemptTimeout: cfg.AckWait / 4,
		opTimeout:      min(opTimeoutMax, cfg.AckWait/8),
	}
}

// Run creates or updates the durable consumer (retrying while JetStream is unreachable or the stream is
// missing) and delivers reports until ctx is done.
//
// When ctx is done, Run stops fetching and hands the reports its pull iterator buffered ahead back to the
// stream (Nak, for immediate redelivery). The reports already given to a worker are finished: their
// attempt completes (bounded by AckWait/4; the attempt is not cancelled with ctx) and they are settled as
// usual: acknowledged, dead-lettered or handed back for a later redelivery. Then Run returns nil. So a
// clean stop loses nothing and sends nothing twice; drain or close the NATS connection only after Run
// returned. One report can still be delayed: JetStream may send it to the iterator's pull request in the
// instant the stop withdraws that request (on a cluster the withdrawal reaches the consumer's leader over
// a route); no client then holds it, and it comes back after AckWait. A report whose settlement failed
// (NATS unreachable), or that was in flight when the process died, is redelivered after AckWait and may
// reach the upstream a second time, with the same Idempotency-Key.
//
// When the stop takes longer than Config.StopTimeout (a slow upstream), it is cut short: the upstream
// attempts still in flight are cancelled and their reports handed back to the stream (Nak) for an
// immediate redelivery, to this bridge after a restart or to another, instead of after AckWait; a report
// the upstream answered meanwhile is settled as usual. Run then returns an error wrapping
// component.ErrStopTimeout and ErrAborted. It waits at most a second for the hand-backs; beyond, it
// returns with its goroutines left behind (the process is on its way out), and the reports come back
// after AckWait.
//
// Run returns an error for an invalid Config, a consumer configuration JetStream refuses (for example
// another consumer on the work-queue stream with an overlapping filter), a closed NATS connection, or a
// stop cut short.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("consume: Run called more than once")
	}
	stopBy, release := component.StopClock(ctx, c.cfg.StopTimeout) // never ends without a StopTimeout
	defer release()
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-stopBy.Done():
	}
	select {
	case err := <-done: // it ended just as the clock ran out: a clean stop
		return err
	default:
	}
	c.abort()
	wait := time.NewTimer(handBackWait)
	defer wait.Stop()
	var err error
	select {
	case err = <-done:
	case <-wait.C:
		err = fmt.Errorf("%w: still stopping; its unacknowledged reports are delivered again after the ack wait", ErrAborted)
	}
	if err == nil {
		err = ErrAborted // handed back its deliveries and stopped within the wait
	}
	return fmt.Errorf("%w (%s): %w", component.ErrStopTimeout, c.cfg.StopTimeout, err) // the supervisor logs it
}

// run is Run without its stop timeout.
func (c *Consumer) run(ctx context.Context) error {
	defer c.setPhase(phaseStopped)
	if err := c.cfg.check(); err != nil {
		return err
	}
	c.setPhase(phaseSetup)
	cons, err := c.setup(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	c.readDLQLimit(ctx)
	c.setPhase(phaseRunning)
	c.log.Info("consuming reports", "stream", c.cfg.Stream, "durable", c.cfg.Durable, "subject", c.cfg.Subject,
		"concurrency", c.cfg.Concurrency, "max_age", c.cfg.MaxAge.String())

	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		c.watch(wctx, cons)
	}()
	err = c.loop(ctx, cons)
	stopWatch()
	<-watched
	if err != nil {
		return err
	}
	if c.aborted.Err() != nil {
		// The hand-backs are plain publishes: make sure they left before the caller closes the connection.
		if ferr := c.js.Conn().FlushTimeout(handBackFlush); ferr != nil {
			c.log.Warn("reports handed back may not have reached NATS; they come back after the ack wait", "err", ferr)
		}
		return fmt.Errorf("%w: %d report(s) in flight handed back", ErrAborted, c.stats.handedBack.Load())
	}
	c.log.Info("report consumer stopped")
	return nil
}

// The report consumer is one of the bridge's components.
var _ component.Component = (*Consumer)(nil)

// ErrAborted is Run's error when its stop was cut short at Config.StopTimeout, wrapped with
// component.ErrStopTimeout.
var ErrAborted = errors.New("consume: stop aborted")

// TokenObtained tells the consumer that some part of the bridge obtained a new access token. A hold
// while the upstream was failing ends at once (though not before the upstream's Retry-After), so that
// reports flow again as soon as the token endpoint has recovered. It is cheap and safe to call at any
// time, from any goroutine.
func (c *Consumer) TokenObtained() { c.circ.tokenObtained() }

// consumerConfig is the durable consumer the bridge wants.
func (c *Consumer) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       c.cfg.Durable,
		Description:   "tracking-bridge: reports sent to the upstream report operation",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.cfg.AckWait,
		// Unlimited: a report is never dropped by JetStream; MaxAge is the bridge's own limit.
		MaxDeliver: -1,
		// Reports waiting for a delayed redelivery count as pending acknowledgements: leave room for them
		// beyond the reports in flight, so that they do not stop fresh ones.
		MaxAckPending: max(1000, 8*c.cfg.Concurrency),
		FilterSubject: c.cfg.Subject,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

// setup creates or updates the durable consumer, retrying transient failures until ctx is done.
func (c *Consumer) setup(ctx context.Context) (jetstream.Consumer, error) {
	want := c.consumerConfig()
	last := ""
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, opTimeoutMax)
		cons, err := c.js.CreateOrUpdateConsumer(cctx, c.cfg.Stream, want)
		cancel()
		if err == nil {
			c.setProblem(&c.setupErr, "")
			return cons, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		err = fmt.Errorf("creating consumer %s on stream %s: %w", c.cfg.Durable, c.cfg.Stream, err)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.Code == 400 && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, err
		}
		c.setProblem(&c.setupErr, err.Error())
		if msg := err.Error(); msg != last {
			c.log.Warn("report consumer not ready; retrying", "err", err)
			last = msg
		}
		if !retry.Sleep(ctx, retry.Backoff(c.cfg.BackoffMin, c.cfg.BackoffMax, attempt)) {
			return nil, ctx.Err()
		}
	}
}

// recreate creates the durable consumer again after it was deleted behind the bridge's back. The
// consumer handle stays valid: it addresses the consumer by stream and name.
func (c *Consumer) recreate(ctx context.Context) error {
	c.log.Warn("report consumer was deleted; creating it again", "durable", c.cfg.Durable)
	if _, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, c.consumerConfig()); err != nil {
		return fmt.Errorf("creating consumer %s again: %w", c.cfg.Durable, err)
	}
	return nil
}
