package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// cursorShow is the JSON of `bridge cursor show -json`.
type cursorShow struct {
	Stream      string  `json:"stream"`
	ResumeAfter string  `json:"resume_after"`
	LastEvent   string  `json:"last_event"`
	Holder      *holder `json:"holder"`
}

// command runs the bridge binary with args in b's configuration, and returns its output; a non-zero
// exit fails the test. Its hold on the lease (`cursor restart`) lasts longer than the bridges' short TTL:
// a loaded machine has taken more than those 2 s to store the markers and the directive, and the command
// then withdraws its directive and fails (ErrRestartWithdrawn); it releases the lease as soon as it is done.
func (b *bridge) command(args ...string) string {
	t := b.r.t
	t.Helper()
	start := time.Now()
	env := maps.Clone(b.env)
	env["BRIDGE_LEASE_TTL"] = "20s"
	p := testutil.StartProcess(t, nil, b.r.bin, args, env)
	exited, err := p.Wait(60 * time.Second)
	t.Logf("bridge %s took %v", strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	if !exited || err != nil {
		t.Fatalf("bridge %s: exited %v, %v; output:\n%s", strings.Join(args, " "), exited, err, p.Out.String())
	}
	return p.Out.String()
}

// TestCursorShowAndRestart runs `bridge cursor show` and `bridge cursor restart -after ID` against two
// running bridges on one server, with a finite upstream log of 400 events all stored. show prints the
// resume point (the last event) and the lease's holder. restart makes the leader step down and the next
// leader resume after the id: the simulator replays the 100 events after it. Within the duplicate
// window JetStream deduplicates the replay (the stream is unchanged; the new leader counts 100
// duplicates); past it the replay is stored again, each of the 100 events once more, after the restart
// marker.
func TestCursorShowAndRestart(t *testing.T) {
	t.Parallel()
	const n, after = 400, 300
	for _, tc := range []struct {
		name   string
		window string
		stored bool // the replay is stored again
	}{
		{"within the duplicate window", "2m", false},
		{"past the duplicate window", "1s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ns := testutil.StartNATS(t, nil)
			r := newRig(t, sim.Options{EventRate: -1, EventLimit: n}, ns.Connect(),
				map[string]string{"BRIDGE_DUPLICATE_WINDOW": tc.window})
			r.addBridge("a", ns.URL(), false)
			r.addBridge("b", ns.URL(), false)
			leader := r.waitLeader(30*time.Second, nil)
			r.phase("bridge %s leads", leader.name)
			r.waitEvents(n, 30*time.Second)
			r.phase("%d events stored", n)
			last := sim.EventID(n)
			testutil.Eventually(t, 30*time.Second, "the leader's resume point is the last event", func() bool {
				st, err := leader.status()
				return err == nil && st.Stream.ResumeAfter == last
			})
			st, err := leader.status()
			if err != nil {
				t.Fatal(err)
			}

			// show: the resume point and the holder, as text and as JSON. The resume point is what the
			// newest event names in Bridge-Resume-After: after a burst, older than the last event (the
			// next leader skips the events stored beyond it).
			point := r.tailResumeAfter()
			t.Logf("the newest event names %s as its resume point; the leader's /status %s", point, last)
			out := leader.command("cursor", "show")
			for _, want := range []string{
				"stream:       TRACKING_EVENTS\n",
				"resume after: " + shownPoint(point) + "\n",
				"last event:   " + last + "\n",
				fmt.Sprintf("leader:       %s (pid %d, instance %s, epoch %d)\n", st.Lease.Self.Name, leader.proc.PID(),
					st.Lease.Self.Instance, st.Lease.Holder.Epoch),
			} {
				if !strings.Contains(out, want) {
					t.Errorf("cursor show printed\n%s\nwant a line %q", out, want)
				}
			}
			var cs cursorShow
			if err := json.Unmarshal([]byte(leader.command("cursor", "show", "-json")), &cs); err != nil {
				t.Fatal(err)
			}
			if cs.Stream != eventsStream || cs.ResumeAfter != point || cs.LastEvent != last || cs.Holder == nil ||
				cs.Holder.PID != leader.proc.PID() || cs.Holder.Instance != st.Lease.Self.Instance {
				t.Errorf("cursor show -json = %+v, want stream %s, resume after %s, last event %s, holder pid %d instance %s",
					cs, eventsStream, point, last, leader.proc.PID(), st.Lease.Self.Instance)
			}

			if tc.stored {
				// Past the duplicate window (and a second more) for the newest event stored.
				testutil.Eventually(t, 30*time.Second, "the stored events are older than the duplicate window", func() bool {
					return time.Since(r.lastStored()) > dupWindow+time.Second
				})
			}
			dups := map[*bridge]uint64{}
			for _, b := range r.bridges {
				s, err := b.status()
				if err != nil {
					t.Fatal(err)
				}
				dups[b] = s.Stream.Duplicates
			}

			// restart: the leader steps down, the next one resumes after the id.
			r.phase("cursor restart -after %s", sim.EventID(after))
			from := time.Now()
			out = leader.command("cursor", "restart", "-after", sim.EventID(after))
			if !strings.Contains(out, "restart directive stored on tracking.leader.restart at sequence") ||
				!strings.Contains(out, fmt.Sprintf("the leader %s (pid %d, epoch %d) stepped down",
					st.Lease.Self.Name, leader.proc.PID(), st.Lease.Holder.Epoch)) {
				t.Errorf("cursor restart printed %q", out)
			}
			var next *bridge
			testutil.EventuallyState(t, 30*time.Second, "a new term after the restart marker", func() (bool, string) {
				var state []string
				for _, b := range r.bridges {
					s, err := b.status()
					state = append(state, fmt.Sprintf("%s: %+v %v", b.name, s, err))
					if err == nil && s.Role == "leader" && s.Lease.Holder != nil && s.Lease.Holder.Epoch > st.Lease.Holder.Epoch {
						next = b
					}
				}
				return next != nil, strings.Join(state, "\n")
			})
			r.measure(fmt.Sprintf("cursor restart: next leader (%s)", next.name), time.Since(from))
			want := n
			if tc.stored {
				want += n - after
			}
			testutil.EventuallyState(t, 30*time.Second, "the replay after the restart point", func() (bool, string) {
				s, err := next.status()
				c, cerr := r.events()
				return err == nil && cerr == nil && s.Stream.ResumeAfter == last && c == want &&
						(tc.stored || s.Stream.Duplicates-dups[next] == n-after),
					fmt.Sprintf("%d events, status %+v %v", c, s, err)
			})
			if !tc.stored {
				s, _ := next.status()
				t.Logf("the new leader %s counted %d duplicates (the replay of %d events)", next.name,
					s.Stream.Duplicates-dups[next], n-after)
			}
			r.measure("cursor restart: the replay stored", time.Since(from))
			if tc.stored {
				point = r.tailResumeAfter()
				out = next.command("cursor", "show")
				if !strings.Contains(out, "resume after: "+shownPoint(point)+"\n") || !strings.Contains(out, fmt.Sprintf("(pid %d,", next.proc.PID())) {
					t.Errorf("cursor show after the restart printed\n%s\nwant resume after %s, leader pid %d", out, point, next.proc.PID())
				}
			}

			r.phase("stopping the bridges")
			for _, b := range r.bridges {
				b.stop()
			}
			r.phase("checking the stream")
			msgs := r.readStream()
			terms := checkFencing(t, msgs)
			logTerms(t, terms)
			// The restart directive, taken by the next leader (a rollup keeps only that record): the replay
			// it caused follows it.
			var restart *stored
			for i, m := range msgs {
				if m.subject == fenceBase+".restart" {
					restart = &msgs[i]
				}
			}
			if restart == nil || restart.header.Get("Bridge-Restart") != "taken" {
				t.Fatalf("no restart directive recorded as taken on %s.restart: %+v", fenceBase, restart)
			}
			count := map[string]int{}
			for _, m := range msgs {
				if testutil.IsFence(m.subject) {
					continue
				}
				id := m.header.Get("Nats-Msg-Id")
				count[id]++
				if count[id] == 2 && m.seq < restart.seq {
					t.Errorf("event %s stored again at %d, before the restart directive was taken at %d", id, m.seq, restart.seq)
				}
			}
			for seq := 1; seq <= n; seq++ {
				wantN := 1
				if tc.stored && seq > after {
					wantN = 2
				}
				if id := sim.EventID(seq); count[id] != wantN {
					t.Errorf("event %s stored %d times, want %d", id, count[id], wantN)
				}
			}
			if len(count) != n {
				t.Errorf("%d distinct events stored, want %d", len(count), n)
			}
			r.summary()
		})
	}
}

// lastStored returns when the events stream's last message was stored (the zero time when it cannot be
// read).
func (r *rig) lastStored() time.Time {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := r.js.Stream(ctx, eventsStream)
	if err != nil {
		return time.Time{}
	}
	m, err := s.GetMsg(ctx, s.CachedInfo().State.LastSeq)
	if err != nil {
		return time.Time{}
	}
	return m.Time
}

// shownPoint is a resume point as `bridge cursor show` prints it.
func shownPoint(after string) string {
	if after == "" {
		return "(the upstream's beginning)"
	}
	return after
}

// tailResumeAfter returns the Bridge-Resume-After of the newest event in the events stream (fence
// markers passed over): the point a new leader resumes after, as `bridge cursor show` reads it.
func (r *rig) tailResumeAfter() string {
	r.t.Helper()
	msgs := r.readStream()
	for i := len(msgs) - 1; i >= 0; i-- {
		if !testutil.IsFence(msgs[i].subject) {
			return msgs[i].header.Get("Bridge-Resume-After")
		}
	}
	return ""
}

// TestCursorRestartAppliesOnce: a restart directive (`bridge cursor restart`) is for the next leader. Here
// the replay it causes is deduplicated entirely (every replayed event is within the duplicate window of 8
// s), so no event follows the directive in the stream. Later, past the duplicate window, every bridge stops
// and a new one starts: it must resume after what the stream holds, not carry out the restart a second
// time, which would store the replayed events again.
func TestCursorRestartAppliesOnce(t *testing.T) {
	t.Parallel()
	const n, after = 400, 300
	ns := testutil.StartNATS(t, nil)
	// Long enough for the restart's replay to come within it, short enough to wait for. (Shrinking a
	// stream's window after the fact is no substitute: nats-server 2.15.2 resets its purge timer before it
	// takes the new window, so the purge may run with the old one and keep every id for its length.)
	const window = 8 * time.Second
	r := newRig(t, sim.Options{EventRate: -1, EventLimit: n}, ns.Connect(),
		map[string]string{"BRIDGE_DUPLICATE_WINDOW": window.String()})
	r.addBridge("a", ns.URL(), false)
	r.addBridge("b", ns.URL(), false)
	leader := r.waitLeader(30*time.Second, nil)
	r.waitEvents(n, 30*time.Second)
	st, err := leader.status()
	if err != nil {
		t.Fatal(err)
	}
	dups := map[*bridge]uint64{}
	for _, b := range r.bridges {
		s, err := b.status()
		if err != nil {
			t.Fatal(err)
		}
		dups[b] = s.Stream.Duplicates
	}
	r.phase("cursor restart -after %s", sim.EventID(after))
	leader.command("cursor", "restart", "-after", sim.EventID(after))
	testutil.EventuallyState(t, 30*time.Second, "the replay deduplicated by the next leader", func() (bool, string) {
		var state []string
		for _, b := range r.bridges {
			s, err := b.status()
			state = append(state, fmt.Sprintf("%s: %+v %v", b.name, s, err))
			if err == nil && s.Role == "leader" && s.Lease.Holder != nil && s.Lease.Holder.Epoch > st.Lease.Holder.Epoch &&
				s.Stream.Duplicates-dups[b] == n-after {
				return true, ""
			}
		}
		return false, strings.Join(state, "\n")
	})
	if c, err := r.events(); err != nil || c != n {
		t.Fatalf("%d events stored after the replay (%v), want %d: it took longer than the duplicate window", c, err, n)
	}

	// The duplicate window passes (a second to spare); then every bridge stops and a new one starts.
	testutil.Eventually(t, 30*time.Second, "the stored events are older than the duplicate window", func() bool {
		return time.Since(r.lastStored()) > window+time.Second
	})
	r.phase("stopping the bridges")
	for _, b := range r.bridges {
		b.signal(syscall.SIGTERM) // both at once: neither takes over from the other
	}
	for _, b := range r.bridges {
		b.waitExit()
	}
	c := r.addBridge("c", ns.URL(), false)
	r.waitLeader(30*time.Second, nil)
	// Every event up to the last one settled (stored, or known stored): as far as the log goes.
	testutil.EventuallyState(t, 30*time.Second, "the new bridge settled the upstream's events up to the last", func() (bool, string) {
		s, err := c.status()
		return err == nil && s.Stream.ResumeAfter == sim.EventID(n), fmt.Sprintf("%+v %v", s, err)
	})
	c.stop()
	ids := r.up.Sim().Stats().LastEventIDs
	t.Logf("the new bridge asked the upstream to resume after %q", ids[len(ids)-1])

	msgs := r.readStream()
	logTerms(t, checkFencing(t, msgs))
	want := make([]string, 0, n)
	for seq := 1; seq <= n; seq++ {
		want = append(want, sim.EventID(seq))
	}
	checkExactlyOnce(t, msgs, want, nil)
}
