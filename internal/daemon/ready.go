package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Names of the readiness checks, one per part (Daemon.listParts, which gives /readyz's order), and of the
// liveness check.
const (
	checkNATS     = "nats"
	checkStreams  = "jetstream_streams"
	checkToken    = "upstream_token"
	checkStream   = "upstream_stream"
	checkReports  = "report_consumer"
	checkAPI      = "api_service"
	checkUnits    = "units_view" // not a readiness check: /status's "units"
	checkLoop     = "loop"       // liveness
	streamsTTL    = 2 * time.Second
	httpStopLimit = 5 * time.Second
)

// addChecks makes /readyz of the parts' readiness, in their order.
func (o *ops) addChecks(parts []part) {
	for _, p := range parts {
		if !p.notReadiness {
			o.ready.Add(p.name, p.ready())
		}
	}
}

// checkStreams: the three JetStream streams exist (asked of JetStream; cached for streamsTTL) while NATS
// is connected.
func (o *ops) checkStreams(ctx context.Context) error {
	if st := o.d.natsSt; st == nil || !st.Connected() {
		return errors.New("NATS not connected")
	}
	return o.streams(ctx)
}

// askStreams asks JetStream whether the three streams exist. JetStream's answer counts; its silence (a
// timeout: its API's request queue, which every JetStream client of the server shares, kept busy by
// another client, or an election) does not, for streamsGrace after the last answer that all exist, so
// that a flood of another account's API requests does not take every replica out of service at once.
func (o *ops) askStreams(ctx context.Context) error {
	js, err := jetstream.New(o.d.nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var errs []error
	silent := true
	for _, name := range []string{o.d.layout.Events(), o.d.layout.Reports(), o.d.layout.DLQ()} {
		_, err := js.Stream(ctx, name)
		switch {
		case err == nil:
			continue
		case errors.Is(err, jetstream.ErrStreamNotFound):
			errs = append(errs, fmt.Errorf("stream %s does not exist", name))
		default:
			errs = append(errs, fmt.Errorf("stream %s: %v", name, err))
		}
		silent = silent && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout))
	}
	if len(errs) == 0 {
		o.streamsSeen.Store(time.Now().UnixNano())
		return nil
	}
	if seen := o.streamsSeen.Load(); silent && seen != 0 && time.Since(time.Unix(0, seen)) < streamsGrace {
		return nil
	}
	return joinLine(errs)
}

// streamsGrace is how long the streams' check passes on JetStream's silence after it last saw them.
const streamsGrace = 30 * time.Second

// checkLoop is the liveness check: the bridge's loop runs and NATS has not given up for good.
func (o *ops) checkLoop(context.Context) error {
	switch {
	case !o.running.Load():
		return errors.New("not running")
	case o.stopping.Load():
		return errors.New("shutting down")
	case o.d.natsSt.Closed(): // New connected it before Run could set running
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
