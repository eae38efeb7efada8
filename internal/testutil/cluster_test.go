package testutil_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestCluster checks that an R3 stream survives the loss of its leader: another node takes over, publishes
// go on, and the stopped node comes back with its store.
func TestCluster(t *testing.T) {
	c := testutil.StartCluster(t)
	js, err := jetstream.New(c.Connect())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(60*time.Second))
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "s.a", []byte("a")); err != nil {
		t.Fatal(err)
	}
	leader := c.WaitStreamLeader("S")
	info, err := js.Stream(ctx, "S")
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().Cluster.Leader; got != c.Name(leader) {
		t.Errorf("stream info names leader %q, StreamLeader %q", got, c.Name(leader))
	}

	c.StopNode(leader)
	if c.Server(leader) != nil {
		t.Fatal("a stopped node still has a server")
	}
	next := c.WaitStreamLeader("S")
	if next == leader {
		t.Fatalf("node %d still leads after it was stopped", leader)
	}
	testutil.Eventually(t, 30*time.Second, "a publish succeeds without the old leader", func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		_, err := js.Publish(pctx, "s.b", []byte("b"))
		return err == nil
	})

	c.RestartNode(leader)
	if n := testutil.StreamMsgs(t, js, "S"); n != 2 {
		t.Errorf("stream holds %d messages after the restart, want 2", n)
	}
}
