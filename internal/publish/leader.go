package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/component"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/lease"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Events is the event path under the lease (docs/replicas.md#the-fence), a component. The
// lease decides whether this bridge leads; each time it starts leading, a term begins: a publisher of its own
// claims the fence (a marker on P.leader that fences out every former leader's writes), reads the resume
// cursor from the stream, and the upstream stream runs into it. When the lease says stop, the term's reading
// stops and its publishes in flight are settled before the lease is released. Its readiness is the upstream
// stream's (on a standby: that a leader is known), and Status says the role, the lease and the stream.
type Events struct {
	cfg    EventsConfig
	lease  *lease.Lease
	stream *upstream.Stream
	watch  *streamWatch // the stream's observer: its metrics, when its last connection ended
	// published is the publishers' metrics, handed to each term's publisher.
	published *Metrics
	log       *slog.Logger
	pubLog    *slog.Logger // the publishers' (component "publish")
	// grace is how long the stream may be reconnecting after a connection ended and still count as ready.
	grace time.Duration

	// Set by Run before the lease starts: its context (the stop of ingress) and the shutdown clock.
	rctx, dctx context.Context
	// fatal carries a failure no other term can mend (no publisher can be made): Run returns it.
	// A term whose stream or publisher fails resigns the lease instead, for a while.
	fatal chan error

	mu   sync.Mutex
	term *term
	pub  *Publisher // the current or the last term's, for Status
}

// EventsConfig is what the event path is built from.
type EventsConfig struct {
	// NC is the connection the publishers publish on; JS, on the same connection, holds the lease.
	NC *nats.Conn
	JS jetstream.JetStream
	// Streams names the events and dead-letter streams, the fence subjects and the lease bucket.
	Streams layout.Streams
	// Stream configures the upstream stream the leader reads; its Observer is the event path's, which
	// feeds StreamMetrics.
	Stream        upstream.StreamConfig
	StreamMetrics *upstream.StreamMetrics
	// Metrics observes every term's publisher, and counts foreign writes to the lease.
	Metrics *Metrics
	// Window, Timeout and Source are each term's publisher's (BRIDGE_PUBLISH_WINDOW,
	// BRIDGE_PUBLISH_TIMEOUT, the CloudEvents source); Timeout also bounds claiming the fence and settling
	// a term's publishes.
	Window  int
	Timeout time.Duration
	Source  string
	// LeaseTTL and Replicas are the lease's (BRIDGE_LEASE_TTL, BRIDGE_STREAM_REPLICAS).
	LeaseTTL time.Duration
	Replicas int
	// ShutdownTimeout bounds settling the publishes in flight once Run's context ends
	// (BRIDGE_SHUTDOWN_TIMEOUT).
	ShutdownTimeout time.Duration
	// ReconnectGrace is how long the stream may be reconnecting after a connection ended and still count
	// as ready.
	ReconnectGrace time.Duration
	// Logger carries no "component" attribute: the event path logs as "leader", its publishers as
	// "publish", the lease as "lease".
	Logger *slog.Logger
	// Spans starts every term's event spans; nil with tracing off.
	Spans *tracing.Roots
	// Reported links an event's span to the span of the report that reported it (Config.Reported).
	Reported *tracing.Reported
}

// term is one period of leadership.
type term struct {
	holder  lease.Holder // this process as the lease holds it, with the epoch this term leads
	cancel  context.CancelFunc
	done    chan struct{} // closed when the stream stopped reading into pub
	pub     *Publisher
	claimed bool // the fence was claimed; written before done is closed
}

// NewEvents builds the event path: its upstream stream and its lease. It contacts nothing; Run competes
// for the lease.
func NewEvents(cfg EventsConfig) (*Events, error) {
	log := cfg.Logger
	e := &Events{cfg: cfg, watch: &streamWatch{StreamMetrics: cfg.StreamMetrics}, published: cfg.Metrics,
		log: log.With("component", "leader"), pubLog: log.With("component", "publish"),
		fatal: make(chan error, 1), grace: cfg.ReconnectGrace}
	sc := cfg.Stream
	sc.Observer = e.watch
	e.stream = upstream.NewStream(sc)
	l, err := lease.New(cfg.JS, lease.Config{
		Bucket:   cfg.Streams.Leases(),
		TTL:      cfg.LeaseTTL,
		Replicas: max(cfg.Replicas, 1),
		OnChange: e.onChange,
		Logger:   log,

		OnForeignWrite: cfg.Metrics.ForeignLeaseWrite,
	})
	if err != nil {
		return nil, err
	}
	e.lease = l
	return e, nil
}

// Run competes for the lease until ctx ends or a failure no term can mend (fatal). When ctx ends, the
// term's reading stops and its publishes in flight are settled within BRIDGE_SHUTDOWN_TIMEOUT; Run
// returns once the lease is released.
func (e *Events) Run(ctx context.Context) error {
	dctx, stopClock := component.StopClock(ctx, e.cfg.ShutdownTimeout)
	defer stopClock()
	e.rctx, e.dctx = ctx, dctx
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- e.lease.Run(lctx) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("the lease cannot work: %w", err)
		}
		return nil
	case err := <-e.fatal:
		stop()
		<-done
		return err
	}
}

// Ready: on the leader, the event stream is connected, or reconnecting for less than the grace period
// after an established connection ended.
func (e *Events) Ready() error {
	s := e.stream
	if !e.Leading() {
		// A standby reads no stream (docs/replicas.md#the-fence). It is ready once it has known a
		// leader, so that a bridge starting alone is not ready before it leads and its stream is connected, and a
		// standby stays ready while the lease changes hands.
		if !e.lease.SawHolder() {
			return errors.New("standing by: no leader known yet")
		}
		return nil
	}
	st := s.State()
	switch st {
	case upstream.StateConnected:
		return nil
	case upstream.StateReconnecting:
		if down := e.watch.down.Load(); down != 0 && time.Since(time.Unix(0, down)) < e.grace {
			return nil
		}
	}
	if err := s.LastError(); err != nil {
		return fmt.Errorf("%s: %v", st, err)
	}
	return errors.New(st.String())
}

// EventsStatus is where the event path stands, for the daemon's /status.
type EventsStatus struct {
	Leading bool
	// Self is this process as it would write itself into the lease; Holder the latest known holder, nil
	// while the lease is free or not known yet.
	Self   lease.Holder
	Holder *lease.Holder
	// StreamState and StreamError are the upstream stream's state and why its last connection attempt
	// ended (nil: none).
	StreamState upstream.StreamState
	StreamError error
	// ResumeAfter is the current or last term's resume point ("" before the first term); Activity the
	// stream's last activity; Duplicates the events found stored before and not stored again.
	ResumeAfter string
	Activity    upstream.StreamActivity
	Duplicates  uint64
}

// Status says the role, the lease and the stream.
func (e *Events) Status() EventsStatus {
	s := e.stream
	st := EventsStatus{Leading: e.Leading(), Self: e.lease.Self(), StreamState: s.State(), StreamError: s.LastError()}
	if h, ok := e.lease.Holder(); ok {
		st.Holder = &h
	}
	if p := e.publisher(); p != nil {
		st.ResumeAfter = p.LastResumeID()
	}
	st.Activity = e.watch.Activity()
	st.Duplicates = e.published.Duplicates()
	return st
}

// StreamState is the upstream stream's connection state.
func (e *Events) StreamState() upstream.StreamState { return e.stream.State() }

// ResumeAfter is the current or last term's resume point: the id up to which every event is stored; ""
// before the first term.
func (e *Events) ResumeAfter() string {
	if p := e.publisher(); p != nil {
		return p.LastResumeID()
	}
	return ""
}

// Self is this process as the lease holds it (its instance tells it from another process of the same
// name).
func (e *Events) Self() lease.Holder { return e.lease.Self() }

// streamWatch is the event stream's observer: its metrics, and when its last established connection
// ended, for the reconnect grace of the readiness.
type streamWatch struct {
	*upstream.StreamMetrics
	down atomic.Int64 // unix ns; 0 while none ended yet
}

func (w *streamWatch) Connected() {
	w.down.Store(0)
	w.StreamMetrics.Connected()
}

func (w *streamWatch) Disconnected(reason string) {
	w.down.Store(time.Now().UnixNano())
	w.StreamMetrics.Disconnected(reason)
}

// Leading reports whether this bridge holds the lease now (by its own clock).
func (e *Events) Leading() bool { return e.lease.Leading() }

// publisher returns the current or last term's publisher; nil before the first term.
func (e *Events) publisher() *Publisher {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pub
}

// onChange is the lease's OnChange: it starts a term, or ends the current one.
func (e *Events) onChange(leading bool) {
	if leading {
		e.begin()
	} else {
		e.end()
	}
}

func (e *Events) begin() {
	h, _ := e.lease.Holder()
	pub, err := e.newPublisher()
	if err != nil {
		e.fail(err)
		e.lease.Resign(h.Epoch, "cannot publish: "+err.Error(), e.cfg.LeaseTTL)
		return
	}
	ctx, cancel := context.WithCancel(e.rctx)
	t := &term{holder: h, cancel: cancel, done: make(chan struct{}), pub: pub}
	e.mu.Lock()
	e.term, e.pub = t, pub
	e.mu.Unlock()
	go e.runTerm(ctx, t)
}

// runTerm claims the fence, then runs the upstream stream into the term's publisher until ctx ends or
// the stream stops on an error.
func (e *Events) runTerm(ctx context.Context, t *term) {
	defer close(t.done)
	h := t.holder
	marker, _ := json.Marshal(h)
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		err := t.pub.Claim(cctx, h.Name, marker)
		cancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if attempt == 0 {
			e.log.Warn("cannot claim the fence; retrying", "err", err)
		}
		if attempt == claimAttempts-1 {
			// Holding the lease without reading the stream helps nobody: leave it to the others a while.
			e.log.Error("cannot claim the fence; leaving the lease to the other bridges", "err", err,
				"for", e.cfg.LeaseTTL.String())
			e.lease.Resign(t.holder.Epoch, "cannot claim the fence", e.cfg.LeaseTTL)
			return
		}
		if !retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, 2*time.Second, attempt)) {
			return
		}
	}
	t.claimed = true
	// Paused or cut off while storing the markers, or overtaken by an operator's command meanwhile: some
	// may have been stored after another's, which would let this process's events through on those
	// subjects. The key, read after the last marker was stored, says whether anyone took the lease
	// before; if so this process must not publish, and the other's events checking those subjects are
	// refused until new markers are written.
	// A read that fails (NATS busy, an election) is tried again while the lease is still valid: only an
	// answer that someone else holds it, or the lease running out, ends the term.
	var held bool
	var err error
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		held, err = e.lease.Confirm(cctx)
		cancel()
		if err == nil || !e.lease.Leading() || attempt == confirmAttempts-1 ||
			!retry.Sleep(ctx, retry.Backoff(100*time.Millisecond, time.Second, attempt)) {
			break
		}
	}
	if !held {
		if ctx.Err() == nil {
			e.log.Warn("the lease was lost while the fence was being claimed; not reading the stream", "err", err)
			e.lease.Resign(t.holder.Epoch, "lease lost while claiming the fence", 0)
		}
		return
	}
	upkeep := make(chan struct{})
	uctx, stopUpkeep := context.WithCancel(ctx)
	go func() {
		defer close(upkeep)
		_ = t.pub.Run(uctx) // returns nil when uctx ends
	}()
	err = e.stream.Run(ctx, t.pub)
	stopUpkeep()
	<-upkeep
	switch {
	case errors.Is(err, ErrFenced):
		e.lease.Resign(t.holder.Epoch, "fenced out", 0)
	case err != nil && ctx.Err() == nil:
		// The cursor could not be read or the publisher failed (NATS in trouble, as during an election):
		// another bridge, or this one after a while, starts a new term.
		e.log.Error("the event path failed; leaving the lease to the other bridges", "err", err,
			"for", e.cfg.LeaseTTL.String())
		e.lease.Resign(t.holder.Epoch, "the event path failed", e.cfg.LeaseTTL)
	}
}

// end stops the current term: the stream stops reading, then the publishes in flight are settled (within
// the publish timeout, or the shutdown clock when stopping), so that the next leader resumes after them.
func (e *Events) end() {
	e.mu.Lock()
	t := e.term
	e.term = nil
	e.mu.Unlock()
	if t == nil {
		return
	}
	t.cancel()
	<-t.done
	defer t.pub.Close()
	if !t.claimed {
		return
	}
	sctx, cancel := context.WithTimeout(e.dctx, e.cfg.Timeout)
	defer cancel()
	if err := t.pub.Settle(sctx); err != nil {
		e.log.Warn("stopped leading with publishes unsettled; the next leader resumes from what the stream holds",
			"err", err)
		return
	}
	e.log.Info("in-flight publishes completed", "resume_after", t.pub.LastResumeID())
}

// newPublisher returns a publisher of events for one term, fenced on P.leader.>, observed by the event
// path's metrics, confirming the lease with it.
func (e *Events) newPublisher() (*Publisher, error) {
	cfg, l := e.cfg, e.cfg.Streams
	return New(cfg.NC, Config{
		Prefix:       l.Prefix,
		EventsStream: l.Events(),
		DLQStream:    l.DLQ(),
		FenceSubject: l.FenceSubject(),
		Window:       cfg.Window,
		Timeout:      cfg.Timeout,
		Source:       cfg.Source,
		Logger:       e.pubLog,
		Observer:     e.published,
		Confirm:      e.lease.Confirm,
		Spans:        cfg.Spans,
		Reported:     cfg.Reported,
	})
}

// claimAttempts bounds the attempts to claim the fence within one term (about 4 s of backoff).
const claimAttempts = 6

// confirmAttempts bounds the reads of the lease after the fence is claimed.
const confirmAttempts = 4

// fail hands a term's failure to Run, which stops on it (the first one; later ones are dropped).
func (e *Events) fail(err error) {
	select {
	case e.fatal <- err:
	default:
	}
}
