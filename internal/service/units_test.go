package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// unitsStore is the bridge's events stream and units bucket as a test fills them: events stored on
// P.events.<TYPE>.<UNIT> directly, and view values written as the view writes them.
type unitsStore struct {
	t  *testing.T
	js jetstream.JetStream
	kv jetstream.KeyValue
	n  int // events stored, for their ids
}

// newUnitsStore creates the streams and, with bucket, the units bucket.
func newUnitsStore(t *testing.T, h *harness, bucket bool) *unitsStore {
	t.Helper()
	js, err := jetstream.New(h.ns.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := (layout.Streams{Prefix: "tracking"}).Ensure(ctx, js, true, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	u := &unitsStore{t: t, js: js}
	if bucket {
		u.createBucket()
	}
	return u
}

func (u *unitsStore) createBucket() {
	u.t.Helper()
	kv, err := u.js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: layout.UnitsBucket("tracking"), History: 1})
	if err != nil {
		u.t.Fatal(err)
	}
	u.kv = kv
}

// event returns the data of an event of unit number at second sec, padded to at least size bytes.
func event(id, typ, number string, sec, size int) string {
	e := fmt.Sprintf(`{"id":%q,"type":%q,"timestamp":"2026-01-02T03:%02d:%02dZ","observation":{"observedLoadingUnit":{"loadingUnit":{"number":%q}}}`,
		id, typ, sec/60%60, sec%60, number)
	if pad := size - len(e) - len(`,"pad":""}`); pad > 0 {
		e += `,"pad":"` + strings.Repeat("x", pad) + `"`
	}
	return e + "}"
}

// store stores data on subject as the bridge does, and returns it.
func (u *unitsStore) store(subject, data string) string {
	u.t.Helper()
	u.n++
	m := nats.NewMsg(subject)
	m.Data = []byte(data)
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("ev-%d", u.n))
	if _, err := u.js.PublishMsg(context.Background(), m); err != nil {
		u.t.Fatal(err)
	}
	return data
}

// put writes the view's value of a unit token as the view does: through $KV.<bucket>.<key> with the
// event's id, the token and the compare-and-set on the key's revision.
func (u *unitsStore) put(token, id, data string) {
	u.t.Helper()
	m := nats.NewMsg("$KV." + layout.UnitsBucket("tracking") + "." + token)
	m.Data = []byte(data)
	m.Header.Set("Tracking-Event-Id", id)
	m.Header.Set("Tracking-Unit", token)
	var rev uint64
	if e, err := u.kv.Get(context.Background(), token); err == nil {
		rev = e.Revision()
	}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, fmt.Sprint(rev))
	if _, err := u.js.PublishMsg(context.Background(), m); err != nil {
		u.t.Fatal(err)
	}
}

// unitEvents is the reply of units.events.
type unitEvents struct {
	Unit   string            `json:"unit"`
	Events []json.RawMessage `json:"events"`
}

func (h *harness) unitEvents(body string) unitEvents {
	h.t.Helper()
	var out unitEvents
	data := h.ok("units.events", body)
	if err := json.Unmarshal(data, &out); err != nil || out.Events == nil {
		h.t.Fatalf("units.events %s: %q: %v", body, data, err)
	}
	return out
}

// TestUnitsGet: units.get answers the unit's value in the units bucket verbatim with Tracking-Unit, for
// the number as written; 404 when the view has none; 503 naming the bucket while it does not exist. No
// upstream call.
func TestUnitsGet(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	u := newUnitsStore(t, h, false)

	r := h.request("units.get", `{"unit":"msku 123456-7"}`)
	if r.code != 503 || !strings.Contains(r.desc, "bucket TRACKING_UNITS does not exist") || !strings.Contains(r.desc, "BRIDGE_UNITS_VIEW") {
		t.Errorf("without the bucket: %d %q, want 503 naming it", r.code, r.desc)
	}
	r.messages(t)

	u.createBucket()
	r = h.request("units.get", `{"unit":"msku 123456-7"}`)
	if r.code != 404 || !strings.Contains(r.desc, "no event of unit MSKU1234567") {
		t.Errorf("no value: %d %q, want 404", r.code, r.desc)
	}
	r.messages(t)
	if h.obs.last("units.get") != 404 {
		t.Errorf("observed %d", h.obs.last("units.get"))
	}

	// Verbatim: the bytes as stored, white space and member order included.
	data := ` {"id":"e-1", "type":"GATE_IN","timestamp":"2026-01-02T03:04:05+01:00",` +
		`"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"msku 123456-7"}}}}`
	u.put("MSKU1234567", "e-1", data)
	for _, number := range []string{"msku 123456-7", "MSKU1234567", "MSKU-123.456/7"} {
		r = h.request("units.get", `{"unit":`+fmt.Sprintf("%q", number)+`}`)
		if r.code != 0 || string(r.msg.Data) != data || r.msg.Header.Get(service.UnitHeader) != "MSKU1234567" {
			t.Errorf("%q: %d %q %q, header %v", number, r.code, r.desc, r.msg.Data, r.msg.Header)
		}
	}
	if h.obs.last("units.get") != 200 {
		t.Errorf("observed %d, want 200", h.obs.last("units.get"))
	}

	// A newer value replaces it; a deleted key is none.
	newer := strings.Replace(data, "e-1", "e-2", 1)
	u.put("MSKU1234567", "e-2", newer)
	if got := h.ok("units.get", `{"unit":"MSKU1234567"}`); string(got) != newer {
		t.Errorf("after the update: %q", got)
	}
	if err := u.kv.Delete(context.Background(), "MSKU1234567"); err != nil {
		t.Fatal(err)
	}
	if r = h.request("units.get", `{"unit":"MSKU1234567"}`); r.code != 404 {
		t.Errorf("deleted: %d %q, want 404", r.code, r.desc)
	}
	if n := h.calls.n.Load(); n != 0 {
		t.Errorf("%d upstream calls", n)
	}
}

// TestUnitsEvents: units.events answers the unit's most recent events of every type from the events
// stream, oldest first, each event's data verbatim: DefaultUnitEvents without a limit, limit when given,
// all when fewer are stored; another unit's events and the events stored before subjects carried the unit
// (P.events.<TYPE>) are not among them; a unit without events gets an empty list.
func TestUnitsEvents(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	u := newUnitsStore(t, h, true)

	types := []string{"GATE_IN", "LOAD", "DISCHARGE", "GATE_OUT"}
	var mine []string
	// An event of the unit from before the unit token: not on P.events.*.<UNIT>.
	u.store(layout.Event("tracking", "GATE_IN"), event("old", "GATE_IN", "MSKU1234567", 0, 0))
	for i := range 30 {
		typ := types[i%len(types)]
		mine = append(mine, u.store(layout.EventSubject("tracking", typ, "MSKU1234567"), event(fmt.Sprint("m", i), typ, "msku 123456-7", i+1, 0)))
		u.store(layout.EventSubject("tracking", typ, "TGHU7654321"), event(fmt.Sprint("o", i), typ, "TGHU7654321", i+1, 0))
		u.store(layout.EventSubject("tracking", typ, layout.NoUnit), event(fmt.Sprint("n", i), typ, "", i+1, 0))
	}
	check := func(body string, want []string) {
		t.Helper()
		got := h.unitEvents(body)
		if got.Unit != "MSKU1234567" || len(got.Events) != len(want) {
			t.Fatalf("%s: unit %q, %d events, want %d", body, got.Unit, len(got.Events), len(want))
		}
		for i := range want {
			if string(got.Events[i]) != want[i] {
				t.Errorf("%s: event %d is %s, want %s", body, i, got.Events[i], want[i])
			}
		}
	}
	check(`{"unit":"msku 123456-7"}`, mine[30-service.DefaultUnitEvents:])
	check(`{"unit":"MSKU1234567","limit":5}`, mine[25:])
	check(`{"unit":"MSKU1234567","limit":1}`, mine[29:])
	check(fmt.Sprintf(`{"unit":"MSKU1234567","limit":%d}`, service.MaxUnitEvents), mine)
	check(`{"unit":"MSKU1234567","limit":null}`, mine[30-service.DefaultUnitEvents:])

	if got := h.unitEvents(`{"unit":"ABCU0000001"}`); got.Unit != "ABCU0000001" || len(got.Events) != 0 {
		t.Errorf("a unit without events: %+v", got)
	}
	if h.obs.last("units.events") != 200 {
		t.Errorf("observed %d, want 200", h.obs.last("units.events"))
	}
	if n := h.calls.n.Load(); n != 0 {
		t.Errorf("%d upstream calls", n)
	}
}

// TestUnitsEventsMaxPayload: when the most recent events would not fit in the server's max_payload, the
// reply holds the most recent that do, oldest first, and fits.
func TestUnitsEventsMaxPayload(t *testing.T) {
	t.Parallel()
	const maxPayload = 16 << 10
	h := start(t, options{nats: func(o *server.Options) { o.MaxPayload = maxPayload }})
	u := newUnitsStore(t, h, true)
	var mine []string
	for i := range 40 {
		mine = append(mine, u.store(layout.EventSubject("tracking", "LOAD", "MSKU1234567"), event(fmt.Sprint("m", i), "LOAD", "MSKU1234567", i, 1000)))
	}
	data := h.ok("units.events", `{"unit":"MSKU1234567","limit":40}`)
	var got unitEvents
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(data) > maxPayload || len(got.Events) < 14 || len(got.Events) >= 17 {
		t.Fatalf("%d bytes, %d events; want at most %d bytes and 14 to 16 events of 1 KB", len(data), len(got.Events), maxPayload)
	}
	want := mine[40-len(got.Events):]
	for i := range want {
		if string(got.Events[i]) != want[i] {
			t.Errorf("event %d: %.40s…, want %.40s…", i, got.Events[i], want[i])
		}
	}
}

// TestUnitsHostile: every bad units request is a 400 that says what is wrong, before any read: a unit
// of 10 KB, not a string, an array, an object, with control characters, of separators or non-ASCII
// letters alone, of more than 64 letters and digits, missing; a limit of 0, negative, huge, fractional,
// not a number, above the maximum; an unknown member; a body past the endpoint's bound. A request with a
// reply subject outside the callers' inboxes (the bucket's own subject) is dropped without an answer and
// writes nothing.
func TestUnitsHostile(t *testing.T) {
	t.Parallel()
	h := start(t, options{})
	u := newUnitsStore(t, h, true)
	u.put("MSKU1234567", "e-1", event("e-1", "LOAD", "MSKU1234567", 1, 0))

	for _, tc := range []struct{ op, body, want string }{
		{"units.get", `{"unit":"` + strings.Repeat("A", 10<<10) + `"}`, "unit is 10240 bytes long, more than the limit of 128"},
		{"units.get", `{"unit":1234567}`, "unit must be a string, not a number"},
		{"units.get", `{"unit":["MSKU1234567"]}`, "unit must be a string, not an array"},
		{"units.get", `{"unit":{"number":"MSKU1234567"}}`, "unit must be a string, not an object"},
		{"units.get", `{"unit":"MSKU\u0000123"}`, "unit must not contain control characters"},
		{"units.get", `{"unit":"MSKU\n1234567"}`, "unit must not contain control characters"},
		{"units.get", `{"unit":" -./ "}`, "names no loading unit"},
		{"units.get", `{"unit":"äöüß"}`, "names no loading unit"},
		{"units.get", `{"unit":"` + strings.Repeat("A1", 33) + `"}`, "names no loading unit"},
		{"units.get", `{"unit":"_"}`, "names no loading unit"},
		{"units.get", `{}`, "unit is missing"},
		{"units.get", `{"unit":""}`, "unit must not be empty"},
		{"units.get", `["MSKU1234567"]`, "must be a JSON object, not an array"},
		{"units.get", `"MSKU1234567"`, "must be a JSON object, not a string"},
		{"units.get", `{"unit":"MSKU1234567","limit":5}`, `unknown member "limit"`},
		{"units.events", `{"unit":"MSKU1234567","limit":0}`, "limit must be at least 1, not 0"},
		{"units.events", `{"unit":"MSKU1234567","limit":-5}`, "limit must be at least 1, not -5"},
		{"units.events", `{"unit":"MSKU1234567","limit":1e12}`, "limit must be an integer (int32)"},
		{"units.events", `{"unit":"MSKU1234567","limit":99999999999999999999999}`, "limit must be an integer (int32)"},
		{"units.events", `{"unit":"MSKU1234567","limit":2.5}`, "limit must be an integer (int32)"},
		{"units.events", `{"unit":"MSKU1234567","limit":"10"}`, "limit must be an integer, not a string"},
		{"units.events", `{"unit":"MSKU1234567","limit":[10]}`, "limit must be an integer, not an array"},
		{"units.events", fmt.Sprintf(`{"unit":"MSKU1234567","limit":%d}`, service.MaxUnitEvents+1), fmt.Sprintf("limit must be at most %d", service.MaxUnitEvents)},
		{"units.events", `{"unit":["a"],"limit":0,"x":1}`, `unknown member "x"`},
		{"units.events", `{"unit":"MSKU1234567","unit":"TGHU7654321"}`, `gives the key "unit" twice`},
		{"units.events", `{"unit":"` + strings.Repeat(" ", service.MaxEnvelopeBytes) + `"}`, "more than the limit of 16384 bytes for units.events"},
		{"units.get", `{"unit":"` + strings.Repeat(" ", service.MaxEnvelopeBytes) + `"}`, "more than the limit of 16384 bytes for units.get"},
	} {
		r := h.request(tc.op, tc.body)
		if r.code != 400 || !strings.Contains(r.desc, tc.want) {
			t.Errorf("%s %.60s: %d %q, want 400 with %q", tc.op, tc.body, r.code, r.desc, tc.want)
			continue
		}
		r.messages(t)
		if len(r.desc) > 2<<10 {
			t.Errorf("%s %.60s: a description of %d bytes", tc.op, tc.body, len(r.desc))
		}
	}
	// Non-ASCII letters among others: the ASCII letters and digits are the unit.
	if r := h.request("units.get", `{"unit":"MSKÜ 1234567 msku"}`); r.code != 404 || !strings.Contains(r.desc, "unit MSK1234567MSKU") {
		t.Errorf("non-ASCII letters among others: %d %q, want 404 for MSK1234567MSKU", r.code, r.desc)
	}

	// A hostile reply subject: the request is dropped, the bucket gets nothing, the drop is counted.
	before := h.obs.refusals(service.RefusedReplyNotInbox)
	evil := "$KV." + layout.UnitsBucket("tracking") + ".EVIL"
	for _, op := range []string{"units.get", "units.events"} {
		if err := h.nc.PublishRequest("tracking.api."+op, evil, []byte(`{"unit":"MSKU1234567"}`)); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "two drops counted", func() bool {
		return h.obs.refusals(service.RefusedReplyNotInbox) == before+2
	})
	if _, err := u.kv.Get(context.Background(), "EVIL"); err != jetstream.ErrKeyNotFound {
		t.Errorf("the bucket's key EVIL: %v, want none", err)
	}
}

// TestUnitsNotBusyWithUpstream: the units endpoints read NATS in slots of their own: while every upstream
// slot is held by a call the upstream does not answer, an upstream request is refused 503 busy and the
// units endpoints still answer.
func TestUnitsNotBusyWithUpstream(t *testing.T) {
	t.Parallel()
	h := start(t, options{upstreamURL: scriptedUpstream(t), concurrency: 1})
	u := newUnitsStore(t, h, true)
	u.put("MSKU1234567", "e-1", event("e-1", "LOAD", "MSKU1234567", 1, 0))

	held := make(chan reply, 1)
	go func() {
		held <- h.request("orders.get", `{"id":"slow-held"}`, service.TimeoutHeader, testutil.Scale(3*time.Second).String())
	}()
	testutil.Eventually(t, 5*time.Second, "a call held upstream", func() bool { return h.calls.n.Load() == 1 })
	if r := h.request("orders.get", `{"id":"slow-other"}`); r.code != 503 || !strings.Contains(r.desc, "busy") {
		t.Fatalf("an upstream request beside the held one: %d %q, want 503 busy", r.code, r.desc)
	}
	// A read holds its slot until its reply is sent, so the next read of a caller that has its reply may
	// still find that one slot taken for a moment: it asks again. An upstream slot is never the reason.
	read := func(op string) {
		for attempt := 0; ; attempt++ {
			r := h.request(op, `{"unit":"MSKU1234567"}`)
			if r.code == 0 {
				return
			}
			if r.code != 503 || !strings.Contains(r.desc, "reads from NATS in flight") || attempt == 100 {
				t.Fatalf("%s while an upstream call is held: %d %q", op, r.code, r.desc)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for range 3 {
		read("units.get")
		read("units.events")
	}
	select {
	case r := <-held:
		t.Fatalf("the held call ended (%d) before the reads were answered: the test proves nothing", r.code)
	default:
	}
	if r := <-held; r.code != 504 {
		t.Errorf("the held call: %d %q, want 504", r.code, r.desc)
	}
}

// BenchmarkUnitsGet measures units.get through the service with BENCH_UNITS units in the bucket (100,000
// unless set), each value an event of about 600 bytes, one caller, requests spread over every unit; it
// reports the p50 and p99 latency in microseconds, from the caller's request to its reply. Run it with
//
//	go test -run XXX -bench BenchmarkUnitsGet -benchtime 5000x ./internal/service/
func BenchmarkUnitsGet(b *testing.B) {
	n := benchCount(b, "BENCH_UNITS", 100_000)
	ctx, nc, js := benchUnitsService(b)
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: layout.UnitsBucket("tracking"), History: 1}); err != nil {
		b.Fatal(err)
	}
	unit := func(i int) string { return fmt.Sprintf("BENU%07d", i) }
	start := time.Now()
	for i := range n {
		data := event(fmt.Sprint("e-", i), "LOAD", unit(i), i, 600)
		if _, err := js.PublishAsync("$KV."+layout.UnitsBucket("tracking")+"."+unit(i), []byte(data)); err != nil {
			b.Fatal(err)
		}
		if i%5000 == 4999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				b.Fatal("the bucket's puts were not acknowledged")
			}
		}
	}
	<-js.PublishAsyncComplete()
	b.Logf("%d units in the bucket in %v", n, time.Since(start))

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		body := []byte(`{"unit":"` + unit((i*7919)%n) + `"}`)
		t0 := time.Now()
		m, err := nc.Request("tracking.api.units.get", body, 5*time.Second)
		lat = append(lat, time.Since(t0))
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			b.Fatalf("units.get: %v %v", m, err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// TestUnitsGetNotBusyWithEvents: units.get has read slots of its own: while 64 callers hammer
// units.events (a unit of 2,000 events, so that each read takes a while), enough to keep every slot of
// units.events taken (some are refused 503 busy), units.get answers every request, none busy.
func TestUnitsGetNotBusyWithEvents(t *testing.T) {
	t.Parallel()
	h := start(t, options{concurrency: 2})
	u := newUnitsStore(t, h, true)
	u.put("MSKU1234567", "e-1", event("e-1", "LOAD", "MSKU1234567", 1, 0))
	storeMany(t, u.js, "MSKU1234567", 2000, 0)

	var (
		stop               = make(chan struct{})
		done               sync.WaitGroup
		served, eventsBusy atomic.Int64
	)
	nc := h.ns.Connect()
	for range 64 {
		done.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, err := nc.Request("tracking.api.units.events", []byte(`{"unit":"MSKU1234567","limit":200}`), 10*time.Second)
				switch {
				case err != nil:
				case m.Header.Get(micro.ErrorCodeHeader) == "503" && strings.Contains(m.Header.Get(micro.ErrorHeader), "busy"):
					eventsBusy.Add(1)
				case m.Header.Get(micro.ErrorCodeHeader) == "":
					served.Add(1)
				}
			}
		})
	}
	defer func() { close(stop); done.Wait() }()
	testutil.Eventually(t, 30*time.Second, "units.events busy under the flood", func() bool {
		return eventsBusy.Load() > 0 && served.Load() > 0
	})
	busy := 0
	for range 200 {
		r := h.request("units.get", `{"unit":"MSKU1234567"}`)
		switch {
		case r.code == 503 && strings.Contains(r.desc, "busy"):
			busy++
		case r.code != 0:
			t.Fatalf("units.get during the flood: %d %q", r.code, r.desc)
		}
	}
	if busy > 0 {
		t.Errorf("units.get answered 503 busy %d times out of 200 while units.events was flooded", busy)
	}
	if eventsBusy.Load() < 10 {
		t.Errorf("units.events was refused busy only %d times: the flood did not hold its slots", eventsBusy.Load())
	}
}

// storeMany stores n events of unit with PublishAsync, each followed by other events of other units.
// It returns the unit's events' data in their order.
func storeMany(t *testing.T, js jetstream.JetStream, unit string, n, others int) []string {
	t.Helper()
	var mine []string
	types := []string{"GATE_IN", "LOAD", "DISCHARGE", "GATE_OUT"}
	for i := range n {
		typ := types[i%len(types)]
		data := event(fmt.Sprintf("%s-%d", unit, i), typ, unit, i, 0)
		mine = append(mine, data)
		if _, err := js.PublishAsync(layout.EventSubject("tracking", typ, unit), []byte(data)); err != nil {
			t.Fatal(err)
		}
		for j := range others {
			other := fmt.Sprintf("OTHU%07d", (i*others+j)%97)
			if _, err := js.PublishAsync(layout.EventSubject("tracking", typ, other), []byte(event(fmt.Sprintf("%s-%d-%d", unit, i, j), typ, other, i, 0))); err != nil {
				t.Fatal(err)
			}
		}
		if i%(1000/(1+others)+1) == 0 {
			waitPublished(t, js)
		}
	}
	waitPublished(t, js)
	return mine
}

func waitPublished(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(testutil.Scale(30 * time.Second)):
		t.Fatal("the events' publishes were not acknowledged")
	}
}

// readCost is what one units.events read asked of NATS: the consumers it created on the events stream,
// and the messages its connection received (JetStream's answers and the events fetched).
type readCost struct{ creates, msgs int64 }

// costMeter counts the consumer creations on the events stream, seen on the server's $JS.API subjects,
// and the messages the service's reads connection receives.
type costMeter struct {
	h       *harness
	creates chan *nats.Msg
}

func newCostMeter(t *testing.T, h *harness) *costMeter {
	t.Helper()
	c := &costMeter{h: h, creates: make(chan *nats.Msg, 1<<12)}
	if _, err := h.nc.ChanSubscribe("$JS.API.CONSUMER.CREATE."+layout.EventsStream("tracking")+".>", c.creates); err != nil {
		t.Fatal(err)
	}
	if err := h.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return c
}

// read asks units.events with body and returns its reply and cost. Once answered, no consumer of the
// read is left on the stream.
func (c *costMeter) read(body string) (unitEvents, readCost) {
	c.h.t.Helper()
	m0 := c.h.reads.Stats().InMsgs
	got := c.h.unitEvents(body)
	// The creations were published before the reply; once a flush of the counting connection returns,
	// its reader has put them in the channel (a channel subscription's messages go there as they are read).
	if err := c.h.nc.Flush(); err != nil {
		c.h.t.Fatal(err)
	}
	cost := readCost{msgs: int64(c.h.reads.Stats().InMsgs - m0)}
	for len(c.creates) > 0 {
		<-c.creates
		cost.creates++
	}
	js, err := jetstream.New(c.h.nc)
	if err != nil {
		c.h.t.Fatal(err)
	}
	s, err := js.Stream(context.Background(), layout.EventsStream("tracking"))
	if err != nil {
		c.h.t.Fatal(err)
	}
	if n := s.CachedInfo().State.Consumers; n != 0 {
		c.h.t.Errorf("%s: %d consumers left on the events stream after the reply", body, n)
	}
	return got, cost
}

// checkSuffix fails unless got is the last n of want, in order.
func checkSuffix(t *testing.T, what string, got []json.RawMessage, want []string, n int) {
	t.Helper()
	if len(got) != n || n > len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), n)
	}
	for i, e := range want[len(want)-n:] {
		if string(got[i]) != e {
			t.Fatalf("%s: event %d is %.60s…, want %.60s…", what, i, got[i], e)
		}
	}
}

// TestUnitsEventsLongHistory: a unit with 20,000 stored events among other units' events: units.events
// answers exactly its latest events, oldest first, for a limit of 5, the default and the maximum, and
// each read costs what its answer holds, not the unit's history: a bounded number of consumers, and no
// more messages received than a few per consumer besides twice the limit (a read of the whole history
// receives 20,000). Every consumer is deleted by the time of the reply.
func TestUnitsEventsLongHistory(t *testing.T) {
	t.Parallel()
	h := start(t, options{readsConn: true, timeout: testutil.Scale(20 * time.Second)})
	u := newUnitsStore(t, h, true)
	mine := storeMany(t, u.js, "MSKU1234567", 20_000, 1)
	meter := newCostMeter(t, h)

	for _, limit := range []int{5, service.DefaultUnitEvents, service.MaxUnitEvents, 1} {
		body := fmt.Sprintf(`{"unit":"MSKU1234567","limit":%d}`, limit)
		if limit == service.DefaultUnitEvents {
			body = `{"unit":"MSKU1234567"}`
		}
		got, cost := meter.read(body)
		checkSuffix(t, body, got.Events, mine, limit)
		t.Logf("%s: %d consumers, %d messages received", body, cost.creates, cost.msgs)
		if cost.creates > 2+40 || cost.creates < 1 {
			t.Errorf("%s: %d consumers created, want 1 to 42", body, cost.creates)
		}
		if max := int64(2*limit) + 4*cost.creates + 10; cost.msgs > max {
			t.Errorf("%s: %d messages received, more than %d: the read costs the unit's history", body, cost.msgs, max)
		}
	}
	// A unit whose events came in a burst of 10,000, then few among many others: spread unevenly, so
	// that guesses from an even spread miss and the search halves its span instead.
	burst := storeMany(t, u.js, "TGHU7654321", 10_000, 0)
	storeMany(t, u.js, "ZZZU0000001", 10_000, 0)
	burst = append(burst, storeMany(t, u.js, "TGHU7654321", 30, 50)...)
	for _, limit := range []int{20, 5, service.MaxUnitEvents} {
		body := fmt.Sprintf(`{"unit":"TGHU7654321","limit":%d}`, limit)
		got, cost := meter.read(body)
		checkSuffix(t, body, got.Events, burst, limit)
		t.Logf("%s: %d consumers, %d messages received", body, cost.creates, cost.msgs)
		if max := int64(2*limit) + 4*cost.creates + 10; cost.creates > 2+40 || cost.msgs > max {
			t.Errorf("%s: %d consumers created, %d messages received; want at most 42 and %d", body, cost.creates, cost.msgs, max)
		}
	}
	// A unit without events is answered as before.
	if got := h.unitEvents(`{"unit":"ABCU0000001"}`); len(got.Events) != 0 {
		t.Errorf("a unit without events: %d events", len(got.Events))
	}
}

// TestUnitsEventsEdges: a unit of 11 events among others, read with a limit of 11 (N = limit), 10
// (N = limit+1), 5 (N = 2×limit+1, the least that searches) and 1: exactly the latest, oldest first;
// up to 2×limit events are read from the unit's first through one consumer, beyond that a search makes
// a few more.
func TestUnitsEventsEdges(t *testing.T) {
	t.Parallel()
	h := start(t, options{readsConn: true})
	u := newUnitsStore(t, h, true)
	mine := storeMany(t, u.js, "MSKU1234567", 11, 3)
	meter := newCostMeter(t, h)
	for _, tc := range []struct {
		limit             int
		creates, creates2 int64 // at least, at most
	}{
		{11, 1, 1}, {10, 1, 1}, {6, 1, 1}, {5, 2, 42}, {1, 2, 2}, {200, 1, 1},
	} {
		body := fmt.Sprintf(`{"unit":"MSKU1234567","limit":%d}`, tc.limit)
		got, cost := meter.read(body)
		checkSuffix(t, body, got.Events, mine, min(tc.limit, len(mine)))
		if cost.creates < tc.creates || cost.creates > tc.creates2 {
			t.Errorf("%s: %d consumers created, want %d to %d", body, cost.creates, tc.creates, tc.creates2)
		}
	}
}

// TestUnitsEventsWhileRemoved: while the unit's 3,000 events are removed from the stream, oldest first
// (as the stream's limits remove them), every read is answered, with the unit's latest events still
// stored, oldest first: a contiguous run that ends with its newest; once all are gone, with none. No
// read receives more than a few messages per consumer besides twice its limit.
func TestUnitsEventsWhileRemoved(t *testing.T) {
	t.Parallel()
	h := start(t, options{readsConn: true})
	u := newUnitsStore(t, h, true)
	mine := storeMany(t, u.js, "MSKU1234567", 3000, 1)
	stream, err := u.js.Stream(context.Background(), layout.EventsStream("tracking"))
	if err != nil {
		t.Fatal(err)
	}
	last := stream.CachedInfo().State.LastSeq

	removed := make(chan struct{})
	go func() {
		defer close(removed)
		for seq := uint64(1); seq <= last+1; seq += 40 {
			if err := stream.Purge(context.Background(), jetstream.WithPurgeSubject("tracking.events.*.MSKU1234567"),
				jetstream.WithPurgeSequence(seq)); err != nil {
				t.Errorf("purging up to %d: %v", seq, err)
				return
			}
			time.Sleep(time.Millisecond) // spreads the removal over the reads; nothing waits on it
		}
		if err := stream.Purge(context.Background(), jetstream.WithPurgeSubject("tracking.events.*.MSKU1234567")); err != nil {
			t.Errorf("purging: %v", err)
		}
	}()
	index := map[string]int{}
	for i, e := range mine {
		index[e] = i
	}
	meter := newCostMeter(t, h)
	reads := 0
	for done := false; !done; reads++ {
		select {
		case <-removed:
			done = true
		default:
		}
		limit := []int{5, 20, 200}[reads%3]
		got, cost := meter.read(fmt.Sprintf(`{"unit":"MSKU1234567","limit":%d}`, limit))
		if len(got.Events) > limit {
			t.Fatalf("read %d: %d events, more than %d", reads, len(got.Events), limit)
		}
		if max := int64(2*limit) + 4*cost.creates + 10; cost.creates > 2+40 || cost.msgs > max {
			t.Errorf("read %d (limit %d): %d consumers created, %d messages received; want at most 42 and %d", reads, limit,
				cost.creates, cost.msgs, max)
		}
		for i, e := range got.Events {
			at, ok := index[string(e)]
			if !ok || at != len(mine)-len(got.Events)+i {
				t.Fatalf("read %d (limit %d): event %d of %d is %.60s…, not the unit's %dth newest", reads, limit, i,
					len(got.Events), e, len(got.Events)-i)
			}
		}
	}
	if got := h.unitEvents(`{"unit":"MSKU1234567"}`); len(got.Events) != 0 {
		t.Errorf("after every event was removed: %d events", len(got.Events))
	}
	t.Logf("%d reads while the events were removed", reads)
}

// BenchmarkUnitsEvents measures units.events through the service for a unit with BENCH_UNIT_EVENTS
// stored events (50,000 unless set), each followed by an event of another unit, one caller asking for
// the default 20; it reports the p50 and p99 latency in microseconds and the consumers each read made.
// Run it with
//
//	go test -run XXX -bench BenchmarkUnitsEvents -benchtime 200x ./internal/service/
func BenchmarkUnitsEvents(b *testing.B) {
	n := benchCount(b, "BENCH_UNIT_EVENTS", 50_000)
	ctx, nc, js := benchUnitsService(b)
	if err := (layout.Streams{Prefix: "tracking"}).Ensure(ctx, js, true, slog.New(slog.DiscardHandler)); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i := range n {
		for _, unit := range []string{"MSKU1234567", fmt.Sprintf("OTHU%07d", i%1000)} {
			if _, err := js.PublishAsync(layout.EventSubject("tracking", "LOAD", unit), []byte(event(fmt.Sprint(unit, i), "LOAD", unit, i, 300))); err != nil {
				b.Fatal(err)
			}
		}
		if i%1000 == 999 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(30 * time.Second):
				b.Fatal("the events' publishes were not acknowledged")
			}
		}
	}
	<-js.PublishAsyncComplete()
	b.Logf("%d events of the unit, as many of others, stored in %v", n, time.Since(start))
	creates := make(chan *nats.Msg, 1<<16)
	if _, err := nc.ChanSubscribe("$JS.API.CONSUMER.CREATE."+layout.EventsStream("tracking")+".>", creates); err != nil {
		b.Fatal(err)
	}

	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		m, err := nc.Request("tracking.api.units.events", []byte(`{"unit":"MSKU1234567"}`), 10*time.Second)
		lat = append(lat, time.Since(t0))
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			b.Fatalf("units.events: %v %v", m, err)
		}
	}
	b.StopTimer()
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	slices.Sort(lat)
	pct := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) }
	b.ReportMetric(pct(0.5), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(float64(len(creates))/float64(b.N), "consumers/op")
}

// TestUnitsEventsCluster: on a 3-node cluster with the events stream replicated, units.events of a unit
// with 2,000 events among others answers exactly the latest, through a search of a few consumers (a
// consumer's creation there tells its start and count as on one server).
func TestUnitsEventsCluster(t *testing.T) {
	t.Parallel()
	c := testutil.StartCluster(t)
	nc := c.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	if err := (layout.Streams{Prefix: "tracking", Replicas: 3}).Ensure(ctx, js, true, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	c.WaitStreamLeader(layout.EventsStream("tracking"))
	mine := storeMany(t, js, "MSKU1234567", 2000, 2)

	svc := service.New(c.Connect(), nil, service.Config{Prefix: "tracking", Concurrency: 4, Timeout: testutil.Scale(10 * time.Second), Version: "1.0.0"})
	sctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(sctx) }()
	t.Cleanup(func() { stop(); <-done })
	testutil.Eventually(t, 10*time.Second, "service up", func() bool { return svc.Ready() == nil })

	creates := make(chan *nats.Msg, 1<<12)
	if _, err := nc.ChanSubscribe("$JS.API.CONSUMER.CREATE."+layout.EventsStream("tracking")+".>", creates); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{5, 20} {
		// A young cluster may answer a JetStream request with no responders for a moment (503, reading
		// from NATS failed): the caller asks again, as a caller would.
		var m *nats.Msg
		testutil.EventuallyState(t, 20*time.Second, "units.events answered", func() (bool, string) {
			for len(creates) > 0 {
				<-creates
			}
			m, err = nc.Request("tracking.api.units.events", fmt.Appendf(nil, `{"unit":"MSKU1234567","limit":%d}`, limit), testutil.Scale(10*time.Second))
			if err != nil {
				return false, err.Error()
			}
			return m.Header.Get(micro.ErrorCodeHeader) == "", m.Header.Get(micro.ErrorHeader)
		})
		var got unitEvents
		if err := json.Unmarshal(m.Data, &got); err != nil {
			t.Fatal(err)
		}
		checkSuffix(t, fmt.Sprint("limit ", limit), got.Events, mine, limit)
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
		n := 0
		for len(creates) > 0 {
			<-creates
			n++
		}
		if n < 3 || n > 2+40 {
			t.Errorf("limit %d: %d consumers created, want 3 to 42 (a search)", limit, n)
		}
	}
}

// benchCount is the number in the environment variable name, or def when it is not set.
func benchCount(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		b.Fatalf("%s: %v", name, err)
	}
	return n
}

// benchUnitsService runs a service on a NATS server of its own for the units benchmarks, and returns a
// context that lasts the benchmark, and a caller's connection and JetStream.
func benchUnitsService(b *testing.B) (context.Context, *nats.Conn, jetstream.JetStream) {
	ns := testutil.StartNATS(b, nil)
	svc := service.New(ns.Connect(), nil, service.Config{Prefix: "tracking", Concurrency: 32, Timeout: 10 * time.Second, Version: "1.0.0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(b, 5*time.Second, "service up", func() bool { return svc.Ready() == nil })
	nc := ns.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	return ctx, nc, js
}
