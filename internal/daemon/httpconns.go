package daemon

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
)

// maxHeaderBytes bounds the request line and headers one request on the HTTP endpoint may send. The
// endpoint's clients (Prometheus, the kubelet's probes, curl) send a few hundred bytes; a bearer token
// in a scrape's Authorization header stays well within it. net/http reads up to 4 KiB past it, then
// answers 431 and closes the connection. Its default, 1 MiB, let each connection cost a mebibyte and more.
const maxHeaderBytes = 8 << 10

// connLimit is a net.Listener that keeps at most max of its connections open. A connection beyond them
// is not refused or kept waiting: it is accepted, and the oldest connection not serving a request (or,
// when every one is, the oldest of all) is closed to make room.
//
// Why the oldest goes rather than the newest: a flood of connections that fills the slots and holds
// them (sending headers slowly, or without end) would otherwise lock the probes and scrapes out until
// the header timeout closes the flood's connections, and then again as soon as the flood reconnects.
// Here a probe's connection always gets in, and a probe's request (a few hundred bytes sent at once)
// is read and answered before enough newer connections arrive to make it the oldest; once its request
// is being served, it goes only when every other connection is serving one too. What one connection
// costs is bounded by maxHeaderBytes and the server's timeouts, so all of them together cost at most
// about max times that. A source that opens connections faster than the server reads one request can
// still crowd a probe out: keeping such sources away is the NetworkPolicy's job.
type connLimit struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns list.List // of *limitedConn, oldest first

	// shed counts the connections closed to make room.
	shed atomic.Uint64
	// onShed, when set, is called after a connection was closed to make room (outside the lock).
	onShed func()
}

// newConnLimit returns ln keeping at most n connections open (at least 1).
func newConnLimit(ln net.Listener, n int) *connLimit {
	return &connLimit{Listener: ln, max: max(n, 1)}
}

// Accept waits for the next connection and makes room for it.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitedConn{Conn: c, l: l}
	var victim *limitedConn
	l.mu.Lock()
	lc.elem = l.conns.PushBack(lc)
	if l.conns.Len() > l.max {
		victim = l.victimLocked()
		l.conns.Remove(victim.elem)
		victim.elem = nil
	}
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Conn.Close()
		l.shed.Add(1)
		if l.onShed != nil {
			l.onShed()
		}
	}
	return lc, nil
}

// victimLocked returns the oldest connection not serving a request, else the oldest. The newest, just
// accepted, is never chosen.
func (l *connLimit) victimLocked() *limitedConn {
	for e := l.conns.Front(); e != nil && e.Next() != nil; e = e.Next() {
		if c := e.Value.(*limitedConn); c.serving.Load() == 0 {
			return c
		}
	}
	return l.conns.Front().Value.(*limitedConn)
}

// open returns the number of connections open.
func (l *connLimit) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns.Len()
}

// limitedConn is a connection of a connLimit.
type limitedConn struct {
	net.Conn
	l    *connLimit
	elem *list.Element // in l.conns; nil once closed or shed (under l.mu)
	// serving counts the requests of this connection in a handler (markServing).
	serving atomic.Int32
}

// Close closes the connection and frees its slot.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	if c.elem != nil {
		c.l.conns.Remove(c.elem)
		c.elem = nil
	}
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// connKey is the context key under which connContext stores a request's *limitedConn.
type connKey struct{}

// connContext is the http.Server's ConnContext: it lets markServing find a request's connection.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// markServing wraps h so that a connection counts as serving a request while h runs: a connection that
// sent a whole request is closed to make room only when every other connection is serving one too.
func markServing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
			lc.serving.Add(1)
			defer lc.serving.Add(-1)
		}
		h.ServeHTTP(w, r)
	})
}
