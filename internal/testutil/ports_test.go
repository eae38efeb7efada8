package testutil

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClusterNodePortTaken: a node that cannot listen fails the test at once with the server's reason, not
// after the two minutes a node may take to become ready.
func TestClusterNodePortTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	c := &Cluster{name: "taken", nodes: []*clusterNode{
		{name: "n1", dir: t.TempDir(), port: FreePort(t), routePort: taken},
		{name: "n2", dir: t.TempDir(), port: FreePort(t), routePort: FreePort(t)}, // not started; n1 routes to it
	}}
	start := time.Now()
	msg := run(func(tb testing.TB) { c.tb = tb; c.startNode(0) })
	if !strings.Contains(msg, "n1") || !strings.Contains(msg, strconv.Itoa(taken)) {
		t.Errorf("failed with %q, want node n1's listening error on port %d", msg, taken)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("failed after %v", d)
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	seen := map[int]bool{}
	for range 50 {
		p := FreePort(t)
		if p < minPort || p >= portsBelow() || seen[p] {
			t.Fatalf("FreePort = %d: repeated or outside [%d, %d)", p, minPort, portsBelow())
		}
		seen[p] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d: %v", p, err)
		}
		_ = ln.Close()
	}
}
