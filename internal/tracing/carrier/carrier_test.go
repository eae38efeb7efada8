package carrier

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"
)

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestInjectLowerCase: the headers are written under W3C's lower-case names, which nats.Header.Set would
// canonicalise, and read back.
func TestInjectLowerCase(t *testing.T) {
	ts, _ := trace.ParseTraceState("congo=t61rcWkgMzE")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xab}, SpanID: trace.SpanID{0xcd},
		TraceFlags: trace.FlagsSampled, TraceState: ts})
	h := nats.Header{}
	Inject(trace.ContextWithSpanContext(context.Background(), sc), h)
	if got := h["traceparent"]; len(got) != 1 || got[0] != "00-ab000000000000000000000000000000-cd00000000000000-01" {
		t.Errorf("traceparent %q", got)
	}
	if got := h["tracestate"]; len(got) != 1 || got[0] != "congo=t61rcWkgMzE" {
		t.Errorf("tracestate %q", got)
	}
	if _, ok := h["Traceparent"]; ok {
		t.Error("canonical Traceparent written")
	}
	if tp := Format(sc); tp != h["traceparent"][0] {
		t.Errorf("Format: %q, Inject: %q", tp, h)
	}
	unsampled := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 0xff}, SpanID: trace.SpanID{0xfe, 9}})
	hu := nats.Header{}
	Inject(trace.ContextWithSpanContext(context.Background(), unsampled), hu)
	if tp := Format(unsampled); tp != hu["traceparent"][0] {
		t.Errorf("Format: %q, Inject: %q", tp, hu)
	}
	if tp := Format(trace.SpanContext{}); tp != "" {
		t.Errorf("Format of no span context: %q", tp)
	}
	back := SpanContext(h)
	if back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || !back.IsSampled() || !back.IsRemote() ||
		back.TraceState().String() != "congo=t61rcWkgMzE" {
		t.Errorf("read back %v", back)
	}
	h = nats.Header{}
	Inject(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("no span, headers %v", h)
	}
}

// TestExtractHostile: what a publisher put in the headers is bounded: a malformed traceparent, or one
// past MaxTraceparent that OpenTelemetry alone would accept, is ignored, a canonical-case one is not
// read, a tracestate past 8 KiB is dropped, a shorter one past 512 characters is cut by whole entries to
// 512 characters and 32 entries, and nothing comes back out as it went in. The cases near each bound are
// ones OpenTelemetry's own checks let through, so that only the carrier's bounds decide them.
func TestExtractHostile(t *testing.T) {
	many := func(n, size int) string {
		var b []string
		for i := range n {
			b = append(b, fmt.Sprintf("k%d=%s", i, strings.Repeat("v", size)))
		}
		return strings.Join(b, ",")
	}
	// exact is short valid entries (values of v characters, the last one padded) of exactly n bytes.
	exact := func(n, v int) string {
		var b strings.Builder
		for i := 0; n-b.Len() > 40; i++ {
			fmt.Fprintf(&b, "k%d=%s,", i, strings.Repeat("v", v))
		}
		b.WriteString("z=" + strings.Repeat("v", n-b.Len()-2))
		return b.String()
	}
	future := "01" + parent[2:] + "-" // version 01, whose added fields a reader of version 00 skips
	for _, tc := range []struct {
		name      string
		h         nats.Header
		valid     bool
		wantState string // "" for none; "<=512" for cut to at most 512 characters; "512" for kept whole
	}{
		{"malformed", nats.Header{"traceparent": {"00-xyz-00f067aa0ba902b7-01"}}, false, ""},
		{"upper-case hex", nats.Header{"traceparent": {strings.ToUpper(parent)}}, false, ""},
		{"all-zero trace id", nats.Header{"traceparent": {"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}}, false, ""},
		// A later version may add fields, which OpenTelemetry accepts at any length: only MaxTraceparent
		// stops a 10 KiB one, and one of MaxTraceparent characters is still read.
		{"10 KiB future-version traceparent", nats.Header{"traceparent": {future + strings.Repeat("a", 10<<10)}}, false, ""},
		{"future-version traceparent at the bound", nats.Header{"traceparent": {future + strings.Repeat("a", MaxTraceparent-len(future))}}, true, ""},
		{"future version with extra field", nats.Header{"traceparent": {future + "extra"}}, true, ""},
		{"canonical name", nats.Header{"Traceparent": {parent}}, false, ""},
		// Short valid entries past 8 KiB are not even split; just under, they are cut to 512 characters.
		{"over 8 KiB of short entries", nats.Header{"traceparent": {parent}, "tracestate": {exact(8<<10+1, 8)}}, true, ""},
		{"just under 8 KiB of short entries", nats.Header{"traceparent": {parent}, "tracestate": {exact(8<<10, 8)}}, true, "<=512"},
		{"many small entries", nats.Header{"traceparent": {parent}, "tracestate": {many(200, 10)}}, true, "<=512"},
		// Entries so short that more than 32 fit in 512 characters: cut to 32, which OpenTelemetry keeps.
		{"100 tiny entries", nats.Header{"traceparent": {parent}, "tracestate": {many(100, 1)}}, true, "<=512"},
		{"512 characters of at most 32 entries kept whole", nats.Header{"traceparent": {parent}, "tracestate": {exact(MaxTracestate, 12)}}, true, "512"},
		{"long entry dropped first", nats.Header{"traceparent": {parent},
			"tracestate": {"a=" + strings.Repeat("x", 200) + "," + many(40, 12)}}, true, "<=512"},
		{"malformed tracestate", nats.Header{"traceparent": {parent}, "tracestate": {"=\x00=,,"}}, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := SpanContext(tc.h)
			if sc.IsValid() != tc.valid {
				t.Fatalf("valid %v, want %v", sc.IsValid(), tc.valid)
			}
			out := nats.Header{}
			Inject(trace.ContextWithSpanContext(context.Background(), sc), out)
			state := sc.TraceState().String()
			switch {
			case tc.wantState == "" && state != "":
				t.Errorf("tracestate %q kept", state)
			case tc.wantState == "<=512" && (state == "" || len(state) > MaxTracestate || sc.TraceState().Len() > 32):
				t.Errorf("tracestate of %d bytes, %d entries", len(state), sc.TraceState().Len())
			case tc.wantState == "512" && state != tc.h["tracestate"][0]:
				t.Errorf("tracestate %q, want it kept whole", state)
			}
			for k, vs := range out {
				for _, v := range vs {
					if len(v) > MaxTracestate {
						t.Errorf("%s written back with %d bytes", k, len(v))
					}
					if in := tc.h[k]; len(in) > 0 && len(in[0]) > MaxTracestate && v == in[0] {
						t.Errorf("%s echoed raw", k)
					}
				}
			}
		})
	}
}

// FuzzExtract: no header makes Extract panic or produce a tracestate past W3C's bounds.
func FuzzExtract(f *testing.F) {
	f.Add(parent, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	f.Add(parent, strings.Repeat("a=b,", 300))
	f.Fuzz(func(t *testing.T, tp, ts string) {
		sc := SpanContext(nats.Header{"traceparent": {tp}, "tracestate": {ts}})
		if len(sc.TraceState().String()) > MaxTracestate {
			t.Fatalf("tracestate of %d bytes", len(sc.TraceState().String()))
		}
	})
}
