package testutil

import (
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Cluster is a 3-node nats-server cluster with JetStream inside the test process, routed over loopback.
// Every node keeps its client port, route port and store across StopNode and StartNode, so that a test can
// kill a node and bring it back as an operator would; the cluster is shut down when the test ends.
type Cluster struct {
	tb    testing.TB
	name  string
	nodes []*clusterNode
}

// clusterNode is one member of a Cluster: its fixed ports and store, and the server while it runs.
type clusterNode struct {
	name      string
	dir       string
	port      int
	routePort int
	srv       *server.Server
}

// clusters numbers the clusters this process started, for their names.
var clusters atomic.Int64

// ClusterSize is the number of nodes StartCluster starts: the smallest cluster that keeps an R3 stream
// writable with one node down.
const ClusterSize = 3

// StartCluster starts a cluster of ClusterSize nodes on loopback ports from FreePort with fresh stores and waits
// until JetStream has elected its meta leader and every node is current with it.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	// A name of its own: a node of another test's cluster (in this process or another package's) that
	// comes to listen on a port this one's routes name, a stopped node's say, is refused instead of
	// joining this cluster and confusing its JetStream.
	c := &Cluster{tb: tb, name: fmt.Sprintf("test-%d-%d", os.Getpid(), clusters.Add(1))}
	for i := range ClusterSize {
		c.nodes = append(c.nodes, &clusterNode{
			name:      fmt.Sprintf("n%d", i+1),
			dir:       tb.TempDir(),
			port:      FreePort(tb),
			routePort: FreePort(tb),
		})
	}
	tb.Cleanup(c.Shutdown)
	for i := range c.nodes {
		c.startNode(i)
	}
	c.WaitReady()
	return c
}

// startNode starts node i on its ports and store, with routes to every other node.
func (c *Cluster) startNode(i int) {
	c.tb.Helper()
	n := c.nodes[i]
	var routes []*url.URL
	for j, o := range c.nodes {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", o.routePort)})
		}
	}
	opts := &server.Options{
		ServerName: n.name,
		Host:       "127.0.0.1",
		Port:       n.port,
		JetStream:  true,
		StoreDir:   n.dir,
		// As embedded.Start: the streams' reservations must not depend on the disk's free space.
		JetStreamMaxStore: 1 << 40,
		NoLog:             true,
		NoSigs:            true,
		Cluster: server.ClusterOpts{
			Name: c.name,
			Host: "127.0.0.1",
			Port: n.routePort,
		},
		Routes: routes,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		c.tb.Fatalf("cluster node %s: %v", n.name, err)
	}
	// Without a logger the server reports a port it cannot listen on to no one and ReadyForConnections
	// waits out its whole timeout; fatalLog hands the report over so that the test fails at once.
	fatal := &fatalLog{ch: make(chan string, 1)}
	s.SetLogger(fatal, false, false)
	go s.Start()
	deadline := time.Now().Add(2 * time.Minute) // a restarted node replays its store; -race on a busy machine
	for !s.ReadyForConnections(100 * time.Millisecond) {
		select {
		case msg := <-fatal.ch:
			s.Shutdown()
			c.tb.Fatalf("cluster node %s: %s", n.name, msg)
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			c.tb.Fatalf("cluster node %s: not ready within 2m", n.name)
		}
	}
	n.srv = s
}

// fatalLog is a server.Logger that drops everything but the first fatal report, which it hands to ch.
type fatalLog struct{ ch chan string }

func (l *fatalLog) Fatalf(format string, v ...any) {
	select {
	case l.ch <- fmt.Sprintf(format, v...):
	default:
	}
}
func (*fatalLog) Noticef(string, ...any) {}
func (*fatalLog) Warnf(string, ...any)   {}
func (*fatalLog) Errorf(string, ...any)  {}
func (*fatalLog) Debugf(string, ...any)  {}
func (*fatalLog) Tracef(string, ...any)  {}

// WaitReady waits until every running node has JetStream, one of them leads the meta group, every running
// node is current with it, and the leader counts every running node as a peer a stream can be placed on
// (else an R3 stream created at once may find "no suitable peers for placement").
func (c *Cluster) WaitReady() {
	c.tb.Helper()
	Eventually(c.tb, 30*time.Second, "the cluster's JetStream meta group is ready", func() bool {
		var leader *server.Server
		running := 0
		for _, n := range c.nodes {
			if n.srv == nil {
				continue
			}
			running++
			if !n.srv.JetStreamEnabled() || !n.srv.JetStreamIsCurrent() {
				return false
			}
			if n.srv.JetStreamIsLeader() {
				if leader != nil {
					return false
				}
				leader = n.srv
			}
		}
		return leader != nil && len(leader.JetStreamClusterPeers()) == running
	})
}

// Shutdown stops every node; it is called when the test ends.
func (c *Cluster) Shutdown() {
	for i := range c.nodes {
		c.StopNode(i)
	}
}

// Size is the number of nodes, running or not; nodes are numbered from 0.
func (c *Cluster) Size() int { return len(c.nodes) }

// Server is node i's running server, nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server { return c.nodes[i].srv }

// Name is node i's server name, as JetStream reports it in a stream's cluster information.
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// NodeURL is node i's client URL, the same across restarts.
func (c *Cluster) NodeURL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].port) }

// URLs is every node's client URL, comma-separated, as a client configured for the whole cluster lists them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.NodeURL(i)
	}
	return strings.Join(urls, ",")
}

// Connect opens a connection to the cluster that knows every node's URL and reconnects forever, every 50 ms,
// to whichever answers; it is closed when the test ends.
func (c *Cluster) Connect() *nats.Conn {
	c.tb.Helper()
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		c.tb.Fatal(err)
	}
	c.tb.Cleanup(nc.Close)
	return nc
}

// StopNode shuts node i down and waits until it is gone, as a killed server would be (its store stays);
// a stopped node stays stopped.
func (c *Cluster) StopNode(i int) {
	n := c.nodes[i]
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
		n.srv = nil
	}
}

// StartNode starts a stopped node i again on its ports and store; it does not wait for it to catch up.
func (c *Cluster) StartNode(i int) {
	c.tb.Helper()
	if c.nodes[i].srv == nil {
		c.startNode(i)
	}
}

// RestartNode stops node i, starts it again and waits until the cluster is ready.
func (c *Cluster) RestartNode(i int) {
	c.tb.Helper()
	c.StopNode(i)
	c.StartNode(i)
	c.WaitReady()
}

// StreamLeader returns the index of the running node that leads the stream, or -1 when none does (yet).
// Streams live in the global account; a key-value bucket B is the stream KV_B (see BucketLeader).
func (c *Cluster) StreamLeader(stream string) int {
	for i, n := range c.nodes {
		if n.srv != nil && n.srv.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// BucketLeader returns the index of the running node that leads the key-value bucket's stream, or -1.
func (c *Cluster) BucketLeader(bucket string) int { return c.StreamLeader("KV_" + bucket) }

// WaitStreamLeader waits until a running node leads the stream and returns its index.
func (c *Cluster) WaitStreamLeader(stream string) int {
	c.tb.Helper()
	leader := -1
	Eventually(c.tb, 30*time.Second, "stream "+stream+" has a leader", func() bool {
		leader = c.StreamLeader(stream)
		return leader >= 0
	})
	return leader
}
