package tracing

import (
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/encoding/protowire"
)

// encoder writes a batch of spans as an OTLP ExportTraceServiceRequest in protobuf's wire format
// (opentelemetry-proto, collector/trace/v1 and trace/v1), straight from the SDK's spans into one buffer it
// keeps for the next batch. The OTLP exporter builds the request's Go structs first (a few allocations
// per attribute) and marshals them after: at ratio 1 that work runs in one burst per batch, and the
// events that arrive meanwhile make most of the added p99 latency (docs/performance.md, Tracing).
//
// Field numbers are the .proto files'. A message's length is known once it is written: end moves it
// right when its length takes more than the one byte begin kept for it.
type encoder struct {
	buf []byte
}

// Field numbers of opentelemetry-proto's messages, as their .proto files have them.
const (
	fRequestResourceSpans protowire.Number = 1 // ExportTraceServiceRequest.resource_spans

	fResourceSpansResource   protowire.Number = 1
	fResourceSpansScopeSpans protowire.Number = 2
	fResourceSpansSchemaURL  protowire.Number = 3

	fResourceAttributes protowire.Number = 1

	fScopeSpansScope     protowire.Number = 1
	fScopeSpansSpans     protowire.Number = 2
	fScopeSpansSchemaURL protowire.Number = 3

	fScopeName       protowire.Number = 1
	fScopeVersion    protowire.Number = 2
	fScopeAttributes protowire.Number = 3

	fSpanTraceID           protowire.Number = 1
	fSpanSpanID            protowire.Number = 2
	fSpanTraceState        protowire.Number = 3
	fSpanParentSpanID      protowire.Number = 4
	fSpanName              protowire.Number = 5
	fSpanKind              protowire.Number = 6
	fSpanStart             protowire.Number = 7
	fSpanEnd               protowire.Number = 8
	fSpanAttributes        protowire.Number = 9
	fSpanDroppedAttributes protowire.Number = 10
	fSpanEvents            protowire.Number = 11
	fSpanDroppedEvents     protowire.Number = 12
	fSpanLinks             protowire.Number = 13
	fSpanDroppedLinks      protowire.Number = 14
	fSpanStatus            protowire.Number = 15
	fSpanFlags             protowire.Number = 16

	fEventTime              protowire.Number = 1
	fEventName              protowire.Number = 2
	fEventAttributes        protowire.Number = 3
	fEventDroppedAttributes protowire.Number = 4

	fLinkTraceID           protowire.Number = 1
	fLinkSpanID            protowire.Number = 2
	fLinkTraceState        protowire.Number = 3
	fLinkAttributes        protowire.Number = 4
	fLinkDroppedAttributes protowire.Number = 5
	fLinkFlags             protowire.Number = 6

	fStatusMessage protowire.Number = 2
	fStatusCode    protowire.Number = 3

	fKeyValueKey   protowire.Number = 1
	fKeyValueValue protowire.Number = 2

	fAnyString protowire.Number = 1
	fAnyBool   protowire.Number = 2
	fAnyInt    protowire.Number = 3
	fAnyDouble protowire.Number = 4
	fAnyArray  protowire.Number = 5
	fAnyKVList protowire.Number = 6
	fAnyBytes  protowire.Number = 7

	fArrayValues  protowire.Number = 1 // ArrayValue.values and KeyValueList.values
	fKVListValues protowire.Number = 1
)

// Span flags: the low byte is the W3C trace flags; these two say whether the parent (or a link's
// context) was remote, as the OTLP exporter sets them.
const (
	flagHasIsRemote = 0x100
	flagIsRemote    = 0x200
)

// Status codes of OTLP's Status message (the Go API numbers them otherwise).
const (
	statusUnset = 0
	statusOK    = 1
	statusError = 2
)

// resourceSpans and scopeSpans are a batch's spans by resource, then by instrumentation scope, in the
// order they came: a batch has one resource and a scope per component.
type resourceSpans struct {
	res    *resource.Resource
	scopes []scopeSpans
}

type scopeSpans struct {
	scope instrumentation.Scope
	spans []sdktrace.ReadOnlySpan
}

// request returns the spans as one ExportTraceServiceRequest. The bytes are the encoder's: valid until
// its next call. Spans of one resource share one ResourceSpans, and those of one scope one ScopeSpans.
func (e *encoder) request(spans []sdktrace.ReadOnlySpan) []byte {
	var byRes []resourceSpans
	for _, s := range spans {
		if s == nil {
			continue
		}
		res, scope := s.Resource(), s.InstrumentationScope()
		r := slices.IndexFunc(byRes, func(r resourceSpans) bool { return sameResource(r.res, res) })
		if r < 0 {
			r, byRes = len(byRes), append(byRes, resourceSpans{res: res})
		}
		scopes := &byRes[r].scopes
		k := slices.IndexFunc(*scopes, func(g scopeSpans) bool { return g.scope == scope })
		if k < 0 {
			k, *scopes = len(*scopes), append(*scopes, scopeSpans{scope: scope})
		}
		(*scopes)[k].spans = append((*scopes)[k].spans, s)
	}
	e.buf = e.buf[:0]
	for _, r := range byRes {
		rs := e.begin(fRequestResourceSpans)
		if r.res.Len() > 0 {
			m := e.begin(fResourceSpansResource)
			e.attributes(fResourceAttributes, r.res.Attributes())
			e.end(m)
		}
		for k := range r.scopes {
			e.scopeSpans(&r.scopes[k])
		}
		e.str(fResourceSpansSchemaURL, r.res.SchemaURL())
		e.end(rs)
	}
	return e.buf
}

// sameResource reports whether two spans' resources are the same one. The provider gives every span
// the same *Resource, so the pointers nearly always decide. A nil resource is an empty one.
func sameResource(a, b *resource.Resource) bool {
	return a == b || a.Equivalent() == b.Equivalent()
}

func (e *encoder) scopeSpans(g *scopeSpans) {
	ss := e.begin(fResourceSpansScopeSpans)
	sc := e.begin(fScopeSpansScope)
	e.str(fScopeName, g.scope.Name)
	e.str(fScopeVersion, g.scope.Version)
	e.attributes(fScopeAttributes, g.scope.Attributes.ToSlice())
	e.end(sc)
	for _, s := range g.spans {
		e.span(s)
	}
	e.str(fScopeSpansSchemaURL, g.scope.SchemaURL)
	e.end(ss)
}

func (e *encoder) span(s sdktrace.ReadOnlySpan) {
	sp := e.begin(fScopeSpansSpans)
	sc := s.SpanContext()
	tid, sid := sc.TraceID(), sc.SpanID()
	e.bytes(fSpanTraceID, tid[:])
	e.bytes(fSpanSpanID, sid[:])
	if ts := sc.TraceState(); ts.Len() > 0 {
		e.str(fSpanTraceState, ts.String())
	}
	parent := s.Parent()
	if psid := parent.SpanID(); psid.IsValid() {
		e.bytes(fSpanParentSpanID, psid[:])
	}
	e.str(fSpanName, s.Name())
	e.uint(fSpanKind, uint64(spanKind(s.SpanKind())))
	e.fixed64(fSpanStart, unixNano(s.StartTime().UnixNano()))
	e.fixed64(fSpanEnd, unixNano(s.EndTime().UnixNano()))
	e.attributes(fSpanAttributes, s.Attributes())
	e.uint(fSpanDroppedAttributes, clampUint32(s.DroppedAttributes()))
	for _, ev := range s.Events() {
		m := e.begin(fSpanEvents)
		e.fixed64(fEventTime, unixNano(ev.Time.UnixNano()))
		e.str(fEventName, ev.Name)
		e.attributes(fEventAttributes, ev.Attributes)
		e.uint(fEventDroppedAttributes, clampUint32(ev.DroppedAttributeCount))
		e.end(m)
	}
	e.uint(fSpanDroppedEvents, clampUint32(s.DroppedEvents()))
	for _, l := range s.Links() {
		m := e.begin(fSpanLinks)
		ltid, lsid := l.SpanContext.TraceID(), l.SpanContext.SpanID()
		e.bytes(fLinkTraceID, ltid[:])
		e.bytes(fLinkSpanID, lsid[:])
		if ts := l.SpanContext.TraceState(); ts.Len() > 0 {
			e.str(fLinkTraceState, ts.String())
		}
		e.attributes(fLinkAttributes, l.Attributes)
		e.uint(fLinkDroppedAttributes, clampUint32(l.DroppedAttributeCount))
		e.fixed32(fLinkFlags, spanFlags(l.SpanContext.TraceFlags(), l.SpanContext))
		e.end(m)
	}
	e.uint(fSpanDroppedLinks, clampUint32(s.DroppedLinks()))
	if st := s.Status(); st.Code != codes.Unset || st.Description != "" {
		m := e.begin(fSpanStatus)
		e.str(fStatusMessage, st.Description)
		e.uint(fStatusCode, statusCode(st.Code))
		e.end(m)
	}
	e.fixed32(fSpanFlags, spanFlags(sc.TraceFlags(), parent))
	e.end(sp)
}

// spanFlags are a span's or a link's flags: the trace flags, and whether the parent (or the link's
// context) is remote.
func spanFlags(tf trace.TraceFlags, parent trace.SpanContext) uint32 {
	f := uint32(tf) | flagHasIsRemote
	if parent.IsRemote() {
		f |= flagIsRemote
	}
	return f
}

// spanKind is OTLP's SpanKind, which numbers the kinds as the Go API does; an unknown kind is unspecified.
func spanKind(k trace.SpanKind) trace.SpanKind {
	if k < trace.SpanKindInternal || k > trace.SpanKindConsumer {
		return trace.SpanKindUnspecified
	}
	return k
}

func statusCode(c codes.Code) uint64 {
	switch c {
	case codes.Ok:
		return statusOK
	case codes.Error:
		return statusError
	}
	return statusUnset
}

func unixNano(n int64) uint64 { return uint64(max(0, n)) }

func clampUint32(v int) uint64 { return uint64(min(max(v, 0), math.MaxUint32)) }

func (e *encoder) attributes(f protowire.Number, kvs []attribute.KeyValue) {
	for _, kv := range kvs {
		e.keyValue(f, string(kv.Key), kv.Value)
	}
}

func (e *encoder) keyValue(f protowire.Number, key string, v attribute.Value) {
	m := e.begin(f)
	e.str(fKeyValueKey, key)
	e.anyValue(fKeyValueValue, v)
	e.end(m)
}

// anyValue writes v as an AnyValue in field f, every attribute type as the OTLP exporter maps it.
func (e *encoder) anyValue(f protowire.Number, v attribute.Value) {
	m := e.begin(f)
	switch v.Type() {
	case attribute.BOOL:
		e.buf = protowire.AppendTag(e.buf, fAnyBool, protowire.VarintType)
		e.buf = protowire.AppendVarint(e.buf, protowire.EncodeBool(v.AsBool()))
	case attribute.INT64:
		e.buf = protowire.AppendTag(e.buf, fAnyInt, protowire.VarintType)
		e.buf = protowire.AppendVarint(e.buf, uint64(v.AsInt64()))
	case attribute.FLOAT64:
		e.buf = protowire.AppendTag(e.buf, fAnyDouble, protowire.Fixed64Type)
		e.buf = protowire.AppendFixed64(e.buf, math.Float64bits(v.AsFloat64()))
	case attribute.STRING:
		e.buf = protowire.AppendTag(e.buf, fAnyString, protowire.BytesType)
		e.buf = protowire.AppendString(e.buf, validUTF8(v.AsString()))
	case attribute.BYTESLICE:
		e.buf = protowire.AppendTag(e.buf, fAnyBytes, protowire.BytesType)
		e.buf = protowire.AppendBytes(e.buf, v.AsByteSlice())
	case attribute.BOOLSLICE:
		array(e, v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		array(e, v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		array(e, v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		array(e, v.AsStringSlice(), attribute.StringValue)
	case attribute.SLICE:
		array(e, v.AsSlice(), func(x attribute.Value) attribute.Value { return x })
	case attribute.MAP:
		a := e.begin(fAnyKVList)
		for _, kv := range v.AsMap() {
			e.keyValue(fKVListValues, string(kv.Key), kv.Value)
		}
		e.end(a)
	}
	e.end(m)
}

// array writes values as AnyValue's ArrayValue, each converted to an attribute value.
func array[T any](e *encoder, values []T, value func(T) attribute.Value) {
	a := e.begin(fAnyArray)
	for _, x := range values {
		e.anyValue(fArrayValues, value(x))
	}
	e.end(a)
}

// begin opens a message in field f and keeps one byte for its length; end writes the length.
func (e *encoder) begin(f protowire.Number) int {
	e.buf = protowire.AppendTag(e.buf, f, protowire.BytesType)
	e.buf = append(e.buf, 0)
	return len(e.buf)
}

// end writes the length of the message begin opened at start, moving the message right when its length
// takes more than one byte.
func (e *encoder) end(start int) {
	n := len(e.buf) - start
	if n < 0x80 {
		e.buf[start-1] = byte(n)
		return
	}
	k := protowire.SizeVarint(uint64(n)) - 1 // bytes more than begin kept
	for range k {
		e.buf = append(e.buf, 0)
	}
	copy(e.buf[start+k:], e.buf[start:start+n])
	protowire.AppendVarint(e.buf[:start-1], uint64(n))
}

// str writes a string field, leaving out the empty string as proto3 does.
func (e *encoder) str(f protowire.Number, s string) {
	if s == "" {
		return
	}
	e.buf = protowire.AppendTag(e.buf, f, protowire.BytesType)
	e.buf = protowire.AppendString(e.buf, validUTF8(s))
}

// validUTF8 replaces what is not UTF-8 in s with U+FFFD. A protobuf string must be UTF-8, and a collector
// refuses a request with one that is not, with every span in it; the OTLP exporter does not even send it.
func validUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

func (e *encoder) bytes(f protowire.Number, b []byte) {
	e.buf = protowire.AppendTag(e.buf, f, protowire.BytesType)
	e.buf = protowire.AppendBytes(e.buf, b)
}

// uint writes a varint field (an enum, a count), leaving out zero as proto3 does.
func (e *encoder) uint(f protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.buf = protowire.AppendTag(e.buf, f, protowire.VarintType)
	e.buf = protowire.AppendVarint(e.buf, v)
}

func (e *encoder) fixed64(f protowire.Number, v uint64) {
	if v == 0 {
		return
	}
	e.buf = protowire.AppendTag(e.buf, f, protowire.Fixed64Type)
	e.buf = protowire.AppendFixed64(e.buf, v)
}

func (e *encoder) fixed32(f protowire.Number, v uint32) {
	if v == 0 {
		return
	}
	e.buf = protowire.AppendTag(e.buf, f, protowire.Fixed32Type)
	e.buf = protowire.AppendFixed32(e.buf, v)
}
