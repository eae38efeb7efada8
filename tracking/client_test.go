package tracking_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/bridgetest"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// pickUp is a valid booking order at terminal.
func pickUp(terminal, reference string) tracking.BookingOrder {
	return tracking.BookingOrder{TerminalId: terminal, Action: tracking.BookingActionPICKUP, Reference: reference,
		Unit: tracking.BookingUnit{LoadingState: tracking.LoadingStateFULL, IsoCode: new("22G1")}}
}

// terminalID returns an ADMINISTRATIVE_TERMINAL's id, found through the client.
func terminalID(t *testing.T, ctx context.Context, c *tracking.Client) string {
	t.Helper()
	page, err := c.SearchLocations(ctx, tracking.SearchLocationsParams{
		Type: new(tracking.LocationTypeADMINISTRATIVETERMINAL), PageSize: new(int32(2))})
	if err != nil {
		t.Fatal(err)
	}
	if page.Data == nil || len(*page.Data) != 2 || page.Pagination == nil || *page.Pagination.PageSize != 2 {
		t.Fatalf("search: %+v", page)
	}
	for _, l := range *page.Data {
		if *l.Type != tracking.LocationTypeADMINISTRATIVETERMINAL || l.Designation == "" {
			t.Errorf("location %+v", l)
		}
	}
	return *(*page.Data)[0].Id
}

// TestClient: every operation through the real service and the simulator, with the generated types.
func TestClient(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	nc, _ := connect(t, b)
	c := tracking.NewClient(nc, "")
	ctx := ctxFor(t, 30*time.Second)

	terminal := terminalID(t, ctx, c)
	created, err := c.CreateOrder(ctx, pickUp(terminal, "REF-1"))
	if err != nil || created.Id == "" {
		t.Fatalf("create: %+v %v", created, err)
	}
	list, err := c.ListOrders(ctx)
	if err != nil || !slices.Contains(list.Ids, created.Id) {
		t.Fatalf("list %+v %v lacks %s", list, err, created.Id)
	}
	order, err := c.GetOrder(ctx, created.Id)
	if err != nil || *order.Id != created.Id || order.TerminalId != terminal || order.Reference != "REF-1" ||
		order.Action != tracking.BookingActionPICKUP || *order.Unit.IsoCode != "22G1" {
		t.Fatalf("get: %+v %v", order, err)
	}
	update := pickUp(terminal, "REF-2")
	update.Action = tracking.BookingActionDROPOFF
	if err := c.UpdateOrder(ctx, created.Id, update); err != nil {
		t.Fatal(err)
	}
	if order, err = c.GetOrder(ctx, created.Id); err != nil || order.Reference != "REF-2" || order.Action != tracking.BookingActionDROPOFF {
		t.Errorf("after the update: %+v %v", order, err)
	}

	tracked := b.Sim().TrackedOrders(bridgetest.User)[0]
	unit, err := c.QueryTracking(ctx, tracking.QueryTrackingParams{OrderId: &tracked.OrderID, PositionId: &tracked.PositionID})
	if err != nil || unit.Order.OrderId != tracked.OrderID || unit.ObservedUntil.IsZero() {
		t.Fatalf("query: %+v %v", unit, err)
	}
	unit, err = c.QueryTracking(ctx, tracking.QueryTrackingParams{
		ClientOrderReference: &tracked.ClientOrderReference, ClientPositionReference: &tracked.ClientPositionReference})
	if err != nil || unit.Order.PositionId != tracked.PositionID {
		t.Fatalf("query by client references: %+v %v", unit, err)
	}

	report := tracking.TrackingEventReport{
		Order: &tracking.IncomingTrackingOrder{OrderId: tracked.OrderID, PositionId: tracked.PositionID},
		Event: tracking.TrackingEvent{Timestamp: time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC), Type: "GATE_OUT"},
	}
	if err := c.ReportEvent(ctx, report, "k-1"); err != nil {
		t.Fatal(err)
	}
	if rs := b.Sim().Reports(bridgetest.User); len(rs) != 1 || rs[0].IdempotencyKey != "k-1" || !strings.Contains(string(rs[0].Body), `"GATE_OUT"`) {
		t.Errorf("reports upstream: %+v", rs)
	}
	err = c.ReportEvent(ctx, tracking.TrackingEventReport{}, "")
	if !errors.Is(err, tracking.ErrInvalidReport) || len(b.Sim().Reports(bridgetest.User)) != 1 {
		t.Errorf("a zero report: %v", err)
	}

	if err := c.DeleteOrder(ctx, created.Id); err != nil {
		t.Fatal(err)
	}
	if list, err = c.ListOrders(ctx); err != nil || slices.Contains(list.Ids, created.Id) {
		t.Errorf("deleted order still listed: %+v %v", list, err)
	}
}

// TestClientDeadline: the request carries Bridge-Timeout a little shorter than the context's deadline, or
// than Timeout without one.
func TestClientDeadline(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	nc, _ := connect(t, b)
	watch, err := nc.SubscribeSync("tracking.api.orders.list") // not in the queue group: sees every request
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	c := tracking.NewClient(nc, "")
	for _, tc := range []struct {
		name     string
		timeout  time.Duration // of the context; 0 for none
		client   time.Duration // Client.Timeout
		min, max time.Duration
	}{
		{"5s context", 5 * time.Second, 0, 4400 * time.Millisecond, 4600 * time.Millisecond},
		{"no deadline", 0, 0, tracking.DefaultTimeout - 600*time.Millisecond, tracking.DefaultTimeout - 400*time.Millisecond},
		{"no deadline, Timeout 2s", 0, 2 * time.Second, 1700 * time.Millisecond, 1820 * time.Millisecond},
	} {
		ctx := context.Background()
		if tc.timeout > 0 {
			ctx = ctxFor(t, tc.timeout)
		}
		c.Timeout = tc.client
		if _, err := c.ListOrders(ctx); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		m, err := watch.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		d, err := time.ParseDuration(m.Header.Get(tracking.HeaderTimeout))
		if err != nil || d < tc.min || d > tc.max {
			t.Errorf("%s: %s %q, want between %v and %v", tc.name, tracking.HeaderTimeout, m.Header.Get(tracking.HeaderTimeout), tc.min, tc.max)
		}
	}
}

// TestClientErrors: each class of failure, from the real service (and a silent responder for the
// caller's own deadline), as *APIError with its code, upstream status, messages and Retry-After, or as
// the context's error, ErrNoResponders and ErrMalformedReply.
func TestClientErrors(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{})
	nc, _ := connect(t, b)
	c := tracking.NewClient(nc, "")
	ctx := ctxFor(t, 60*time.Second)
	terminal := terminalID(t, ctx, c)
	booked, err := c.CreateOrder(ctx, pickUp(terminal, "BOOKED"))
	if err != nil {
		t.Fatal(err)
	}
	b.Sim().MarkBooked(booked.Id)
	tracked := b.Sim().TrackedOrders(bridgetest.User)[0]
	report := tracking.TrackingEventReport{
		Order: &tracking.IncomingTrackingOrder{OrderId: tracked.OrderID, PositionId: tracked.PositionID},
		Event: tracking.TrackingEvent{Timestamp: time.Date(2026, 11, 25, 8, 30, 0, 0, time.UTC), Type: "GATE_IN"},
	}
	ordersBefore, err := c.ListOrders(ctx)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name      string
		faults    sim.Faults
		call      func(context.Context) error
		timeout   time.Duration // of the call's context; 0: the test's
		sentinel  error
		code      int
		upstream  int
		temporary bool
		retry     time.Duration
		want      []string // substrings of the messages
	}{
		{name: "400 before calling: the order's schema", call: func(ctx context.Context) error {
			o := pickUp(terminal, "R")
			o.Action = "SIDEWAYS"
			o.ClientContext = &tracking.BookingClientContext{InternalNote: new("far more than twenty characters")}
			_, err := c.CreateOrder(ctx, o)
			return err
		}, sentinel: tracking.ErrInvalid, code: 400, want: []string{"action", "internalNote"}},
		{name: "400 before calling: the envelope", call: func(ctx context.Context) error {
			_, err := c.QueryTracking(ctx, tracking.QueryTrackingParams{OrderId: new("TO1")})
			return err
		}, sentinel: tracking.ErrInvalid, code: 400, want: []string{"orderId and positionId must be given together"}},
		{name: "400 from the upstream", call: func(ctx context.Context) error {
			_, err := c.CreateOrder(ctx, pickUp("NOT-A-TERMINAL", "R"))
			return err
		}, sentinel: tracking.ErrInvalid, code: 400, upstream: 400, want: []string{"ADMINISTRATIVE_TERMINAL"}},
		{name: "404", call: func(ctx context.Context) error {
			_, err := c.GetOrder(ctx, "BO-99999999")
			return err
		}, sentinel: tracking.ErrNotFound, code: 404, upstream: 404, want: []string{"BO-99999999 not found"}},
		{name: "409 update", call: func(ctx context.Context) error {
			return c.UpdateOrder(ctx, booked.Id, pickUp(terminal, "LATE"))
		}, sentinel: tracking.ErrConflict, code: 409, upstream: 409, want: []string{"no longer open"}},
		{name: "409 delete", call: func(ctx context.Context) error {
			return c.DeleteOrder(ctx, booked.Id)
		}, sentinel: tracking.ErrConflict, code: 409, upstream: 409, want: []string{"no longer open"}},
		{name: "429", faults: sim.Faults{Report429: true, RetryAfter: 3 * time.Second}, call: func(ctx context.Context) error {
			return c.ReportEvent(ctx, report, "k-429")
		}, sentinel: tracking.ErrTooManyRequests, code: 429, upstream: 429, temporary: true, retry: 3 * time.Second},
		{name: "503", faults: sim.Faults{ErrorRate: 1, RetryAfter: 2 * time.Second}, call: func(ctx context.Context) error {
			_, err := c.ListOrders(ctx)
			return err
		}, sentinel: tracking.ErrUnavailable, code: 503, upstream: 503, temporary: true, retry: 2 * time.Second},
		// The bridge is told a tenth less than the context has left (at most 500 ms less), so that its 504
		// arrives in time; the deadline scales with the machine's load, and the upstream outlasts it.
		{name: "504 by the context's deadline", faults: sim.Faults{Latency: 3 * testutil.Scale(2*time.Second)},
			timeout: testutil.Scale(2 * time.Second),
			call: func(ctx context.Context) error {
				_, err := c.ListOrders(ctx)
				return err
			}, sentinel: tracking.ErrTimeout, code: 504, temporary: true,
			want: []string{"did not answer within "}}, // the time, what was left less timeoutMargin, varies
	} {
		t.Run(tc.name, func(t *testing.T) {
			b.Sim().SetFaults(tc.faults)
			defer b.Sim().SetFaults(sim.Faults{})
			cctx := ctx
			if tc.timeout > 0 {
				cctx = ctxFor(t, tc.timeout)
			}
			err := tc.call(cctx)
			var ae *tracking.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("%v (%T), want an *APIError", err, err)
			}
			if !errors.Is(err, tc.sentinel) || ae.Code != tc.code || ae.UpstreamStatus != tc.upstream ||
				ae.Temporary() != tc.temporary || ae.RetryAfter != tc.retry || cctx.Err() != nil {
				t.Errorf("%+v, want %v, code %d, upstream %d, temporary %v, retry after %v (context: %v)",
					ae, tc.sentinel, tc.code, tc.upstream, tc.temporary, tc.retry, cctx.Err())
			}
			for _, w := range tc.want {
				if !strings.Contains(strings.Join(ae.Messages, "\n"), w) || !strings.Contains(ae.Error(), w) {
					t.Errorf("%q not in the messages %q or the error %q", w, ae.Messages, ae.Error())
				}
			}
			if len(ae.Messages) == 0 {
				t.Error("no messages")
			}
		})
	}
	if after, err := c.ListOrders(ctx); err != nil || len(after.Ids) != len(ordersBefore.Ids) {
		t.Errorf("orders %v → %+v (%v): a refused create reached the upstream", ordersBefore.Ids, after, err)
	}

	t.Run("context deadline", func(t *testing.T) {
		silent, err := nc.Subscribe("silent.api.>", func(*nats.Msg) {}) // takes requests, answers none
		if err != nil {
			t.Fatal(err)
		}
		defer silent.Unsubscribe()
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		_, err = tracking.NewClient(nc, "silent").ListOrders(ctxFor(t, 200*time.Millisecond))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v, want the context's deadline", err)
		}
		expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		if _, err := c.ListOrders(expired); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("an expired context: %v", err)
		}
	})
	t.Run("no responders", func(t *testing.T) {
		_, err := tracking.NewClient(nc, "nobody").GetOrder(ctx, "BO-1")
		if !errors.Is(err, tracking.ErrNoResponders) || !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "nobody.api.orders.get") {
			t.Errorf("%v, want ErrNoResponders naming the subject", err)
		}
	})
	t.Run("malformed reply", func(t *testing.T) {
		odd, err := nc.Subscribe("odd.api.>", func(m *nats.Msg) { _ = m.Respond([]byte(`{"id":7}`)) })
		if err != nil {
			t.Fatal(err)
		}
		defer odd.Unsubscribe()
		if _, err := tracking.NewClient(nc, "odd").GetOrder(ctx, "BO-1"); !errors.Is(err, tracking.ErrMalformedReply) {
			t.Errorf("%v, want ErrMalformedReply", err)
		}
	})
}

// TestClientTooLarge: a reply larger than the NATS server's max_payload is the service's 502 naming it,
// and a request larger than it the client's own error.
func TestClientTooLarge(t *testing.T) {
	b := bridgetest.Start(t, bridgetest.Options{NATS: func(o *server.Options) { o.MaxPayload = 16 << 10 }})
	nc, _ := connect(t, b)
	c := tracking.NewClient(nc, "")
	ctx := ctxFor(t, 20*time.Second)
	_, err := c.SearchLocations(ctx, tracking.SearchLocationsParams{PageSize: new(int32(1000))})
	var ae *tracking.APIError
	if !errors.As(err, &ae) || !errors.Is(err, tracking.ErrBadAnswer) || ae.Code != 502 || ae.UpstreamStatus != 200 ||
		ae.Temporary() || !strings.Contains(ae.Description, "max_payload") {
		t.Errorf("%v (%+v), want 502 naming max_payload", err, ae)
	}
	if _, err := c.SearchLocations(ctx, tracking.SearchLocationsParams{PageSize: new(int32(2))}); err != nil {
		t.Errorf("a small page: %v", err)
	}
	_, err = c.CreateOrder(ctx, pickUp("L10001", strings.Repeat("x", 20<<10)))
	if !errors.Is(err, nats.ErrMaxPayload) {
		t.Errorf("a request over max_payload: %v", err)
	}
}
