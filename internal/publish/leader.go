package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/component"
	"github.com/tracking-bridge/tracking-bridge/internal/lease"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// events is the event path under the lease (docs/replicas.md#the-fence), a component. The
// lease decides whether this bridge leads; each time it starts leading, a term begins: a publisher of its own
// claims the fence (a marker on P.leader that fences out every former leader's writes), reads the resume
// cursor from the stream, and the upstream stream runs into it. When the lease says stop, the term's reading
// stops and its publishes in flight are settled before the lease is released. Its readiness is the upstream
// stream's (on a standby: that a leader is known), and it writes the role, the lease and the stream into
// /status.
type events struct {
	d      *Daemon
	lease  *lease.Lease
	stream *upstream.Stream
	watch  *streamWatch // the stream's observer: its metrics, when its last connection ended
	// published is the publishers' metrics, handed to each term's publisher.
	published *publish.Metrics
	log       *slog.Logger
	// grace is how long the stream may be reconnecting after a connection ended and still count as ready.
	grace time.Duration

	// Set by Run before the lease starts: its context (the stop of ingress) and the shutdown clock.
	rctx, dctx context.Context
	// fatal carries a failure no other term can mend (no publisher can be made): the daemon stops on it.
	// A term whose stream or publisher fails resigns the lease instead, for a while.
	fatal chan error

	mu   sync.Mutex
	term *term
	pub  *publish.Publisher // the current or the last term's, for /status
}

// term is one period of leadership.
type term struct {
	holder  lease.Holder // this process as the lease holds it, with the epoch this term leads
	cancel  context.CancelFunc
	done    chan struct{} // closed when the stream stopped reading into pub
	pub     *publish.Publisher
	claimed bool // the fence was claimed; written before done is closed
}

func newEvents(d *Daemon, js jetstream.JetStream, stream *upstream.Stream, watch *streamWatch, published *publish.Metrics,
	log *slog.Logger) (*events, error) {
	e := &events{d: d, stream: stream, watch: watch, published: published, log: log.With("component", "leader"),
		fatal: make(chan error, 1), grace: 2*d.cfg.ReconnectMin + 2*time.Second}
	l, err := lease.New(js, lease.Config{
		Bucket:   d.layout.Leases(),
		TTL:      d.cfg.LeaseTTL,
		Replicas: max(d.cfg.StreamReplicas, 1),
		OnChange: e.onChange,
		Logger:   log,

		OnForeignWrite: published.ForeignLeaseWrite,
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
func (e *events) Run(ctx context.Context) error {
	dctx, stopClock := component.StopClock(ctx, e.d.cfg.ShutdownTimeout)
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
func (e *events) Ready() error {
	s := e.stream
	if !e.leading() {
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

// status writes the role, the lease and the stream into /status.
func (e *events) status(doc *statusDoc) {
	s := e.stream
	doc.Stream.State = s.State().String()
	if err := s.LastError(); err != nil {
		doc.Stream.LastError = err.Error()
	}
	doc.Role = "standby"
	if e.leading() {
		doc.Role = "leader"
	}
	self := e.lease.Self()
	doc.Lease = statusLease{Bucket: e.d.layout.Leases(), TTL: e.d.cfg.LeaseTTL.String(),
		Self: statusHolder{Name: self.Name, PID: self.PID, Instance: self.Instance}}
	if h, ok := e.lease.Holder(); ok {
		doc.Lease.Holder = &statusHolder{Name: h.Name, PID: h.PID, Instance: h.Instance, Epoch: h.Epoch}
	}
	if p := e.publisher(); p != nil {
		doc.Stream.ResumeAfter = statusID(p.LastResumeID())
	}
	a := e.watch.Activity()
	doc.Stream.LastReceivedID = statusID(a.LastID)
	doc.Stream.Duplicates = e.published.Duplicates()
	doc.Stream.LastEventAt, doc.Stream.LastBytesAt = optionalTime(a.LastEvent), optionalTime(a.LastBytes)
}

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

// leading reports whether this bridge holds the lease now (by its own clock).
func (e *events) leading() bool { return e.lease.Leading() }

// publisher returns the current or last term's publisher; nil before the first term.
func (e *events) publisher() *publish.Publisher {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.pub
}

// onChange is the lease's OnChange: it starts a term, or ends the current one.
func (e *events) onChange(leading bool) {
	if leading {
		e.begin()
	} else {
		e.end()
	}
}

func (e *events) begin() {
	h, _ := e.lease.Holder()
	pub, err := e.d.newPublisher(e.published, e.lease.Confirm)
	if err != nil {
		e.fail(err)
		e.lease.Resign(h.Epoch, "cannot publish: "+err.Error(), e.d.cfg.LeaseTTL)
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
func (e *events) runTerm(ctx context.Context, t *term) {
	defer close(t.done)
	h := t.holder
	marker, _ := json.Marshal(h)
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, e.d.cfg.PublishTimeout)
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
				"for", e.d.cfg.LeaseTTL.String())
			e.lease.Resign(t.holder.Epoch, "cannot claim the fence", e.d.cfg.LeaseTTL)
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
		cctx, cancel := context.WithTimeout(ctx, e.d.cfg.PublishTimeout)
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
	case errors.Is(err, publish.ErrFenced):
		e.lease.Resign(t.holder.Epoch, "fenced out", 0)
	case err != nil && ctx.Err() == nil:
		// The cursor could not be read or the publisher failed (NATS in trouble, as during an election):
		// another bridge, or this one after a while, starts a new term.
		e.log.Error("the event path failed; leaving the lease to the other bridges", "err", err,
			"for", e.d.cfg.LeaseTTL.String())
		e.lease.Resign(t.holder.Epoch, "the event path failed", e.d.cfg.LeaseTTL)
	}
}

// end stops the current term: the stream stops reading, then the publishes in flight are settled (within
// the publish timeout, or the shutdown clock when stopping), so that the next leader resumes after them.
func (e *events) end() {
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
	sctx, cancel := context.WithTimeout(e.dctx, e.d.cfg.PublishTimeout)
	defer cancel()
	if err := t.pub.Settle(sctx); err != nil {
		e.log.Warn("stopped leading with publishes unsettled; the next leader resumes from what the stream holds",
			"err", err)
		return
	}
	e.log.Info("in-flight publishes completed", "resume_after", t.pub.LastResumeID())
}

// claimAttempts bounds the attempts to claim the fence within one term (about 4 s of backoff).
const claimAttempts = 6

// confirmAttempts bounds the reads of the lease after the fence is claimed.
const confirmAttempts = 4

// fail hands a term's failure to the daemon (the first one; later ones are dropped).
func (e *events) fail(err error) {
	select {
	case e.fatal <- err:
	default:
	}
}
