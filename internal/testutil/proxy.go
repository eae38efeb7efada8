package testutil

import (
	"bytes"
	"net"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a NATS server, and plays the server's failures that a clean stop does
// not: answers lost on a connection that stays up (DropAnswers), and a server that stops reading and
// answering without closing anything, as a frozen process or a black-holed network does (Freeze).
type Proxy struct {
	ln net.Listener

	mu      sync.Mutex
	thawed  *sync.Cond
	frozen  bool
	dropped bool // the server's answers are dropped
	conns   []net.Conn
	rcvBuf  int // the receive buffer of accepted connections; 0 leaves it to the kernel
	at      *freezeAt
}

// freezeAt is FreezeAt's rule: freeze before the n-th occurrence of prefix in what clients send.
type freezeAt struct {
	prefix []byte
	n      int
	fired  chan struct{}
}

// StartProxy listens on a loopback port and forwards each connection to natsURL until the test ends.
func StartProxy(tb testing.TB, natsURL string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	px := &Proxy{ln: ln}
	px.thawed = sync.NewCond(&px.mu)
	target := strings.TrimPrefix(natsURL, "nats://")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			px.mu.Lock()
			px.conns = append(px.conns, c, s)
			if px.rcvBuf > 0 {
				_ = c.(*net.TCPConn).SetReadBuffer(px.rcvBuf)
			}
			px.mu.Unlock()
			go px.pump(c, s, false) // the client's requests
			go px.pump(s, c, true)  // the server's answers
		}
	}()
	tb.Cleanup(func() { _ = ln.Close(); px.Thaw(); px.Cut() })
	return px
}

// pump copies from src to dst. While the proxy is frozen it neither reads nor writes, so that the
// sender's socket buffers fill up as they would in front of a frozen server.
func (px *Proxy) pump(src, dst net.Conn, answers bool) {
	defer func() { _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	var carry []byte // a client's last bytes before this read, for FreezeAt (freezeIn)
	for {
		px.wait()
		n, err := src.Read(buf)
		chunk := buf[:n]
		if !answers && n > 0 {
			if i := px.freezeIn(&carry, chunk); i >= 0 { // what comes before goes through, the rest waits
				if _, werr := dst.Write(chunk[:i]); werr != nil {
					return
				}
				chunk = chunk[i:]
			}
		}
		if len(chunk) > 0 {
			if drop := px.wait(); !(answers && drop) {
				if _, werr := dst.Write(chunk); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// wait blocks while the proxy is frozen and reports whether the server's answers are dropped.
func (px *Proxy) wait() (dropped bool) {
	px.mu.Lock()
	defer px.mu.Unlock()
	for px.frozen {
		px.thawed.Wait()
	}
	return px.dropped
}

// URL is the proxy's nats:// URL.
func (px *Proxy) URL() string { return "nats://" + px.ln.Addr().String() }

// LimitReceiveBuffer sets the receive buffer of the connections the proxy accepts from now on to about
// bytes. Left to itself, the kernel grows it to tens of MB on loopback; limited, a client writing to a
// frozen proxy blocks once its own send buffer and those bytes are full, so that a test needs to write
// far less to get there.
func (px *Proxy) LimitReceiveBuffer(bytes int) {
	px.mu.Lock()
	px.rcvBuf = bytes
	px.mu.Unlock()
}

// DropAnswers drops (true) or forwards (false) what the server sends, on every connection.
func (px *Proxy) DropAnswers(drop bool) {
	px.mu.Lock()
	px.dropped = drop
	px.mu.Unlock()
}

// Freeze stops all forwarding, in both directions and on new connections too, leaving every connection
// open; Thaw resumes it.
func (px *Proxy) Freeze() {
	px.mu.Lock()
	px.frozen = true
	px.mu.Unlock()
}

// FreezeAt makes the proxy freeze (as Freeze) just before the n-th occurrence of prefix in what clients
// send, counted over every connection, so that a client stalls in the middle of a burst of writes; the
// channel is closed then. An occurrence split between two reads counts too; the proxy then freezes after
// its first part.
func (px *Proxy) FreezeAt(prefix string, n int) <-chan struct{} {
	px.mu.Lock()
	defer px.mu.Unlock()
	px.at = &freezeAt{prefix: []byte(prefix), n: n, fired: make(chan struct{})}
	return px.at.fired
}

// freezeIn applies FreezeAt's rule to chunk, a client's bytes that follow *carry (the end of its previous
// read, which freezeIn keeps): the index in chunk before which the proxy froze (0 for an occurrence that
// began in the previous read), or -1.
func (px *Proxy) freezeIn(carry *[]byte, chunk []byte) int {
	px.mu.Lock()
	defer px.mu.Unlock()
	if px.at == nil {
		*carry = nil
		return -1
	}
	// carry is shorter than the prefix, so each occurrence found here is one not counted before.
	seen := append(append([]byte(nil), *carry...), chunk...)
	keep := min(len(px.at.prefix)-1, len(seen))
	*carry = append((*carry)[:0], seen[len(seen)-keep:]...)
	for off := 0; ; {
		i := bytes.Index(seen[off:], px.at.prefix)
		if i < 0 {
			return -1
		}
		if px.at.n--; px.at.n == 0 {
			px.frozen = true
			close(px.at.fired)
			px.at = nil
			return max(0, off+i-(len(seen)-len(chunk)))
		}
		off += i + 1
	}
}

// Thaw resumes forwarding after Freeze.
func (px *Proxy) Thaw() {
	px.mu.Lock()
	px.frozen = false
	px.thawed.Broadcast()
	px.mu.Unlock()
}

// Cut closes every connection and lets the server's answers through again.
func (px *Proxy) Cut() {
	px.mu.Lock()
	defer px.mu.Unlock()
	for _, c := range px.conns {
		_ = c.Close()
	}
	px.conns = nil
	px.dropped = false
}
