package daemon

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestStreamsCheckSilence: the streams' readiness check takes JetStream's answers, not its silence. A
// scripted JetStream API answers that the streams exist, then goes silent (its request queue kept busy by
// another client): the check passes for streamsGrace after the last answer, then fails; an answer that a
// stream does not exist fails it at once, grace or not.
func TestStreamsCheckSilence(t *testing.T) {
	t.Parallel()
	// No JetStream of its own: the scripted API below is the only one answering.
	ns := testutil.StartNATS(t, func(o *server.Options) { o.JetStream = false })
	var mode atomic.Value
	mode.Store("exist")
	api := ns.Connect()
	if _, err := api.Subscribe("$JS.API.STREAM.INFO.*", func(m *nats.Msg) {
		name := strings.TrimPrefix(m.Subject, "$JS.API.STREAM.INFO.")
		switch mode.Load() {
		case "exist":
			_ = m.Respond([]byte(`{"type":"io.nats.jetstream.api.v1.stream_info_response","config":{"name":"` + name +
				`","subjects":["x.` + name + `"]},"state":{},"created":"2026-01-01T00:00:00Z"}`))
		case "missing":
			_ = m.Respond([]byte(`{"type":"io.nats.jetstream.api.v1.stream_info_response","error":{"code":404,"err_code":10059,"description":"stream not found"}}`))
		} // "silent": no answer
	}); err != nil {
		t.Fatal(err)
	}
	if err := api.Flush(); err != nil {
		t.Fatal(err)
	}
	o := &ops{d: &Daemon{nc: ns.Connect(), layout: layout.Streams{Prefix: "tracking"}}}
	ctx := context.Background()
	if err := o.askStreams(ctx); err != nil {
		t.Fatalf("streams answered as existing: %v", err)
	}
	mode.Store("silent")
	if err := o.askStreams(ctx); err != nil {
		t.Errorf("JetStream silent just after it answered: %v, want ready (grace)", err)
	}
	o.streamsSeen.Store(time.Now().Add(-streamsGrace - time.Second).UnixNano())
	if err := o.askStreams(ctx); err == nil {
		t.Error("JetStream silent for longer than the grace: ready, want not")
	}
	mode.Store("exist")
	if err := o.askStreams(ctx); err != nil {
		t.Fatalf("streams answered as existing again: %v", err)
	}
	mode.Store("missing")
	if err := o.askStreams(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("a stream answered missing within the grace: %v, want not ready", err)
	}
}
