package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Recorder collects received events for an end-to-end latency measurement: the time each was received
// and its data, whose "timestamp" field is the moment the source generated (and wrote) it. Record only
// keeps the two; the JSON is parsed later by Summarize, so recording adds next to nothing to the receive
// path it measures. It is safe for concurrent use.
type Recorder struct {
	mu   sync.Mutex
	recv []time.Time
	data [][]byte
}

// Record notes one event received at t. data must not be modified afterwards.
func (r *Recorder) Record(t time.Time, data []byte) {
	r.mu.Lock()
	r.recv = append(r.recv, t)
	r.data = append(r.data, data)
	r.mu.Unlock()
}

// Count returns the number of events recorded.
func (r *Recorder) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recv)
}

// LatencySummary describes the distribution of receive time minus event timestamp.
type LatencySummary struct {
	Received  int // events recorded
	Warmup    int // events left out because they were generated within the warm-up
	Bad       int // events without a parsable "timestamp"
	Count     int // events in the figures below
	Min       time.Duration
	P50       time.Duration
	P90       time.Duration
	P99       time.Duration
	P999      time.Duration
	Max       time.Duration
	Generated time.Duration // from the first to the last event timestamp counted
}

// Summarize computes the latency distribution, leaving out the events generated within warmup of the
// earliest timestamp seen.
func (r *Recorder) Summarize(warmup time.Duration) LatencySummary {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := LatencySummary{Received: len(r.recv)}
	ts := make([]time.Time, len(r.recv))
	var first time.Time
	for i, d := range r.data {
		t, err := EventTimestamp(d)
		if err != nil {
			s.Bad++
			continue
		}
		ts[i] = t
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	cut := first.Add(warmup)
	lat := make([]time.Duration, 0, len(ts))
	var lo, hi time.Time
	for i, t := range ts {
		if t.IsZero() {
			continue
		}
		if t.Before(cut) {
			s.Warmup++
			continue
		}
		if lo.IsZero() || t.Before(lo) {
			lo = t
		}
		if t.After(hi) {
			hi = t
		}
		lat = append(lat, r.recv[i].Sub(t))
	}
	slices.Sort(lat)
	s.Count = len(lat)
	if s.Count > 0 {
		s.Min, s.Max = lat[0], lat[len(lat)-1]
		s.P50, s.P90 = Percentile(lat, 50), Percentile(lat, 90)
		s.P99, s.P999 = Percentile(lat, 99), Percentile(lat, 99.9)
		s.Generated = hi.Sub(lo)
	}
	return s
}

// EventTimestamp returns the top-level "timestamp" field of a JSON event (RFC 3339 with optional
// fractional seconds).
func EventTimestamp(data []byte) (time.Time, error) {
	var v struct {
		Timestamp string `json:"timestamp"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return time.Time{}, err
	}
	if v.Timestamp == "" {
		return time.Time{}, errors.New(`no "timestamp" field`)
	}
	t, err := time.Parse(time.RFC3339Nano, v.Timestamp)
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp: %w", err)
	}
	return t, nil
}

// WriteCSV writes one line per recorded event, in the order received: the event's timestamp (RFC 3339),
// the time received (RFC 3339) and the latency in microseconds; events without a parsable timestamp are
// left out. It is for finding when slow events happened.
func (r *Recorder) WriteCSV(w io.Writer) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "timestamp,received,latency_us")
	for i, d := range r.data {
		t, err := EventTimestamp(d)
		if err != nil {
			continue
		}
		fmt.Fprintf(bw, "%s,%s,%.1f\n", t.Format(time.RFC3339Nano), r.recv[i].Format(time.RFC3339Nano),
			float64(r.recv[i].Sub(t).Nanoseconds())/1e3)
	}
	return bw.Flush()
}
