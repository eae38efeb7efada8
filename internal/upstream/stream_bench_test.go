package upstream

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// BenchmarkStreamEvents measures the stream reader on its own: SSE events of about 1 KB from a server over
// loopback that writes them as fast as the reader takes them, each handed to a sink that only reads its
// data. One op is one event; the server runs in the same process, so its cost is included (it writes a
// prepared block, with no allocation per event).
func BenchmarkStreamEvents(b *testing.B) {
	const perBlock = 256
	data := `{"id":"%08d","type":"GATE_IN","timestamp":"2026-11-22T10:00:00Z","observation":{"orderId":"BO-00000001",` +
		`"positionId":"1","location":{"type":"TERMINAL","name":"Container Terminal Altenwerder"},"notes":"` +
		strings.Repeat("x", 760) + `"}}`
	var block bytes.Buffer
	for i := range perBlock {
		fmt.Fprintf(&block, "id: ev-%08d\nevent: GATE_IN\ndata: "+data+"\n\n", i, i)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/token" {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"access_token":"at","expires_in":300,"token_type":"Bearer"}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			if _, err := w.Write(block.Bytes()); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	cfg := scriptedConfig(srv.URL)
	cfg.MaxEventBytes = 1 << 20
	cfg.IdleTimeout = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink := &countingSink{want: b.N, done: cancel}
	b.ReportAllocs()
	b.SetBytes(int64(block.Len() / perBlock))
	b.ResetTimer()
	if err := NewStream(cfg).Run(ctx, sink); err != nil && ctx.Err() == nil {
		b.Fatal(err)
	}
	b.StopTimer()
	if sink.n < b.N {
		b.Fatalf("%d events of %d", sink.n, b.N)
	}
}

// countingSink takes events until it has want, then calls done.
type countingSink struct {
	n, want int
	sum     byte
	done    func()
}

func (s *countingSink) Resume(context.Context) (string, error) { return "", nil }

func (s *countingSink) Handle(ctx context.Context, ev Event) error {
	s.sum += ev.Data[len(ev.Data)/2]
	if s.n++; s.n == s.want {
		s.done()
	}
	return ctx.Err()
}
