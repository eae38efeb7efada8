package units

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// flow publishes events of units units with random timestamps until stop is closed, then returns how many.
func (h *harness) flow(r *rand.Rand, units int, stop <-chan struct{}) int {
	base := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	n := 0
	for {
		select {
		case <-stop:
			return n
		default:
		}
		u := r.IntN(units)
		at := base.Add(time.Duration(r.IntN(1_000_000)) * time.Millisecond)
		h.publish(h.nextID(), fmt.Sprintf("FLOW%04d", u), timestamp(r, at), r.IntN(4) == 0)
		n++
	}
}

// TestRebuildWhileEventsFlow: Rebuild, with and without purging the bucket, while events keep coming and
// two views keep applying them: the view afterwards holds the latest event of every unit.
func TestRebuildWhileEventsFlow(t *testing.T) {
	for _, purge := range []bool{false, true} {
		t.Run(fmt.Sprintf("purge=%v", purge), func(t *testing.T) {
			h := newTestHarness(t, false)
			h.startView()
			h.startView()
			r := rand.New(rand.NewPCG(3, 4))
			h.shuffled(r, 30, 10)
			h.waitView(30 * time.Second)

			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); h.flow(rand.New(rand.NewPCG(5, 6)), 50, stop) }()
			time.Sleep(200 * time.Millisecond) // events flowing before the rebuild, as in production
			ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(10*time.Second))
			out, err := Rebuild(ctx, h.js, h.streams, "", purge)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if out.From != 1 || out.Created || purge && out.Purged == 0 {
				t.Errorf("Rebuild = %+v", out)
			}
			time.Sleep(300 * time.Millisecond)
			close(stop)
			wg.Wait()
			h.waitView(60 * time.Second)
		})
	}
}

// TestViewNATSRestart: the server restarts while events are stored; the view catches up with what was
// stored while it was away, and with what comes after.
func TestViewNATSRestart(t *testing.T) {
	n := testutil.StartNATS(t, nil)
	h := newHarness(t, 1, n.Connect)
	rv := h.startView()
	r := rand.New(rand.NewPCG(7, 8))
	h.shuffled(r, 20, 5)
	h.waitView(30 * time.Second)
	n.Restart()
	h.shuffled(r, 25, 5)
	h.waitView(60 * time.Second)
	testutil.Eventually(t, 30*time.Second, "the view reports no problem and no lag", func() bool {
		st := rv.v.Status()
		return st.Problem == "" && st.LagEvents == 0
	})
}

// TestViewClusterLosesNode: on a 3-node cluster, the node that leads the bucket stops while events flow;
// the view keeps being built, and holds the latest event of every unit.
func TestViewClusterLosesNode(t *testing.T) {
	c := testutil.StartCluster(t)
	h := newHarness(t, 3, c.Connect)
	h.startView()
	h.startView()
	r := rand.New(rand.NewPCG(9, 10))
	h.shuffled(r, 20, 5)
	h.waitView(30 * time.Second)
	leader := c.WaitStreamLeader(h.streams.UnitsStream())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); h.flow(rand.New(rand.NewPCG(11, 12)), 30, stop) }()
	time.Sleep(200 * time.Millisecond)
	c.StopNode(leader)
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	h.waitView(90 * time.Second)
}
