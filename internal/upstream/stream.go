package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/launchdarkly/eventsource"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/retry"
)

// Sink receives the stream's events. The publisher implements it.
type Sink interface {
	// Resume waits until every event handed to Handle is durably stored and returns the stream id to
	// resume after ("" when nothing was ever stored). The stream calls it before every connection.
	Resume(ctx context.Context) (string, error)
	// Handle takes one event. It blocks while the sink applies backpressure, and returns an error only
	// when ctx is done.
	Handle(ctx context.Context, ev Event) error
}

// StreamConfig configures a Stream.
type StreamConfig struct {
	// URL of the event stream (operation streamTrackingEvents).
	URL string
	// Tokens supplies the bearer token of every connection.
	Tokens *TokenSource
	// Client performs the stream request. It must not have an overall timeout (the response never ends);
	// NewHTTPClient(..., 0) builds a suitable one.
	Client *http.Client
	// IdleTimeout: reconnect when no byte (heartbeats included) arrived for this long.
	IdleTimeout time.Duration
	// MaxEventBytes bounds one SSE message; a longer one is cut and handed on as oversize.
	MaxEventBytes int
	// MaxEventTime bounds the time one SSE message takes to arrive, from its first byte to the blank line
	// that ends it (time the bridge spends applying backpressure aside); a message not ended by then is
	// cut, handed on as oversize with Slow set, and the stream reconnects. Zero means
	// DefaultMaxEventTime.
	MaxEventTime time.Duration
	// ReconnectMin and ReconnectMax bound the exponential reconnect backoff.
	ReconnectMin, ReconnectMax time.Duration
	// UnavailableRetry is the retry pace after 403 or 404: the function is not available to the account.
	UnavailableRetry time.Duration
	// MaxRetryHint bounds the reconnection time an SSE retry: hint may set. The hint holds every later
	// reconnect, as the SSE model keeps it per event source, so a stray one must not stall a daemon for
	// hours.
	MaxRetryHint time.Duration
	// Logger receives the stream's logs; nil discards them.
	Logger *slog.Logger
	// Observer, when set, is told of connection changes (for metrics).
	Observer StreamObserver
	// Tracer, when set, records a span of every connection, from its token to its end; the sink's Handle
	// gets a context holding it, so that every event's span can link to it. Nil with tracing off.
	Tracer trace.Tracer
}

// StreamObserver receives the stream's state changes. Connected, Disconnected and Received are called
// from the Run goroutine; Heartbeat from the goroutine reading the response body, so it must be safe to
// call concurrently with the others. Implementations must be cheap.
type StreamObserver interface {
	Connected()
	Disconnected(reason string)
	Received(ev *Event) // every message with data, after it was read
	Heartbeat()         // bytes arrived (comment or message): once per read from the connection
}

// StreamState is the stream's connection state, for readiness.
type StreamState int32

// Stream states.
const (
	StateStarting     StreamState = iota // not connected yet
	StateConnected                       // response 200 with text/event-stream, reading
	StateReconnecting                    // waiting for the next attempt after a failure
	StateUnavailable                     // 403/404: the stream is not available to this account
	StateStopped                         // Run returned
)

var stateNames = [...]string{"starting", "connected", "reconnecting", "unavailable", "stopped"}

// String returns the state's name, as /status and the logs show it.
func (s StreamState) String() string { return stateNames[s] }

// StatusError is a non-success HTTP answer of the upstream API. Its text holds the messages cut short,
// for the log and /status; Messages holds them as sent.
type StatusError struct {
	Code       int
	RetryAfter time.Duration // from Retry-After, 0 when absent
	Messages   []string      // from an ApiResponseMessage body, when there was one
}

// Error returns the status and the body's messages, if any.
func (e *StatusError) Error() string {
	s := fmt.Sprintf("HTTP %d %s", e.Code, http.StatusText(e.Code))
	if len(e.Messages) > 0 {
		s += ": " + logging.Clip(JoinMessages(e.Messages), maxMessages)
	}
	return s
}

// Stream errors that change the retry pace.
var (
	// ErrUnavailable means the upstream answered 403 or 404 to the stream: the function is disabled or
	// not accessible for this account (docs/upstream.md#the-event-stream). The stream keeps retrying slowly.
	ErrUnavailable = errors.New("tracking stream not available to this account")
	// ErrNotEventStream means the upstream answered 200 with another content type; the body is not read.
	ErrNotEventStream = errors.New("response is not text/event-stream")
)

// Stream holds the upstream's Server-Sent Events stream of tracking events open for as long as its Run
// runs: it reconnects forever with capped exponential backoff and jitter, never sooner than the server's
// retry: hint or Retry-After, and resumes with the Last-Event-ID the sink reports as durably stored. It is
// the only retry layer on the ingest path.
type Stream struct {
	cfg   StreamConfig
	log   *slog.Logger
	state atomic.Int32

	mu      sync.Mutex
	lastErr error
}

// DefaultMaxRetryHint is StreamConfig.MaxRetryHint when unset.
const DefaultMaxRetryHint = 2 * time.Minute

// DefaultMaxEventTime is StreamConfig.MaxEventTime when unset: an upstream writes a message at once, so
// a minute leaves room for a slow network and none for a message that never ends.
const DefaultMaxEventTime = time.Minute

// NewStream returns a Stream; Run starts it.
func NewStream(cfg StreamConfig) *Stream {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ReconnectMin <= 0 {
		cfg.ReconnectMin = time.Second
	}
	if cfg.ReconnectMax < cfg.ReconnectMin {
		cfg.ReconnectMax = cfg.ReconnectMin
	}
	if cfg.UnavailableRetry <= 0 {
		cfg.UnavailableRetry = 5 * time.Minute
	}
	if cfg.MaxRetryHint <= 0 {
		cfg.MaxRetryHint = DefaultMaxRetryHint
	}
	if cfg.MaxEventBytes <= 0 {
		cfg.MaxEventBytes = 1 << 20
	}
	if cfg.MaxEventTime <= 0 {
		cfg.MaxEventTime = DefaultMaxEventTime
	}
	return &Stream{cfg: cfg, log: cfg.Logger}
}

// State returns the current connection state.
func (s *Stream) State() StreamState { return StreamState(s.state.Load()) }

// LastError returns the error that ended the last connection attempt, nil while connected.
func (s *Stream) LastError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

func (s *Stream) setState(st StreamState, err error) {
	s.state.Store(int32(st))
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// Run reads the stream into sink until ctx is done; it then returns nil. It returns an error only when the
// sink failed for another reason than ctx.
func (s *Stream) Run(ctx context.Context, sink Sink) error {
	defer s.setState(StateStopped, nil)
	var (
		attempt   int           // consecutive failed attempts, for the backoff
		serverMin time.Duration // the server's retry: hint
		unauth    int           // consecutive 401 answers
		lastMsg   string        // the last failure logged, to log state changes only
	)
	for {
		resume, err := sink.Resume(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("stream: resume: %w", err)
		}
		c := s.connect(ctx, resume, sink)
		if ctx.Err() != nil {
			return nil
		}
		if c.sinkErr != nil {
			return fmt.Errorf("stream: %w", c.sinkErr)
		}
		if c.retry > 0 {
			serverMin = c.retry
		}
		if c.messages > 0 {
			attempt, lastMsg = 0, ""
		}
		var st *StatusError
		errors.As(c.err, &st)
		if st != nil && st.Code == http.StatusUnauthorized {
			unauth++
		} else {
			unauth = 0
		}

		delay := retry.Backoff(s.cfg.ReconnectMin, s.cfg.ReconnectMax, attempt)
		state := StateReconnecting
		switch {
		case errors.Is(c.err, ErrUnavailable):
			delay, state = s.cfg.UnavailableRetry, StateUnavailable
		case unauth == 1:
			delay = 0 // the token was invalidated: retry at once, once
		}
		// A rejected login needs no case: the token source paces logins itself (BRIDGE_LOGIN_RETRY).
		if st != nil && st.RetryAfter > delay {
			delay = st.RetryAfter
		}
		delay = max(delay, serverMin)
		attempt++

		s.setState(state, c.err)
		reason := "closed by upstream"
		if c.err != nil {
			reason = c.err.Error()
		}
		if s.cfg.Observer != nil && c.connected {
			s.cfg.Observer.Disconnected(disconnectReason(c.err))
		}
		level := slog.LevelWarn
		if c.messages > 0 || c.err == nil {
			level = slog.LevelInfo
		}
		if reason != lastMsg {
			s.log.Log(ctx, level, "stream disconnected", "reason", reason, "messages", c.messages,
				"retry_in", delay.Round(time.Millisecond).String(), "state", state.String())
			lastMsg = reason
		} else {
			s.log.Debug("stream attempt failed again", "reason", reason, "attempt", attempt,
				"retry_in", delay.Round(time.Millisecond).String())
		}
		if !retry.Sleep(ctx, delay) {
			return nil
		}
	}
}

// conn is the outcome of one connection.
type conn struct {
	connected bool
	messages  int           // messages read (with data or not)
	retry     time.Duration // last retry: hint seen
	err       error         // why it ended; nil = closed cleanly by the upstream
	sinkErr   error
}

// connect makes one connection and reads it until it ends.
func (s *Stream) connect(ctx context.Context, resume string, sink Sink) (c conn) {
	var span trace.Span
	if s.cfg.Tracer != nil {
		ctx, span = s.startConnect(ctx, resume)
		defer func() { endConnect(span, c.err, ctx.Err() != nil) }() // once connected, when the connection ends
	}
	tok, err := s.cfg.Tokens.Token(ctx)
	if err != nil {
		c.err = err
		return c
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodGet, s.cfg.URL, nil)
	if err != nil {
		c.err = err
		return c
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	req.Header.Set("Authorization", "Bearer "+tok)
	if resume != "" {
		if !Resumable(resume) {
			// The publisher never names such an id (it keeps the last one HTTP can carry); another
			// sink might. Connecting without it would replay from wherever the upstream starts: not
			// exact.
			c.err = fmt.Errorf("the last stored event id %s holds control characters or edge white space, "+
				"which HTTP cannot carry as Last-Event-ID: the stream cannot resume after it (retrying; the "+
				"upstream's ids must be printable, without leading or trailing spaces)", quoted(resume))
			return c
		}
		req.Header.Set("Last-Event-ID", resume)
	}
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		c.err = boundError(err)
		return c
	}
	if err := checkStreamResponse(resp); err != nil {
		_ = resp.Body.Close()
		var st *StatusError
		if errors.As(err, &st) && st.Code == http.StatusUnauthorized {
			s.cfg.Tokens.Invalidate(tok)
		}
		c.err = err
		return c
	}

	c.connected = true
	if span != nil {
		span.AddEvent("connected")
	}
	s.setState(StateConnected, nil)
	if s.cfg.Observer != nil {
		s.cfg.Observer.Connected()
	}
	s.log.Info("stream connected", "resume_after", resume)

	src := resp.Body
	if s.cfg.Observer != nil {
		src = heartbeatBody{src, s.cfg.Observer}
	}
	// The byte order mark goes first: the decoder keeps it, and the guard must see the first line as the
	// decoder will (a comment, a data line).
	body := newGuard(newBOMReader(src), s.cfg.MaxEventBytes, s.cfg.IdleTimeout)
	body.maxTime = s.cfg.MaxEventTime
	dec := eventsource.NewDecoderWithOptions(body, eventsource.DecoderOptionLastEventID(resume))
	defer func() {
		_ = body.Close()
		// Let the decoder's reading goroutine end: it stops at the read error the close causes.
		// Once that goroutine has ended, Decode returns (nil, nil): its channels are closed.
		for {
			if e, err := dec.Decode(); err != nil || e == nil {
				return
			}
		}
	}()
	for {
		e, err := dec.Decode()
		if err == nil && e == nil {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				c.err = err
				if ctx.Err() == nil && errors.Is(err, io.ErrUnexpectedEOF) {
					c.err = errors.New("connection closed in the middle of a message")
				}
			}
			return c
		}
		c.messages++
		if r, ok := e.(interface{ Retry() int64 }); ok && r.Retry() > 0 {
			c.retry = s.retryHint(r.Retry(), c.retry)
		}
		ev := Event{ID: e.Id(), Name: e.Event(), ResumeID: e.Id()}
		if l, ok := e.(eventsource.EventWithLastID); ok {
			ev.ResumeID = l.LastEventID()
		}
		if n, why, ok := parseOversize(ev.Name); ok {
			ev.Name, ev.Oversize, ev.ManyLines = "", n, why == cutLines
			switch why {
			case cutLines:
				s.log.Warn("event has more lines than one message may have; dead-lettering a description",
					"event_id", ev.ID, "size", n, "max_lines", MaxLines)
			case cutSlow:
				ev.Slow = s.cfg.MaxEventTime
				s.log.Warn("event did not end within the time bound of one message; dead-lettering a description "+
					"and reconnecting", "event_id", ev.ID, "size", n, "limit", s.cfg.MaxEventTime.String())
			default:
				s.log.Warn("event exceeds the size bound; dead-lettering a description", "event_id", ev.ID,
					"size", n, "limit", s.cfg.MaxEventBytes)
			}
		} else {
			switch data := e.Data(); data {
			case "":
				// A block without a data line (retry:, id: or event: alone) dispatches no event. Its id:
				// still sets the last event id, which the decoder hands on as the next event's
				// LastEventID (its ResumeID).
				continue
			case emptyData:
				// A data line without a value: an event with empty data, which the sink dead-letters as
				// not JSON rather than losing it without a trace (see emptyDataMarker).
			default:
				// The decoder's string is the event's only copy: share its bytes (Data is read-only).
				// Measured against []byte(data) on events of ~1 KB: BenchmarkStreamEvents -cpu 1 takes
				// 4.9 µs and 10 allocations (2,360 B) per event against 5.5 µs and 11 (3,384 B); the
				// whole bridge in cmd/bench, 15.5 against 16.6 µs of CPU per event (medians of 10 runs,
				// alternated; the copy cost more in 9 of the 10 pairs).
				ev.Data = unsafe.Slice(unsafe.StringData(data), len(data))
			}
		}
		if s.cfg.Observer != nil {
			s.cfg.Observer.Received(&ev)
		}
		if err := sink.Handle(ctx, ev); err != nil {
			if ctx.Err() == nil {
				c.sinkErr = err
			}
			return c
		}
	}
}

// retryHint returns the reconnection time a retry: hint of ms milliseconds sets, at most MaxRetryHint. A
// cut is logged when the hint differs from the previous one (prev), not at every message that repeats it.
func (s *Stream) retryHint(ms int64, prev time.Duration) time.Duration {
	if ms <= s.cfg.MaxRetryHint.Milliseconds() {
		return time.Duration(ms) * time.Millisecond
	}
	if prev != s.cfg.MaxRetryHint {
		s.log.Warn("stream's retry: hint cut to BRIDGE_STREAM_RETRY_HINT_MAX", "hint_ms", ms,
			"max", s.cfg.MaxRetryHint.String())
	}
	return s.cfg.MaxRetryHint
}

// heartbeatBody tells the observer of every read that brought bytes, keep-alive comments included (the
// SSE decoder hides those).
type heartbeatBody struct {
	io.ReadCloser
	obs StreamObserver
}

func (b heartbeatBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.obs.Heartbeat()
	}
	return n, err
}

// checkStreamResponse turns anything but a 200 text/event-stream response into an error.
func checkStreamResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusOK {
		st := readStatusError(resp)
		if st.Code == http.StatusForbidden || st.Code == http.StatusNotFound {
			return fmt.Errorf("%w: %w", ErrUnavailable, st)
		}
		return st
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "text/event-stream" {
		return fmt.Errorf("%w: Content-Type %s", ErrNotEventStream, quoted(ct))
	}
	return nil
}

// Reasons a connection ended, as passed to StreamObserver.Disconnected. The set is closed (a metrics label).
const (
	DisconnectEOF    = "eof"    // closed by the upstream
	DisconnectIdle   = "idle"   // no byte within the idle timeout
	DisconnectStatus = "status" // a non-success answer
	DisconnectError  = "error"  // any other failure
)

func disconnectReason(err error) string {
	var st *StatusError
	switch {
	case err == nil:
		return DisconnectEOF
	case errors.Is(err, ErrIdle):
		return DisconnectIdle
	case errors.As(err, &st):
		return DisconnectStatus
	default:
		return DisconnectError
	}
}

// startConnect starts the span of one connection attempt: it lasts as long as the connection, so that
// a trace shows when each was open and why it ended; the request itself is its child (the HTTP client's
// span, when tracing wraps the client's transport).
func (s *Stream) startConnect(ctx context.Context, resume string) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{attribute.Bool("bridge.stream.resumed", resume != "")}
	if resume != "" {
		attrs = append(attrs, attribute.String("bridge.stream.resume_after", logging.Value(resume, 256)))
	}
	return s.cfg.Tracer.Start(ctx, "stream connection", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrs...))
}

// endConnect ends a connection's span with the reason it ended; a connection the bridge closed to stop
// (stopping) is no error.
func endConnect(span trace.Span, err error, stopping bool) {
	if stopping {
		span.SetAttributes(attribute.String("bridge.stream.disconnect", "stop"))
	} else if err != nil {
		span.SetAttributes(attribute.String("bridge.stream.disconnect", disconnectReason(err)))
		span.SetStatus(codes.Error, logging.Value(err.Error(), 256))
	} else {
		span.SetAttributes(attribute.String("bridge.stream.disconnect", DisconnectEOF))
	}
	span.End()
}
