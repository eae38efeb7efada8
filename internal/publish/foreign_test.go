package publish

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// leaderWith returns a fenced publisher on nc whose lease, as Confirm reads it, is held while held says so.
func leaderWith(t *testing.T, nc *nats.Conn, layout layout.Streams, obs Observer, confirm func(context.Context) (bool, error)) *Publisher {
	t.Helper()
	p, err := New(nc, Config{Prefix: layout.Prefix, EventsStream: layout.Events(), DLQStream: layout.DLQ(),
		FenceSubject: layout.FenceSubject(), Window: 64, Timeout: 5 * time.Second, Logger: testLogger(t),
		Observer: obs, Confirm: confirm})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// foreignAck publishes what a JetStream acknowledgement aimed at subject by a client's reply subject would
// store there: a body such as {"stream":"TRACKING_REPORTS","seq":7}, no headers.
func foreignAck(t *testing.T, js jetstream.JetStream, subject string, seq int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
	defer cancel()
	if _, err := js.Publish(ctx, subject, fmt.Appendf(nil, `{"stream":"TRACKING_REPORTS","seq":%d}`, seq)); err != nil {
		t.Fatal(err)
	}
}

// TestForeignWritesOnFence: another client's messages on every fence subject (what a report producer in
// the bridge's own NATS account stores there by aiming JetStream's acknowledgements at them) do not end
// the term: the leader, finding no bridge's marker there and its lease still held, claims each subject
// again and goes on. Every event is stored exactly once, in fence order, every foreign write is counted,
// and none is left on the fence subjects. On one server and on an R3 stream.
func TestForeignWritesOnFence(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"server", "cluster"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			connect, layout, js, ctx := fenceBackend(t, backend, time.Minute)
			nc := connect()
			obs := &countingObserver{}
			var confirms atomic.Int64
			p := leaderWith(t, nc, layout, obs, func(context.Context) (bool, error) {
				confirms.Add(1)
				return true, nil
			})
			if err := p.Claim(ctx, "leader", []byte(`{"name":"leader"}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			const events = FenceWidth + 200
			attacker, _ := jetstream.New(connect())
			for i := range events {
				if i == 100 { // some events in, then a write on every fence subject
					for j := range FenceWidth {
						foreignAck(t, attacker, fenceSubject(layout.FenceSubject(), j), j)
					}
				}
				if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN")); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
			}
			if _, err := p.Resume(ctx); err != nil {
				t.Fatalf("Resume: %v", err)
			}
			stored := testutil.StreamContents(t, js, layout.Events())
			assertExactlyOnce(t, stored, events)
			checkFenceOrder(t, js, layout)
			if n := obs.foreign.Load(); n != FenceWidth {
				t.Errorf("%d foreign writes counted, want %d", n, FenceWidth)
			}
			if n := confirms.Load(); n < FenceWidth {
				t.Errorf("the lease was read %d times, want once per subject claimed again (%d)", n, FenceWidth)
			}
		})
	}
}

// TestForeignWriteThenTakeover: a foreign write on a fence subject tells a leader nothing about a takeover,
// so it must not let a former leader on. Three orders, each ending the former leader's term (ErrFenced)
// and leaving every event stored under its own leader's marker:
//   - the lease, read after the foreign write was found, says another holds it;
//   - another leader's markers, stored after the foreign write, are found instead of it;
//   - the worst race: the lease still reads as held, and another leader's markers land between that read
//     and the former leader's claim of the subject, which must then fail (it is conditional on the foreign
//     write still being the subject's last message).
func TestForeignWriteThenTakeover(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"lease lost", "markers first", "race", "race on a cluster"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			backend := "server"
			if order == "race on a cluster" {
				backend, order = "cluster", "race"
			}
			connect, layout, js, ctx := fenceBackend(t, backend, 100*time.Millisecond)
			nc := connect()
			second := fencedPublisher(t, connect(), layout, 64)
			var takeOver func()
			var tookOver atomic.Bool
			takeOver = func() {
				if tookOver.Swap(true) {
					return
				}
				if err := second.Claim(ctx, "second", []byte(`{"name":"second"}`)); err != nil {
					t.Error(err)
				}
			}
			obs := &countingObserver{}
			first := leaderWith(t, nc, layout, obs, func(context.Context) (bool, error) {
				switch order {
				case "lease lost":
					return false, nil
				case "race":
					takeOver() // after the lease was read as held, before the claim
				}
				return true, nil
			})
			if err := first.Claim(ctx, "first", []byte(`{"name":"first"}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := first.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if err := first.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := first.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			// The next events check the next subjects: foreign writes land there first.
			attacker, _ := jetstream.New(connect())
			for j := 5; j < 30; j++ {
				foreignAck(t, attacker, fenceSubject(layout.FenceSubject(), j), j)
			}
			if order == "markers first" {
				takeOver()
			}
			time.Sleep(200 * time.Millisecond) // past the duplicate window: only the fence can refuse now
			var fenced error
			for i := 10; i < 20 && fenced == nil; i++ {
				fenced = first.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN"))
			}
			if fenced == nil {
				_, fenced = first.Resume(ctx)
			}
			if !errors.Is(fenced, ErrFenced) {
				t.Fatalf("former leader's publish after the foreign write: %v, want ErrFenced", fenced)
			}
			if order != "lease lost" && !tookOver.Load() {
				t.Fatal("the second leader never claimed: the test proves nothing")
			}
			if order == "lease lost" {
				takeOver()
			}
			after, err := second.Resume(ctx)
			if err != nil {
				t.Fatal(err)
			}
			from := -1
			if after != "" {
				if _, err := fmt.Sscanf(after, "ev-%05d", &from); err != nil {
					t.Fatalf("second leader resumes after %q", after)
				}
			}
			for i := from + 1; i < 25; i++ {
				if err := second.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := second.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			// The ordered consumer deletes a read's earlier consumers in the background, and the reader
			// its last one: wait for the count to drop, well within the inactivity threshold (the backstop
			// that would hide a consumer left behind).
			if n := consumersAfter(ctx, t, js, layout.Events(), consumerIdle/3); n != 0 {
				t.Errorf("%d consumers left on the events stream by two terms' cursor reads, want none", n)
			}
			assertExactlyOnce(t, testutil.StreamContents(t, js, layout.Events()), 25)
			checkFenceOrder(t, js, layout)
		})
	}
}

// TestForeignFloodSwept: a client floods a fence subject that no event checks in the meantime, and the
// restart subject: the leader's upkeep (Run) removes what piled up, each subject holds one message again
// (the marker, or the directive's record), and the events stored meanwhile are all there, once.
func TestForeignFloodSwept(t *testing.T) {
	t.Parallel()
	ns := testutil.StartNATS(t, nil)
	layout := layout.Streams{Prefix: "tracking", DuplicateWindow: time.Minute, Replicas: 1}
	nc := ns.Connect()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(90*time.Second))
	defer cancel()
	if err := layout.Ensure(ctx, js, true, discard()); err != nil {
		t.Fatal(err)
	}
	obs := &countingObserver{}
	p := leaderWith(t, nc, layout, obs, func(context.Context) (bool, error) { return true, nil })
	if err := p.Claim(ctx, "leader", []byte(`{"name":"leader"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	rctx, stopRun := context.WithCancel(ctx)
	running := make(chan struct{})
	go func() { defer close(running); _ = p.Run(rctx) }()
	defer func() { stopRun(); <-running }()

	attacker := ns.Connect()
	const flood = 5000
	for i := range flood {
		for _, subject := range []string{fenceSubject(layout.FenceSubject(), 1000), restartSubject(layout.FenceSubject())} {
			if err := attacker.Publish(subject, fmt.Appendf(nil, `{"stream":"TRACKING_REPORTS","seq":%d}`, i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := attacker.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 100 { // events go on meanwhile; none checks subject 1000
		if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN")); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, layout.Events())
	if err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyState(t, 30*time.Second, "one message on each subject under the fence", func() (bool, string) {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(layout.FenceSubject()+".>"))
		if err != nil {
			return false, err.Error()
		}
		var piled []string
		for subject, n := range info.State.Subjects {
			if n > 1 {
				piled = append(piled, fmt.Sprintf("%s: %d", subject, n))
			}
		}
		return len(piled) == 0 && len(info.State.Subjects) == FenceWidth+1, fmt.Sprint(len(info.State.Subjects), " subjects; piled up: ", piled)
	})
	// The bridge counts a foreign write once JetStream acknowledged the marker that replaced it, a moment
	// after the stream shows the subject clean: wait for the count before stopping the upkeep, which would
	// abandon an acknowledgement still on its way.
	testutil.EventuallyState(t, 30*time.Second, "the fence subject's and the restart subject's foreign writes counted", func() (bool, string) {
		n := obs.foreign.Load()
		return n >= 2, fmt.Sprint(n, " counted")
	})
	stopRun() // the upkeep is done with them
	<-running
	assertExactlyOnce(t, testutil.StreamContents(t, js, layout.Events()), 100)
	checkFenceOrder(t, js, layout)
}

// consumersAfter returns the number of consumers on stream once it is 0, or when within has passed.
func consumersAfter(ctx context.Context, t *testing.T, js jetstream.JetStream, stream string, within time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		n := s.CachedInfo().State.Consumers
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestOwnMarkerWithoutAcknowledgement: a marker this term stored whose acknowledgement never came back (a
// publish that timed out on a busy server, stored all the same) is the term's own, not another leader's:
// the events that meet it go on, each stored once. A marker of another term under the same holder name
// (two bridges on one host) still ends the term.
func TestOwnMarkerWithoutAcknowledgement(t *testing.T) {
	t.Parallel()
	for _, term := range []string{"own", "another of the same name"} {
		t.Run(term, func(t *testing.T) {
			t.Parallel()
			connect, layout, js, ctx := fenceBackend(t, "server", time.Minute)
			p := leaderWith(t, connect(), layout, &countingObserver{}, func(context.Context) (bool, error) { return true, nil })
			if err := p.Claim(ctx, "vm", []byte(`{"name":"vm"}`)); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if err := p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN")); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := p.Resume(ctx); err != nil {
				t.Fatal(err)
			}
			markerTerm := p.fence.term
			if term != "own" {
				markerTerm = "another-term"
			}
			other, _ := jetstream.New(connect())
			for j := range FenceWidth {
				if _, err := other.PublishMsg(ctx, markerMsg(layout.FenceSubject(), j, p.fence.leader, markerTerm, nil)); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			const events = 200
			for i := 10; i < events && err == nil; i++ {
				err = p.Handle(ctx, ev(fmt.Sprintf("ev-%05d", i), "GATE_IN"))
			}
			if err == nil {
				_, err = p.Resume(ctx)
			}
			if term != "own" {
				if !errors.Is(err, ErrFenced) {
					t.Fatalf("after another term's markers under the same name: %v, want ErrFenced", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("after the term's own markers stored without acknowledgement: %v", err)
			}
			assertExactlyOnce(t, testutil.StreamContents(t, js, layout.Events()), events)
			checkFenceOrder(t, js, layout)
		})
	}
}
