package testutil

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/embedded"
)

// NATS is an embedded nats-server with JetStream for a test. It keeps its port and store across Stop and
// Start, so that a test can take the server away and bring it back; it is shut down when the test ends.
type NATS struct {
	tb   testing.TB
	dir  string
	port int
	// Configure adjusts the server options at every Start (authentication, TLS); nil for none.
	Configure func(*server.Options)
	// Srv is the running server, nil while stopped.
	Srv *server.Server
}

// StartNATS starts a server on a free loopback port with a fresh store.
func StartNATS(tb testing.TB, configure func(*server.Options)) *NATS {
	tb.Helper()
	n := &NATS{tb: tb, dir: tb.TempDir(), port: -1, Configure: configure}
	n.Start()
	n.port = n.Srv.Addr().(*net.TCPAddr).Port
	tb.Cleanup(n.Stop)
	return n
}

// Start starts the server (again) on its port and store.
func (n *NATS) Start() {
	n.tb.Helper()
	s, err := embedded.Start(embedded.Options{StoreDir: n.dir, Port: n.port, Configure: n.Configure})
	if err != nil {
		n.tb.Fatal(err)
	}
	n.Srv = s
}

// Stop shuts the server down and waits until it is gone; a stopped server stays stopped.
func (n *NATS) Stop() {
	if n.Srv != nil {
		n.Srv.Shutdown()
		n.Srv.WaitForShutdown()
		n.Srv = nil
	}
}

// Restart stops the server and starts it again.
func (n *NATS) Restart() {
	n.tb.Helper()
	n.Stop()
	n.Start()
}

// URL is the server's client URL, the same across restarts.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Connect opens a connection that reconnects forever, every 50 ms, closed when the test ends.
func (n *NATS) Connect() *nats.Conn {
	n.tb.Helper()
	nc, err := nats.Connect(n.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond),
		nats.RetryOnFailedConnect(true))
	if err != nil {
		n.tb.Fatal(err)
	}
	n.tb.Cleanup(nc.Close)
	return nc
}
