// Package carrier carries W3C trace context (traceparent, tracestate) in NATS message headers. NATS header
// names are case-sensitive and W3C writes them in lower case, so the headers are set by direct map
// assignment: nats.Header.Set, like an HTTP carrier, would write "Traceparent", which no W3C reader finds.
//
// Reading is bounded: a header's value comes from whoever published the message, so a traceparent that is
// not one (too long, malformed) is ignored, and a tracestate longer than W3C asks anyone to keep is cut
// by whole entries as W3C's rules say, or ignored when it cannot be parsed; nothing read is ever written
// back as it came. The package depends on the OpenTelemetry API only (no SDK), so that package tracking
// can offer it to downstream services.
package carrier

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Header names, as W3C Trace Context writes them.
const (
	Traceparent = "traceparent"
	Tracestate  = "tracestate"
)

// Bounds of what is read. A traceparent of version 00 has 55 characters; later versions may add fields,
// which a reader of version 00 ignores, so a longer value is read but not one past MaxTraceparent. W3C asks
// a platform to keep at least 512 characters of tracestate, and to cut a longer one by dropping entries
// longer than 128 characters first, then entries from its end; it allows 32 entries at most.
const (
	MaxTraceparent       = 256
	MaxTracestate        = 512
	maxTracestateEntry   = 128
	maxTracestateEntries = 32
	maxTracestateInput   = 8 << 10 // longer tracestate values are not even split: ignored
)

var propagator = propagation.TraceContext{}

// Inject writes the context of the span in ctx into h as traceparent (and tracestate when it has one). It
// writes nothing when ctx holds no valid span context.
func Inject(ctx context.Context, h nats.Header) {
	propagator.Inject(ctx, writer(h))
}

// Format returns the traceparent value of sc, as Inject writes it ("" when sc is not valid), without a
// header map: for a caller that sets its headers itself, once per message, and whose spans start traces
// of their own, with no tracestate to carry.
func Format(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	const hexDigits = "0123456789abcdef"
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	for i, c := range tid {
		b[3+2*i], b[4+2*i] = hexDigits[c>>4], hexDigits[c&15]
	}
	b[35] = '-'
	for i, c := range sid {
		b[36+2*i], b[37+2*i] = hexDigits[c>>4], hexDigits[c&15]
	}
	b[52] = '-'
	flags := byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))
	b[53], b[54] = hexDigits[flags>>4], hexDigits[flags&15]
	return string(b[:])
}

// Extract returns ctx continuing the trace named by h's traceparent and tracestate: a context with that
// remote span context, or ctx itself when h carries none or a malformed one.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, reader(h))
}

// SpanContext returns the remote span context h names; it is not valid when h names none.
func SpanContext(h nats.Header) trace.SpanContext {
	return trace.SpanContextFromContext(Extract(context.Background(), h))
}

// writer is the carrier Inject writes through: lower-case names, one value each.
type writer nats.Header

func (w writer) Get(key string) string { return first(nats.Header(w), key) }
func (w writer) Set(key, value string) { w[key] = []string{value} }
func (w writer) Keys() []string        { return []string{Traceparent, Tracestate} }

// reader is the carrier Extract reads through, applying the bounds.
type reader nats.Header

func (r reader) Get(key string) string {
	v := first(nats.Header(r), key)
	switch key {
	case Traceparent:
		if len(v) > MaxTraceparent {
			return ""
		}
	case Tracestate:
		return boundTracestate(v)
	}
	return v
}
func (r reader) Set(string, string) {}
func (r reader) Keys() []string     { return []string{Traceparent, Tracestate} }

// first returns the first value of key in h, looked up under that exact (lower-case) name only.
func first(h nats.Header, key string) string {
	if vs := h[key]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// boundTracestate returns a tracestate value cut to at most MaxTracestate bytes the way W3C Trace Context
// says a platform may cut it: entries longer than 128 characters go first, then entries from the end,
// each whole. A value longer than 8 KiB is dropped whole (""), as is one whose entries cannot be cut to
// fit. The result still has to parse: the propagator ignores a tracestate that does not.
func boundTracestate(v string) string {
	if len(v) <= MaxTracestate {
		return v
	}
	if len(v) > maxTracestateInput {
		return ""
	}
	var b strings.Builder
	kept := 0
	for entry := range strings.SplitSeq(v, ",") {
		entry = strings.Trim(entry, " \t")
		if entry == "" || len(entry) > maxTracestateEntry {
			continue
		}
		n := len(entry)
		if b.Len() > 0 {
			n++
		}
		if b.Len()+n > MaxTracestate || kept == maxTracestateEntries {
			break
		}
		kept++
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(entry)
	}
	return b.String()
}
