package daemon

import (
	"container/list"
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxHeaderBytes bounds the request line and headers one request on the HTTP endpoint may send. The
// endpoint's clients (Prometheus, the kubelet's probes, curl) send a few hundred bytes; a bearer token
// in a scrape's Authorization header stays well within it. net/http reads up to 4 KiB past it, then
// answers 431 and closes the connection. Its default, 1 MiB, let each connection cost a mebibyte and more.
const maxHeaderBytes = 8 << 10

// connLimit is a net.Listener that keeps at most max of its connections open. A connection beyond them
// is not refused: it is accepted, and an older one is closed to make room, chosen among those the server
// has started reading, in this order: the oldest part way through sending a request (bytes read, no
// request served from them yet), else the oldest that sent nothing since it connected or since its last
// answer, else, when every one is serving a request, the oldest of all. While every candidate is one
// the server has not started reading yet, Accept waits until it has (a moment: the server reads a new
// connection at once), so that the server reads connections as fast as it takes them.
//
// Why an old connection goes rather than the new one: a flood that fills the slots and holds them
// (sending headers slowly, or without end, or nothing at all) would otherwise lock the probes and
// scrapes out until the header timeout closes the flood's connections, and again each time the flood
// reconnects. Here a probe's connection always gets in, and is not closed before the server has read
// it; its request (a few hundred bytes sent at once) is then read in one go and served, while a flood's
// connections, part way through a request or silent, go first. What one connection costs is bounded by
// maxHeaderBytes and the server's timeouts, so all of them together cost at most about max times that.
// Keeping away sources that should not connect at all is the NetworkPolicy's job.
type connLimit struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns list.List // of *limitedConn, oldest first
	// wake is signalled when a connection may have become a candidate (first read) or closed.
	wake chan struct{}

	// shed counts the connections closed to make room.
	shed atomic.Uint64
	// onShed, when set, is called after a connection was closed to make room (outside the lock).
	onShed func()
}

// maxAdmitWait bounds how long Accept waits for the server to start reading the connections it holds;
// past it, the oldest connection goes. The server starts reading a connection as soon as it has it, so
// this is only a safety net.
const maxAdmitWait = time.Second

// newConnLimit returns ln keeping at most n connections open (at least 1).
func newConnLimit(ln net.Listener, n int) *connLimit {
	return &connLimit{Listener: ln, max: max(n, 1), wake: make(chan struct{}, 1)}
}

// Accept waits for the next connection and makes room for it.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	lc := &limitedConn{Conn: c, l: l}
	l.mu.Lock()
	lc.elem = l.conns.PushBack(lc)
	l.mu.Unlock()
	var timeout <-chan time.Time // set at the first wait
	expired := false
	for {
		l.mu.Lock()
		if l.conns.Len() <= l.max {
			l.mu.Unlock()
			return lc, nil
		}
		victim := l.victimLocked(!expired)
		if victim != nil {
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
			continue
		}
		if timeout == nil {
			timeout = time.After(maxAdmitWait)
		}
		select {
		case <-l.wake:
		case <-timeout:
			expired = true // from now on, victimLocked takes the oldest
		}
	}
}

// victimLocked returns the connection to close to make room (connLimit's order). When there is none
// but connections the server has not started reading, it returns nil if canWait, else the oldest of
// all. The newest, just accepted, is never chosen.
func (l *connLimit) victimLocked(canWait bool) *limitedConn {
	var quiet *limitedConn // the oldest that sent nothing since it connected or since its last answer
	unread := false
	for e := l.conns.Front(); e != nil && e.Next() != nil; e = e.Next() {
		c := e.Value.(*limitedConn)
		switch {
		case !c.read.Load():
			unread = true
		case c.serving.Load() != 0:
		case c.unserved.Load() != 0:
			return c
		case quiet == nil:
			quiet = c
		}
	}
	switch {
	case quiet != nil:
		return quiet
	case unread && canWait:
		return nil
	}
	return l.conns.Front().Value.(*limitedConn)
}

// signal wakes an Accept waiting for a candidate.
func (l *connLimit) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
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
	// unserved counts the bytes read since the connection was accepted or a handler last returned:
	// more than 0 outside a handler means a request is part way in.
	unserved atomic.Int64
	// read is set once the server started reading the connection.
	read atomic.Bool
}

// Read reads from the connection and counts the bytes in unserved.
func (c *limitedConn) Read(p []byte) (int, error) {
	if !c.read.Load() && c.read.CompareAndSwap(false, true) {
		c.l.signal()
	}
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.unserved.Add(int64(n))
	}
	return n, err
}

// Close closes the connection and frees its slot.
func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	if c.elem != nil {
		c.l.conns.Remove(c.elem)
		c.elem = nil
	}
	c.l.mu.Unlock()
	c.l.signal()
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

// markServing wraps h so that a connection counts as serving a request from the moment its handler runs
// until its answer is written out (connState's StateIdle), and as having sent nothing afterwards: a
// connection that sent a whole request is closed to make room only when every other connection is serving
// one too. (Reset when the handler returns, a connection looked quiet while net/http was still writing the
// answer, and could be closed with it unsent.)
func markServing(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if lc, ok := r.Context().Value(connKey{}).(*limitedConn); ok {
			lc.serving.Add(1)
		}
		h.ServeHTTP(w, r)
	})
}

// connState is the http.Server's ConnState: once a connection's answer is written and it waits for the
// next request (StateIdle), it serves nothing and has sent nothing unanswered.
func connState(c net.Conn, st http.ConnState) {
	lc, ok := c.(*limitedConn)
	if !ok || st != http.StateIdle {
		return
	}
	lc.unserved.Store(0)
	lc.serving.Store(0)
	lc.l.signal()
}
