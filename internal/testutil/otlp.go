package testutil

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLPReceiver is an OTLP/HTTP trace collector for tests: an HTTP server on 127.0.0.1 that decodes every
// export request (protobuf ExportTraceServiceRequest, as OTLP/HTTP sends it) and keeps its spans. Block
// makes it hold every request, as a collector that hangs would; Close lets them go and stops it, as a
// collector that is down.
type OTLPReceiver struct {
	// URL is the traces endpoint (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); Base the server's root
	// (OTEL_EXPORTER_OTLP_ENDPOINT).
	URL, Base string
	srv       *httptest.Server

	mu    sync.Mutex
	spans []ReceivedSpan
	block chan struct{} // non-nil while blocked: closed by Close
}

// ReceivedSpan is one span as the receiver decoded it, its ids in hex as traceparent writes them.
type ReceivedSpan struct {
	Name                    string
	TraceID, SpanID, Parent string
	Kind                    tracepb.Span_SpanKind
	Attrs                   map[string]any // string, int64, float64, bool, or fmt's %v of other values
	Events                  []string       // the span events' names
	Links                   []string       // the linked spans' trace-id/span-id
	Status                  tracepb.Status_StatusCode
	Resource                map[string]any
	StartUnixNano, EndNano  uint64
}

// NewOTLPReceiver starts a receiver, stopped at the end of the test.
func NewOTLPReceiver(tb testing.TB) *OTLPReceiver {
	tb.Helper()
	r := &OTLPReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.handle))
	r.Base = r.srv.URL
	r.URL = r.srv.URL + "/v1/traces"
	tb.Cleanup(r.Close)
	return r
}

// Close lets held requests through and stops the receiver; later exports fail to connect.
func (r *OTLPReceiver) Close() {
	r.mu.Lock()
	if r.block != nil {
		close(r.block)
		r.block = nil
	}
	r.mu.Unlock()
	r.srv.Close()
}

// Block makes the receiver hold every request (those in progress and later ones) until Close or the
// request's own end.
func (r *OTLPReceiver) Block() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.block == nil {
		r.block = make(chan struct{})
	}
}

// Spans returns a copy of the spans received so far.
func (r *OTLPReceiver) Spans() []ReceivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ReceivedSpan(nil), r.spans...)
}

// Find returns the received spans for which match holds.
func (r *OTLPReceiver) Find(match func(ReceivedSpan) bool) []ReceivedSpan {
	var out []ReceivedSpan
	for _, s := range r.Spans() {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// BySpanID returns the received spans by their span id.
func (r *OTLPReceiver) BySpanID() map[string]ReceivedSpan {
	out := map[string]ReceivedSpan{}
	for _, s := range r.Spans() {
		out[s.SpanID] = s
	}
	return out
}

func (r *OTLPReceiver) handle(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	block := r.block
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-req.Context().Done():
			return
		}
	}
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var ex coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &ex); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []ReceivedSpan
	for _, rs := range ex.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				rec := ReceivedSpan{Name: s.GetName(), TraceID: hex.EncodeToString(s.GetTraceId()),
					SpanID: hex.EncodeToString(s.GetSpanId()), Parent: hex.EncodeToString(s.GetParentSpanId()),
					Kind: s.GetKind(), Attrs: attrMap(s.GetAttributes()), Resource: res,
					Status:        s.GetStatus().GetCode(),
					StartUnixNano: s.GetStartTimeUnixNano(), EndNano: s.GetEndTimeUnixNano()}
				for _, e := range s.GetEvents() {
					rec.Events = append(rec.Events, e.GetName())
				}
				for _, l := range s.GetLinks() {
					rec.Links = append(rec.Links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
				}
				got = append(got, rec)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = x.IntValue
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = x.DoubleValue
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = x.BoolValue
		default:
			m[kv.GetKey()] = fmt.Sprintf("%v", v)
		}
	}
	return m
}
