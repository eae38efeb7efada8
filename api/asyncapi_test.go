package api

import (
	"cmp"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/tracing/carrier"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
	"go.yaml.in/yaml/v4"
)

// asyncapi.yaml describes what NATS clients see of the bridge. TestAsyncAPIDrift holds it against the
// code, both ways: every subject, header, stream, endpoint and queue group it names is the code's, every
// one the code has is in it (or listed below as internal), and the values it fixes (the type token's
// rule, the streams' retention, the headers' constant values and bounds, the required headers, the codes)
// are the code's. TestAsyncAPIMessages (asyncapi_messages_test.go) holds the messages the code produces
// against it.
// TestAsyncAPIParse validates it with the AsyncAPI project's parser.

// The subject prefix and the streams' name prefix as the document writes them.
const (
	prefixParam = "{prefix}"
	pfxParam    = "{PFX}"
)

// The document's parts the tests read. Extensions (x-…) are the document's own.
type asyncAPI struct {
	Channels   map[string]asyncChannel   `yaml:"channels"`
	Operations map[string]asyncOperation `yaml:"operations"`
	Components struct {
		Parameters map[string]asyncParameter `yaml:"parameters"`
		Messages   map[string]asyncMessage   `yaml:"messages"`
		Schemas    map[string]asyncSchema    `yaml:"schemas"`
	} `yaml:"components"`
	Micro struct {
		Name       string   `yaml:"name"`
		QueueGroup string   `yaml:"queueGroup"`
		Operations []string `yaml:"operations"`
	} `yaml:"x-nats-micro-service"`
	Streams []struct {
		Name        string   `yaml:"name"`
		Subjects    []string `yaml:"subjects"`
		Retention   string   `yaml:"retention"`
		Storage     string   `yaml:"storage"`
		Discard     string   `yaml:"discard"`
		AllowRollup bool     `yaml:"allowRollup"`
	} `yaml:"x-jetstream-streams"`
}

type asyncRef struct {
	Ref string `yaml:"$ref"`
}

type asyncChannel struct {
	Address    *string                   `yaml:"address"`
	Parameters map[string]asyncParameter `yaml:"parameters"`
	Messages   map[string]asyncRef       `yaml:"messages"`
	Stream     string                    `yaml:"x-jetstream-stream"`
}

type asyncOperation struct {
	Action   string     `yaml:"action"`
	Channel  asyncRef   `yaml:"channel"`
	Messages []asyncRef `yaml:"messages"`
	Reply    *struct {
		Channel  asyncRef   `yaml:"channel"`
		Messages []asyncRef `yaml:"messages"`
	} `yaml:"reply"`
	Bindings struct {
		NATS *struct {
			Queue string `yaml:"queue"`
		} `yaml:"nats"`
	} `yaml:"bindings"`
	OpenAPI  string `yaml:"x-openapi-operation"`
	Upstream string `yaml:"x-upstream"`
	Source   string `yaml:"x-source"` // an endpoint answered from NATS: what it reads
}

type asyncParameter struct {
	Ref       string   `yaml:"$ref"`
	Enum      []string `yaml:"enum"`
	Default   string   `yaml:"default"`
	Examples  []string `yaml:"examples"`
	TokenRule *struct {
		Source      string `yaml:"source"`
		Pattern     string `yaml:"pattern"`
		UpperCase   bool   `yaml:"upperCase"`
		Allowed     string `yaml:"allowed"`
		Replacement string `yaml:"replacement"`
		MaxLength   int    `yaml:"maxLength"`
		Missing     string `yaml:"missing"`
	} `yaml:"x-token-rule"`
}

type asyncMessage struct {
	Headers *asyncRef `yaml:"headers"`
	Payload *struct {
		SchemaFormat string   `yaml:"schemaFormat"`
		Schema       asyncRef `yaml:"schema"`
	} `yaml:"payload"`
}

type asyncSchema struct {
	Ref               string                 `yaml:"$ref"`
	Properties        map[string]asyncSchema `yaml:"properties"`
	PatternProperties map[string]asyncSchema `yaml:"patternProperties"`
	Required          []string               `yaml:"required"`
	Const             string                 `yaml:"const"`
	Enum              []string               `yaml:"enum"`
	MaxLength         int                    `yaml:"maxLength"`
	Items             *asyncSchema           `yaml:"items"`
	Codes             []string               `yaml:"x-bridge-codes"`
}

// loadAsyncAPI reads asyncapi.yaml, typed and as a plain tree.
func loadAsyncAPI(t *testing.T) (*asyncAPI, any) {
	t.Helper()
	b, err := os.ReadFile("asyncapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc asyncAPI
	var tree any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("asyncapi.yaml: %v", err)
	}
	if err := yaml.Unmarshal(b, &tree); err != nil {
		t.Fatalf("asyncapi.yaml: %v", err)
	}
	return &doc, tree
}

// refName returns the last token of a local reference under prefix ("#/components/messages/"), or
// fails.
func refName(t *testing.T, ref, prefix string) string {
	t.Helper()
	name, ok := strings.CutPrefix(ref, prefix)
	if !ok || strings.Contains(name, "/") {
		t.Fatalf("reference %q is not under %s", ref, prefix)
	}
	return name
}

// message resolves a message reference of an operation or a channel: #/channels/<c>/messages/<m> or
// #/components/messages/<m>.
func (d *asyncAPI) message(t *testing.T, ref string) (string, asyncMessage) {
	t.Helper()
	if rest, ok := strings.CutPrefix(ref, "#/channels/"); ok {
		c, m, ok := strings.Cut(rest, "/messages/")
		r, found := d.Channels[c].Messages[m]
		if !ok || !found {
			t.Fatalf("message reference %q does not resolve", ref)
		}
		ref = r.Ref
	}
	name := refName(t, ref, "#/components/messages/")
	m, ok := d.Components.Messages[name]
	if !ok {
		t.Fatalf("message reference %q does not resolve", ref)
	}
	return name, m
}

// schema resolves a schema and the references among its properties.
func (d *asyncAPI) schema(t *testing.T, s asyncSchema) asyncSchema {
	t.Helper()
	for s.Ref != "" {
		r, ok := d.Components.Schemas[refName(t, s.Ref, "#/components/schemas/")]
		if !ok {
			t.Fatalf("schema reference %q does not resolve", s.Ref)
		}
		s = r
	}
	for k, p := range s.Properties {
		s.Properties[k] = d.schema(t, p)
	}
	return s
}

// headers returns the header schema of a message, and the names it allows: its properties, and each
// of its patternProperties of the form ^<prefix> as <prefix> (a name ending in "-").
func (d *asyncAPI) headers(t *testing.T, m asyncMessage) (asyncSchema, []string) {
	t.Helper()
	if m.Headers == nil {
		return asyncSchema{}, nil
	}
	s := d.schema(t, asyncSchema{Ref: m.Headers.Ref})
	names := slices.Collect(maps.Keys(s.Properties))
	for p := range s.PatternProperties {
		prefix, ok := strings.CutPrefix(p, "^")
		if !ok || regexp.QuoteMeta(prefix) != prefix {
			t.Errorf("header pattern %q: only ^<literal prefix> is understood", p)
			continue
		}
		names = append(names, prefix)
	}
	return s, names
}

func (d *asyncAPI) parameter(t *testing.T, p asyncParameter) asyncParameter {
	t.Helper()
	if p.Ref == "" {
		return p
	}
	r, ok := d.Components.Parameters[refName(t, p.Ref, "#/components/parameters/")]
	if !ok {
		t.Fatalf("parameter reference %q does not resolve", p.Ref)
	}
	return r
}

// sameSet reports, as errors, what is in one of the two lists and not in the other.
func sameSet(t *testing.T, what, docName string, doc, code []string) {
	t.Helper()
	for _, s := range doc {
		if !slices.Contains(code, s) {
			t.Errorf("%s %q is in asyncapi.yaml (%s) but not in the code", what, s, docName)
		}
	}
	for _, s := range code {
		if !slices.Contains(doc, s) {
			t.Errorf("%s %q is in the code but not in asyncapi.yaml (%s)", what, s, docName)
		}
	}
}

// Every name and value of asyncapi.yaml is the code's, and the reverse.
func TestAsyncAPIDrift(t *testing.T) {
	doc, tree := loadAsyncAPI(t)

	t.Run("subjects", func(t *testing.T) {
		p := prefixParam
		code := []string{layout.EventSubject(p, "{type}", "{unit}"), layout.Reports(p), layout.DLQEvents(p), layout.DLQReports(p)}
		for _, c := range []struct{ got, want string }{
			{layout.EventsOfType(p, "GATE_IN"), layout.EventSubject(p, "GATE_IN", "*")},
			{layout.EventsOfUnit(p, "MSKU1234565"), layout.EventSubject(p, "*", "MSKU1234565")},
			{layout.EventBase(p), strings.TrimSuffix(layout.EventSubject(p, "", ""), ".")},
		} {
			if c.got != c.want {
				t.Errorf("layout's filter %q, want %q: a filter of the events channel's address", c.got, c.want)
			}
		}
		var served []string
		for _, op := range service.Operations {
			code = append(code, layout.API(p, op.Name))
			served = append(served, op.Name)
		}
		sameSet(t, "API operation", "the service's", layout.APIOperations(), served)
		var addrs []string
		for _, c := range doc.Channels {
			if c.Address != nil && !strings.HasPrefix(*c.Address, micro.APIPrefix+".") {
				addrs = append(addrs, *c.Address)
			}
		}
		sameSet(t, "subject", "a channel's address", addrs, code)

		// Every subject internal/layout names is above, a stream's (subtest streams) or internal; its other
		// functions size streams and dead letters.
		known := map[string]string{
			"EventSubject": "channel", "EventBase": "channel", "Event": "channel (its events stored before the unit token)", "EventsOfType": "channel (a filter of it)",
			"EventsOfUnit": "channel (a filter of it)", "UnitToken": "the unit parameter",
			"UnitsBucket": "the units view's bucket", "Reports": "channel", "DLQEvents": "channel",
			"DLQReports": "channel", "API": "channel", "APIOperations": "channel (the API's endpoints)",
			"Events": "stream", "DLQ": "stream", "EventsStream": "stream", "ReportsStream": "stream",
			"DLQStream": "stream", "Stream": "stream", "TypeToken": "the type parameter",
			"Fence": "internal", "FenceFilter": "internal (a subject of the events stream)", "LeaseBucket": "internal",
			"MaxMsgSize": "no subject (a stream's bound)", "OriginalKey": "no subject (a dead letter's header)",
			"Fit": "no subject (a dead letter's size)", "HeaderSize": "no subject (a message's size)",
			"MsgSize": "no subject (a message's size)", "MaxMessage": "no subject (a stream's bound)",
			"TooLarge": "no subject (a publish error)",
		}
		funcs, _ := exportedDecls(t, "../internal/layout")
		for _, f := range funcs {
			if _, ok := known[f]; !ok {
				t.Errorf("layout.%s is new: describe its subject in asyncapi.yaml and classify it here", f)
			}
		}
		if p := doc.parameter(t, asyncParameter{Ref: "#/components/parameters/prefix"}); p.Default != layout.DefaultPrefix {
			t.Errorf("the prefix parameter's default is %q, the code's %q", p.Default, layout.DefaultPrefix)
		}
	})

	t.Run("type token", func(t *testing.T) {
		typ := doc.parameter(t, doc.Channels["events"].Parameters["type"])
		rule := typ.TokenRule
		if rule == nil {
			t.Fatal("the events channel's type parameter has no x-token-rule")
		}
		if rule.MaxLength != layout.MaxTypeToken {
			t.Errorf("maxLength %d, the code's %d", rule.MaxLength, layout.MaxTypeToken)
		}
		if rule.Missing != layout.UnknownType || layout.TypeToken("") != rule.Missing {
			t.Errorf("missing %q, the code's %q", rule.Missing, layout.UnknownType)
		}
		pattern := regexp.MustCompile(rule.Pattern)
		allowed := regexp.MustCompile("^" + rule.Allowed + "$")
		for c := range rune(0x100) {
			s := string(c)
			want := rule.Replacement
			if allowed.MatchString(s) {
				want = s
			}
			if got := layout.TypeToken(s); got != want {
				t.Errorf("TypeToken(%q) = %q, the rule in asyncapi.yaml gives %q", s, got, want)
			}
		}
		long := strings.Repeat("A", rule.MaxLength+10)
		if got := layout.TypeToken(long); got != long[:rule.MaxLength] {
			t.Errorf("TypeToken of %d characters = %q, the rule cuts at %d", len(long), got, rule.MaxLength)
		}
		for _, s := range append([]string{"", "a.b", "*", ">", " ", "GATE IN", "Grüße", long, strings.Repeat("x.", 50)}, typ.Examples...) {
			if got := layout.TypeToken(s); !pattern.MatchString(got) {
				t.Errorf("TypeToken(%q) = %q does not match the pattern %q", s, got, rule.Pattern)
			}
		}
		for _, ex := range typ.Examples {
			if got := layout.TypeToken(ex); got != ex {
				t.Errorf("example %q is not a type token: TypeToken gives %q", ex, got)
			}
		}
	})

	t.Run("unit token", func(t *testing.T) {
		unit := doc.parameter(t, doc.Channels["events"].Parameters["unit"])
		rule := unit.TokenRule
		if rule == nil {
			t.Fatal("the events channel's unit parameter has no x-token-rule")
		}
		if got, want := strings.Split(rule.Source, "."), []string{"observation", "observedLoadingUnit", "loadingUnit", "number"}; !slices.Equal(got, want) {
			t.Errorf("source %q, the code reads %q", rule.Source, strings.Join(want, "."))
		}
		withNumber := func(number string) []byte {
			b, _ := json.Marshal(map[string]any{"observation": map[string]any{"observedLoadingUnit": map[string]any{
				"loadingUnit": map[string]any{"number": number}}}})
			return b
		}
		if rule.MaxLength != layout.MaxUnitToken || rule.Missing != layout.NoUnit || !rule.UpperCase || rule.Replacement != "" {
			t.Errorf("rule %+v, the code's maxLength %d, missing %q, upper-cased, others removed", rule, layout.MaxUnitToken, layout.NoUnit)
		}
		pattern := regexp.MustCompile(rule.Pattern)
		allowed := regexp.MustCompile("^" + rule.Allowed + "$")
		for c := range rune(0x3000) {
			s := string(c)
			if rule.UpperCase {
				s = string(unicode.ToUpper(c))
			}
			want := rule.Missing
			if allowed.MatchString(s) {
				want = s
			}
			if got := publish.UnitOf(withNumber("A" + string(c))); got != "A"+strings.TrimPrefix(want, rule.Missing) {
				t.Errorf("the unit of %q is %q, the rule in asyncapi.yaml gives %q", "A"+string(c), got, "A"+strings.TrimPrefix(want, rule.Missing))
			}
		}
		long := strings.Repeat("A", rule.MaxLength+1)
		for _, c := range []struct{ data []byte }{{withNumber(long)}, {withNumber("")}, {withNumber("--")},
			{[]byte(`{"observation":{"observedLoadingUnit":{"loadingUnit":{"number":7}}}}`)}, {[]byte(`{}`)}} {
			if got := publish.UnitOf(c.data); got != rule.Missing {
				t.Errorf("the unit of %s is %q, the rule gives %q", c.data, got, rule.Missing)
			}
		}
		for _, s := range append([]string{"", "a.b", "*", ">", " ", "msku 123456-7", "Grüße", long, strings.Repeat("x.", 50)}, unit.Examples...) {
			if got := layout.UnitToken(s); !pattern.MatchString(got) {
				t.Errorf("UnitToken(%q) = %q does not match the pattern %q", s, got, rule.Pattern)
			}
		}
		for _, ex := range unit.Examples {
			if got := layout.UnitToken(ex); got != ex {
				t.Errorf("example %q is not a unit token: UnitToken gives %q", ex, got)
			}
		}
	})

	t.Run("streams", func(t *testing.T) {
		streams := layout.Streams{Prefix: "pfx"}
		fill := strings.NewReplacer(pfxParam, "PFX", prefixParam, "pfx")
		configs := streams.Configs()
		var docNames, codeNames []string
		for _, s := range doc.Streams {
			docNames = append(docNames, fill.Replace(s.Name))
		}
		for _, c := range configs {
			codeNames = append(codeNames, c.Name)
		}
		sameSet(t, "stream", "x-jetstream-streams", docNames, codeNames)
		wantNames := []string{layout.EventsStream("pfx"), layout.ReportsStream("pfx"), layout.DLQStream("pfx")}
		sameSet(t, "stream", "x-jetstream-streams", docNames, wantNames)
		jsonName := func(v any) string {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := strconv.Unquote(string(b))
			return s
		}
		for _, s := range doc.Streams {
			i := slices.IndexFunc(configs, func(c jetstream.StreamConfig) bool { return c.Name == fill.Replace(s.Name) })
			if i < 0 {
				continue
			}
			c := configs[i]
			var subjs []string
			for _, subj := range s.Subjects {
				subjs = append(subjs, fill.Replace(subj))
			}
			if !slices.Equal(subjs, c.Subjects) {
				t.Errorf("stream %s: subjects %q, the code's %q", s.Name, subjs, c.Subjects)
			}
			for _, f := range []struct{ name, doc, code string }{
				{"retention", s.Retention, jsonName(c.Retention)},
				{"storage", s.Storage, jsonName(c.Storage)},
				{"discard", s.Discard, jsonName(c.Discard)},
				{"allowRollup", strconv.FormatBool(s.AllowRollup), strconv.FormatBool(c.AllowRollup)},
			} {
				if f.doc != f.code {
					t.Errorf("stream %s: %s %q, the code's %q", s.Name, f.name, f.doc, f.code)
				}
			}
		}
		// Each channel names the stream that holds its subject.
		for name, ch := range doc.Channels {
			if ch.Address == nil || !strings.HasPrefix(*ch.Address, prefixParam+".") {
				continue
			}
			subj := regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllString(strings.Replace(*ch.Address, prefixParam, "pfx", 1), "x")
			holder := ""
			for _, c := range configs {
				for _, filter := range c.Subjects {
					if subjectMatches(filter, subj) {
						holder = c.Name
					}
				}
			}
			if got := fill.Replace(ch.Stream); got != holder {
				t.Errorf("channel %s: x-jetstream-stream %q, but %q is stored in %q", name, ch.Stream, subj, holder)
			}
		}
	})

	t.Run("headers", func(t *testing.T) {
		headersOf := func(msg string) (asyncSchema, []string) {
			m, ok := doc.Components.Messages[msg]
			if !ok {
				t.Fatalf("no message %s", msg)
			}
			return doc.headers(t, m)
		}
		event, names := headersOf("trackingEvent")
		// tracestate is declared beside traceparent, optional: the bridge writes none today (an event's
		// span starts a trace of its own, which has no trace state), so the publisher does not list it.
		sameSet(t, "event header", "trackingEvent", names, append(publish.EventHeaders(), carrier.Tracestate))
		for _, h := range []struct{ name, value string }{
			{"Content-Type", publish.EventContentType},
			{"ce-datacontenttype", publish.EventContentType},
			{"ce-specversion", publish.CloudEventsSpecVersion},
		} {
			if got := event.Properties[h.name].Const; got != h.value {
				t.Errorf("event header %s: const %q, the code sets %q", h.name, got, h.value)
			}
		}
		_, names = headersOf("eventDeadLetter")
		sameSet(t, "header", "eventDeadLetter", names, []string{publish.HeaderMsgID, publish.HeaderEventID,
			layout.HeaderError, publish.HeaderResumeAfter, publish.HeaderStreamID, publish.HeaderSSEEvent,
			carrier.Traceparent, carrier.Tracestate})
		_, names = headersOf("report")
		sameSet(t, "header", "report", names, []string{jetstream.MsgIDHeader, carrier.Traceparent, carrier.Tracestate})
		_, names = headersOf("reportDeadLetter")
		sameSet(t, "header", "reportDeadLetter", names, []string{jetstream.MsgIDHeader, layout.HeaderError,
			layout.HeaderUpstreamStatus, layout.HeaderReportSequence, layout.HeaderReportTime,
			layout.HeaderDeliveries, layout.HeaderOriginalPrefix})
		apiErr, names := headersOf("apiError")
		sameSet(t, "header", "apiError", names, []string{micro.ErrorHeader, micro.ErrorCodeHeader,
			service.UpstreamStatusHeader, service.RetryAfterHeader})

		// The codes the bridge sets itself.
		codes := map[string]int{"CodeInvalid": service.CodeInvalid, "CodeNotFound": service.CodeNotFound,
			"CodeBadAnswer": service.CodeBadAnswer, "CodeUnavailable": service.CodeUnavailable, "CodeTimeout": service.CodeTimeout}
		_, consts := exportedDecls(t, "../internal/service")
		var codeCodes []string
		for _, c := range consts {
			if !strings.HasPrefix(c, "Code") {
				continue
			}
			if v, ok := codes[c]; ok {
				codeCodes = append(codeCodes, strconv.Itoa(v))
			} else {
				t.Errorf("service.%s is new: add it to x-bridge-codes in asyncapi.yaml and to this test", c)
			}
		}
		sameSet(t, "error code", "x-bridge-codes of Nats-Service-Error-Code", apiErr.Properties[micro.ErrorCodeHeader].Codes, codeCodes)

		// Every bound the document states (each maxLength), against the code's constant: a maxLength
		// missing here fails, as does an entry here that the document lacks.
		bounds := map[string]int{
			"/components/parameters/type/x-token-rule":                                    layout.MaxTypeToken,
			"/components/parameters/unit/x-token-rule":                                    layout.MaxUnitToken,
			"/components/schemas/EventHeaders/properties/Tracking-Event-Type":             publish.MaxTypeHeader,
			"/components/schemas/EventHeaders/properties/ce-time":                         publish.MaxTimeHeader,
			"/components/schemas/EventDeadLetterHeaders/properties/Sse-Event":             publish.MaxSSEEventHeader,
			"/components/schemas/BridgeError":                                             layout.MaxErrorHeader,
			"/components/schemas/Tracestate":                                              carrier.MaxTracestate,
			"/components/schemas/CallerTraceparent":                                       carrier.MaxTraceparent,
			"/components/schemas/ApiRequestHeaders/properties/Bridge-Timeout":             service.MaxTimeoutHeader,
			"/components/schemas/ApiRequestHeaders/properties/Idempotency-Key":            upstream.MaxIdempotencyKeyBytes,
			"/components/schemas/ApiErrorHeaders/properties/Retry-After":                  service.MaxRetryAfterHeader,
			"/components/schemas/OrderId":                                                 service.MaxValueBytes,
			"/components/schemas/UnitNumber":                                              service.MaxValueBytes,
			"/components/schemas/SearchLocationsRequest/properties/type":                  service.MaxValueBytes,
			"/components/schemas/SearchLocationsRequest/properties/name":                  service.MaxValueBytes,
			"/components/schemas/QueryTrackingRequest/properties/orderId":                 service.MaxValueBytes,
			"/components/schemas/QueryTrackingRequest/properties/positionId":              service.MaxValueBytes,
			"/components/schemas/QueryTrackingRequest/properties/clientOrderReference":    service.MaxValueBytes,
			"/components/schemas/QueryTrackingRequest/properties/clientPositionReference": service.MaxValueBytes,
		}
		stated := map[string]bool{}
		walkKey(tree, "", "maxLength", func(at string, v any) {
			stated[at] = true
			code, ok := bounds[at]
			n, isInt := v.(int)
			switch {
			case !ok:
				t.Errorf("%s: maxLength %v is not compared with the code: add its constant to the bounds of this test", at, v)
			case !isInt || n != code:
				t.Errorf("%s: maxLength %v, the code's %d", at, v, code)
			}
		})
		for at := range bounds {
			if !stated[at] {
				t.Errorf("%s: no maxLength in asyncapi.yaml, the code bounds it at %d", at, bounds[at])
			}
		}

		// The required headers of every message with headers (TestAsyncAPIMessages checks that the code
		// sets them); a message left out here fails.
		required := map[string][]string{
			"trackingEvent": {publish.HeaderMsgID, publish.HeaderEventID, "Content-Type", "ce-specversion", "ce-id",
				"ce-source", "ce-type", "ce-datacontenttype"},
			"eventDeadLetter": {publish.HeaderMsgID, publish.HeaderEventID, layout.HeaderError},
			"report":          nil, // Nats-Msg-Id is asked for, not required: the bridge accepts a report without it
			"reportDeadLetter": {jetstream.MsgIDHeader, layout.HeaderError, layout.HeaderReportSequence,
				layout.HeaderReportTime, layout.HeaderDeliveries},
			"apiError":        {micro.ErrorHeader, micro.ErrorCodeHeader},
			"unitLatestReply": {service.UnitHeader},
		}
		for name, m := range doc.Components.Messages {
			hs, declared := doc.headers(t, m)
			for _, r := range hs.Required {
				if !slices.Contains(declared, r) {
					t.Errorf("message %s: required header %s is not among its headers", name, r)
				}
			}
			want, ok := required[name]
			if !ok && len(hs.Required) > 0 {
				t.Errorf("message %s requires %q: add it to the required headers of this test", name, hs.Required)
			}
			sameSet(t, "required header", name, hs.Required, want)
		}

		// Every header of every message, against every header name the code has.
		var docNames []string
		for _, m := range doc.Components.Messages {
			_, names := doc.headers(t, m)
			for _, n := range names {
				if !slices.Contains(docNames, n) {
					docNames = append(docNames, n)
				}
			}
		}
		sameSet(t, "header", "a message's headers", docNames, codeHeaderNames(t))
	})

	t.Run("endpoints", func(t *testing.T) {
		if doc.Micro.Name != service.Name || doc.Micro.QueueGroup != service.QueueGroup {
			t.Errorf("x-nats-micro-service: name %q, queue group %q; the code's %q, %q", doc.Micro.Name,
				doc.Micro.QueueGroup, service.Name, service.QueueGroup)
		}
		if p := doc.parameter(t, doc.Channels["discoveryService"].Parameters["service"]); !slices.Equal(p.Enum, []string{service.Name}) {
			t.Errorf("the service parameter of discovery is %q, the service's name %q", p.Enum, service.Name)
		}
		var served []string // the document's operations of the API, in the order of x-nats-micro-service
		for _, id := range doc.Micro.Operations {
			op, ok := doc.Operations[id]
			if !ok {
				t.Errorf("x-nats-micro-service names operation %s, which is not in the document", id)
				continue
			}
			addr := doc.Channels[refName(t, op.Channel.Ref, "#/channels/")].Address
			name, ok := strings.CutPrefix(*addr, layout.API(prefixParam, ""))
			if !ok {
				t.Errorf("operation %s is on %q, not under %s", id, *addr, layout.API(prefixParam, ""))
				continue
			}
			served = append(served, name)
			i := slices.IndexFunc(service.Operations, func(o service.Operation) bool { return o.Name == name })
			if i < 0 {
				continue // reported below
			}
			code := service.Operations[i]
			if op.Action != "receive" || op.Reply == nil {
				t.Errorf("operation %s: action %q without a reply; an endpoint receives requests and replies", id, op.Action)
				continue
			}
			if code.FromNATS() {
				if op.OpenAPI != "" || op.Upstream != "" || op.Source != code.Source {
					t.Errorf("operation %s: OpenAPI operation %q, upstream %q, source %q; the code reads %q from NATS",
						id, op.OpenAPI, op.Upstream, op.Source, code.Source)
				}
			} else if op.OpenAPI != code.OpenAPI || op.Upstream != code.Method+" "+code.Path || op.Source != "" {
				t.Errorf("operation %s: OpenAPI operation %q, upstream %q; the code's %q, %q", id, op.OpenAPI, op.Upstream, code.OpenAPI, code.Method+" "+code.Path)
			}
			if op.Bindings.NATS == nil || op.Bindings.NATS.Queue != service.QueueGroup {
				t.Errorf("operation %s: the NATS binding's queue is not the service's queue group %q", id, service.QueueGroup)
			}
			for _, r := range op.Messages {
				_, m := doc.message(t, r.Ref)
				_, names := doc.headers(t, m)
				sameSet(t, "request header", "operation "+id, names, []string{service.TimeoutHeader,
					service.IdempotencyKeyHeader, service.RequestInfoHeader, carrier.Traceparent, carrier.Tracestate})
			}
			var replies []string
			for _, r := range op.Reply.Messages {
				name, m := doc.message(t, r.Ref)
				replies = append(replies, name)
				_, names := doc.headers(t, m)
				switch {
				case name == "unitLatestReply":
					sameSet(t, "reply header", "operation "+id, names, []string{service.UnitHeader})
				case name != "apiError" && len(names) > 0:
					t.Errorf("operation %s: reply %s has headers; a success is the upstream's body alone", id, name)
				}
			}
			if len(replies) != 2 || !slices.Contains(replies, "apiError") {
				t.Errorf("operation %s: replies %q, want one success and apiError", id, replies)
			}
		}
		if !slices.Equal(served, service.EndpointNames()) {
			t.Errorf("x-nats-micro-service serves %q, the service %q", served, service.EndpointNames())
		}
		// Only the endpoints are in a queue group.
		for id, op := range doc.Operations {
			if op.Bindings.NATS != nil && !slices.Contains(doc.Micro.Operations, id) {
				t.Errorf("operation %s has a NATS binding (queue %q) but is not an endpoint of the service", id, op.Bindings.NATS.Queue)
			}
		}
	})

	t.Run("discovery", func(t *testing.T) {
		var addrs []string
		for name, c := range doc.Channels {
			if c.Address == nil || !strings.HasPrefix(*c.Address, micro.APIPrefix+".") {
				continue
			}
			expanded := []string{*c.Address}
			for param, p := range c.Parameters {
				values := doc.parameter(t, p).Enum
				if len(values) == 0 {
					values = []string{"ID"} // the instance id, new at each start
				}
				var next []string
				for _, a := range expanded {
					for _, v := range values {
						next = append(next, strings.ReplaceAll(a, "{"+param+"}", v))
					}
				}
				expanded = next
			}
			for _, a := range expanded {
				if strings.ContainsAny(a, "{}") {
					t.Errorf("channel %s: address %q has a parameter that is not described", name, a)
				}
			}
			addrs = append(addrs, expanded...)
		}
		code, err := service.DiscoverySubjects("ID")
		if err != nil {
			t.Fatal(err)
		}
		sameSet(t, "discovery subject", "a $SRV channel", addrs, code)
		for _, c := range []struct{ schema, typ string }{
			{"MicroPing", micro.PingResponseType}, {"MicroInfo", micro.InfoResponseType}, {"MicroStats", micro.StatsResponseType},
		} {
			s := doc.Components.Schemas[c.schema]
			if !slices.Equal(s.Properties["type"].Enum, []string{c.typ}) || !slices.Equal(s.Properties["name"].Enum, []string{service.Name}) {
				t.Errorf("%s: type %q and name %q; micro's %q and the service's %q", c.schema,
					s.Properties["type"].Enum, s.Properties["name"].Enum, c.typ, service.Name)
			}
			if e := s.Properties["endpoints"].Items; e != nil && !slices.Equal(e.Properties["queue_group"].Enum, []string{service.QueueGroup}) {
				t.Errorf("%s: the endpoints' queue group %q, the service's %q", c.schema, e.Properties["queue_group"].Enum, service.QueueGroup)
			}
		}
		// The data of each endpoint in STATS: the members of service.EndpointStats, by their JSON names.
		var members []string
		for f := range reflect.TypeFor[service.EndpointStats]().Fields() {
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "-" && f.IsExported() {
				members = append(members, cmp.Or(name, f.Name))
			}
		}
		var data []string
		if e := doc.Components.Schemas["MicroStats"].Properties["endpoints"].Items; e != nil {
			data = slices.Collect(maps.Keys(e.Properties["data"].Properties))
		}
		sameSet(t, "member", "MicroStats' endpoints' data", data, members)
	})

	t.Run("references", func(t *testing.T) {
		openapi, err := os.ReadFile("openapi.yaml")
		if err != nil {
			t.Fatal(err)
		}
		var oas any
		if err := yaml.Unmarshal(openapi, &oas); err != nil {
			t.Fatal(err)
		}
		n := 0
		walkRefs(tree, "", func(at, ref string) {
			file, pointer, _ := strings.Cut(ref, "#")
			root := tree
			switch file {
			case "":
			case "./openapi.yaml":
				root = oas
				n++
			default:
				t.Errorf("%s: $ref %q: only local references and ./openapi.yaml are expected", at, ref)
				return
			}
			if resolvePointer(root, pointer) == nil {
				t.Errorf("%s: $ref %q does not resolve", at, ref)
			}
		})
		if n == 0 {
			t.Error("no payload is referenced from openapi.yaml")
		}
		for name, m := range doc.Components.Messages {
			if m.Payload != nil && m.Payload.SchemaFormat != "application/vnd.oai.openapi;version=3.0.0" {
				t.Errorf("message %s: schemaFormat %q; the payloads are OpenAPI 3.0 schemas, as in openapi.yaml", name, m.Payload.SchemaFormat)
			}
		}
	})
}

// walkKey calls f with every value of a key named key in the tree, and the JSON pointer of the object
// that holds it.
func walkKey(v any, at, key string, f func(at string, v any)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == key {
				f(at, x)
			} else {
				walkKey(x, at+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), key, f)
			}
		}
	case []any:
		for i, x := range v {
			walkKey(x, at+"/"+strconv.Itoa(i), key, f)
		}
	}
}

// subjectMatches reports whether the NATS subject filter matches subject.
func subjectMatches(filter, subject string) bool {
	f, s := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, tok := range f {
		switch {
		case tok == ">":
			return len(s) > i
		case i >= len(s) || tok != "*" && tok != s[i]:
			return false
		}
	}
	return len(f) == len(s)
}

// walkRefs calls f with every $ref in the tree and where it is.
func walkRefs(v any, at string, f func(at, ref string)) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				f(at, s)
			} else {
				walkRefs(x, at+"/"+k, f)
			}
		}
	case []any:
		for i, x := range v {
			walkRefs(x, at+"/"+strconv.Itoa(i), f)
		}
	}
}

// resolvePointer returns what the JSON pointer names in the tree, or nil.
func resolvePointer(v any, pointer string) any {
	if pointer == "" {
		return v
	}
	for _, tok := range strings.Split(strings.TrimPrefix(pointer, "/"), "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
		if v == nil {
			return nil
		}
	}
	return v
}

// The packages whose NATS messages the document describes: every header name in their code is one
// a client sees, or one of internalHeaders.
var headerPackages = []string{"../tracking", "../internal/publish", "../internal/layout", "../internal/consume",
	"../internal/service", "../internal/tracing/carrier"}

// internalHeaders are header names of the code that no client sees: those of the fence markers on
// P.leader.>.
var internalHeaders = []string{publish.HeaderLeader, publish.HeaderLeaderTerm, publish.HeaderRestart, publish.HeaderRestartAfter}

// headerName matches a string literal that names a NATS header (or, ending in "-", a prefix of names).
var headerName = regexp.MustCompile(`^(?:(?:Nats|Tracking|Bridge|Sse)-[A-Za-z-]+|ce-[a-z]+|Content-Type|Idempotency-Key|Retry-After|traceparent|tracestate)$`)

// natsHeaderConsts are the header constants of nats.go that the packages use: an unknown one fails
// codeHeaderNames until it is added here.
var natsHeaderConsts = map[string]string{
	"jetstream.MsgIDHeader":                   jetstream.MsgIDHeader,
	"jetstream.ExpectedLastSubjSeqHeader":     jetstream.ExpectedLastSubjSeqHeader,
	"jetstream.ExpectedLastSubjSeqSubjHeader": jetstream.ExpectedLastSubjSeqSubjHeader,
	"micro.ErrorHeader":                       micro.ErrorHeader,
	"micro.ErrorCodeHeader":                   micro.ErrorCodeHeader,
}

// codeHeaderNames returns every header name in the non-test code of headerPackages, but
// internalHeaders: the string literals that look like one, and nats.go's header constants they use.
func codeHeaderNames(t *testing.T) []string {
	t.Helper()
	var names []string
	add := func(n string) {
		if !slices.Contains(names, n) && !slices.Contains(internalHeaders, n) {
			names = append(names, n)
		}
	}
	for _, dir := range headerPackages {
		for _, f := range parseDir(t, dir) {
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if s, err := strconv.Unquote(n.Value); err == nil && n.Kind == token.STRING && headerName.MatchString(s) {
						add(s)
					}
				case *ast.SelectorExpr:
					x, ok := n.X.(*ast.Ident)
					if !ok || !slices.Contains([]string{"nats", "jetstream", "micro"}, x.Name) ||
						!(strings.HasSuffix(n.Sel.Name, "Header") && n.Sel.Name != "Header" || strings.HasSuffix(n.Sel.Name, "Hdr")) {
						return true
					}
					if v, ok := natsHeaderConsts[x.Name+"."+n.Sel.Name]; ok {
						add(v)
					} else {
						t.Errorf("%s uses %s.%s: add it to natsHeaderConsts, and its header to asyncapi.yaml", dir, x.Name, n.Sel.Name)
					}
				}
				return true
			})
		}
	}
	return names
}

// parseDir parses the non-test Go files of dir.
func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	var files []*ast.File
	fset := token.NewFileSet()
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// exportedDecls returns the names of the exported functions and constants of the package in dir.
func exportedDecls(t *testing.T, dir string) (funcs, consts []string) {
	t.Helper()
	for _, f := range parseDir(t, dir) {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					funcs = append(funcs, d.Name.Name)
				}
			case *ast.GenDecl:
				if d.Tok != token.CONST {
					continue
				}
				for _, s := range d.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						if n.IsExported() {
							consts = append(consts, n.Name)
						}
					}
				}
			}
		}
	}
	return funcs, consts
}

// TestAsyncAPIParse checks what the AsyncAPI project's parser (@asyncapi/parser, with its OpenAPI schema
// parser for the payloads, at the versions lint/package-lock.json pins) made of asyncapi.yaml, through
// lint/asyncapi.mjs: it fails on every error the parser reported and on every reference it left
// unresolved, and logs the rest. As TestOpenAPILint, it reads the report lint/run wrote into the directory
// API_LINT_RESULTS names, and skips without it.
func TestAsyncAPIParse(t *testing.T) {
	out := linterReport(t, lintResults(t), "asyncapi")
	stdout, stderr, runErr := out.stdout, out.stderr, out.err
	var r struct {
		Diagnostics []struct {
			Code, Message   string
			Severity        int // 0 error, 1 warning, 2 information, 3 hint
			Path            []string
			Line, Character int
		}
		Parsed     bool
		Unresolved []string
		Channels   []*string
	}
	if err := json.Unmarshal(stdout, &r); err != nil {
		t.Fatalf("asyncapi.mjs: %v; its output is not JSON: %v\n%s\n%s", runErr, err, stdout, stderr)
	}
	var fs []finding
	for _, d := range r.Diagnostics {
		severity := "hint"
		if d.Severity >= 0 && d.Severity < 3 {
			severity = []string{"error", "warning", "info"}[d.Severity]
		}
		fs = append(fs, finding{file: "asyncapi.yaml", severity: severity, rule: d.Code, message: d.Message,
			line: d.Line, col: d.Character, where: strings.Join(d.Path, ".")})
	}
	reportFindings(t, "@asyncapi/parser", fs, out, "")
	if !r.Parsed {
		t.Fatal("the parser returned no document")
	}
	for _, u := range r.Unresolved {
		t.Errorf("the parser left a reference unresolved: %s", u)
	}
	// The parser read the channels this package's YAML reader reads.
	doc, _ := loadAsyncAPI(t)
	var want, got []string
	for _, c := range doc.Channels {
		want = append(want, derefOr(c.Address, "null"))
	}
	for _, a := range r.Channels {
		got = append(got, derefOr(a, "null"))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the parser read the channels %q, the YAML holds %q", got, want)
	}
}

func derefOr(s *string, or string) string {
	if s == nil {
		return or
	}
	return *s
}
