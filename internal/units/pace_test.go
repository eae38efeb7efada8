package units

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestArrivals: the storage rate over the readings of about the last second (four of them); none from
// the first reading, and the readings start again when the stream went back.
func TestArrivals(t *testing.T) {
	var a arrivals
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for i, c := range []struct {
		seq  uint64
		at   time.Time
		want float64
	}{
		{0, at(0), -1},       // an empty stream, the first reading
		{500, at(250), 2000}, // 500 in 250 ms
		{500, at(500), 1000}, // 500 in 500 ms
		{500, at(750), 500 / 0.75},
		{1000, at(1000), 1000}, // 1,000 in the last second: the first reading is the oldest kept
		{1000, at(1250), 500},  // the first reading has left the ring: 500 in the second since 250 ms
		{1000, at(1500), 500},  // and since 500 ms
		{1000, at(1750), 500},  // and since 750 ms
		{1000, at(2000), 0},    // the burst has left the last second
		{50, at(2250), -1},     // purged or made again: the readings start again
		{550, at(2500), 2000},
		{600, at(2500), -1}, // no time passed: start again
	} {
		if got := a.observe(c.seq, c.at); got != c.want {
			t.Errorf("reading %d (seq %d): %v events/s, want %v", i, c.seq, got, c.want)
		}
	}
}

// TestPace: a hundredth of the rate until the stream's rate is known; the view yields above twice
// MaxRate, and takes its full rate again below it.
func TestPace(t *testing.T) {
	v := New(nil, Config{MaxRate: 1000})
	if v.yielding.Load() || v.limit.Limit() != 10 {
		t.Errorf("a new view: yielding %v at %v a second, want false at 10", v.yielding.Load(), v.limit.Limit())
	}
	for i, c := range []struct {
		arriving float64
		yielding bool
		limit    float64
	}{
		{-1, false, 10}, {500, false, 1000}, {1500, false, 1000}, {2000, false, 1000}, {2001, true, 10},
		{-1, true, 10}, {1500, true, 10}, {1000, true, 10}, {999, false, 1000}, {5000, true, 10}, {0, false, 1000},
	} {
		v.pace(c.arriving)
		if v.yielding.Load() != c.yielding || float64(v.limit.Limit()) != c.limit {
			t.Errorf("step %d, %v events/s arriving: yielding %v at %v a second, want %v at %v", i, c.arriving,
				v.yielding.Load(), v.limit.Limit(), c.yielding, c.limit)
		}
	}
	flood := New(nil, Config{MaxRate: 1000})
	if flood.pace(2001); !flood.yielding.Load() || flood.limit.Limit() != 10 {
		t.Errorf("a view started into a flood: yielding %v at %v a second, want true at 10", flood.yielding.Load(), flood.limit.Limit())
	}
	unlimited := New(nil, Config{MaxRate: -1})
	unlimited.pace(1e9)
	if unlimited.yielding.Load() {
		t.Error("a view without a rate limit yields")
	}
}

// TestViewYieldsToFlood: events stored faster than twice the view's MaxRate make it yield
// (Status.Yielding) and take a hundredth of its rate; once they stop it takes the full rate again. What
// yielding saves the event path is measured by cmd/bench, not here; that the view catches up after a
// backlog, by the other tests.
func TestViewYieldsToFlood(t *testing.T) {
	h := newTestHarness(t, false)
	const maxRate = 100 // low, so that a busy machine's flood is one too
	rv := h.startView(func(c *Config) { c.MaxRate = maxRate })
	h.publish(h.nextID(), "PACE0000", "2026-04-02T00:00:00Z", false)
	h.waitView(30 * time.Second)

	// A flood of 100 events every 100 ms, published asynchronously, until the view says it yields.
	js, err := jetstream.New(h.connect())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; {
			for range 100 {
				id := fmt.Sprintf("flood-%06d", i)
				unit := fmt.Sprintf("PACE%04d", i%500)
				m := nats.NewMsg(layout.EventSubject(h.streams.Prefix, "GATE_IN", layout.UnitToken(unit)))
				m.Data = eventData(id, unit, "2026-04-02T00:00:00Z")
				m.Header.Set(jetstream.MsgIDHeader, id)
				if _, err := js.PublishMsgAsync(m); err != nil {
					t.Errorf("publishing: %v", err)
					return
				}
				i++
			}
			select {
			case <-js.PublishAsyncComplete():
			case <-stop:
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	testutil.Eventually(t, 60*time.Second, "the view yields while the flood lasts", func() bool {
		return rv.v.Status().Yielding
	})
	if got := float64(rv.v.limit.Limit()); got != maxRate*floodShare {
		t.Errorf("while yielding the view takes %v events a second, want %v", got, maxRate*floodShare)
	}
	close(stop)
	wg.Wait()
	testutil.Eventually(t, 30*time.Second, "the view takes its full rate again once the flood stops", func() bool {
		return !rv.v.Status().Yielding
	})
	if got := float64(rv.v.limit.Limit()); got != maxRate {
		t.Errorf("after the flood the view takes %v events a second, want %v", got, float64(maxRate))
	}
}
