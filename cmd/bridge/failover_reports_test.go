package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// reporter publishes reports to P.reports at a steady pace, each with a Nats-Msg-Id of its own, sent
// again with the same id until JetStream acknowledged it (docs/subjects.md, "Reporting events").
type reporter struct {
	t      *testing.T
	js     jetstream.JetStream
	sim    func() *sim.Server
	orders []sim.TrackingOrder
	stop   chan struct{}
	done   chan struct{}

	mu      sync.Mutex // held while a report is being published, so that pause waits for it
	paused  bool
	keys    []string          // acknowledged, in order
	bodies  map[string][]byte // by key
	retries int               // publishes sent again after an error or a timeout
}

// startReporter publishes a report every `every` until finish.
func (r *rig) startReporter(every time.Duration) *reporter {
	rp := &reporter{t: r.t, js: r.js, sim: r.up.Sim, orders: r.up.Sim().TrackedOrders(user),
		stop: make(chan struct{}), done: make(chan struct{}), bodies: map[string][]byte{}}
	go rp.run(every)
	r.t.Cleanup(rp.halt)
	return rp
}

func (rp *reporter) run(every time.Duration) {
	defer close(rp.done)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for k := 0; ; {
		select {
		case <-rp.stop:
			return
		case <-tick.C:
		}
		rp.mu.Lock()
		if !rp.paused {
			if !rp.publish(k) {
				rp.mu.Unlock()
				return
			}
			k++
		}
		rp.mu.Unlock()
	}
}

// publish publishes report k until JetStream acknowledges it; false when stopped first.
func (rp *reporter) publish(k int) bool {
	key := fmt.Sprintf("failover-report-%05d", k)
	o := rp.orders[k%len(rp.orders)]
	body, _ := json.Marshal(map[string]any{
		"order": map[string]any{"orderId": o.OrderID, "positionId": o.PositionID},
		"event": map[string]any{
			"timestamp": time.Now().UTC().Format(time.RFC3339Nano),
			"type":      "GATE_IN",
			"observation": map[string]any{
				"observedLoadingUnit": map[string]any{
					"loadingUnit":  map[string]any{"containerClass": "CONTAINER", "number": "MSCU1234565"},
					"loadingState": "FULL",
				},
			},
		},
		"reporter": map[string]any{"id": "failover-test", "name": fmt.Sprintf("report %d", k)},
	})
	msg := &nats.Msg{Subject: reportSubject, Data: body, Header: nats.Header{"Nats-Msg-Id": {key}}}
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := rp.js.PublishMsg(ctx, msg)
		cancel()
		if err == nil {
			rp.keys = append(rp.keys, key)
			rp.bodies[key] = body
			return true
		}
		rp.retries++
		select {
		case <-rp.stop:
			return false
		case <-time.After(100 * time.Millisecond): // the pace of a producer's retries
		}
	}
}

// pause stops publishing (after the report being published, if any) and waits until the simulator
// accepted every report published so far: no report is in flight in a bridge then.
func (rp *reporter) pause(within time.Duration) {
	rp.t.Helper()
	rp.mu.Lock()
	rp.paused = true
	keys := slices.Clone(rp.keys)
	rp.mu.Unlock()
	rp.waitAccepted(keys, within)
}

// resume publishes again after pause.
func (rp *reporter) resume() {
	rp.mu.Lock()
	rp.paused = false
	rp.mu.Unlock()
}

// halt stops publishing for good.
func (rp *reporter) halt() {
	select {
	case <-rp.stop:
	default:
		close(rp.stop)
	}
	<-rp.done
}

// waitAccepted waits until the simulator accepted a report of each key.
func (rp *reporter) waitAccepted(keys []string, within time.Duration) {
	rp.t.Helper()
	testutil.EventuallyState(rp.t, within, fmt.Sprintf("the simulator accepted %d reports", len(keys)), func() (bool, string) {
		got := map[string]bool{}
		for _, rep := range rp.sim().Reports(user) {
			got[rep.IdempotencyKey] = true
		}
		var missing []string
		for _, k := range keys {
			if !got[k] {
				missing = append(missing, k)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d missing: %v", len(missing), missing[:min(len(missing), 10)])
	})
}

// finish stops publishing, waits until every report was accepted upstream, and checks that each was
// accepted exactly once, with the body published, and that none was dead-lettered. It returns how many
// reports were published.
func (rp *reporter) finish(r *rig, within time.Duration) int {
	t := rp.t
	t.Helper()
	rp.halt()
	rp.mu.Lock()
	keys := slices.Clone(rp.keys)
	retries := rp.retries
	rp.mu.Unlock()
	rp.waitAccepted(keys, within)
	accepted := map[string]int{}
	for _, rep := range rp.sim().Reports(user) {
		accepted[rep.IdempotencyKey]++
		if want, ok := rp.bodies[rep.IdempotencyKey]; !ok {
			t.Errorf("report with Idempotency-Key %q accepted upstream, which the test did not publish", rep.IdempotencyKey)
		} else if string(rep.Body) != string(want) {
			t.Errorf("report %s accepted upstream as %s, published as %s", rep.IdempotencyKey, rep.Body, want)
		}
	}
	for _, k := range keys {
		if accepted[k] != 1 {
			t.Errorf("report %s accepted upstream %d times, want once", k, accepted[k])
		}
	}
	st := rp.sim().Stats()
	t.Logf("reports: %d published (%d publishes sent again), %d accepted upstream, %d repeats of an "+
		"Idempotency-Key answered as duplicates, %d report calls", len(keys), retries, st.ReportsAccepted,
		st.ReportDuplicates, st.ReportCalls)
	if n := r.dlqReports(); n != 0 {
		t.Errorf("%d reports dead-lettered", n)
	}
	return len(keys)
}

// dlqReports returns how many messages P.dlq.reports holds.
func (r *rig) dlqReports() int {
	ctx, cancel := opCtx()
	defer cancel()
	s, err := r.js.Stream(ctx, dlqStream)
	if err != nil {
		r.t.Fatalf("stream %s: %v", dlqStream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("tracking.dlq.reports"))
	if err != nil {
		r.t.Fatalf("stream %s: %v", dlqStream, err)
	}
	return int(info.State.Subjects["tracking.dlq.reports"])
}
