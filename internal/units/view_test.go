package units

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// harness is an events stream and a units bucket on a real server (or cluster), with views running on
// connections of their own, as bridges run them.
type harness struct {
	t       *testing.T
	js      jetstream.JetStream
	streams layout.Streams
	connect func() *nats.Conn
	views   []*runningView
	mu      sync.Mutex
	want    map[string]wantValue // what the view must hold, computed by the test alone
	seq     int
}

type runningView struct {
	v    *View
	stop context.CancelFunc
	done chan struct{}
}

// wantValue is a unit's latest event as the test computes it: the instant in Unix nanoseconds (the test's
// times lie well within int64's range) and the id.
type wantValue struct {
	nanos int64
	id    string
	data  string
}

// newHarness makes the streams with the layout the test runs with, after adjust changed it.
func newHarness(t *testing.T, replicas int, connect func() *nats.Conn, adjust ...func(*layout.Streams)) *harness {
	t.Helper()
	h := &harness{t: t, connect: connect, want: map[string]wantValue{},
		streams: layout.Streams{Prefix: "tracking", DuplicateWindow: time.Minute, Replicas: replicas, MaxEventBytes: 1 << 20}}
	for _, f := range adjust {
		f(&h.streams)
	}
	var err error
	if h.js, err = jetstream.New(connect()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	if err := h.streams.Ensure(ctx, h.js, true, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return h
}

// startView runs one more view, as one more bridge would.
func (h *harness) startView(options ...func(*Config)) *runningView {
	h.t.Helper()
	js, err := jetstream.New(h.connect())
	if err != nil {
		h.t.Fatal(err)
	}
	cfg := Config{Streams: h.streams, Create: true, AckWait: 2 * time.Second,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 500 * time.Millisecond, StopTimeout: 5 * time.Second}
	for _, o := range options {
		o(&cfg)
	}
	v := New(js, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	rv := &runningView{v: v, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(rv.done)
		if err := v.Run(ctx); err != nil {
			h.t.Errorf("Run: %v", err)
		}
	}()
	h.views = append(h.views, rv)
	h.t.Cleanup(func() { rv.stop(); <-rv.done })
	return rv
}

// event is the data of a tracking event of unit number at timestamp ts.
func eventData(id, number, ts string) []byte {
	b, _ := json.Marshal(map[string]any{
		"id": id, "type": "GATE_IN", "timestamp": ts,
		"observation": map[string]any{"observedLoadingUnit": map[string]any{"loadingUnit": map[string]any{"number": number}}},
	})
	return b
}

// publish stores one event as the bridge's publisher does, on the subject with the unit token (or the
// older one without it, old), and records what the view must hold for it when want is true.
func (h *harness) publish(id, number, ts string, old bool) {
	h.t.Helper()
	data := eventData(id, number, ts)
	unit := layout.UnitToken(number)
	subject := layout.EventSubject(h.streams.Prefix, "GATE_IN", unit)
	if old {
		subject = layout.Event(h.streams.Prefix, "GATE_IN")
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, id)
	m.Header.Set(layout.HeaderEventID, id)
	// Each attempt has a deadline of its own: a request sent on a connection to a node that just stopped is
	// never answered, and the next attempt (same id, stored once) goes to a node that answers.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(20*time.Second))
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, time.Second)
		_, err := h.js.PublishMsg(actx, m)
		acancel()
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			h.t.Fatalf("publishing %s: %v", id, err)
		}
		time.Sleep(20 * time.Millisecond) // the server is restarting or electing: try again, same id
	}
	// The test's own reading, independent of the view's: RFC 3339 allows lower-case letters, and no comma.
	at, err := time.Parse(time.RFC3339Nano, strings.ToUpper(ts))
	if err != nil || strings.Contains(ts, ",") || unit == layout.NoUnit || at.After(time.Now().Add(MaxAhead)) {
		return // not kept: no RFC 3339 time, no unit, or dated past MaxAhead after its storage (just now)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	w, ok := h.want[unit]
	if !ok || at.UnixNano() > w.nanos || at.UnixNano() == w.nanos && id > w.id {
		h.want[unit] = wantValue{nanos: at.UnixNano(), id: id, data: string(data)}
	}
}

// nextID is a fresh event id; its order has nothing to do with the events' timestamps.
func (h *harness) nextID() string {
	h.seq++
	sum := sha256.Sum256(fmt.Appendf(nil, "%d", h.seq))
	return "ev-" + hex.EncodeToString(sum[:6])
}

// bucket reads every value of the units bucket with its Tracking-Event-Id, as a reader of the raw
// messages would (the last message of each key).
func (h *harness) bucket() (map[string]wantValue, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	s, err := h.js.Stream(ctx, h.streams.UnitsStream())
	if err != nil {
		return nil, err
	}
	got := map[string]wantValue{}
	info, err := s.Info(ctx)
	if err != nil || info.State.Msgs == 0 {
		return got, err
	}
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: 10 * time.Second, FilterSubject: h.streams.UnitSubject(">")})
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.DeleteConsumer(context.Background(), c.CachedInfo().Name) }()
	for {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			unit := strings.TrimPrefix(m.Subject(), "$KV."+h.streams.Units()+".")
			if m.Headers().Get(layout.HeaderUnit) != unit {
				return nil, fmt.Errorf("value of %s has %s %q", unit, layout.HeaderUnit, m.Headers().Get(layout.HeaderUnit))
			}
			got[unit] = wantValue{id: m.Headers().Get(layout.HeaderEventID), data: string(m.Data())}
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			if md.NumPending == 0 {
				return got, nil
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
	}
}

// waitView waits until the bucket holds exactly the latest event of every unit, as the test computed it.
func (h *harness) waitView(within time.Duration) {
	h.t.Helper()
	testutil.EventuallyState(h.t, within, "the units bucket holds the latest event of every unit", func() (bool, string) {
		got, err := h.bucket()
		if err != nil {
			return false, err.Error()
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		var diff []string
		for unit, w := range h.want {
			if g, ok := got[unit]; !ok || g.id != w.id || g.data != w.data {
				diff = append(diff, fmt.Sprintf("%s: have %q, want %q", unit, g.id, w.id))
			}
		}
		for unit := range got {
			if _, ok := h.want[unit]; !ok {
				diff = append(diff, fmt.Sprintf("%s: not wanted", unit))
			}
		}
		if len(diff) > 10 {
			diff = append(diff[:10], fmt.Sprintf("... %d in all", len(diff)))
		}
		return len(diff) == 0, strings.Join(diff, "\n")
	})
}

// timestamp writes the instant base+offset in one of several forms of RFC 3339: other zones, fractions
// of several lengths, lower-case letters.
func timestamp(r *rand.Rand, at time.Time) string {
	zones := []*time.Location{time.UTC, time.FixedZone("", 3600), time.FixedZone("", -5*3600-1800), time.FixedZone("", 14*60)}
	t := at.In(zones[r.IntN(len(zones))])
	switch r.IntN(4) {
	case 0:
		return t.Format("2006-01-02T15:04:05.000000000Z07:00")
	case 1:
		return t.Format(time.RFC3339Nano)
	case 2:
		return strings.ToLower(t.Format("2006-01-02T15:04:05.999999999Z07:00"))
	default:
		return t.Format("2006-01-02T15:04:05.000Z07:00")
	}
}

// shuffled publishes events of units units, perUnit each, with timestamps shuffled (and some instants
// shared by two events, written differently), in random order across units, half on the older subject.
func (h *harness) shuffled(r *rand.Rand, units, perUnit int) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	type ev struct {
		id, number, ts string
		old            bool
	}
	var evs []ev
	for u := range units {
		number := fmt.Sprintf("msku %06d-%d", u, u%10)
		for range perUnit {
			at := base.Add(time.Duration(r.IntN(1000)) * time.Millisecond * 997).Add(time.Duration(r.IntN(3)))
			evs = append(evs, ev{h.nextID(), number, timestamp(r, at), r.IntN(2) == 0})
		}
	}
	r.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	for _, e := range evs {
		h.publish(e.id, e.number, e.ts, e.old)
	}
}

// TestViewShuffled: events of many units with shuffled timestamps, applied by two views at once (two
// bridges), leave in the bucket the latest event of each unit as the test computes it; ties of instants
// (written in other zones and with fractions of other lengths) go to the larger id.
func TestViewShuffled(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		t.Run(map[bool]string{false: "server", true: "cluster"}[cluster], func(t *testing.T) {
			h := newTestHarness(t, cluster)
			h.startView()
			h.startView()
			r := rand.New(rand.NewPCG(1, 2))
			h.shuffled(r, 40, 25)
			h.waitView(60 * time.Second)
			testutil.Eventually(t, 20*time.Second, "no lag", func() bool {
				st := h.views[0].v.Status()
				return st.LagEvents == 0 && st.LagSeconds == 0 && st.Problem == ""
			})
		})
	}
}

func newTestHarness(t *testing.T, cluster bool) *harness {
	if cluster {
		c := testutil.StartCluster(t)
		return newHarness(t, 3, c.Connect)
	}
	n := testutil.StartNATS(t, nil)
	return newHarness(t, 1, n.Connect)
}

// TestViewOrder: a late event after a newer one never moves the unit back; two events with one instant
// (in two zones, with and without nanoseconds) keep the larger id; the same event twice changes nothing.
func TestViewOrder(t *testing.T) {
	h := newTestHarness(t, false)
	rv := h.startView()
	h.publish("b-newer", "ABCU1234567", "2026-03-01T12:00:00.5Z", false)
	h.waitView(20 * time.Second)
	h.publish("a-late", "abcu 123456-7", "2026-03-01T12:00:00.499999999Z", false)  // older: not kept
	h.publish("z-tie", "ABCU1234567", "2026-03-01T13:00:00.500000000+01:00", true) // same instant, larger id
	h.publish("c-tie", "ABCU1234567", "2026-03-01T12:00:00.5z", false)             // same instant, smaller id
	h.waitView(20 * time.Second)
	testutil.Eventually(t, 20*time.Second, "every event counted", func() bool {
		st := rv.v.Status()
		return st.Events[OutcomeApplied] == 2 && st.Events[OutcomeOlder] == 2
	})
	got, _ := h.bucket()
	if got["ABCU1234567"].id != "z-tie" {
		t.Fatalf("value %+v, want z-tie", got["ABCU1234567"])
	}
}

// TestViewNotKept: events without a unit, or whose timestamp is not RFC 3339, are counted and not kept,
// and do not stop the view.
func TestViewNotKept(t *testing.T) {
	h := newTestHarness(t, false)
	rv := h.startView()
	bad := []string{"2026-03-01 12:00:00Z", "2026-03-01T12:00:00", "yesterday", "", "2026-03-01T12:00:00+25:00", "2026-03-01T12:00:00,5Z"}
	for _, ts := range bad {
		h.publish(h.nextID(), "ABCU7654321", ts, false)
	}
	for _, number := range []string{"", "- -/.", strings.Repeat("A", 65), "\u00e9\u00e8"} {
		h.publish(h.nextID(), number, "2026-03-01T12:00:00Z", false)
	}
	// A foreign subject token that is not a unit token, and data whose number is not a string.
	for i, subject := range []string{"tracking.events.GATE_IN.abc", "tracking.events.GATE_IN"} {
		m := nats.NewMsg(subject)
		m.Data = []byte(`{"id":"x","timestamp":"2026-03-01T12:00:00Z","observation":{"observedLoadingUnit":{"loadingUnit":{"number":7}}}}`)
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("foreign-%d", i))
		if _, err := h.js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	h.publish("good", "ABCU7654321", "2026-03-01T12:00:00Z", false)
	h.waitView(20 * time.Second)
	testutil.EventuallyState(t, 20*time.Second, "every event counted", func() (bool, string) {
		st := rv.v.Status()
		return st.Events[OutcomeBadTimestamp] == uint64(len(bad)) && st.Events[OutcomeNoUnit] == 6 &&
			st.Events[OutcomeApplied] == 1, fmt.Sprint(st.Events)
	})
}

// TestViewFutureTimestamp: an event dated more than MaxAhead after its storage (a report producer's year
// 9999) is counted and not kept, so it cannot pin its unit; an event within MaxAhead is kept as usual, and
// the real events after the future ones still move the unit on.
func TestViewFutureTimestamp(t *testing.T) {
	h := newTestHarness(t, false)
	rv := h.startView()
	now := time.Now().UTC()
	h.publish("a-real", "ABCU1234567", now.Format(time.RFC3339Nano), false)
	h.publish("z-pin", "ABCU1234567", "9999-12-31T23:59:59.999999999Z", false)
	h.publish("z-ahead", "ABCU1234567", now.Add(2*MaxAhead).Format(time.RFC3339), false)
	h.publish("b-skewed", "ABCU1234567", now.Add(MaxAhead/2).Format(time.RFC3339), false)
	h.waitView(20 * time.Second)
	testutil.EventuallyState(t, 20*time.Second, "every event counted", func() (bool, string) {
		st := rv.v.Status()
		return st.Events[OutcomeFuture] == 2 && st.Events[OutcomeApplied]+st.Events[OutcomeOlder] == 2, fmt.Sprint(st.Events)
	})
	got, _ := h.bucket()
	if got["ABCU1234567"].id != "b-skewed" {
		t.Fatalf("value %+v, want b-skewed (the latest event not dated past MaxAhead)", got["ABCU1234567"])
	}
}

// TestViewAgesOut: with a maximum age on the events stream, the bucket the view makes has it as its TTL,
// so a unit's value leaves the bucket soon after its event left the stream; the unit's next event is
// then its value, even one dated before the value that left (the view's cache still knows that value: the
// bucket decides).
func TestViewAgesOut(t *testing.T) {
	const age = 2 * time.Second
	n := testutil.StartNATS(t, nil)
	h := newHarness(t, 1, n.Connect, func(l *layout.Streams) {
		l.DuplicateWindow, l.EventsLimits.MaxAge = age/2, age
	})
	h.startView()
	now := time.Now().UTC()
	h.publish("e-1", "ABCU1234567", now.Format(time.RFC3339Nano), false)
	h.waitView(20 * time.Second)

	kv, err := h.js.KeyValue(context.Background(), h.streams.Units())
	if err != nil {
		t.Fatal(err)
	}
	if st, err := kv.Status(context.Background()); err != nil || st.TTL() != age {
		t.Fatalf("the bucket's TTL: %v %v, want %v", st, err, age)
	}
	testutil.EventuallyState(t, 20*time.Second, "the value and its event gone", func() (bool, string) {
		_, err := kv.Get(context.Background(), "ABCU1234567")
		events := testutil.StreamMsgs(t, h.js, h.streams.Events())
		return errors.Is(err, jetstream.ErrKeyNotFound) && events == 0, fmt.Sprintf("value: %v; events stored: %d", err, events)
	})

	h.mu.Lock()
	delete(h.want, "ABCU1234567") // the test's own record: the unit's events left the stream
	h.mu.Unlock()
	h.publish("e-0", "ABCU1234567", now.Add(-time.Hour).Format(time.RFC3339Nano), false)
	h.waitView(20 * time.Second)
}
