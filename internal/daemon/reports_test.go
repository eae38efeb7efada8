package daemon

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestStopTimeoutHandsReportsBack: reports still waiting on a slow upstream at BRIDGE_SHUTDOWN_TIMEOUT
// make Run return an error (exit 1), and are handed back, so that the next bridge delivers them at once
// rather than after the consumer's ack wait of 2 minutes.
func TestStopTimeoutHandsReportsBack(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	up.Sim().SetFaults(sim.Faults{ReportLatency: 10 * time.Minute})
	cfg := up.Config(ns.URL(), func(c *config.Config) { c.ShutdownTimeout = time.Second })
	first := opsStartBridge(t, cfg)
	first.waitReady(t, 15*time.Second, http.StatusOK, allReady...)
	opsPublishReports(t, ns.URL(), [][]byte{opsReport(up, 1), opsReport(up, 2)})
	testutil.EventuallyState(t, 10*time.Second, "both reports waiting on the upstream", func() (bool, string) {
		n := first.b.reports.Stats().InFlight
		return n == 2, fmt.Sprint(n, " in flight")
	})

	start := time.Now()
	err := first.stop(t)
	took := time.Since(start)
	if !errors.Is(err, ErrShutdownTimeout) || !errors.Is(err, consume.ErrAborted) {
		t.Fatalf("Run after a stop that timed out: %v, want ErrShutdownTimeout and consume.ErrAborted\n%s", err, first.logs)
	}
	t.Logf("Run: %v (after %v)", err, took.Round(time.Millisecond))
	if took > 6*time.Second { // 1 s timeout, at most 1 s for the hand-back; generous for a loaded machine
		t.Errorf("the stop took %v with BRIDGE_SHUTDOWN_TIMEOUT=1s", took.Round(time.Millisecond))
	}
	if st := first.b.reports.Stats(); st.HandedBack != 2 || st.Retried != 0 {
		t.Errorf("stats %+v: want both reports handed back, none retried later", st)
	}

	up.Sim().SetFaults(sim.Faults{})
	restart := time.Now()
	opsStartBridge(t, cfg)
	testutil.EventuallyState(t, 30*time.Second, "both reports accepted by the next bridge", func() (bool, string) {
		n := len(up.Sim().Reports("demo"))
		return n == 2, fmt.Sprint(n, " accepted")
	})
	t.Logf("the next bridge delivered them %v after its start", time.Since(restart).Round(time.Millisecond))
}
