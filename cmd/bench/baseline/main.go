// Command baseline is the benchmark's own yardstick: the least work that moves Server-Sent Events from
// the upstream's stream into JetStream with the libraries the bridge uses (launchdarkly/eventsource's
// decoder, nats.go's jetstream PublishMsgAsync with a window of publishes awaiting their acknowledgement,
// Nats-Msg-Id from the SSE id). It keeps no resume cursor, no metrics, no fence and no dead letters, and
// retries nothing: what the bridge costs beyond it is the price of its promises.
//
// cmd/bench builds and runs it by default; -refpipe swaps in an outside program with the same interface:
//
//   - the flags -url (the stream), -n (events to move, then exit), -nats, -token-url, -user, -pass,
//     -client-id (the password grant; no -token-url means no token) and -window;
//   - a fresh stream REFPIPE (file storage, duplicate window 2m) holding the events on
//     refpipe.events.<type>;
//   - a line "RESULT <name> events=<n> secs=<s> events_per_s=<r>" on standard output once every publish
//     is acknowledged, and exit status 0.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/launchdarkly/eventsource"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/oauth2"
)

// The stream and subjects of the yardstick interface.
const (
	streamName    = "REFPIPE"
	subjectPrefix = "refpipe.events."
)

// ackWait bounds the wait for the last acknowledgements once n events are published.
const ackWait = time.Minute

// options are the command's flags.
type options struct {
	url, natsURL                   string
	tokenURL, user, pass, clientID string
	n, window                      int
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	o, err := parse(os.Args[1:], os.Stderr)
	if err == nil {
		err = run(ctx, o, os.Stdout)
	}
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintf(os.Stderr, "baseline: %v\n", err)
		os.Exit(1)
	}
}

// parse reads the flags of the yardstick interface.
func parse(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("baseline", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.url, "url", "", "URL of the upstream's event stream (required)")
	fs.IntVar(&o.n, "n", 200000, "events to move; then wait for their acknowledgements and exit")
	fs.StringVar(&o.natsURL, "nats", nats.DefaultURL, "NATS server URL")
	fs.StringVar(&o.tokenURL, "token-url", "", "OAuth 2.0 token URL for the password grant; empty sends no token")
	fs.StringVar(&o.user, "user", "", "user name of the password grant")
	fs.StringVar(&o.pass, "pass", "", "password of the password grant")
	fs.StringVar(&o.clientID, "client-id", "", "client id of the password grant")
	fs.IntVar(&o.window, "window", 4000, "most asynchronous publishes awaiting their acknowledgement")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("no arguments expected, got %q", fs.Args())
	case o.url == "":
		return o, errors.New("-url is required")
	case o.n < 1:
		return o, errors.New("-n must be at least 1")
	case o.window < 1:
		return o, errors.New("-window must be at least 1")
	}
	return o, nil
}

// run moves o.n events from the stream to JetStream and writes the RESULT line to stdout.
func run(ctx context.Context, o options, stdout io.Writer) error {
	nc, err := nats.Connect(o.natsURL)
	if err != nil {
		return fmt.Errorf("nats: %w", err)
	}
	defer nc.Close()
	var failed atomic.Int64
	var firstErr atomic.Value
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.window),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
			failed.Add(1)
			firstErr.CompareAndSwap(nil, err)
		}))
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if err := js.DeleteStream(ctx, streamName); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("deleting stream %s: %w", streamName, err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: streamName, Subjects: []string{subjectPrefix + ">"},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute}); err != nil {
		return fmt.Errorf("creating stream %s: %w", streamName, err)
	}

	body, err := open(ctx, o)
	if err != nil {
		return err
	}
	defer body.Close()

	start := time.Now()
	dec := eventsource.NewDecoder(body)
	for count := 0; count < o.n; {
		ev, err := dec.Decode()
		if err != nil {
			return fmt.Errorf("stream ended after %d events: %w", count, err)
		}
		if ev.Data() == "" {
			continue // a block without data is no event
		}
		msg := nats.NewMsg(subjectPrefix + typeToken(ev.Event()))
		msg.Data = []byte(ev.Data())
		msg.Header.Set(jetstream.MsgIDHeader, ev.Id())
		for {
			// PublishMsgAsync waits for room in the window and gives up with ErrTooManyStalledMsgs after
			// its stall wait; then wait again.
			_, err := js.PublishMsgAsync(msg)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return fmt.Errorf("publishing event %d: %w", count+1, err)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		count++
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(ackWait):
		return fmt.Errorf("%d acknowledgements still awaited after %v", js.PublishAsyncPending(), ackWait)
	case <-ctx.Done():
		return ctx.Err()
	}
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d publishes failed, the first with: %v", n, firstErr.Load())
	}
	secs := time.Since(start).Seconds()
	_, err = fmt.Fprintf(stdout, "RESULT baseline events=%d secs=%.3f events_per_s=%.0f\n", o.n, secs, float64(o.n)/secs)
	return err
}

// open gets a token when o names a token URL and opens the event stream; the caller closes the body.
func open(ctx context.Context, o options) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if o.tokenURL != "" {
		conf := oauth2.Config{ClientID: o.clientID, Scopes: []string{"openid"},
			Endpoint: oauth2.Endpoint{TokenURL: o.tokenURL, AuthStyle: oauth2.AuthStyleInParams}}
		tok, err := conf.PasswordCredentialsToken(ctx, o.user, o.pass)
		if err != nil {
			return nil, fmt.Errorf("token: %w", err)
		}
		tok.SetAuthHeader(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || mt != "text/event-stream" {
		resp.Body.Close()
		return nil, fmt.Errorf("stream: HTTP %d, content type %q", resp.StatusCode, mt)
	}
	return resp.Body, nil
}

// typeToken makes an SSE event name a single subject token: characters outside [A-Za-z0-9_-] become
// '_', and no name gives UNKNOWN.
func typeToken(name string) string {
	if name == "" {
		return "UNKNOWN"
	}
	return strings.Map(func(r rune) rune {
		switch {
		case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9', r == '_', r == '-':
			return r
		}
		return '_'
	}, name)
}
