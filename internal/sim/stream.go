package sim

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

const (
	// streamBurst is how many log entries a stream connection takes per lock; they are written and then
	// flushed together (in rate mode usually one).
	streamBurst = 256
	// streamBufSize is the write buffer of a stream connection.
	streamBufSize = 64 << 10
	// preciseWindow is how long before a due event the stream stops waiting on a timer (millisecond
	// resolution) and sleeps precisely instead.
	preciseWindow = 2 * time.Millisecond
)

// streamBuffers are the per-connection buffers, pooled so that a connection allocates nothing per event.
type streamBuffers struct {
	entries []entry
	msg     []byte
	bw      *bufio.Writer
}

var streamPool = sync.Pool{New: func() any {
	return &streamBuffers{entries: make([]entry, 0, streamBurst), msg: make([]byte, 0, 4096)}
}}

// errDropped ends a connection closed by the DropEvery fault.
var errDropped = errors.New("dropped by fault injection (DropEvery)")

// handleStream serves operation streamTrackingEvents: it replays the user's retained log after Last-Event-ID
// and then streams live until the client leaves, the server closes, or a fault drops the connection.
func (s *Server) handleStream(w http.ResponseWriter, r *http.Request, u *userState) {
	f := s.Faults()
	lastID := r.Header.Get("Last-Event-ID")
	s.stats.mu.Lock()
	s.stats.streamRequests++
	if len(s.stats.lastEventIDs) == maxLastEventIDs {
		s.stats.lastEventIDs = append(s.stats.lastEventIDs[:0], s.stats.lastEventIDs[1:]...)
	}
	s.stats.lastEventIDs = append(s.stats.lastEventIDs, lastID)
	s.stats.mu.Unlock()

	select {
	case <-s.closed:
		writeMessages(w, http.StatusServiceUnavailable, "The server is shutting down")
		return
	default:
	}
	if f.StreamStatus != 0 && f.StreamStatus != http.StatusOK {
		writeMessages(w, f.StreamStatus, fmt.Sprintf("The tracking stream is not available to this client (%d %s)",
			f.StreamStatus, http.StatusText(f.StreamStatus)))
		return
	}

	if s.opts.EventRate != 0 {
		s.generator(u) // built now, so that the first due event is not late
	}
	now := time.Now()
	u.mu.Lock()
	u.log.startGeneration(now)
	u.log.catchUp(now)
	from, known := u.log.resolve(lastID)
	u.mu.Unlock()
	if !known {
		s.log.Warn("unknown Last-Event-ID: replaying the retained log from its beginning",
			"user", u.name, "last_event_id", lastID)
	}

	h := w.Header()
	h.Set("Content-Type", cmp.Or(f.StreamContentType, "text/event-stream"))
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s.stats.add(&s.stats.streamConnects, 1)
	s.log.Info("stream connected", "user", u.name, "last_event_id", lastID)

	n, err := s.serveStream(w, r, u, from)
	s.log.Info("stream closed", "user", u.name, "events", n, "reason", err)
}

// serveStream writes events from sequence number from on. It returns the number of complete events it
// wrote and why it stopped. A DropMidEvent drop aborts the connection (panic http.ErrAbortHandler).
func (s *Server) serveStream(w http.ResponseWriter, r *http.Request, u *userState, from int64) (written int, err error) {
	rc := http.NewResponseController(w)
	buf := streamPool.Get().(*streamBuffers)
	if buf.bw == nil {
		buf.bw = bufio.NewWriterSize(w, streamBufSize)
	} else {
		buf.bw.Reset(w)
	}
	defer func() {
		buf.bw.Reset(nil)
		buf.entries = buf.entries[:0]
		streamPool.Put(buf)
	}()
	bw := buf.bw
	flush := func() error {
		if err := bw.Flush(); err != nil {
			return err
		}
		return rc.Flush()
	}

	if s.opts.Retry > 0 {
		_, _ = bw.WriteString("retry: " + strconv.FormatInt(s.opts.Retry.Milliseconds(), 10) + "\n\n")
	}
	if err := flush(); err != nil {
		return 0, err
	}
	hb := s.opts.Heartbeat
	lastWrite := time.Now()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	ctx := r.Context()
	for {
		select {
		case <-ctx.Done():
			return written, ctx.Err()
		case <-s.closed:
			return written, errors.New("server closed")
		default:
		}
		f := s.Faults()
		now := time.Now()
		var wake <-chan struct{}
		var due time.Time
		var hasDue bool
		u.mu.Lock()
		u.log.catchUp(now)
		if from < u.log.first {
			s.log.Warn("stream reader fell behind the retention bound; events skipped",
				"user", u.name, "skipped", u.log.first-from)
			from = u.log.first
		}
		if from >= u.log.next {
			u.log.flood(streamBurst, now)
		}
		entries := u.log.read(from, streamBurst, buf.entries[:0])
		if len(entries) == 0 {
			wake = u.log.waitChan()
			due, hasDue = u.log.nextDue()
		}
		u.mu.Unlock()

		if len(entries) > 0 {
			n := 0
			for i := range entries {
				e := &entries[i]
				buf.msg = s.render(buf.msg[:0], u, e)
				if f.DropEvery > 0 && written >= f.DropEvery && f.DropMidEvent {
					s.stats.eventsWritten.Add(int64(n))
					s.cutMidEvent(bw, flush, buf.msg, u.name, written)
				}
				if _, err := bw.Write(buf.msg); err != nil {
					s.stats.eventsWritten.Add(int64(n))
					return written, err
				}
				n++
				written++
				from = e.seq + 1
				if f.DropEvery > 0 && written >= f.DropEvery && !f.DropMidEvent {
					s.stats.eventsWritten.Add(int64(n))
					_ = flush()
					return written, errDropped
				}
			}
			s.stats.eventsWritten.Add(int64(n))
			if err := flush(); err != nil {
				return written, err
			}
			lastWrite = now
			continue
		}

		// Nothing to write: wait for the next due event, an explicit event or the heartbeat. The last
		// stretch before a due event is slept precisely (see preciseSleep); a timer brings us there.
		var hbAt, next time.Time
		if hb > 0 {
			hbAt = lastWrite.Add(hb)
			next = hbAt
		}
		dueFirst := hasDue && (next.IsZero() || !due.After(next))
		if dueFirst {
			if d := time.Until(due); d <= preciseWindow {
				if d > 0 {
					preciseSleep(d)
				}
				continue
			}
			next = due.Add(-preciseWindow)
		}
		var tc <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			tc = timer.C
		}
		select {
		case <-ctx.Done():
			return written, ctx.Err()
		case <-s.closed:
			return written, errors.New("server closed")
		case <-wake:
		case <-tc:
		}
		timer.Stop()
		if now := time.Now(); hb > 0 && !now.Before(hbAt) {
			if _, err := bw.WriteString(heartbeat); err != nil {
				return written, err
			}
			if err := flush(); err != nil {
				return written, err
			}
			lastWrite = now
		}
	}
}

// render appends the SSE message of log entry e.
func (s *Server) render(dst []byte, u *userState, e *entry) []byte {
	if e.ex != nil {
		return appendEvent(dst, e.ex.id, e.ex.name, e.ex.data)
	}
	return s.generator(u).appendMessage(dst, e.seq, e.k, e.ts)
}

// cutMidEvent writes the first half of msg (at least its first line, never its final line break),
// flushes, and aborts the connection, so that the client sees an incomplete event.
func (s *Server) cutMidEvent(bw *bufio.Writer, flush func() error, msg []byte, user string, written int) {
	cut := len(msg) / 2
	cut = max(cut, bytes.IndexByte(msg, '\n')+1)
	cut = min(cut, len(msg)-1)
	_, _ = bw.Write(msg[:cut])
	_ = flush()
	s.log.Info("stream cut in the middle of an event (DropMidEvent)", "user", user, "events", written)
	panic(http.ErrAbortHandler)
}
