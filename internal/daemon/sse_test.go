package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// The SSE edge cases, through a whole bridge: what the upstream sends is either stored, dead-lettered
// or counted, and what the upstream's headers say reaches the log and /status cut short.

// injectIDs injects the events ev-<from> … ev-<to> into s's stream for the demo user.
func injectIDs(s *sim.Server, from, to int) {
	for i := from; i <= to; i++ {
		id := fmt.Sprintf("ev-%02d", i)
		s.Inject("demo", id, "GATE_IN", fmt.Appendf(nil, `{"id":%q,"type":"GATE_IN"}`, id))
	}
}

// TestReusedIDsCountAsDuplicates: the bridge and the upstream restart; the upstream has lost its history,
// does not know the bridge's Last-Event-ID and streams the ids of 40 stored events again. The bridge stores
// none of them twice, and all 40 are visible as duplicates, in the metric, /status and one log line: those
// its resume cursor finds stored beyond the resume point as well as the resume point's own event, which
// JetStream finds in its duplicate window.
func TestReusedIDsCountAsDuplicates(t *testing.T) {
	t.Parallel()
	const n = 40
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	injectIDs(up.Sim(), 1, n)
	cfg := up.Config(ns.URL())
	first := opsStartBridge(t, cfg)
	testutil.EventuallyState(t, 15*time.Second, "the events stored", func() (bool, string) {
		got := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return got == n, fmt.Sprintf("%d stored", got)
	})
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	up.Sim().Close()
	up.Replace(sim.New(sim.Options{}))
	ob := opsStartBridge(t, cfg)
	testutil.Eventually(t, 15*time.Second, "the bridge connected to the new upstream", func() bool {
		return up.Sim().Stats().StreamConnects > 0
	})
	injectIDs(up.Sim(), 1, n+1) // the 40 again, then a new one
	testutil.EventuallyState(t, 15*time.Second, "the new event stored and the duplicates counted", func() (bool, string) {
		stored := opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		dups := ob.counter(t, "bridge_events_duplicates_total", nil)
		return stored == n+1 && dups == n, fmt.Sprintf("%d stored, %v duplicates", stored, dups)
	})
	if got := ob.counter(t, "bridge_events_published_total", map[string]string{"type": "GATE_IN"}); got != 1 {
		t.Errorf("bridge_events_published_total{type=GATE_IN} = %v, want 1", got)
	}
	if st := ob.status(t); st.Stream.Duplicates != n {
		t.Errorf("/status duplicates = %d, want %d", st.Stream.Duplicates, n)
	}
	logs := ob.logs.String()
	if c := countLines(logs, "events found stored before are not stored again"); c != 1 {
		t.Errorf("the run of duplicates logged %d times, want once", c)
	}
	if c := countLines(logs, "events found stored before", `"found_by":"the events stream, beyond the resume point"`,
		`"event_id":"ev-01"`); c != 1 {
		t.Errorf("the run's log line does not name where its first duplicate was found:\n%s", logs)
	}
}

// TestEmptyDataDeadLettered: an event whose data line has no value reaches P.dlq.events with its id,
// as not JSON; a block with only an id reaches nowhere.
func TestEmptyDataDeadLettered(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	up.Sim().Inject("demo", "empty-1", "GATE_IN", nil) // the simulator writes "data: " for empty data
	injectIDs(up.Sim(), 1, 1)
	ob := opsStartBridge(t, up.Config(ns.URL()))
	testutil.EventuallyState(t, 15*time.Second, "the dead letter and the event", func() (bool, string) {
		dlq, events := opsStreamMsgs(t, ns.URL(), "TRACKING_DLQ"), opsStreamMsgs(t, ns.URL(), "TRACKING_EVENTS")
		return dlq == 1 && events == 1, fmt.Sprintf("%d dead letters, %d events", dlq, events)
	})
	if got := ob.counter(t, "bridge_events_dead_lettered_total", map[string]string{"reason": "not_json"}); got != 1 {
		t.Errorf("bridge_events_dead_lettered_total{reason=not_json} = %v, want 1", got)
	}
	if c := countLines(ob.logs.String(), "event dead-lettered", `"event_id":"empty-1"`, "event data is empty"); c != 1 {
		t.Errorf("the dead letter logged %d times with its id and reason, want once", c)
	}
}

// TestHugeContentTypeCutShort: an upstream that answers the stream with a Content-Type of 1 MB; the error
// in the log and /status quotes it cut short.
func TestHugeContentTypeCutShort(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	up := simtest.Start(t, false, sim.Options{})
	up.Sim().SetFaults(sim.Faults{StreamContentType: "text/html; x=" + strings.Repeat("a", 1<<20)})
	ob := opsStartBridge(t, up.Config(ns.URL()))
	var lastErr string
	testutil.EventuallyState(t, 15*time.Second, "the stream's error on /status", func() (bool, string) {
		lastErr = ob.status(t).Stream.LastError
		return strings.Contains(lastErr, "Content-Type"), lastErr
	})
	if len(lastErr) > 300 || !strings.Contains(lastErr, "bytes)") {
		t.Errorf("/status last_error of %d bytes: %.300q", len(lastErr), lastErr)
	}
	for _, line := range strings.Split(ob.logs.String(), "\n") {
		if len(line) > 2000 {
			t.Errorf("log line of %d bytes: %.300q", len(line), line)
		}
	}
}
