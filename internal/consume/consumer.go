package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/deadletter"
	"github.com/tracking-bridge/tracking-bridge/internal/delivery"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/streams"
)

// Defaults of the Config fields left zero.
const (
	DefaultConcurrency = 16
	DefaultMaxBytes    = 256 << 10
	DefaultBackoffMin  = time.Second
	DefaultBackoffMax  = 5 * time.Minute
	DefaultAckWait     = 2 * time.Minute
)

const (
	// fetchWait is how long one pull request (of a probe) waits for a report on an idle stream.
	fetchWait = 5 * time.Second
	// nextWait bounds one wait for the pull iterator's next report.
	nextWait = 200 * time.Millisecond
	// infoInterval is the pace of the consumer info requests behind Pending and Ready.
	infoInterval = 5 * time.Second
	// opTimeoutMax bounds one JetStream operation of a report (dead-letter publish, acknowledgement).
	opTimeoutMax = 10 * time.Second
)

// Sender delivers one report to the upstream and classifies the answer. *upstream.ReportClient
// implements it. Send must be safe for concurrent use and must return when ctx is done.
type Sender interface {
	Send(ctx context.Context, body []byte, key string) delivery.Outcome
}

// Observer receives the consumer's counts, for metrics. Its methods are called from many goroutines at
// once; implementations must be safe for concurrent use and cheap.
type Observer interface {
	// Consumed is called for every delivery of a report taken from the stream, redeliveries included.
	Consumed()
	// Outcome is called once per delivery that was settled: kind is "accepted" (acknowledged after a 2xx),
	// "retry" (redelivery later), "rejected" (the upstream refused it; dead-lettered), "invalid"
	// (dead-lettered without an upstream call) or "expired" (dead-lettered after MaxAge). statusClass is
	// the class of the upstream's HTTP status, "1xx" to "5xx", or "none" when there was no answer.
	Outcome(kind, statusClass string)
}

// Config configures a Consumer.
type Config struct {
	// Stream is the work-queue stream of reports (TRACKING_REPORTS); it must exist (streams.Ensure).
	Stream string
	// Durable is the name of the durable pull consumer, created or updated by Run.
	Durable string
	// Subject is the consumer's filter: P.reports.
	Subject string
	// DLQSubject receives rejected reports: P.dlq.reports. A stream must capture it (TRACKING_DLQ).
	DLQSubject string
	// DLQStream is the stream that captures DLQSubject (TRACKING_DLQ): its max_msg_size bounds dead
	// letters. Empty: only the server's max_payload does.
	DLQStream string
	// Concurrency is the most reports being sent upstream at the same time (BRIDGE_REPORT_CONCURRENCY).
	// Reports already answered are settled meanwhile, and at most Concurrency more are fetched ahead, so
	// at most 4×Concurrency reports are unsettled at any time. Default 16.
	Concurrency int
	// MaxBytes is the largest report accepted; a larger one is dead-lettered. Default 256 KiB.
	MaxBytes int
	// MaxAge, when positive, dead-letters a report still failing transiently this long after it was
	// stored in the stream (its JetStream timestamp). Zero retries forever.
	MaxAge time.Duration
	// BackoffMin and BackoffMax bound the capped exponential delay of redeliveries after transient
	// failures (and of the holds while the upstream is failing). Defaults 1 s and 5 min.
	BackoffMin, BackoffMax time.Duration
	// AckWait is the consumer's acknowledgement wait: a report the bridge holds unsettled this long (it
	// crashed, or NATS was unreachable when it settled it) is redelivered. One upstream attempt is bounded
	// by AckWait/4, a dead-letter publish and an acknowledgement by AckWait/8 each; even when every stage
	// runs into its bound (the wait for a slot, for a worker, the attempt, the settlement), a report is
	// settled within AckWait of its delivery, so JetStream does not redeliver a report the bridge is still
	// working on. Keep it at least 4× the upstream HTTP timeout. Default 2 min.
	AckWait time.Duration
	// Logger receives the consumer's logs; give it a component key. Nil discards them.
	Logger *slog.Logger
	// Observer, when set, is told of every delivery and outcome.
	Observer Observer
}

// check reports configuration errors, all at once.
func (c *Config) check() error {
	var errs []error
	for _, f := range []struct{ name, v string }{
		{"Stream", c.Stream}, {"Durable", c.Durable}, {"Subject", c.Subject}, {"DLQSubject", c.DLQSubject},
	} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("consume: %s is empty", f.name))
		}
	}
	if strings.ContainsAny(c.Durable, ".*> \t\r\n") {
		errs = append(errs, fmt.Errorf("consume: durable name %q must not contain '.', '*', '>' or white space", c.Durable))
	}
	if c.DLQSubject != "" && c.DLQSubject == c.Subject {
		errs = append(errs, fmt.Errorf("consume: DLQSubject %q is the reports subject", c.DLQSubject))
	}
	return errors.Join(errs...)
}

// Stats is a snapshot of the consumer's counters since New.
type Stats struct {
	Consumed int64 // deliveries taken from the stream, redeliveries included
	Accepted int64 // reports the upstream accepted (2xx), acknowledged or not
	Retried  int64 // deliveries handed back for a later redelivery after a transient failure
	Rejected int64 // reports the upstream rejected, dead-lettered
	Invalid  int64 // reports that failed validation, dead-lettered
	Expired  int64 // reports dead-lettered after MaxAge

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
	inFlight                                                atomic.Int64
}

// Run phases, for Ready.
const (
	phaseNew = iota
	phaseSetup
	phaseRunning
	phaseStopped
)

// Consumer delivers the reports producers publish to P.reports to the upstream's report operation. It
// is a durable JetStream pull consumer with explicit acknowledgements on the work-queue stream:
//
//   - Each report is validated (Validate); an invalid one is dead-lettered without an upstream call.
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
// deadletter.HeaderOriginalPrefix) on DLQSubject with Bridge-Error, Bridge-Upstream-Status when the upstream
// answered, and deadletter.HeaderReportSequence, deadletter.HeaderReportTime and deadletter.HeaderDeliveries. It is published with
// JetStream and its acknowledgement awaited before the report is acknowledged; its Nats-Msg-Id is
// "<stream>-<sequence>-<timestamp>-dlq", so a crash in between gives a second dead letter the DLQ
// stream's duplicate window drops, never a lost report. When the dead letter cannot be published, the
// report stays in the work queue and is tried again later.
//
// At most Config.Concurrency reports are sent upstream at the same time. While the upstream is failing,
// the consumer holds new fetches after a burst of transient failures and probes with one report per hold
// (see circuit): one log line when it starts backing off, one when the upstream recovered, counters in
// between. When the upstream recovers, fetching resumes at full concurrency.
//
// Its methods are safe for concurrent use; Run may be called once.
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
	natsFailed atomic.Bool // an acknowledgement or dead-letter publish failed, logged once
	fetchFails atomic.Int64

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
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = DefaultBackoffMin
	}
	if cfg.BackoffMax < cfg.BackoffMin {
		cfg.BackoffMax = max(cfg.BackoffMin, DefaultBackoffMax)
	}
	if cfg.AckWait <= 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.MaxAge < 0 {
		cfg.MaxAge = 0
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Consumer{
		js:             js,
		send:           client,
		cfg:            cfg,
		log:            cfg.Logger,
		circ:           newCircuit(cfg.BackoffMin, cfg.BackoffMax, cfg.Concurrency),
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
// returned. A report whose settlement failed (NATS unreachable), or that was in flight when the process
// died, is redelivered after AckWait and may reach the upstream a second time, with the same
// Idempotency-Key.
//
// Run returns an error for an invalid Config, a consumer configuration JetStream refuses (for example
// another consumer on the work-queue stream with an overlapping filter), or a closed NATS connection.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.started.CompareAndSwap(false, true) {
		return errors.New("consume: Run called more than once")
	}
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
	c.log.Info("report consumer stopped")
	return nil
}

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

// recreate creates the durable consumer again after it was deleted behind the bridge's back. The
// consumer handle stays valid: it addresses the consumer by stream and name.
func (c *Consumer) recreate(ctx context.Context) error {
	c.log.Warn("report consumer was deleted; creating it again", "durable", c.cfg.Durable)
	if _, err := c.js.CreateOrUpdateConsumer(ctx, c.cfg.Stream, c.consumerConfig()); err != nil {
		return fmt.Errorf("creating consumer %s again: %w", c.cfg.Durable, err)
	}
	return nil
}

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
// fewer than three quarters remain (nats.go's default waits until fewer than half do): the buffer stays
// fuller, so that a slot rarely waits for the next pull request (BenchmarkReports at 16 in flight: 12,690–12,794 reports/s against
// 12,068–12,711 with the default, 4 alternating runs each), while the bound on buffered reports stays.
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

// handle validates and sends one report, calls sent when that is over (the upstream answered, or the report
// failed validation), then settles it.
func (c *Consumer) handle(msg jetstream.Msg, probe bool, sent func()) {
	c.stats.consumed.Add(1)
	c.stats.inFlight.Add(1)
	defer c.stats.inFlight.Add(-1)
	if c.cfg.Observer != nil {
		c.cfg.Observer.Consumed()
	}
	meta, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery; cannot happen on a pull consumer.
		sent()
		c.circ.abandon(probe)
		c.log.Error("report without JetStream metadata; leaving it to redelivery", "subject", msg.Subject(), "err", err)
		return
	}
	body := msg.Data()
	if problems := Validate(body, c.cfg.MaxBytes); problems != nil {
		sent()
		c.circ.abandon(probe)
		c.deadLetter(msg, meta, "invalid", 0, strings.Join(problems, "; "))
		return
	}

	// The attempt is not cancelled when Run's context ends: a report being sent is finished and settled.
	sctx, cancel := context.WithTimeout(context.Background(), c.attemptTimeout)
	out := c.send.Send(sctx, body, idempotencyKey(msg, meta))
	cancel()
	sent()

	switch out.Kind {
	case delivery.Accepted:
		c.answered(probe)
		c.stats.accepted.Add(1)
		c.observe("accepted", out.Status)
		c.ack(msg)
	case delivery.Reject:
		c.answered(probe)
		c.deadLetter(msg, meta, "rejected", out.Status, out.Reason())
	default:
		c.failed(probe, out)
		c.retryLater(msg, meta, out)
	}
}

// answered records that the upstream answered (accepted or rejected): it is up.
func (c *Consumer) answered(probe bool) {
	if recovered, openFor, failed := c.circ.success(probe); recovered {
		c.log.Info("upstream recovered", "failed_attempts", failed, "after", openFor.Round(time.Millisecond).String())
	}
}

// failed records a transient failure of the upstream.
func (c *Consumer) failed(probe bool, out delivery.Outcome) {
	opened, hold := c.circ.failure(probe, out.RetryAfter)
	if opened {
		c.stats.holds.Add(1)
		c.log.Warn("upstream failing, backing off", "status", out.Status, "err", out.Reason(),
			"hold", hold.Round(time.Millisecond).String())
	}
}

// retryLater hands a report back for a delayed redelivery, or dead-letters it once it is older than MaxAge.
func (c *Consumer) retryLater(msg jetstream.Msg, meta *jetstream.MsgMetadata, out delivery.Outcome) {
	age := time.Since(meta.Timestamp)
	if c.cfg.MaxAge > 0 && age >= c.cfg.MaxAge {
		c.deadLetter(msg, meta, "expired", out.Status, fmt.Sprintf(
			"the upstream still failed after %s (max age %s, %d attempts): %s",
			age.Round(time.Second), c.cfg.MaxAge, meta.NumDelivered, out.Reason()))
		return
	}
	delay := max(c.backoff(meta), out.RetryAfter)
	if c.cfg.MaxAge > 0 {
		delay = min(delay, c.cfg.MaxAge-age) // a last attempt right at the age limit
	}
	c.stats.retried.Add(1)
	c.observe("retry", out.Status)
	c.log.Debug("report failed; retrying later", "seq", meta.Sequence.Stream, "status", out.Status,
		"err", out.Reason(), "retry_in", delay.Round(time.Millisecond).String())
	if err := msg.NakWithDelay(delay); err != nil {
		// Without the nak the report comes back after AckWait instead.
		c.natsFailure("nak", err)
	}
}

// backoff is the redelivery delay after the report's n-th delivery failed.
func (c *Consumer) backoff(meta *jetstream.MsgMetadata) time.Duration {
	n := int(min(meta.NumDelivered, 64))
	return retry.Backoff(c.cfg.BackoffMin, c.cfg.BackoffMax, max(n-1, 0))
}

// deadLetter publishes the report to DLQSubject with its reason, then acknowledges it. When the publish
// fails, the report is handed back for a later redelivery.
func (c *Consumer) deadLetter(msg jetstream.Msg, meta *jetstream.MsgMetadata, kind string, status int, reason string) {
	dl := deadLetterMsg(c.cfg.DLQSubject, msg, meta, status, reason, c.dlqLimit())
	err := c.publishDeadLetter(dl)
	if deadletter.TooLarge(err) {
		// The limits changed since they were read (the stream's max_msg_size lowered, a failover to a
		// server with a smaller max_payload): read them again and send a dead letter that fits.
		c.readDLQLimit(context.Background())
		limit := c.dlqLimit()
		if limit <= 0 || limit >= int64(deadletter.MsgSize(dl)) {
			limit = int64(deadletter.MsgSize(dl)) - 1 // refused for a reason the limits read do not show
		}
		if smaller := deadLetterMsg(c.cfg.DLQSubject, msg, meta, status, reason, limit); deadletter.MsgSize(smaller) < deadletter.MsgSize(dl) {
			err = c.publishDeadLetter(smaller)
		}
	}
	if err != nil {
		c.stats.dlqFailures.Add(1)
		c.natsFailure("dead-letter publish", err)
		if nerr := msg.NakWithDelay(c.backoff(meta)); nerr != nil {
			c.natsFailure("nak", nerr)
		}
		return
	}
	switch kind {
	case "invalid":
		c.stats.invalid.Add(1)
	case "rejected":
		c.stats.rejected.Add(1)
	case "expired":
		c.stats.expired.Add(1)
	}
	c.observe(kind, status)
	attrs := []any{"subject", c.cfg.DLQSubject, "seq", meta.Sequence.Stream, "kind", kind, "err", reason}
	if status != 0 {
		attrs = append(attrs, "status", status)
	}
	c.log.Warn("report dead-lettered", attrs...)
	c.ack(msg)
}

func (c *Consumer) publishDeadLetter(dl *nats.Msg) error {
	pctx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
	defer cancel()
	_, err := c.js.PublishMsg(pctx, dl)
	return err
}

// dlqLimit is the largest dead letter NATS stores (see deadletter.MaxMessage).
func (c *Consumer) dlqLimit() int64 {
	return deadletter.MaxMessage(c.js.Conn().MaxPayload(), c.dlqMax.Load())
}

// readDLQLimit reads the max_msg_size of DLQStream, keeping the last known value when it cannot.
func (c *Consumer) readDLQLimit(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.opTimeout)
	defer cancel()
	if c.cfg.DLQStream == "" {
		return
	}
	if n, err := streams.MaxMsgSize(ctx, c.js, c.cfg.DLQStream); err == nil {
		c.dlqMax.Store(n)
	} else {
		c.log.Debug("dead-letter stream's max_msg_size unknown", "stream", c.cfg.DLQStream, "err", err)
	}
}

// deadLetterMsg builds the dead letter of a report (see Consumer). It is always storable: headers whose
// names nats.go cannot send are left out; when the report's headers would take the header block past
// what JetStream stores, or the message past maxSize (the largest message the dead-letter stream stores,
// see deadletter.MaxMessage; 0: no bound) even with a description in place of the report, the report's
// headers go; a report too large with the headers is described (see deadletter.Fit). A dead
// letter that cannot be stored would be redelivered forever.
func deadLetterMsg(subject string, msg jetstream.Msg, meta *jetstream.MsgMetadata, status int, reason string,
	maxSize int64) *nats.Msg {
	key := reportKey(meta)
	dl := nats.NewMsg(subject)
	dl.Data = msg.Data()
	left := 0
	for k, vs := range msg.Headers() {
		if len(k) >= 5 && strings.EqualFold(k[:5], "Nats-") {
			k = deadletter.HeaderOriginalPrefix + k
		}
		if !sendableHeaderKey(k) {
			left++
			continue
		}
		dl.Header[k] = append([]string(nil), vs...)
	}
	if left > 0 {
		reason += fmt.Sprintf("; %d report header(s) with names a NATS client cannot send were left out", left)
	}
	setDeadLetterHeaders(dl.Header, meta, status, reason)
	if deadletter.HeaderSize(dl) <= deadletter.MaxHeaderBlock {
		// A description lengthens Bridge-Error, which may take the header block over after all.
		fitted := deadletter.Fit(dl, maxSize, key)
		if !fitted || int64(deadletter.MsgSize(dl)) <= maxSize && deadletter.HeaderSize(dl) <= deadletter.MaxHeaderBlock {
			return dl
		}
	}
	dl.Header = nats.Header{}
	dl.Data = msg.Data()
	setDeadLetterHeaders(dl.Header, meta, status, reason+"; the report's headers were dropped: too large for a dead letter")
	deadletter.Fit(dl, maxSize, key)
	return dl
}

// sendableHeaderKey reports whether nats.go sends a header of this name (printable ASCII without
// separators, as ADR-4 and nats.go's stricter check have it); the server accepts others from other
// clients.
func sendableHeaderKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 33 || c > 126 || strings.IndexByte(`"()/,:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// setDeadLetterHeaders sets the bridge's headers of a report's dead letter.
func setDeadLetterHeaders(h nats.Header, meta *jetstream.MsgMetadata, status int, reason string) {
	h.Set(deadletter.HeaderError, deadletter.Clip(reason, deadletter.MaxErrorHeader))
	if status != 0 {
		h.Set(deadletter.HeaderUpstreamStatus, strconv.Itoa(status))
	} else {
		h.Del(deadletter.HeaderUpstreamStatus)
	}
	h.Set(deadletter.HeaderReportSequence, strconv.FormatUint(meta.Sequence.Stream, 10))
	h.Set(deadletter.HeaderReportTime, meta.Timestamp.UTC().Format(time.RFC3339Nano))
	h.Set(deadletter.HeaderDeliveries, strconv.FormatUint(meta.NumDelivered, 10))
	h.Set(jetstream.MsgIDHeader, reportKey(meta)+"-dlq")
}

// ack acknowledges a settled report and waits for the server's confirmation.
func (c *Consumer) ack(msg jetstream.Msg) {
	actx, cancel := context.WithTimeout(context.Background(), c.opTimeout)
	err := msg.DoubleAck(actx)
	cancel()
	if err != nil {
		c.stats.ackFailures.Add(1)
		c.natsFailure("acknowledgement", err)
		return
	}
	if c.natsFailed.CompareAndSwap(true, false) {
		c.log.Info("JetStream acknowledgements succeed again")
	}
}

// natsFailure logs the first of a series of failed JetStream operations on reports; the rest go to debug.
func (c *Consumer) natsFailure(op string, err error) {
	if c.natsFailed.CompareAndSwap(false, true) {
		c.log.Warn("JetStream "+op+" failed; the report will be delivered again", "err", err)
		return
	}
	c.log.Debug("JetStream "+op+" failed", "err", err)
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

func (c *Consumer) observe(kind string, status int) {
	if c.cfg.Observer != nil {
		c.cfg.Observer.Outcome(kind, statusClass(status))
	}
}

// statusClass returns "1xx" to "5xx", or "none".
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "none"
	}
	return strconv.Itoa(status/100) + "xx"
}

// reportKey identifies a report's stored message: its stream, sequence and storage time (nanoseconds),
// so that a re-created stream reusing sequence numbers does not collide.
func reportKey(meta *jetstream.MsgMetadata) string {
	return meta.Stream + "-" + strconv.FormatUint(meta.Sequence.Stream, 10) + "-" +
		strconv.FormatInt(meta.Timestamp.UnixNano(), 10)
}

// idempotencyKey is the producer's Nats-Msg-Id when it is usable as an HTTP header value, else reportKey:
// the same for every delivery of the report.
func idempotencyKey(msg jetstream.Msg, meta *jetstream.MsgMetadata) string {
	if id := msg.Headers().Get(jetstream.MsgIDHeader); id != "" && len(id) <= 256 && printableASCII(id) {
		return id
	}
	return reportKey(meta)
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
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

// Ready reports whether the consumer is running with its durable consumer in place and JetStream
// answering, and why not. A failing upstream does not make it unready (the reports wait in the stream);
// the reason then says that it is backing off.
func (c *Consumer) Ready() (bool, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.phase {
	case phaseNew:
		return false, "report consumer not started"
	case phaseSetup:
		if c.setupErr != "" {
			return false, c.setupErr
		}
		return false, "report consumer starting"
	case phaseStopped:
		return false, "report consumer stopped"
	}
	if c.infoErr != "" {
		return false, c.infoErr
	}
	if c.fetchErr != "" {
		return false, c.fetchErr
	}
	if c.circ.isOpen() {
		return true, "consuming reports; upstream failing, backing off"
	}
	return true, "consuming reports"
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
		DeadLetterFailures: s.dlqFailures.Load(),
		AckFailures:        s.ackFailures.Load(),
		FetchErrors:        s.fetchErrors.Load(),
		Holds:              s.holds.Load(),
		BackingOff:         c.circ.isOpen(),
		InFlight:           int(s.inFlight.Load()),
	}
}
