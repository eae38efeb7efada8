package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/metrics"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// Names of the readiness checks, in the order /readyz lists them.
const (
	checkNATS     = "nats"
	checkStreams  = "jetstream_streams"
	checkToken    = "upstream_token"
	checkStream   = "upstream_stream"
	checkReports  = "report_consumer"
	checkLoop     = "loop" // liveness
	streamsTTL    = 2 * time.Second
	httpStopLimit = 5 * time.Second
)

// tokenObserved is the token source's Observe hook: metrics, and the last error for the token check.
func (o *ops) tokenObserved(kind string, err error) {
	o.metrics.TokenObserved(kind, err)
	o.tokenOK.Store(err == nil)
	if err == nil {
		o.tokenErr.Store(nil)
		return
	}
	msg := err.Error() // the token source's errors carry no secret
	o.tokenErr.Store(&msg)
}

// streamObserver returns the event stream's observer: the metrics, plus the disconnect time for the
// stream check.
func (o *ops) streamObserver() upstream.StreamObserver { return streamObserver{o.metrics, o} }

type streamObserver struct {
	*metrics.Metrics
	o *ops
}

func (s streamObserver) Connected() {
	s.o.streamDown.Store(0)
	s.Metrics.Connected()
}

func (s streamObserver) Disconnected(reason string) {
	s.o.streamDown.Store(time.Now().UnixNano())
	s.Metrics.Disconnected(reason)
}

// reportsObserver is the report consumer's observer (consume.Config.Observer).
func (o *ops) reportsObserver() consume.Observer { return o.metrics }

// watchReports adds the report consumer to readiness (its own Ready) and to the metrics (its Pending).
// Call it after consume.New, before Run.
func (o *ops) watchReports(c *consume.Consumer) {
	o.reports.Store(c)
	o.ready.Add(checkReports, func(context.Context) error {
		if ok, why := c.Ready(); !ok {
			return errors.New(why)
		}
		return nil
	})
}

// checkNATS: the connection is up.
func (o *ops) checkNATS(context.Context) error {
	ns := o.d.natsSt
	if ns == nil {
		return errors.New("not connected yet")
	}
	if why := ns.NotConnected(); why != "" {
		return errors.New(why)
	}
	return nil
}

// checkStreams: the three JetStream streams exist (asked of JetStream; cached for streamsTTL).
func (o *ops) checkStreams(ctx context.Context) error {
	js, err := jetstream.New(o.d.nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var errs []error
	for _, name := range []string{o.d.layout.Events(), o.d.layout.Reports(), o.d.layout.DLQ()} {
		if _, err := js.Stream(ctx, name); err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				errs = append(errs, fmt.Errorf("stream %s does not exist", name))
			} else {
				errs = append(errs, fmt.Errorf("stream %s: %v", name, err))
			}
		}
	}
	return joinLine(errs)
}

// checkToken: the token source holds an unexpired access token, or its last request succeeded. (The
// source refreshes on demand: while the stream stays connected, nothing asks for a token and it may
// expire unused; the next request gets a new one.)
func (o *ops) checkToken(context.Context) error {
	if o.d.tokens != nil && o.d.tokens.Valid() || o.tokenOK.Load() {
		return nil
	}
	if msg := o.tokenErr.Load(); msg != nil {
		return fmt.Errorf("no valid access token: %s", *msg)
	}
	return errors.New("no valid access token yet")
}

// checkStream: on the leader, the event stream is connected, or reconnecting for less than the grace period after an
// established connection ended.
func (o *ops) checkStream(context.Context) error {
	s := o.d.stream
	if s == nil {
		return errors.New("not started")
	}
	if e := o.d.events; e != nil && !e.leading() {
		// A standby reads no stream (contract §6). It is ready once it has known a leader, so that a bridge
		// starting alone is not ready before it leads and its stream is connected, and a standby stays
		// ready while the lease changes hands.
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
		if down := o.streamDown.Load(); down != 0 && time.Since(time.Unix(0, down)) < o.grace {
			return nil
		}
	}
	if err := s.LastError(); err != nil {
		return fmt.Errorf("%s: %v", st, err)
	}
	return errors.New(st.String())
}

// checkLoop is the liveness check: the bridge's loop runs and NATS has not given up for good.
func (o *ops) checkLoop(context.Context) error {
	switch {
	case !o.running.Load():
		return errors.New("not running")
	case o.stopping.Load():
		return errors.New("shutting down")
	case o.d.natsSt != nil && o.d.natsSt.Closed():
		return fmt.Errorf("NATS connection closed for good (%s); a restart is needed", o.d.natsSt.LastError())
	}
	return nil
}

// readiness is the metrics' view of the readiness checks.
func (o *ops) readiness() map[string]bool {
	rs := o.ready.Evaluate(context.Background())
	m := make(map[string]bool, len(rs))
	for _, r := range rs {
		m[r.Name] = r.Err == nil
	}
	return m
}

// joinLine joins errors on one line.
func joinLine(errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	msg := errs[0].Error()
	for _, e := range errs[1:] {
		msg += "; " + e.Error()
	}
	return errors.New(msg)
}
