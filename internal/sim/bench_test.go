package sim

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkFloodStream measures the stream in flood mode over loopback with ~1 KB events and a reader
// that only counts messages: the simulator's own ceiling, to compare with what a client achieves.
func BenchmarkFloodStream(b *testing.B) {
	e := newEnv(b, Options{EventRate: -1, EventLimit: b.N, EventSize: 1000})
	tok := e.login("demo")

	req, _ := http.NewRequest(http.MethodGet, e.api+"/tracking/events/stream", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 256<<10)
	var n, bytes int
	var last byte
	for n < b.N {
		m, err := resp.Body.Read(buf)
		for _, c := range buf[:m] {
			if c == '\n' && last == '\n' {
				n++
			}
			last = c
		}
		bytes += m
		if err == io.EOF {
			break
		} else if err != nil {
			b.Fatal(err)
		}
	}
	el := time.Since(start)
	b.ReportMetric(float64(n)/el.Seconds(), "events/s")
	b.ReportMetric(float64(bytes)/float64(max(n, 1)), "B/event")
}

// BenchmarkRenderGenerated measures rendering one generated SSE message.
func BenchmarkRenderGenerated(b *testing.B) {
	g := newGenerator("demo", 1000, seedLocations(), idPrefix)
	buf := make([]byte, 0, 4096)
	ts := time.Now().UTC()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = g.appendMessage(buf[:0], int64(i+1), int64(i), ts)
	}
}

// BenchmarkDocumentCheck measures the simulator's check of one report request against the OpenAPI
// document (openapi3filter.ValidateRequest, the body read and restored), the cost every API request pays.
func BenchmarkDocumentCheck(b *testing.B) {
	d, err := newDocument()
	if err != nil {
		b.Fatal(err)
	}
	route := d.route("POST", "/tracking/events")
	body := `{"order":{"orderId":"TO1","positionId":"10"},"transport":{"identifier":"truck-7"},` +
		`"event":{"timestamp":"2024-05-01T12:00:07Z","type":"GATE_IN","observation":{"observedMeansOfTransport":` +
		`{"modeOfTransport":"TRUCK","truck":{"countryCode":"DE","licensePlate":"HH-TB 7"}},"observedLoadingUnit":` +
		`{"loadingUnit":{"containerClass":"CONTAINER","number":"MSCU1234565"},"loadingState":"FULL",` +
		`"seals":[{"type":"CUSTOMS","number":"S-7"}]}}},"reporter":{"id":"op-1","name":"Test Operator"}}`
	b.ReportAllocs()
	for b.Loop() {
		r, _ := http.NewRequest(http.MethodPost, "/v1.0/tracking/events", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if p := d.check(r, route); p != nil {
			b.Fatal(p)
		}
	}
}
