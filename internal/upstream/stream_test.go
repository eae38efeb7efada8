package upstream

import (
	"context"
	"fmt"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// memSink stores events in memory; Resume reports the last one.
type memSink struct {
	mu     sync.Mutex
	events []Event
}

func (s *memSink) Resume(context.Context) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.events) == 0 {
		return "", nil
	}
	return s.events[len(s.events)-1].ResumeID, nil
}

func (s *memSink) Handle(_ context.Context, ev Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, ev)
	return nil
}

func (s *memSink) snapshot() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// scripted serves the stream from a list of handlers, one per connection attempt, and records when each
// attempt came and with which Last-Event-ID.
type scripted struct {
	mu       sync.Mutex
	tokens   int // token requests
	attempts []time.Time
	lastIDs  []string
	script   []http.HandlerFunc
	stream   *Stream // set by runScripted
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/token" {
		s.mu.Lock()
		s.tokens++
		n := s.tokens
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n > 1 {
			fmt.Fprintf(w, `{"access_token":"at%d","expires_in":300,"token_type":"Bearer"}`, n)
			return
		}
		fmt.Fprint(w, `{"access_token":"at","expires_in":300,"token_type":"Bearer"}`)
		return
	}
	s.mu.Lock()
	i := len(s.attempts)
	s.attempts = append(s.attempts, time.Now())
	s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
	s.mu.Unlock()
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer at") || r.Header.Get("Accept") != "text/event-stream" {
		http.Error(w, "bad request headers", http.StatusBadRequest)
		return
	}
	if i < len(s.script) {
		s.script[i](w, r)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func (s *scripted) seen() ([]time.Time, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.attempts...), append([]string(nil), s.lastIDs...)
}

func sse(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		fmt.Fprint(w, body)
	}
}

// scriptedConfig is the configuration of a stream against a scripted server at url: quick reconnects.
func scriptedConfig(url string) StreamConfig {
	client, _ := NewHTTPClient(ClientOptions{})
	return StreamConfig{
		URL:    url + "/stream",
		Tokens: NewTokenSource(TokenConfig{TokenURL: url + "/token", ClientID: "c", Username: "u", Password: func() string { return "p" }}),
		Client: client, IdleTimeout: 5 * time.Second, MaxEventBytes: 1024,
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 20 * time.Millisecond, UnavailableRetry: time.Second,
	}
}

func runScripted(t *testing.T, script ...http.HandlerFunc) (*scripted, *memSink, func()) {
	t.Helper()
	return runScriptedWith(t, nil, script...)
}

// runScriptedWith is runScripted with the stream's configuration adjusted by configure.
func runScriptedWith(t *testing.T, configure func(*StreamConfig), script ...http.HandlerFunc) (*scripted, *memSink, func()) {
	t.Helper()
	sc := &scripted{script: script}
	srv := httptest.NewServer(sc)
	cfg := scriptedConfig(srv.URL)
	if configure != nil {
		configure(&cfg)
	}
	st := NewStream(cfg)
	sc.stream = st
	sink := &memSink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx, sink) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		srv.Close()
	}
	return sc, sink, stop
}

func waitAttempts(t *testing.T, sc *scripted, n int) []time.Time {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, fmt.Sprintf("%d connection attempts", n), func() bool {
		at, _ := sc.seen()
		return len(at) >= n
	})
	at, _ := sc.seen()
	return at
}

// A 200 that is not text/event-stream is an error and its body is never parsed.
func TestStreamRejectsOtherContentType(t *testing.T) {
	sc, sink, stop := runScripted(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, "id: 1\ndata: {\"type\":\"GATE_IN\"}\n\n")
	})
	waitAttempts(t, sc, 2)
	stop()
	if evs := sink.snapshot(); len(evs) != 0 {
		t.Fatalf("parsed %d events from a text/html answer", len(evs))
	}
}

// Retry-After on a 429 and the server's retry: hint both hold the next attempt back.
func TestStreamHonoursRetryAfterAndRetryHint(t *testing.T) {
	sc, sink, stop := runScripted(t,
		func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		},
		sse("retry: 700\n\nid: a\ndata: {\"x\":1}\n\n: comment only\n\nevent: ping\n\n"),
	)
	at := waitAttempts(t, sc, 3)
	stop()
	if d := at[1].Sub(at[0]); d < time.Second {
		t.Errorf("reconnected %v after a 429 with Retry-After: 1", d)
	}
	if d := at[2].Sub(at[1]); d < 700*time.Millisecond {
		t.Errorf("reconnected %v after retry: 700", d)
	}
	evs := sink.snapshot()
	if len(evs) != 1 || evs[0].ID != "a" || string(evs[0].Data) != `{"x":1}` {
		t.Fatalf("events %+v: want only the one with data", evs)
	}
	if _, ids := sc.seen(); ids[2] != "a" {
		t.Errorf("Last-Event-ID after the first event = %q, want a", ids[2])
	}
}

// Comments never count toward an event's size: a long comment before a large event (each alone within
// the bound, together over it) leaves the event whole, and comment-only blocks are no events.
func TestStreamCommentsDoNotCount(t *testing.T) {
	comment := ": " + strings.Repeat("c", 700) + "\n"
	data := `{"d":"` + strings.Repeat("d", 500) + `"}`
	sc, sink, stop := runScripted(t, sse(comment+comment+"\n"+comment+"id: real-1\ndata: "+data+"\n\n"))
	waitAttempts(t, sc, 2)
	stop()
	evs := sink.snapshot()
	if len(evs) != 1 || evs[0].ID != "real-1" || string(evs[0].Data) != data || evs[0].Oversize != 0 {
		t.Fatalf("events %+v, want real-1 whole", evs)
	}
}

// A 401 invalidates the token: the next attempt carries a new one. A 503 keeps the token.
func TestStreamRetriesAfter401And5xx(t *testing.T) {
	var auth []string
	var mu sync.Mutex
	record := func(r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
	}
	sc, _, stop := runScripted(t,
		func(w http.ResponseWriter, r *http.Request) { record(r); w.WriteHeader(http.StatusUnauthorized) },
		func(w http.ResponseWriter, r *http.Request) {
			record(r)
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"messages":["maintenance"]}`)
		},
		func(w http.ResponseWriter, r *http.Request) { record(r); w.WriteHeader(http.StatusServiceUnavailable) },
	)
	waitAttempts(t, sc, 4)
	stop()
	mu.Lock()
	defer mu.Unlock()
	want := []string{"Bearer at", "Bearer at2", "Bearer at2"}
	if fmt.Sprint(auth) != fmt.Sprint(want) {
		t.Fatalf("bearer per attempt %q, want %q: a new token after the 401 only", auth, want)
	}
}

// An id that HTTP cannot carry as Last-Event-ID (a control character; or edge white space, which
// net/http trims, so the upstream would get another id) stops the reconnect with a clear error, rather
// than a connection without it or with another id, which would not resume where the stream stopped.
func TestStreamUnsendableResumeID(t *testing.T) {
	for _, id := range []string{"a\x01b", " a", "a ", "a\t", "\ta"} {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			sc, sink, stop := runScripted(t, sse("id: "+id+"\ndata: {\"type\":\"GATE_IN\"}\n\n"))
			defer stop()
			testutil.Eventually(t, 10*time.Second, "a last error about Last-Event-ID", func() bool {
				err := sc.stream.LastError()
				return err != nil && strings.Contains(err.Error(), "Last-Event-ID")
			})
			time.Sleep(100 * time.Millisecond) // several reconnect attempts (10–20 ms apart)
			if at, ids := sc.seen(); len(at) != 1 {
				t.Errorf("%d connections (Last-Event-ID %q), want 1: the bridge connected without the id", len(at), ids)
			}
			if evs := sink.snapshot(); len(evs) != 1 || evs[0].ResumeID != id {
				t.Errorf("events %+v", evs)
			}
		})
	}
}

// A retry: hint is honoured up to MaxRetryHint (a hint holds every later reconnect, so a stray one could
// stall the stream for hours), and the cut is logged once; hints that overflow a Duration (285 years; the second
// overflows when turned into nanoseconds) would stop the stream for good after the next disconnect.
func TestStreamBoundsRetryHint(t *testing.T) {
	for _, hint := range []string{"3600000", "9000000000000", "27000000000000"} {
		t.Run(hint, func(t *testing.T) {
			sc := &scripted{script: []http.HandlerFunc{sse("retry: " + hint + "\n\nid: a\ndata: {}\n\n")}}
			srv := httptest.NewServer(sc)
			defer srv.Close()
			logs := &testutil.Logs{}
			cfg := scriptedConfig(srv.URL)
			cfg.Logger = slog.New(logs)
			cfg.MaxRetryHint = 1500 * time.Millisecond
			st := NewStream(cfg)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- st.Run(ctx, &memSink{}) }()
			// retryIn is the delay of the first reconnect, as logged.
			retryIn := func() string {
				if v, ok := logs.Attr("stream disconnected", "retry_in"); ok {
					return v.String()
				}
				return ""
			}
			deadline := time.Now().Add(10 * time.Second)
			for retryIn() == "" && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
			if got, want := retryIn(), cfg.MaxRetryHint.String(); got != want {
				t.Errorf("reconnecting in %q after retry: %s, want %q", got, hint, want)
			}
			if n := logs.Count(slog.LevelWarn, "stream's retry: hint cut to BRIDGE_STREAM_RETRY_HINT_MAX"); n != 1 {
				t.Errorf("the cut hint was logged %d times, want once", n)
			}
		})
	}
}

// trickle serves head, then piece every 5 ms until the client goes: a message that never ends.
func trickle(head, piece string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, head)
		w.(http.Flusher).Flush()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-r.Context().Done():
				return
			case <-tick.C:
				if _, err := fmt.Fprint(w, piece); err != nil {
					return
				}
				w.(http.Flusher).Flush()
			}
		}
	}
}

// A message that never ends, whether its data lines go on forever without the blank line or one line
// comes a byte at a time (each byte well within the idle timeout), is cut at the time bound of one
// message: logged, handed on as oversize with Slow (the publisher dead-letters a description), and the
// stream reconnects after it.
func TestStreamCutsMessageThatNeverEnds(t *testing.T) {
	logs := &testutil.Logs{}
	const bound = 300 * time.Millisecond
	sc, sink, stop := runScriptedWith(t, func(c *StreamConfig) {
		c.MaxEventTime = bound
		c.Logger = slog.New(logs)
	},
		trickle("id: e1\ndata: {\"n\":1}\n\nid: slow-1\ndata: {\"n\":\n", "data: 2\n"),
		trickle("id: slow-2\ndata: {\"n\":", "3"),
	)
	defer stop()
	waitAttempts(t, sc, 3)
	testutil.Eventually(t, 10*time.Second, "two messages cut", func() bool { return len(sink.snapshot()) == 3 })
	evs := sink.snapshot()
	if evs[0].ID != "e1" || string(evs[0].Data) != `{"n":1}` || evs[0].Oversize != 0 {
		t.Errorf("first event %+v, want e1 whole", evs[0])
	}
	for i, id := range []string{"slow-1", "slow-2"} {
		if ev := evs[i+1]; ev.ID != id || ev.Slow != bound || ev.Oversize == 0 || len(ev.Data) != 0 || ev.ManyLines {
			t.Errorf("event %d: %+v; want %s cut for its time, with its size so far and no data", i+1, ev, id)
		}
	}
	if _, ids := sc.seen(); ids[1] != "slow-1" || ids[2] != "slow-2" {
		t.Errorf("Last-Event-ID of the reconnects %q, want after each cut message", ids[1:3])
	}
	if n := logs.Count(slog.LevelWarn, "event did not end within the time bound of one message; dead-lettering a description and reconnecting"); n != 2 {
		t.Errorf("%d warnings for the cut messages, want 2:\n%s", n, logs)
	}
	if !strings.Contains(logs.String(), ErrMessageTime.Error()) {
		t.Errorf("no disconnect naming the time bound:\n%s", logs)
	}
}
