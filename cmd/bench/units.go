package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

// unitsLag measures, in -latency mode, how far the bridge's units view runs behind the events: for every
// value the view writes to its bucket, the time it reaches a core subscriber of $KV.<bucket>.> minus the
// time its event reached a core subscriber of the events (matched by the event id, Nats-Msg-Id on the
// event, Tracking-Event-Id on the value). Both subscribers are in this process, on one connection.
type unitsLag struct {
	mu     sync.Mutex
	events map[string]time.Time // event id → when the event arrived
	first  time.Time
	lags   []time.Duration
	warm   int // values of events that arrived in the first benchWarmup, left out
	values int
}

// watchUnits subscribes nc to the events and to the bucket's values; nil, nil when the bucket subject is "".
func watchUnits(nc *nats.Conn, events, values string) (*unitsLag, error) {
	u := &unitsLag{events: map[string]time.Time{}}
	if _, err := nc.Subscribe(events, func(m *nats.Msg) {
		now := time.Now()
		u.mu.Lock()
		if u.first.IsZero() {
			u.first = now
		}
		u.events[m.Header.Get(jetstream.MsgIDHeader)] = now
		u.mu.Unlock()
	}); err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(values, func(m *nats.Msg) {
		now := time.Now()
		u.mu.Lock()
		defer u.mu.Unlock()
		u.values++
		at, ok := u.events[m.Header.Get(layout.HeaderEventID)]
		switch {
		case !ok:
		case at.Sub(u.first) < benchWarmup:
			u.warm++
		default:
			u.lags = append(u.lags, now.Sub(at))
		}
	})
	if err != nil {
		return nil, err
	}
	_ = sub.SetPendingLimits(-1, -1)
	return u, nc.Flush()
}

// settle waits until no value arrived for a second (the view caught up), or ctx ends.
func (u *unitsLag) settle(ctx context.Context) {
	last := -1
	for ctx.Err() == nil {
		u.mu.Lock()
		n := u.values
		u.mu.Unlock()
		if n == last {
			return
		}
		last = n
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (u *unitsLag) String() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	l := slices.Clone(u.lags)
	slices.Sort(l)
	q := func(p float64) string {
		if len(l) == 0 {
			return "-"
		}
		return benchUS(l[min(len(l)-1, int(p*float64(len(l))))])
	}
	mx := "-"
	if len(l) > 0 {
		mx = benchUS(l[len(l)-1])
	}
	return fmt.Sprintf("units view: %d values written for %d events (%d in the first %v left out); lag behind the event: p50 %s  p90 %s  p99 %s  max %s",
		u.values, len(u.events), u.warm, benchWarmup, q(0.5), q(0.9), q(0.99), mx)
}

// unitsSizing writes n units of about size bytes each to a bucket made as the bridge makes PFX_UNITS,
// with the view's headers, and reports the bucket's size and nats-server's resident memory before and
// after (and after a second pass over the same units, as the view replaces values).
func (e *benchEnv) unitsSizing(ctx context.Context, stdout io.Writer, n, size int) error {
	lay := layout.Streams{Prefix: "benchunits", MaxEventBytes: 1 << 20}
	fmt.Fprintf(stdout, "units sizing: %d units of ~%d bytes in bucket %s (file storage, history 1)\n", n, size, lay.Units())
	_ = e.js.DeleteKeyValue(ctx, lay.Units())
	if _, err := e.js.CreateKeyValue(ctx, lay.UnitsConfig()); err != nil {
		return err
	}
	defer func() { _ = e.js.DeleteKeyValue(context.Background(), lay.Units()) }()
	report := func(what string) error {
		s, err := e.js.Stream(ctx, lay.UnitsStream())
		if err != nil {
			return err
		}
		mem, err := ReadMem(e.natsSrv.Pid())
		if err != nil {
			return err
		}
		st := s.CachedInfo().State
		fmt.Fprintf(stdout, "  %-28s values %d, bucket %.1f MB (%.0f bytes/unit), nats-server RSS %.1f MB (peak %.1f MB)\n",
			what, st.Msgs, benchMB(int64(st.Bytes)), float64(st.Bytes)/float64(max(st.Msgs, 1)),
			benchMB(mem.RSS), benchMB(mem.PeakRSS))
		return nil
	}
	if err := report("empty:"); err != nil {
		return err
	}
	pad := strings.Repeat("x", max(0, size-250))
	for pass := 1; pass <= 2; pass++ {
		start := time.Now()
		var futures []jetstream.PubAckFuture
		for i := range n {
			unit := fmt.Sprintf("MSKU%07d", i)
			m := nats.NewMsg(lay.UnitSubject(unit))
			id := fmt.Sprintf("ev-%d-%d", pass, i)
			m.Data = fmt.Appendf(nil, `{"id":%q,"type":"GATE_IN","timestamp":"2026-03-01T12:00:%02d.%09dZ",`+
				`"observation":{"observedLoadingUnit":{"loadingUnit":{"number":%q}}},"pad":%q}`, id, pass, i, unit, pad)
			m.Header.Set(layout.HeaderEventID, id)
			m.Header.Set(layout.HeaderUnit, unit)
			f, err := e.js.PublishMsgAsync(m)
			if err != nil {
				return err
			}
			futures = append(futures, f)
			if len(futures) == 4000 {
				if err := waitAcks(ctx, futures); err != nil {
					return err
				}
				futures = futures[:0]
			}
		}
		if err := waitAcks(ctx, futures); err != nil {
			return err
		}
		if err := report(fmt.Sprintf("pass %d (%.1f s):", pass, time.Since(start).Seconds())); err != nil {
			return err
		}
	}
	return nil
}

func waitAcks(ctx context.Context, fs []jetstream.PubAckFuture) error {
	for _, f := range fs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
