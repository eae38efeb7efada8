// Package embedded runs a nats-server with JetStream inside the process, on loopback, for the demo and
// the tests. Production deployments connect to their own NATS cluster instead.
package embedded

import (
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configures an embedded server.
type Options struct {
	// StoreDir holds JetStream's files; reuse it across restarts to keep the streams.
	StoreDir string
	// Port to listen on, on 127.0.0.1; -1 picks a free one.
	Port int
	// Configure, when set, adjusts the server options further (authentication, TLS, limits).
	Configure func(*server.Options)
}

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*server.Server, error) {
	if o.StoreDir == "" {
		return nil, errors.New("embedded nats: StoreDir is required")
	}
	opts := &server.Options{
		ServerName: "embedded",
		Host:       "127.0.0.1",
		Port:       o.Port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		// The bridge's streams reserve their max_bytes (6 GiB by default) against the store's limit, which
		// is otherwise 75% of the disk's free space: the demo and the tests must not depend on it.
		JetStreamMaxStore: 1 << 40,
		NoLog:             true,
		NoSigs:            true,
	}
	if o.Port == 0 {
		opts.Port = -1
	}
	if o.Configure != nil {
		o.Configure(opts)
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded nats: not ready within 10s")
	}
	return s, nil
}
