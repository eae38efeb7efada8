package layout_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

func TestTooLarge(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nats.ErrMaxPayload, true},
		{fmt.Errorf("publish: %w", nats.ErrMaxPayload), true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum}, true},
		{&jetstream.APIError{Code: 503, ErrorCode: 10077}, false},
		{nats.ErrTimeout, false},
		{errors.New("message size exceeds maximum allowed"), false},
		{nil, false},
	} {
		if got := layout.TooLarge(tc.err); got != tc.want {
			t.Errorf("TooLarge(%v) = %v", tc.err, got)
		}
	}
}

func TestMaxMessage(t *testing.T) {
	for _, tc := range []struct{ payload, stream, want int64 }{
		{1 << 20, -1, 1 << 20}, {1 << 20, 0, 1 << 20}, {1 << 20, 2048, 2048}, {1024, 2048, 1024},
		{0, 2048, 2048}, {0, -1, 0},
	} {
		if got := layout.MaxMessage(tc.payload, tc.stream); got != tc.want {
			t.Errorf("MaxMessage(%d, %d) = %d, want %d", tc.payload, tc.stream, got, tc.want)
		}
	}
}

// TestMsgSize: MsgSize is the size the client checks against max_payload: a message of exactly
// max_payload is accepted, one byte more is refused.
func TestMsgSize(t *testing.T) {
	const max = 4096
	nc := testutil.StartNATS(t, func(o *server.Options) { o.MaxPayload = max }).Connect()
	m := &nats.Msg{Subject: "tracking.dlq.events", Header: nats.Header{"A": {"1"}, "Bee": {"x", "yy"}}}
	m.Data = make([]byte, max-layout.MsgSize(m))
	if layout.MsgSize(m) != max {
		t.Fatalf("MsgSize = %d", layout.MsgSize(m))
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatalf("a message of exactly max_payload: %v", err)
	}
	m.Data = append(m.Data, 'x')
	if err := nc.PublishMsg(m); !errors.Is(err, nats.ErrMaxPayload) {
		t.Fatalf("a message one byte over max_payload: %v, want ErrMaxPayload", err)
	}
}

// TestFitAlwaysFits: whatever the reason (HTML-like characters included, which json.Marshal
// would triple) and the max_payload, a replaced dead letter fits.
func TestFitAlwaysFits(t *testing.T) {
	for _, max := range []int64{2 << 10, 4 << 10, 16 << 10} {
		m := &nats.Msg{Subject: "tracking.dlq.events", Header: nats.Header{
			jetstream.MsgIDHeader: {"x"}, layout.HeaderError: {logging.Clip(strings.Repeat("<&>", 5000), layout.MaxErrorHeader)}}, Data: make([]byte, max)}
		if !layout.Fit(m, max, "x") {
			t.Fatalf("max %d: not replaced", max)
		}
		if size := layout.MsgSize(m); size > int(max) {
			t.Errorf("max %d: the dead letter is still %d bytes", max, size)
		}
		if !strings.Contains(m.Header.Get(layout.HeaderError), "the data was dropped") {
			t.Errorf("max %d: Bridge-Error does not say the data was dropped: %.80q…", max, m.Header.Get(layout.HeaderError))
		}
	}
}
