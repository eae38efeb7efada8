package failover

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
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

// term is one leader's period as the events stream records it: its markers (or an operator's, for a
// restart) and the events stored under them.
type term struct {
	first   uint64 // the sequence of its marker on P.leader.0
	leader  string // Bridge-Leader: the holder's name, or "operator" for a restart
	holder  holder // the first marker's body, for a leader's markers
	markers int
	events  int
}

// checkFencing checks that every event in msgs was stored under the newest marker on its fence subject:
// its Nats-Expected-Last-Subject-Sequence names the sequence of the last marker on the subject that its
// Nats-Expected-Last-Subject-Sequence-Subject names, one of P.leader.<n>. JetStream checks this at store
// time; the test checks that the publisher asked for it on every event, and that the server kept to it
// across every failover. It returns the terms in order (a term begins with a marker on P.leader.0).
func checkFencing(t *testing.T, msgs []stored) []term {
	t.Helper()
	var terms []term
	last := map[string]uint64{} // fence subject → its newest marker's sequence
	termOf := map[uint64]int{}  // marker sequence → term
	bad, directives := 0, 0
	for _, m := range msgs {
		switch {
		case m.subject == fenceBase+".restart":
			directives++
			continue
		case testutil.IsFence(m.subject):
			if m.subject == fenceBase+".0" {
				tm := term{first: m.seq, leader: m.header.Get("Bridge-Leader")}
				_ = json.Unmarshal(m.data, &tm.holder)
				terms = append(terms, tm)
			}
			if len(terms) == 0 {
				t.Errorf("marker on %s at sequence %d before any on %s.0", m.subject, m.seq, fenceBase)
				continue
			}
			terms[len(terms)-1].markers++
			last[m.subject] = m.seq
			termOf[m.seq] = len(terms) - 1
			continue
		}
		id := m.header.Get("Nats-Msg-Id")
		fenceSubj := m.header.Get(jetstream.ExpectedLastSubjSeqSubjHeader)
		fenceSeq := m.header.Get(jetstream.ExpectedLastSubjSeqHeader)
		want, ok := last[fenceSubj]
		if !ok || !testutil.IsFence(fenceSubj) || fenceSeq != strconv.FormatUint(want, 10) {
			if bad++; bad <= 20 {
				t.Errorf("event %s at sequence %d stored under the fence %s=%q, %s=%q; the last marker on that subject "+
					"before it is at %d", id, m.seq, jetstream.ExpectedLastSubjSeqSubjHeader, fenceSubj,
					jetstream.ExpectedLastSubjSeqHeader, fenceSeq, want)
			}
			continue
		}
		terms[termOf[want]].events++
	}
	if bad > 20 {
		t.Errorf("... %d events stored under a fence other than the last marker's", bad)
	}
	for i, tm := range terms {
		if tm.markers != publish.FenceWidth {
			t.Errorf("term %d (first marker at %d) has %d markers, want %d", i, tm.first, tm.markers, publish.FenceWidth)
		}
	}
	if directives > 0 {
		t.Logf("%d messages on %s.restart (directives, and their records as taken)", directives, fenceBase)
	}
	return terms
}

// logTerms logs the terms the events stream records.
func logTerms(t *testing.T, terms []term) {
	t.Helper()
	var b strings.Builder
	for _, tm := range terms {
		fmt.Fprintf(&b, "  markers from %6d  %-8s pid %-7d epoch %-5d %6d events\n", tm.first, tm.leader, tm.holder.PID,
			tm.holder.Epoch, tm.events)
	}
	t.Logf("terms (fence markers and the events stored under each):\n%s", b.String())
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

// checkStaleWriteRefused publishes an event with a former leader's fence (the second newest leader's
// marker on P.leader.0), as that leader would after the takeover, and checks that JetStream refuses it for
// the fence (10071) and that the stream does not change.
func (r *rig) checkStaleWriteRefused(terms []term) {
	t := r.t
	t.Helper()
	var leaders []term
	for _, tm := range terms {
		if tm.leader != "operator" {
			leaders = append(leaders, tm)
		}
	}
	if len(leaders) < 2 {
		t.Fatalf("%d leaders' terms: no former leader", len(leaders))
	}
	stale := leaders[len(leaders)-2]
	var before uint64
	testutil.Eventually(t, 30*time.Second, "the events stream answers", func() bool {
		last, err := r.lastSeq()
		before = last
		return err == nil
	})
	msg := &nats.Msg{Subject: "tracking.events.GATE_IN", Data: []byte(`{"id":"stale-write","type":"GATE_IN"}`),
		Header: nats.Header{
			"Nats-Msg-Id":                           {"stale-write"},
			jetstream.ExpectedLastSubjSeqHeader:     {strconv.FormatUint(stale.first, 10)},
			jetstream.ExpectedLastSubjSeqSubjHeader: {fenceBase + ".0"},
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
		t.Errorf("an event with the fence of the term at marker %d: %v, want refused with error code %d", stale.first,
			err, jetstream.JSErrCodeStreamWrongLastSequence)
	}
	if after, err := r.lastSeq(); err != nil || after != before {
		t.Errorf("events stream's last sequence %d after the stale write (%v), %d before", after, err, before)
	}
}
