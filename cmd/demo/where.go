package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/tracking"
)

// whereUnits is how many loading units the demo follows: the first it sees in events.
const whereUnits = 3

// seeUnit notes the unit token of an event the watcher received, keeping the first whereUnits units
// that events name. The caller holds w.mu.
func (w *watcher) seeUnit(unit string) {
	if unit == "" || unit == tracking.NoUnit || len(w.units) == whereUnits {
		return
	}
	for _, u := range w.units {
		if u == unit {
			return
		}
	}
	w.units = append(w.units, unit)
}

// whereLoop prints, every interval, where the followed units are now, as the units view has it: the
// latest event of each in the key-value bucket PFX_UNITS, read as a downstream service would with
// `nats kv get`. It reads through a connection of its own in the bridge's account (the operator's user
// of the demo's server, which needs no import). While the bucket does not exist yet (the bridge creates
// it, unless its view is off), it prints nothing.
func (w *watcher) whereLoop(ctx context.Context, url, prefix string, every time.Duration) {
	nc, err := nats.Connect(url, nats.Name("tracking-bridge-demo-where"))
	if err != nil {
		fmt.Fprintf(w.out, "  WHERE cannot connect to read the units view: %v\n", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.where(ctx, js, prefix)
	}
}

// where prints one round of whereLoop: a line for each followed unit that the view holds.
func (w *watcher) where(ctx context.Context, js jetstream.JetStream, prefix string) {
	w.mu.Lock()
	units := append([]string(nil), w.units...)
	w.mu.Unlock()
	if len(units) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	bucket := layout.UnitsBucket(prefix)
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return // no view yet (or off): nothing to show
	}
	var b strings.Builder
	for _, unit := range units {
		e, err := kv.Get(ctx, unit)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyNotFound) && ctx.Err() == nil {
				fmt.Fprintf(&b, "  WHERE %-14s cannot read %s: %v\n", unit, bucket, err)
			}
			continue
		}
		fmt.Fprintf(&b, "  WHERE %-14s %s\n", unit, describeLatest(e.Value()))
	}
	if b.Len() > 0 {
		fmt.Fprintf(w.out, "  WHERE now, from the units view %s:\n%s", bucket, b.String())
	}
}

// describeLatest says in one line what a unit's latest event holds: its type, time and place. The data
// is the provider's, so each member may be missing.
func describeLatest(data []byte) string {
	var ev struct {
		ID          string `json:"id"`
		Type        string `json:"type"`
		Timestamp   string `json:"timestamp"`
		Observation struct {
			Location struct {
				ID          string `json:"id"`
				Designation string `json:"designation"`
			} `json:"location"`
		} `json:"observation"`
	}
	if err := json.Unmarshal(data, &ev); err != nil {
		return fmt.Sprintf("%d bytes that do not decode: %v", len(data), err)
	}
	place := ev.Observation.Location.Designation
	if id := ev.Observation.Location.ID; id != "" {
		place = strings.TrimSpace(place + " (" + id + ")")
	}
	if place == "" {
		place = "an unnamed place"
	}
	return fmt.Sprintf("%-17s at %s, %s (event %s)", ev.Type, place, ev.Timestamp, ev.ID)
}
