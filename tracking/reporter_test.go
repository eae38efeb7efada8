package tracking_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// TestReporter: a report is stored in PFX_REPORTS with its Nats-Msg-Id (the caller's or a generated one),
// and the bridge sends it upstream verbatim with that id as Idempotency-Key; a repeat of the key is a
// duplicate JetStream drops; a report the bridge would refuse is not published.
func TestReporter(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	_, js := connect(t, b)
	ctx := ctxFor(t, 20*time.Second)
	reporter := tracking.NewReporter(js, "")
	tracked := b.Sim().TrackedOrders(bridgetest.User)[0]
	report := tracking.TrackingEventReport{
		Order: &tracking.IncomingTrackingOrder{OrderId: tracked.OrderID, PositionId: tracked.PositionID},
		Event: tracking.TrackingEvent{Timestamp: time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC), Type: "GATE_IN",
			Observation: &tracking.Observation{ObservedMeansOfTransport: &tracking.MeansOfTransportObservation{
				ModeOfTransport: new(tracking.ModeOfTransportTRUCK), Truck: &tracking.Truck{LicensePlate: new("HH-EX 4711")}}}},
	}
	body, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}

	r1, err := reporter.Report(ctx, report, "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(r1.MsgID, "report-") || r1.Stream != "TRACKING_REPORTS" || r1.Sequence != 1 || r1.Duplicate {
		t.Errorf("receipt %+v", r1)
	}
	r2, err := reporter.Report(ctx, report, "gate7-1")
	if err != nil {
		t.Fatal(err)
	}
	r3, err := reporter.Report(ctx, report, "gate7-1")
	if err != nil {
		t.Fatal(err)
	}
	if r2.Duplicate || !r3.Duplicate || r3.Sequence != r2.Sequence || r3.MsgID != "gate7-1" {
		t.Errorf("receipts of a repeat: %+v, %+v", r2, r3)
	}
	testutil.EventuallyState(t, 10*time.Second, "both reports upstream", func() (bool, string) {
		var keys []string
		for _, r := range b.Sim().Reports(bridgetest.User) {
			if string(r.Body) != string(body) {
				return false, "body " + string(r.Body)
			}
			keys = append(keys, r.IdempotencyKey)
		}
		slices.Sort(keys)
		return slices.Equal(keys, []string{"gate7-1", r1.MsgID}), strings.Join(keys, ", ")
	})

	// Refused before publishing: nothing more is stored.
	for _, tc := range []struct {
		name string
		try  func() error
		want string
	}{
		{"zero timestamp", func() error {
			_, err := reporter.Report(ctx, tracking.TrackingEventReport{Event: tracking.TrackingEvent{Type: "GATE_IN"}}, "")
			return err
		}, "event.timestamp is missing"},
		{"half an order", func() error {
			r := report
			r.Order = &tracking.IncomingTrackingOrder{OrderId: "TO1"}
			_, err := reporter.Report(ctx, r, "")
			return err
		}, "order.orderId and order.positionId"},
		{"schema", func() error {
			_, err := reporter.ReportJSON(ctx, []byte(`{"event":{"type":"GATE_IN","timestamp":"2026-11-25T08:30:00Z","observation":[]}}`), "")
			return err
		}, "event.observation must be an object"},
		{"size", func() error {
			small := tracking.NewReporter(js, "")
			small.MaxBytes = 50
			_, err := small.Report(ctx, report, "")
			return err
		}, "more than the limit of 50 bytes"},
	} {
		err := tc.try()
		var ie *tracking.InvalidReportError
		if !errors.Is(err, tracking.ErrInvalidReport) || !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an invalid report with %q", tc.name, err, tc.want)
		}
	}
	stream, err := js.Stream(ctx, "TRACKING_REPORTS")
	if err != nil {
		t.Fatal(err)
	}
	if info, err := stream.Info(ctx); err != nil || info.State.LastSeq != 2 {
		t.Errorf("reports stored after the refused ones: %+v %v", info, err)
	}

	// Another prefix has no reports stream: the publish fails, it is not lost silently.
	if _, err := tracking.NewReporter(js, "nobody").Report(ctx, report, "k"); err == nil {
		t.Error("a report to a prefix without a stream: no error")
	}
}
