package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// unitsBucket is the units bucket of the default prefix, and its stream.
const (
	unitsBucket = "TRACKING_UNITS"
	unitsStream = "KV_" + unitsBucket
)

// TestUnitsViewFailover runs two bridges building the units view while the simulator streams, and in turn:
// kills the leader with SIGKILL mid-stream, kills the other bridge (a view builder that does not lead),
// runs `bridge units rebuild -purge` while events flow, and kills every bridge, stores events while none
// runs (newer and older ones for units the view holds, as a bridge of another build would), and starts
// them again. At the end the bucket holds, for every unit, the latest of its events in the stream, as the
// test computes it from the stream's contents alone, and /status shows the view caught up.
func TestUnitsViewFailover(t *testing.T) {
	t.Parallel()
	const total = 6000
	ns := testutil.StartNATS(t, nil)
	r := newRig(t, sim.Options{EventRate: 200, EventLimit: total}, ns.Connect(), nil)
	r.addBridge("a", ns.URL(), false)
	r.addBridge("b", ns.URL(), false)
	leader := r.waitLeader(30*time.Second, nil)
	r.waitEvents(400, 30*time.Second)

	r.phase("SIGKILL to the leader %s", leader.name)
	from := time.Now()
	leader.kill()
	next := r.takeover("SIGKILL", leader, from, failoverBound)
	leader.start()
	r.waitMoreEvents(300, 30*time.Second)

	r.phase("SIGKILL to %s, a view builder that does not lead", leader.name)
	leader.kill()
	leader.start()
	r.waitMoreEvents(300, 30*time.Second)

	r.phase("bridge units rebuild -purge while events flow")
	out := next.command("units", "rebuild", "-purge")
	if !strings.Contains(out, "emptied") || !strings.Contains(out, "rebuilding from TRACKING_EVENTS sequence 1") {
		t.Errorf("units rebuild printed %q", out)
	}
	r.waitMoreEvents(300, 30*time.Second)

	r.phase("every bridge killed; events stored while none runs")
	for _, b := range r.bridges {
		b.kill()
	}
	units := r.storedUnits(t)
	if len(units) < 2 {
		t.Fatalf("the simulator's events name %d units", len(units))
	}
	for i, unit := range units[:min(len(units), 20)] {
		// Newer than the simulator's (dated as it writes them), within the hour a timestamp may lie ahead
		// of its storage (units.MaxAhead): kept.
		ts := time.Now().Add(30 * time.Minute).In(time.FixedZone("", 3600)).Format(time.RFC3339)
		if i%2 == 1 {
			ts = "2000-01-01T00:00:00Z" // older: never kept
		}
		m := nats.NewMsg("tracking.events.GATE_IN." + unit)
		m.Data = fmt.Appendf(nil, `{"id":"own-%d","type":"GATE_IN","timestamp":%q,`+
			`"observation":{"observedLoadingUnit":{"loadingUnit":{"number":%q}}}}`, i, ts, unit)
		m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("own-%d", i))
		ctx, cancel := opCtx()
		_, err := r.js.PublishMsg(ctx, m)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range r.bridges {
		b.start()
	}
	r.waitEvents(total, 60*time.Second)

	r.phase("the view holds the latest event of every unit")
	testutil.EventuallyState(t, 90*time.Second, "the bucket holds every unit's latest event in the stream", func() (bool, string) {
		want, err := latestPerUnit(r.js)
		if err != nil {
			return false, err.Error()
		}
		got, err := bucketIDs(r.js)
		if err != nil {
			return false, err.Error()
		}
		var diff []string
		for unit, id := range want {
			if got[unit] != id {
				diff = append(diff, fmt.Sprintf("%s: have %q, want %q", unit, got[unit], id))
			}
		}
		if len(got) != len(want) {
			diff = append(diff, fmt.Sprintf("%d units in the bucket, want %d", len(got), len(want)))
		}
		return len(diff) == 0, strings.Join(diff[:min(len(diff), 10)], "\n")
	})
	for _, b := range r.bridges {
		testutil.EventuallyState(t, 30*time.Second, b.name+"'s /status shows the view caught up", func() (bool, string) {
			u, err := b.unitsStatus()
			return err == nil && u.Enabled && u.Ready && u.LagEvents == 0, fmt.Sprintf("%+v %v", u, err)
		})
	}
	r.summary()
}

// unitsStatus is /status's "units" section, as the tests read it.
type unitsStatus struct {
	Enabled    bool              `json:"enabled"`
	Ready      bool              `json:"ready"`
	Reason     string            `json:"reason"`
	LagEvents  uint64            `json:"lag_events"`
	LagSeconds float64           `json:"lag_seconds"`
	Events     map[string]uint64 `json:"events"`
}

func (b *bridge) unitsStatus() (unitsStatus, error) {
	var doc struct {
		Units unitsStatus `json:"units"`
	}
	resp, err := statusClient.Get("http://" + b.addr + "/status")
	if err != nil {
		return doc.Units, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return doc.Units, fmt.Errorf("GET /status: %s", resp.Status)
	}
	err = json.NewDecoder(resp.Body).Decode(&doc)
	return doc.Units, err
}

// refUnit is the unit token of an event as the test reads it from the subject's words and the data: the
// subject's fourth token when it has one, else the number upper-cased with everything but A-Z and 0-9
// removed, at most 64 characters, "_" otherwise.
func refUnit(subject string, data []byte) string {
	if tok := strings.Split(subject, "."); len(tok) == 4 {
		return tok[3]
	}
	var ev struct {
		Observation struct {
			ObservedLoadingUnit struct {
				LoadingUnit struct {
					Number any `json:"number"`
				} `json:"loadingUnit"`
			} `json:"observedLoadingUnit"`
		} `json:"observation"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return "_"
	}
	number, ok := ev.Observation.ObservedLoadingUnit.LoadingUnit.Number.(string)
	if !ok {
		return "_"
	}
	var b strings.Builder
	for _, c := range strings.ToUpper(number) {
		if c < unicode.MaxASCII && (unicode.IsUpper(c) || unicode.IsDigit(c)) {
			b.WriteRune(c)
		}
	}
	if b.Len() == 0 || b.Len() > 64 {
		return "_"
	}
	return b.String()
}

// latestPerUnit computes, from the events stream's contents alone, the id of every unit's latest event:
// the largest timestamp as an instant, then the largest id.
func latestPerUnit(js jetstream.JetStream) (map[string]string, error) {
	type best struct {
		at time.Time
		id string
	}
	bests := map[string]best{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := js.Stream(ctx, eventsStream)
	if err != nil {
		return nil, err
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{"tracking.events.>"}})
	if err != nil {
		return nil, err
	}
	// Fetched in batches, not one request a message: thousands of events, read again at every look.
	for more := true; more; {
		batch, err := c.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			md, err := msg.Metadata()
			if err != nil {
				return nil, err
			}
			more = md.NumPending > 0
			unit := refUnit(msg.Subject(), msg.Data())
			var ev struct {
				Timestamp string `json:"timestamp"`
			}
			if unit == "_" || json.Unmarshal(msg.Data(), &ev) != nil {
				continue
			}
			at, err := time.Parse(time.RFC3339Nano, strings.ToUpper(ev.Timestamp))
			if err != nil {
				continue
			}
			id := msg.Headers().Get(jetstream.MsgIDHeader)
			if b, ok := bests[unit]; !ok || at.After(b.at) || at.Equal(b.at) && id > b.id {
				bests[unit] = best{at, id}
			}
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		more = more && n > 0
	}
	out := map[string]string{}
	for unit, b := range bests {
		out[unit] = b.id
	}
	return out, nil
}

// bucketIDs reads the units bucket: every unit's Tracking-Event-Id.
func bucketIDs(js jetstream.JetStream) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, unitsStream)
	if err != nil {
		return nil, err
	}
	got := map[string]string{}
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
		AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: 10 * time.Second, FilterSubject: "$KV." + unitsBucket + ".>"})
	if err != nil {
		return nil, err
	}
	defer func() { _ = s.DeleteConsumer(context.Background(), c.CachedInfo().Name) }()
	if c.CachedInfo().NumPending == 0 {
		return got, nil
	}
	for {
		msg, err := c.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			return nil, err
		}
		got[strings.TrimPrefix(msg.Subject(), "$KV."+unitsBucket+".")] = msg.Headers().Get("Tracking-Event-Id")
		if md, err := msg.Metadata(); err != nil || md.NumPending == 0 {
			return got, err
		}
	}
}

// storedUnits returns the units the bucket holds now.
func (r *rig) storedUnits(t *testing.T) []string {
	t.Helper()
	var units []string
	testutil.Eventually(t, 30*time.Second, "the bucket can be read", func() bool {
		got, err := bucketIDs(r.js)
		units = units[:0]
		for u := range got {
			units = append(units, u)
		}
		return err == nil && len(units) > 0
	})
	return units
}
