package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// stored is one message of the events stream, fence markers included.
type stored struct {
	seq     uint64
	subject string
	header  nats.Header
	data    []byte
}

// readStream returns every message of the events stream, fence markers included, in sequence order. It
// reads again while the stream does not answer (a cluster electing a leader, a client reconnecting).
func (r *rig) readStream() []stored {
	r.t.Helper()
	var msgs []stored
	testutil.EventuallyState(r.t, 60*time.Second, "the events stream read", func() (bool, string) {
		m, err := r.tryReadStream()
		msgs = m
		return err == nil, fmt.Sprint(err)
	})
	return msgs
}

// tryReadStream is readStream for a stream that may not answer yet (a cluster electing a leader).
func (r *rig) tryReadStream() ([]stored, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(90*time.Second))
	defer cancel()
	s, err := r.js.Stream(ctx, eventsStream)
	if err != nil {
		return nil, err
	}
	last := s.CachedInfo().State.LastSeq
	if last == 0 {
		return nil, nil
	}
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, err
	}
	var out []stored
	for len(out) == 0 || out[len(out)-1].seq < last {
		// No more than remain, so that the fetch returns as soon as they arrived.
		remain := last
		if len(out) > 0 {
			remain -= out[len(out)-1].seq
		}
		batch, err := c.Fetch(int(min(1000, remain)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return nil, err
			}
			out = append(out, stored{seq: md.Sequence.Stream, subject: m.Subject(), header: m.Headers(), data: m.Data()})
			n++
		}
		if err := batch.Error(); err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, fmt.Errorf("events stream: read %d messages of %d, then nothing", len(out), last)
		}
	}
	return out, nil
}

// term is one leader's period as the events stream records it. Each fence subject keeps only its newest
// marker (a rollup), so a former term shows only in the checks its events carry: the events that check
// one set of markers, which all precede every event of the next set (a leader that stores its markers
// again within its term, ahead of the stream's limits, begins a new one here). The newest markers, still
// stored, name their leader; a term they begin without events of its own is listed too.
type term struct {
	first  uint64 // the sequence of its first event; of its lowest marker for the newest markers' term without events
	check  fenceCheck
	leader string // Bridge-Leader of the newest markers: the holder's name, or "operator"; "" for earlier terms
	holder holder // the newest markers' first body, for a leader's
	// markers still stored, each the newest on its subject: FenceWidth for the newest term, 0 for earlier ones
	markers int
	events  int
}

// fenceCheck is the fence check of an event: the fence subject and the marker sequence it names.
type fenceCheck struct {
	subject string
	seq     uint64
}

// checkFencing checks that every event in msgs was stored under the newest marker on its fence subject
// at the time: its Nats-Expected-Last-Subject-Sequence names a marker on the subject that its
// Nats-Expected-Last-Subject-Sequence-Subject names (one of P.leader.<n>) stored before it, and when a
// newer marker has replaced that one since, the event came before the newer marker. JetStream checks
// this at store time; the test checks that the publisher asked for it on every event, and that the
// server kept to it across every failover. It also checks that each fence subject holds one marker and
// the restart subject at most one message (the rollups). It returns the terms in order.
func checkFencing(t *testing.T, msgs []stored) []term {
	t.Helper()
	latest := map[string]stored{} // fence subject → its marker
	present := map[uint64]bool{}
	bad, directives := 0, 0
	for _, m := range msgs {
		present[m.seq] = true
		switch {
		case m.subject == fenceBase+".restart":
			if directives++; directives > 1 {
				t.Errorf("another message on %s at %d: the directive's rollup failed", m.subject, m.seq)
			}
		case testutil.IsFence(m.subject):
			if prev, ok := latest[m.subject]; ok {
				if bad++; bad <= 20 {
					t.Errorf("markers on %s at %d and %d: the marker's rollup failed", m.subject, prev.seq, m.seq)
				}
			}
			latest[m.subject] = m
		}
	}
	var terms []term
	for _, m := range msgs {
		if testutil.IsFence(m.subject) {
			continue
		}
		id := m.header.Get("Nats-Msg-Id")
		c := fenceCheck{subject: m.header.Get(jetstream.ExpectedLastSubjSeqSubjHeader)}
		c.seq, _ = strconv.ParseUint(m.header.Get(jetstream.ExpectedLastSubjSeqHeader), 10, 64)
		marker, ok := latest[c.subject]
		switch {
		case !ok || c.seq == 0 || c.seq >= m.seq:
			if bad++; bad <= 20 {
				t.Errorf("event %s at sequence %d stored under the fence %s=%d, %s=%q; the marker on that subject is at %d",
					id, m.seq, jetstream.ExpectedLastSubjSeqHeader, c.seq, jetstream.ExpectedLastSubjSeqSubjHeader,
					c.subject, marker.seq)
			}
			continue
		case c.seq != marker.seq && (m.seq > marker.seq || present[c.seq]):
			if bad++; bad <= 20 {
				t.Errorf("event %s at sequence %d checks the marker at %d on %s, but the marker at %d (newer) was stored "+
					"before it, or %d is no replaced marker", id, m.seq, c.seq, c.subject, marker.seq, c.seq)
			}
			continue
		}
		// The markers an event checks were all stored before the first event of their term.
		if len(terms) == 0 || c.seq > terms[len(terms)-1].first {
			terms = append(terms, term{first: m.seq, check: c})
		}
		terms[len(terms)-1].events++
	}
	if bad > 20 {
		t.Errorf("... %d events or markers in all against the fence", bad)
	}
	if len(latest) > 0 {
		newest := term{first: math.MaxUint64, markers: len(latest)}
		for _, m := range latest {
			newest.first = min(newest.first, m.seq)
		}
		first := latest[fenceBase+".0"]
		newest.leader = first.header.Get("Bridge-Leader")
		_ = json.Unmarshal(first.data, &newest.holder)
		if n := len(terms); n > 0 && latest[terms[n-1].check.subject].seq == terms[n-1].check.seq {
			terms[n-1].leader, terms[n-1].holder, terms[n-1].markers = newest.leader, newest.holder, newest.markers
		} else {
			terms = append(terms, newest)
		}
		if len(latest) != publish.FenceWidth {
			t.Errorf("%d fence subjects hold a marker, want %d", len(latest), publish.FenceWidth)
		}
	}
	if directives > 0 {
		t.Logf("%d message on %s.restart (a directive, or its record as taken)", directives, fenceBase)
	}
	return terms
}

// logTerms logs the terms the events stream records.
func logTerms(t *testing.T, terms []term) {
	t.Helper()
	var b strings.Builder
	for _, tm := range terms {
		fmt.Fprintf(&b, "  from %6d  %6d events  checks %s=%-6d  %d markers stored  %-8s pid %-7d epoch %d\n",
			tm.first, tm.events, tm.check.subject, tm.check.seq, tm.markers, tm.leader, tm.holder.PID, tm.holder.Epoch)
	}
	t.Logf("terms (sets of fence markers and the events stored under each):\n%s", b.String())
}

// emitted returns the ids of the simulator's event log for user, in log order: each generated event and
// each accepted report's event, from sequence 1 up to the first sequence that is neither (yet). Generated
// events map to their data, reports to nil.
func emitted(s *sim.Server) (ids []string, data map[string][]byte) {
	reported := map[string]bool{}
	for _, rep := range s.Reports(user) {
		reported[rep.EventID] = true
	}
	data = map[string][]byte{}
	for seq := 1; ; seq++ {
		id, d := s.GeneratedEvent(user, seq)
		switch {
		case id != "":
			data[id] = d
		case reported[sim.EventID(seq)]:
			id = sim.EventID(seq)
		default:
			return ids, data
		}
		ids = append(ids, id)
	}
}

// checkExactlyOnce checks that the events stream holds each of ids exactly once (a generated event with
// its data byte for byte), and nothing else but ids of the simulator's log beyond them (stored after the
// list was taken), each once. It returns the number of events checked.
func checkExactlyOnce(t *testing.T, msgs []stored, ids []string, data map[string][]byte) int {
	t.Helper()
	count := map[string]int{}
	var extra []string
	events := 0
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	problems := 0
	report := func(format string, args ...any) {
		if problems++; problems <= 20 {
			t.Errorf(format, args...)
		}
	}
	for _, m := range msgs {
		if testutil.IsFence(m.subject) {
			continue
		}
		events++
		id := m.header.Get("Nats-Msg-Id")
		if count[id]++; count[id] == 2 {
			report("event %s stored twice (again at sequence %d)", id, m.seq)
		}
		if !want[id] {
			extra = append(extra, id)
		} else if d, ok := data[id]; ok && string(d) != string(m.data) {
			report("event %s stored as %.80q..., want %.80q...", id, m.data, d)
		}
	}
	missing := 0
	for _, id := range ids {
		if count[id] == 0 {
			if missing++; missing <= 10 {
				report("event %s missing", id)
			}
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d events missing", missing, len(ids))
	}
	if problems > 20 {
		t.Errorf("... %d problems in all", problems)
	}
	// Stored after the list was taken: they must follow it in the log.
	last := ""
	if len(ids) > 0 {
		last = ids[len(ids)-1]
	}
	for _, id := range extra {
		if !strings.HasPrefix(id, "ev-") || id <= last {
			t.Errorf("event %s stored, which the simulator did not emit", id)
		}
	}
	return events
}

// verify waits until the events stream holds every event the simulator's log holds now, then stops
// every bridge with SIGTERM (each must exit 0) and checks the stream: every event exactly once, every
// event under the fence of its leader. It returns the terms the stream records.
func (r *rig) verify(within time.Duration) []term {
	r.t.Helper()
	ids, data := emitted(r.up.Sim())
	r.t.Logf("the simulator's log holds %d events", len(ids))
	r.waitEvents(len(ids), within)
	// Every id of the list stored, not only as many: a duplicate would make up for a missing one.
	testutil.EventuallyState(r.t, within, "every emitted event stored", func() (bool, string) {
		msgs, err := r.tryReadStream()
		if err != nil {
			return false, err.Error()
		}
		have := map[string]bool{}
		for _, m := range msgs {
			have[m.header.Get("Nats-Msg-Id")] = true
		}
		var missing []string
		for _, id := range ids {
			if !have[id] {
				missing = append(missing, id)
			}
		}
		return len(missing) == 0, fmt.Sprintf("%d missing, first %v", len(missing), missing[:min(10, len(missing))])
	})
	r.phase("every emitted event stored; stopping the bridges")
	for _, b := range r.bridges {
		if b.pause {
			b.signal(syscall.SIGCONT)
		}
		if b.running() {
			b.stop()
		}
	}
	r.phase("checking the stream")
	msgs := r.readStream()
	terms := checkFencing(r.t, msgs)
	n := checkExactlyOnce(r.t, msgs, ids, data)
	logTerms(r.t, terms)
	r.t.Logf("events stream: %d events, %d terms of leadership; %d emitted events checked", n, len(terms), len(ids))
	return terms
}

// checkStaleWriteRefused publishes an event with a former leader's fence (the check of the last former
// term's first event, whose marker a newer one replaced), as that leader would after the takeover, and
// checks that JetStream refuses it for the fence (10071) and that the stream does not change.
func (r *rig) checkStaleWriteRefused(terms []term) {
	t := r.t
	t.Helper()
	var former []term // terms with events whose markers were replaced since
	for _, tm := range terms[:max(len(terms)-1, 0)] {
		if tm.events > 0 {
			former = append(former, tm)
		}
	}
	if len(former) == 0 {
		t.Fatalf("%d terms: no former leader's events", len(terms))
	}
	stale := former[len(former)-1]
	var before uint64
	testutil.Eventually(t, 30*time.Second, "the events stream answers", func() bool {
		last, err := r.lastSeq()
		before = last
		return err == nil
	})
	msg := &nats.Msg{Subject: "tracking.events.GATE_IN", Data: []byte(`{"id":"stale-write","type":"GATE_IN"}`),
		Header: nats.Header{
			"Nats-Msg-Id":                           {"stale-write"},
			jetstream.ExpectedLastSubjSeqHeader:     {strconv.FormatUint(stale.check.seq, 10)},
			jetstream.ExpectedLastSubjSeqSubjHeader: {stale.check.subject},
		}}
	// Sent again while JetStream gives no answer at all (no responders, a timeout), as a producer would.
	var err error
	var api *jetstream.APIError
	testutil.Eventually(t, 30*time.Second, "JetStream answers the stale write", func() bool {
		ctx, cancel := opCtx()
		defer cancel()
		_, err = r.js.PublishMsg(ctx, msg)
		return err == nil || errors.As(err, &api)
	})
	if api == nil || api.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Errorf("an event with the fence of the term from %d (%s=%d): %v, want refused with error code %d", stale.first,
			stale.check.subject, stale.check.seq, err, jetstream.JSErrCodeStreamWrongLastSequence)
	}
	if after, err := r.lastSeq(); err != nil || after != before {
		t.Errorf("events stream's last sequence %d after the stale write (%v), %d before", after, err, before)
	}
}
