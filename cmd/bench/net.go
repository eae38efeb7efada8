package main

import (
	"context"
	"net"
	"time"
)

// FreeAddr returns a loopback address with a port that was free a moment ago. Another process may take
// it before the caller binds it; that is unlikely enough for a benchmark.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}

// WaitTCP waits until addr accepts TCP connections, or ctx is done, or abort is closed.
func WaitTCP(ctx context.Context, addr string, abort <-chan struct{}) error {
	var d net.Dialer
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		c, err := d.DialContext(cctx, "tcp", addr)
		cancel()
		if err == nil {
			return c.Close()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-abort:
			return err
		case <-time.After(10 * time.Millisecond):
		}
	}
}
