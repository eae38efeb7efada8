package units

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/tracking-bridge/tracking-bridge/internal/component"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
)

// DefaultMaxRate is a bridge's view's default Config.MaxRate: half again the 2,000 events a second it is
// measured at (docs/performance.md#the-units-view).
const DefaultMaxRate = 3000

// floodShare is the part of Config.MaxRate a view takes while events arrive faster than twice MaxRate (a
// flood, a replay): each event the view applies costs about 90 µs of processor time between the bridge and
// nats-server; at the full rate that took a tenth of a flood's throughput from the event path, at a tenth
// of it still a twentieth (docs/performance.md#the-units-view). A trickle, not a stop, keeps the view
// alive through a flood that does not end. It catches up once the events slow down.
const floodShare = 0.01

// DefaultDurable is the durable consumer on the events stream that the views of every bridge share.
const DefaultDurable = "tracking-bridge-units"

// Config configures a View. Zero fields take their defaults.
type Config struct {
	// Streams names the events stream and the units bucket; its Replicas and MaxEventBytes shape the bucket
	// when the view creates it.
	Streams layout.Streams
	// Create creates the bucket when it is missing (BRIDGE_CREATE_STREAMS).
	Create bool
	// Durable is the shared consumer's name; DefaultDurable when empty.
	Durable string
	// Workers is how many events one bridge applies at once (16); the events of one unit go to one worker,
	// in the stream's order.
	Workers int
	// AckWait is how long the stream waits for an event's acknowledgement before it hands it to another
	// bridge (10s): the longest the view lags behind an event a killed bridge held.
	AckWait time.Duration
	// StopTimeout bounds the writes still in flight after Run's context ended (BRIDGE_SHUTDOWN_TIMEOUT);
	// zero: no bound.
	StopTimeout time.Duration
	// MaxRate is the most events a second this bridge takes from the stream (DefaultMaxRate when zero; no
	// limit when negative). While the stream stores events faster than twice that (a flood, a replay),
	// the view yields the processors to the event path: it takes a hundredth of MaxRate until they arrive
	// slower than MaxRate, then catches up.
	MaxRate float64
	// BackoffMin and BackoffMax pace the retries of what failed: setting up, writes handed back (500ms, 10s).
	BackoffMin, BackoffMax time.Duration
	Logger                 *slog.Logger
	Metrics                *Metrics // nil: none
}

func (c Config) withDefaults() Config {
	if c.Durable == "" {
		c.Durable = DefaultDurable
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.AckWait <= 0 {
		c.AckWait = 10 * time.Second
	}
	if c.MaxRate == 0 {
		c.MaxRate = DefaultMaxRate
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 500 * time.Millisecond
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// View builds the units bucket from the events stream (see the package's documentation). It is a
// component.Component whose Run never fails while its context lasts: what goes wrong is retried and shows in
// Ready, Status and its metrics. Its methods are safe for concurrent use; Run may be called once.
type View struct {
	js   jetstream.JetStream
	cfg  Config
	log  *slog.Logger
	m    *Metrics
	base string // P.events.

	started atomic.Bool
	cache   cache
	// limit paces the events the view takes: MaxRate, or MaxRate*floodShare while yielding to a flood.
	limit    *rate.Limiter
	yielding atomic.Bool
	paced    bool     // the stream's rate was known once; watch's own
	arrivals arrivals // the stream's storage rate, as watch reads it
	// reset asks the loop for a new iterator and an empty cache: the consumer was deleted.
	reset atomic.Bool

	lagEvents atomic.Uint64
	lagSince  atomic.Int64                 // storage time (Unix ns) of the first event not applied yet; 0: none
	lastWrite atomic.Int64                 // when this bridge last applied an event (Unix ns)
	counts    [len(outcomes)]atomic.Uint64 // by outcome, in the order of outcomes
	conflicts atomic.Uint64

	mu       sync.Mutex
	running  bool
	setupErr string // why the bucket or consumer is not there
	writeErr string // the last write that failed, until one succeeds
	infoErr  string // the consumer's info could not be read
}

// New returns a View that works through js (a NATS connection of its own: the view's traffic then never
// delays the event path's). Nothing is contacted before Run.
func New(js jetstream.JetStream, cfg Config) *View {
	cfg = cfg.withDefaults()
	limit := rate.NewLimiter(rate.Inf, 0)
	if cfg.MaxRate > 0 {
		// The rate of a view that yields until the stream's rate is known: a bridge often starts into a
		// flood (the upstream replays what it missed).
		limit = rate.NewLimiter(rate.Limit(cfg.MaxRate*floodShare), max(1, int(cfg.MaxRate/10)))
	}
	return &View{js: js, cfg: cfg, log: cfg.Logger, m: cfg.Metrics, base: layout.EventBase(cfg.Streams.Prefix),
		limit: limit}
}

var _ component.Component = (*View)(nil)

// Status is the view's state, for /status and the metrics.
type Status struct {
	Running bool
	// Problem is why the view does not apply events now ("" while it does).
	Problem string
	// LagEvents is the events of the stream not yet applied (the consumer's pending and unacknowledged).
	LagEvents uint64
	// LagSeconds is how long ago the stream stored the first event not yet applied; 0 when none is left.
	LagSeconds float64
	// LastApplied is when this bridge last applied an event (zero: never since start-up).
	LastApplied time.Time
	// Yielding is true while the stream stores events faster than the view's MaxRate: the view then takes
	// a hundredth of it, and catches up when they slow down.
	Yielding bool
	// Events counts the events this bridge took, by outcome (OutcomeApplied, ...).
	Events map[string]uint64
	// Conflicts counts the writes refused because another bridge changed the unit first.
	Conflicts uint64
}

// Status returns the view's state. It reads state; it asks nobody.
func (v *View) Status() Status {
	st := Status{LagEvents: v.lagEvents.Load(), Conflicts: v.conflicts.Load(), Events: map[string]uint64{},
		Yielding: v.yielding.Load()}
	for i, o := range outcomes {
		st.Events[o] = v.counts[i].Load()
	}
	if since := v.lagSince.Load(); since != 0 && st.LagEvents > 0 {
		st.LagSeconds = max(0, time.Since(time.Unix(0, since)).Seconds())
	}
	if at := v.lastWrite.Load(); at != 0 {
		st.LastApplied = time.Unix(0, at)
	}
	v.mu.Lock()
	st.Running = v.running
	st.Problem = v.problemLocked()
	v.mu.Unlock()
	return st
}

// Ready returns nil while the view is set up and its last write succeeded, else why not.
func (v *View) Ready() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p := v.problemLocked(); p != "" {
		return errors.New(p)
	}
	return nil
}

func (v *View) problemLocked() string {
	switch {
	case v.setupErr != "":
		return v.setupErr
	case !v.running:
		return "units view not running"
	case v.writeErr != "":
		return v.writeErr
	}
	return v.infoErr
}

func (v *View) setProblem(field *string, msg string) {
	v.mu.Lock()
	*field = msg
	v.mu.Unlock()
}

// Run builds the view until ctx ends: it makes sure the bucket and the shared consumer exist (retrying
// while they cannot be made), then applies events. When ctx ends it stops fetching, hands the events it
// fetched ahead back to the stream, finishes the writes in flight within Config.StopTimeout and returns
// nil. It returns an error only when called twice.
func (v *View) Run(ctx context.Context) error {
	if !v.started.CompareAndSwap(false, true) {
		return errors.New("units: Run called more than once")
	}
	v.setProblem(&v.setupErr, "setting up the units view")
	cons, kv, ok := v.setup(ctx)
	if !ok {
		return nil
	}
	v.mu.Lock()
	v.running = true
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		v.running = false
		v.mu.Unlock()
	}()
	v.log.Info("building the units view", "stream", v.cfg.Streams.Events(), "bucket", v.cfg.Streams.Units(),
		"durable", v.cfg.Durable, "workers", v.cfg.Workers)

	stopBy, release := component.StopClock(ctx, v.cfg.StopTimeout)
	defer release()
	queues := make([]chan event, v.cfg.Workers)
	var workers sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan event, queueLen)
		workers.Add(1)
		go func() {
			defer workers.Done()
			for ev := range queues[i] {
				v.handleQueued(stopBy, kv, ev, queues[i])
			}
		}()
	}
	wctx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		v.watch(wctx, cons)
	}()
	v.loop(ctx, cons, func(msg jetstream.Msg) {
		ev, ok := v.parse(msg)
		if !ok {
			return
		}
		h := fnv.New32a()
		h.Write([]byte(ev.unit))
		queues[h.Sum32()%uint32(len(queues))] <- ev
	})
	stopWatch()
	<-watched
	for _, q := range queues {
		close(q)
	}
	workers.Wait()
	v.log.Info("units view stopped")
	return nil
}

// queueLen is how many events wait for each worker; with the pull batch it bounds the events one bridge
// holds unacknowledged.
const queueLen = 64

// pullBatch is how many events the consumer's iterator keeps buffered ahead.
const pullBatch = 256

// consumerConfig is the shared durable consumer: every event from the stream's first, each acknowledged
// once applied, never given up (MaxDeliver -1), handed to another bridge after AckWait.
func (v *View) consumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       v.cfg.Durable,
		Description:   "tracking-bridge: the units view " + v.cfg.Streams.Units() + ", built from the events",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       v.cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 4 * (pullBatch + queueLen*v.cfg.Workers),
		FilterSubject: layout.Events(v.cfg.Streams.Prefix),
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
	}
}

// ConsumerConfig is the shared consumer a view of streams builds from, as Run and Rebuild make it.
func ConsumerConfig(streams layout.Streams, durable string) jetstream.ConsumerConfig {
	return New(nil, Config{Streams: streams, Durable: durable}).consumerConfig()
}

// setup makes sure the bucket and the consumer exist, retrying until ctx ends (ok false then).
func (v *View) setup(ctx context.Context) (jetstream.Consumer, jetstream.Stream, bool) {
	last := ""
	for attempt := 0; ; attempt++ {
		cons, kv, err := v.setupOnce(ctx)
		if err == nil {
			v.setProblem(&v.setupErr, "")
			return cons, kv, true
		}
		if ctx.Err() != nil {
			return nil, nil, false
		}
		v.setProblem(&v.setupErr, err.Error())
		if msg := err.Error(); msg != last {
			v.log.Warn("units view not set up; retrying", "err", err)
			last = msg
		}
		if !retry.Sleep(ctx, retry.Backoff(v.cfg.BackoffMin, v.cfg.BackoffMax, attempt)) {
			return nil, nil, false
		}
	}
}

func (v *View) setupOnce(ctx context.Context) (jetstream.Consumer, jetstream.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if err := v.cfg.Streams.EnsureUnits(ctx, v.js, v.cfg.Create, v.log); err != nil {
		return nil, nil, err
	}
	kv, err := v.js.Stream(ctx, v.cfg.Streams.UnitsStream())
	if err != nil {
		return nil, nil, fmt.Errorf("looking up the units bucket's stream %s: %w", v.cfg.Streams.UnitsStream(), err)
	}
	cons, err := v.consumer(ctx)
	if err != nil {
		return nil, nil, err
	}
	return cons, kv, nil
}

// consumer creates the shared consumer, or finds it as it is (another bridge, or a rebuild, made it).
func (v *View) consumer(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := v.js.CreateOrUpdateConsumer(ctx, v.cfg.Streams.Events(), v.consumerConfig())
	if err != nil {
		return nil, fmt.Errorf("creating consumer %s on stream %s: %w", v.cfg.Durable, v.cfg.Streams.Events(), err)
	}
	return cons, nil
}

// opTimeout bounds one request to JetStream: a write, a read, an info.
const opTimeout = 5 * time.Second

// loop takes events from the consumer and hands each to dispatch until ctx ends; then it hands back what
// its iterator had fetched ahead.
func (v *View) loop(ctx context.Context, cons jetstream.Consumer, dispatch func(jetstream.Msg)) {
	fails := 0
	for ctx.Err() == nil {
		if v.reset.Swap(false) {
			v.cache.clear()
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(pullBatch))
		if err != nil {
			v.fetchFailed(ctx, err, &fails)
			continue
		}
		for {
			msg, err := it.Next(jetstream.NextMaxWait(time.Second))
			if err == nil {
				fails = 0
				if v.limit.Wait(ctx) != nil {
					_ = msg.Nak()
					handBack(it)
					return
				}
				dispatch(msg)
				if !v.reset.Load() {
					continue
				}
			}
			if ctx.Err() != nil {
				handBack(it)
				return
			}
			if err != nil && errors.Is(err, nats.ErrTimeout) && !v.reset.Load() {
				continue
			}
			it.Stop()
			if err != nil && !errors.Is(err, nats.ErrTimeout) {
				if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
					v.log.Warn("the units view's consumer was deleted; making it again, from the stream's first event", "durable", v.cfg.Durable)
					v.reset.Store(true)
				}
				v.fetchFailed(ctx, err, &fails)
			}
			break
		}
	}
}

// fetchFailed records a failure to take events, makes sure the consumer exists, and waits a backoff.
func (v *View) fetchFailed(ctx context.Context, err error, fails *int) {
	*fails++
	v.setProblem(&v.infoErr, "taking events: "+err.Error())
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	if _, cerr := v.consumer(cctx); cerr != nil && ctx.Err() == nil {
		v.setProblem(&v.infoErr, cerr.Error())
	}
	cancel()
	retry.Sleep(ctx, retry.Backoff(v.cfg.BackoffMin, v.cfg.BackoffMax, *fails-1))
}

// handBack drains the iterator and hands what it had fetched back to the stream at once, for another
// bridge (or this one after a restart) instead of after the ack wait.
func handBack(it jetstream.MessagesContext) {
	it.Drain()
	for range pullBatch + 1 {
		msg, err := it.Next(jetstream.NextMaxWait(100 * time.Millisecond))
		if err != nil {
			return
		}
		_ = msg.Nak()
	}
}

// watch reads the stream's last sequence every paceEvery, which paces the view, and the consumer's state
// every lagEvery, the lag, until ctx ends.
func (v *View) watch(ctx context.Context, cons jetstream.Consumer) {
	events, err := v.js.Stream(ctx, v.cfg.Streams.Events())
	for tick := 0; ; tick++ {
		if err == nil {
			v.readArrivals(ctx, events)
			if tick%int(lagEvery/paceEvery) == 0 {
				v.readLag(ctx, cons, events)
			}
		} else if ctx.Err() == nil {
			events, err = v.js.Stream(ctx, v.cfg.Streams.Events())
		}
		if !retry.Sleep(ctx, paceEvery) {
			return
		}
	}
}

// paceEvery is how often the view reads the stream's last sequence: a flood is seen within about a
// second. lagEvery is how often it reads its consumer's state.
const (
	paceEvery = 250 * time.Millisecond
	lagEvery  = time.Second
)

// readArrivals reads the stream's last sequence and paces the view by the rate it gives.
func (v *View) readArrivals(ctx context.Context, events jetstream.Stream) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if si, err := events.Info(ctx); err == nil {
		v.pace(v.arrivals.observe(si.State.LastSeq, time.Now()))
	}
}

// readLag reads the consumer's pending events and the storage time of the first one not applied yet.
func (v *View) readLag(ctx context.Context, cons jetstream.Consumer, events jetstream.Stream) {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		if ctx.Err() == nil || errors.Is(err, context.DeadlineExceeded) {
			v.setProblem(&v.infoErr, "reading the consumer's state: "+err.Error())
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				v.reset.Store(true)
			}
		}
		return
	}
	v.setProblem(&v.infoErr, "")
	behind := info.NumPending + uint64(info.NumAckPending)
	if behind == 0 {
		v.lagSince.Store(0)
		v.lagEvents.Store(0)
		return
	}
	msg, err := events.GetMsg(ctx, info.AckFloor.Stream+1, jetstream.WithGetMsgSubject(layout.Events(v.cfg.Streams.Prefix)))
	if err == nil {
		v.lagSince.Store(msg.Time.UnixNano())
	}
	v.lagEvents.Store(behind)
}

// pace sets the view's rate from the stream's storage rate (events a second; negative: not known yet).
// It yields when events arrive faster than twice MaxRate (a flood, where the event path needs the
// processors; a steady rate the view cannot keep up with on its own, between MaxRate and twice it, is no
// flood, nor the bursts of a busy machine at 2,000 events a second), and takes the full rate again once
// they arrive slower than MaxRate. Until the first rate is known the view takes what it takes while
// yielding, without saying it yields.
func (v *View) pace(arriving float64) {
	if v.cfg.MaxRate <= 0 || arriving < 0 {
		return
	}
	if !v.paced && arriving <= 2*v.cfg.MaxRate {
		v.paced = true
		v.limit.SetLimit(rate.Limit(v.cfg.MaxRate))
		return
	}
	v.paced = true
	switch {
	case arriving > 2*v.cfg.MaxRate && !v.yielding.Load():
		v.yielding.Store(true)
		v.limit.SetLimit(rate.Limit(v.cfg.MaxRate * floodShare))
		v.log.Info("events arrive faster than the units view takes them: it yields to the event path and "+
			"catches up when they slow down", "arriving_per_s", int(arriving), "max_rate", v.cfg.MaxRate,
			"rate_while_yielding", v.cfg.MaxRate*floodShare)
	case arriving < v.cfg.MaxRate && v.yielding.Load():
		v.yielding.Store(false)
		v.limit.SetLimit(rate.Limit(v.cfg.MaxRate))
		v.log.Info("the units view takes events at its full rate again", "arriving_per_s", int(arriving),
			"max_rate", v.cfg.MaxRate)
	}
}

// arrivals turns the stream's last sequence, read every paceEvery, into a storage rate over about the
// last second: a burst shorter than that (the upstream's events come in bursts) is no flood.
type arrivals struct {
	readings [lagEvery / paceEvery]reading // a ring, the oldest at next once full
	n, next  int
}

type reading struct {
	seq uint64
	at  time.Time
}

// observe records the last sequence at t and returns the events a second since the oldest reading kept,
// or -1 for the first reading, and when the stream went back (it was purged or made again) or no time
// passed, which start the readings again.
func (a *arrivals) observe(seq uint64, t time.Time) float64 {
	if a.n > 0 {
		newest := a.readings[(a.next+len(a.readings)-1)%len(a.readings)]
		if seq < newest.seq || !t.After(newest.at) {
			a.n, a.next = 0, 0
		}
	}
	rate := -1.0
	if a.n > 0 {
		oldest := a.readings[(a.next+len(a.readings)-a.n)%len(a.readings)]
		rate = float64(seq-oldest.seq) / t.Sub(oldest.at).Seconds()
	}
	a.readings[a.next] = reading{seq: seq, at: t}
	a.next = (a.next + 1) % len(a.readings)
	a.n = min(a.n+1, len(a.readings))
	return rate
}
