package publish

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func TestAckResult(t *testing.T) {
	t.Parallel()
	status503 := nats.Header{"Status": {"503"}}
	for _, tc := range []struct {
		data string
		hdr  nats.Header
		want string // "" for a PubAck, else a part of the error
		dup  bool
		seq  uint64
	}{
		{data: `{"stream":"TRACKING_EVENTS","seq":12}`, seq: 12},
		{data: `{"stream":"TRACKING_EVENTS","seq":12,"duplicate":true}`, dup: true, seq: 12},
		{data: `{"stream":"S","seq":"12"}`},                 // not a number: an acknowledgement without a sequence
		{data: `{"stream":"S","seq":18446744073709551616}`}, // beyond a uint64: the same
		{data: `{"stream":"S","SEQ":3,"seq":null}`, seq: 3}, // case folded, null leaving it as it is
		{data: `{"stream":"TRACKING_EVENTS","seq":12,"duplicate":false}`, seq: 12},
		{data: `{"stream":"S","seq":1,"duplicate":true,"duplicate":false}`, seq: 1}, // the last one counts
		{data: `{"stream":"S","seq":1,"duplicate":null}`, seq: 1},
		{data: `{"stream":"S","seq":1,"duplicate":1}`, want: errBadAck.Error()},
		{data: `{"stream":"S", "duplicate":true}`, dup: true}, // decoded
		{data: `{"stream":"error","seq":1}`, seq: 1},
		{data: `{"seq":1,"stream":"S","domain":"hub"}`, seq: 1},
		{data: `{"error":{"code":503,"err_code":10077,"description":"maximum messages exceeded"},"stream":"S","seq":0}`,
			want: "maximum messages exceeded"},
		{data: `{"stream":"S","error":{"code":400,"description":"bad"}}`, want: "bad"},
		{data: `{"stream":"S","Error":{"code":400,"description":"case"}}`, want: "case"}, // encoding/json folds case
		{data: `{"stream":"S","stream":""}`, want: errBadAck.Error()},                    // the last one counts
		{data: `{"stream":"S", "seq":1}`, seq: 1},                                        // not the server's spacing: decoded
		{data: `{}`, want: errBadAck.Error()},
		{data: `{"stream":""}`, want: errBadAck.Error()},
		{data: `not json`, want: errBadAck.Error()},
		{data: `{"stream":"S"`, want: errBadAck.Error()},
		{hdr: status503, want: jetstream.ErrNoStreamResponse.Error()},
		{want: errBadAck.Error()},
	} {
		seq, dup, err := ackResult(&nats.Msg{Data: []byte(tc.data), Header: tc.hdr})
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("ackResult(%q, %v) = %v, want %q", tc.data, tc.hdr, err, tc.want)
		}
		if dup != tc.dup || seq.decode() != tc.seq {
			t.Errorf("ackResult(%q): duplicate %v, seq %d; want %v, %d", tc.data, dup, seq.decode(), tc.dup, tc.seq)
		}
	}
}

// TestAcksLateAnswer: an answer for an entry that was settled otherwise (timed out, sent again) and whose
// slot now holds a later entry changes nothing, and each entry is told to the observer once.
func TestAcksLateAnswer(t *testing.T) {
	t.Parallel()
	obs := &countingObserver{}
	a := &acks{prefix: "_INBOX.test.", obs: obs, slots: make([]slot, 4), errs: map[uint64]error{},
		wake: make(chan struct{}, 1)}
	ok := func(seq uint64) *nats.Msg {
		return &nats.Msg{Subject: a.reply(seq), Data: []byte(`{"stream":"S","seq":1}`)}
	}
	a.start(1, "GATE_IN", time.Now(), time.Time{}, nil)
	a.fail(1, errAckTimeout)
	if done, err := a.outcome(1); !done || !errors.Is(err, errAckTimeout) {
		t.Fatalf("outcome(1) = %v, %v after a timeout", done, err)
	}
	a.handle(ok(1)) // late: the entry is failed already
	if obs.published.Load() != 0 {
		t.Fatal("a late answer for a failed entry was counted")
	}
	a.start(5, "ARRIVED", time.Now(), time.Time{}, nil) // same slot as 1
	a.handle(ok(1))
	if done, _ := a.outcome(5); done {
		t.Fatal("an answer for seq 1 settled seq 5 in the same slot")
	}
	a.handle(ok(5))
	if done, err := a.outcome(5); !done || err != nil {
		t.Fatalf("outcome(5) = %v, %v", done, err)
	}
	a.handle(ok(5)) // a second answer (a redelivery) is not counted again
	a.fail(5, errAckTimeout)
	if done, err := a.outcome(5); !done || err != nil || obs.published.Load() != 1 {
		t.Fatalf("outcome(5) = %v, %v, published %d: want acked once", done, err, obs.published.Load())
	}
	a.handle(&nats.Msg{Subject: a.prefix + "not-base-36!", Data: []byte(`{"stream":"S"}`)}) // ignored
}

// TestAcksFromServer: replies from a real JetStream, a PubAck and an error, reach the right slots.
func TestAcksFromServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if _, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "LIMITED", Subjects: []string{"lim.>"},
		MaxMsgs: 1, Discard: jetstream.DiscardNew}); err != nil {
		t.Fatal(err)
	}
	obs := &countingObserver{}
	a, err := newAcks(e.nc, 8, obs)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	for seq := uint64(0); seq < 2; seq++ {
		a.start(seq, "X", time.Now(), time.Time{}, nil)
		if err := e.nc.PublishMsg(&nats.Msg{Subject: "lim.x", Reply: a.reply(seq), Data: []byte("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	settled := func(seq uint64) bool { return a.slot(seq).state.Load()&3 != inFlight }
	testutil.Eventually(t, 5*time.Second, "both answered", func() bool { return settled(0) && settled(1) })
	if done, err := a.outcome(0); !done || err != nil {
		t.Errorf("first publish: %v, %v; want acknowledged", done, err)
	}
	var apiErr *jetstream.APIError
	if done, err := a.outcome(1); !done || !errors.As(err, &apiErr) || !strings.Contains(err.Error(), "maximum messages") {
		t.Errorf("second publish: %v, %v; want the stream's limit error", done, err)
	}
	if obs.published.Load() != 1 {
		t.Errorf("published %d, want 1", obs.published.Load())
	}
}

// FuzzAckResult checks the fast path of ackResult against decoding every reply in full.
func FuzzAckResult(f *testing.F) {
	for _, s := range []string{`{"stream":"S","seq":1}`, `{"stream":"S","seq":1,"duplicate":true}`,
		`{"stream":"S","duplicate":1}`, `{"stream":"S","duplicate":true,"duplicate":false}`, `{"stream":"error","seq":1}`, `{"error":{"code":503,"description":"x"},"stream":"S","seq":0}`,
		`{"stream":"S","error":{"code":400}}`, `{"stream":"S"}}`, `{"stream":"S"`, `{}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		seq, dup, err := ackResult(&nats.Msg{Data: data})
		var r struct {
			Error     *jetstream.APIError `json:"error"`
			Stream    string              `json:"stream"`
			Duplicate bool                `json:"duplicate"`
		}
		want := len(data) > 0 && json.Unmarshal(data, &r) == nil && r.Error == nil && r.Stream != ""
		if got := err == nil; got != want || got && dup != r.Duplicate {
			t.Fatalf("ackResult(%q) says acknowledged=%v duplicate=%v, a full decode %v %v", data, got, dup, want, r.Duplicate)
		}
		var n struct {
			Seq uint64 `json:"seq"`
		}
		if err == nil && json.Unmarshal(data, &n) == nil && seq.decode() != n.Seq {
			t.Fatalf("ackResult(%q) says seq %d, a full decode %d", data, seq.decode(), n.Seq)
		}
	})
}

// BenchmarkAckResult measures reading a typical PubAck: the fast path, and the full decode it avoids.
func BenchmarkAckResult(b *testing.B) {
	m := &nats.Msg{Data: []byte(`{"stream":"TRACKING_EVENTS","seq":1234567}`)}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := ackResult(m); err != nil {
				b.Fatal("not a PubAck")
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r struct {
				Error  *jetstream.APIError `json:"error"`
				Stream string              `json:"stream"`
			}
			if err := json.Unmarshal(m.Data, &r); err != nil || r.Stream == "" {
				b.Fatal("not a PubAck")
			}
		}
	})
}
