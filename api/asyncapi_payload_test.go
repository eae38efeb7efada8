package api

import (
	"encoding/json"
	"maps"
	"net/url"
	"os"
	"regexp"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"go.yaml.in/yaml/v4"

	"github.com/tracking-bridge/tracking-bridge/internal/publish"
)

// payloadPrefix names, among payloadSchemas, the payload schema of a message.
const payloadPrefix = "payload of "

// payloadSchemas loads the schemas of asyncapi.yaml with kin-openapi, as the OpenAPI 3.0 schemas their
// messages' schemaFormat says they are, their references into openapi.yaml resolved, so that a test can
// hold a message's headers and data against them: each schema of components/schemas by its name, and
// each message's payload schema as payloadPrefix + the message's name.
func payloadSchemas(t *testing.T) openapi3.Schemas {
	t.Helper()
	_, tree := loadAsyncAPI(t)
	all, ok := resolvePointer(tree, "/components/schemas").(map[string]any)
	if !ok {
		t.Fatal("asyncapi.yaml has no components/schemas")
	}
	schemas := maps.Clone(all)
	messages, _ := resolvePointer(tree, "/components/messages").(map[string]any)
	for name := range messages {
		if s := resolvePointer(tree, "/components/messages/"+name+"/payload/schema"); s != nil {
			schemas[payloadPrefix+name] = s
		}
	}
	b, err := json.Marshal(map[string]any{
		"openapi": "3.0.3", "info": map[string]any{"title": "asyncapi.yaml's schemas", "version": "1"},
		"paths": map[string]any{}, "components": map[string]any{"schemas": schemas},
	})
	if err != nil {
		t.Fatal(err)
	}
	l := openapi3.NewLoader()
	l.IsExternalRefsAllowed = true
	doc, err := l.LoadFromDataWithPath(b, &url.URL{Path: "asyncapi.yaml"}) // ./openapi.yaml is its neighbour
	if err != nil {
		t.Fatalf("asyncapi.yaml's schemas as OpenAPI 3.0: %v", err)
	}
	return doc.Components.Schemas
}

// payloadSchema returns the payload schema of the message, with everything it references.
func payloadSchema(t *testing.T, doc *asyncAPI, schemas openapi3.Schemas, message string) *openapi3.Schema {
	t.Helper()
	m, ok := doc.Components.Messages[message]
	if !ok || m.Payload == nil {
		t.Fatalf("no message %s with a payload", message)
	}
	s := schemas[payloadPrefix+message]
	if s == nil || s.Value == nil {
		t.Fatalf("message %s: payload schema %q not loaded", message, m.Payload.Schema.Ref)
	}
	return s.Value
}

// visit holds data, JSON, against s.
func visit(s *openapi3.Schema, data []byte) error {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	return s.VisitJSON(v)
}

// TestAsyncAPIEventPayload: the events' payload schema accepts every data the bridge publishes on
// P.events.* (any JSON object, whatever its type and timestamp, as publish.ScanEvent routes it) and
// refuses what it dead-letters instead (JSON that is not an object); the message's examples are such
// data; and the TrackingEvent of openapi.yaml alone would refuse some of it, so the schema has to say
// more than TrackingEvent.
func TestAsyncAPIEventPayload(t *testing.T) {
	doc, _ := loadAsyncAPI(t)
	schemas := payloadSchemas(t)
	payload := payloadSchema(t, doc, schemas, "trackingEvent")
	rule := doc.parameter(t, doc.Channels["events"].Parameters["type"]).TokenRule
	if rule == nil {
		t.Fatal("the events channel's type parameter has no x-token-rule")
	}
	token := regexp.MustCompile(rule.Pattern)
	strict := trackingEvent(t, schemas)
	for _, c := range []struct {
		data     string
		token    string // the subject's type token; "" for data that is dead-lettered
		strictOK bool   // TrackingEvent itself accepts it
	}{
		{`{"id":"e-1","type":"GATE_IN","timestamp":"2025-03-01T08:15:00Z"}`, "GATE_IN", true},
		{`{"type":"NEW_KIND_OF_EVENT","timestamp":"2025-03-01T08:15:00Z","extra":[1]}`, "NEW_KIND_OF_EVENT", true},
		{`{"x":1}`, rule.Missing, false},
		{`{"type":5}`, rule.Missing, false},
		{`{"type":null,"timestamp":"yesterday"}`, rule.Missing, false},
		{`{"type":"GATE IN"}`, "GATE_IN", false},
		{`{}`, rule.Missing, false},
		{`[{"type":"GATE_IN"}]`, "", false},
		{`"GATE_IN"`, "", false},
		{`5`, "", false},
		{`null`, "", false},
	} {
		f, err := publish.ScanEvent([]byte(c.data))
		if published := err == nil; published != (c.token != "") {
			t.Fatalf("%s: ScanEvent: %v; the case expects it published: %t", c.data, err, c.token != "")
		}
		err = visit(payload, []byte(c.data))
		if c.token == "" {
			if err == nil {
				t.Errorf("%s is dead-lettered, but the events' payload schema accepts it", c.data)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s is published on %s, but the events' payload schema refuses it: %v", c.data, c.token, err)
		}
		if got := publish.TypeToken(f.Type, f.TypeKind); got != c.token || !token.MatchString(got) {
			t.Errorf("%s: type token %q, want %q matching %s", c.data, got, c.token, rule.Pattern)
		}
		if err := visit(strict, []byte(c.data)); (err == nil) != c.strictOK {
			t.Errorf("%s: openapi.yaml's TrackingEvent accepts it: %t, the case says %t (%v)", c.data, err == nil, c.strictOK, err)
		}
	}

	// The message's examples are data the bridge publishes.
	var examples struct {
		Components struct {
			Messages map[string]struct {
				Examples []struct {
					Name    string `yaml:"name"`
					Payload any    `yaml:"payload"`
				} `yaml:"examples"`
			} `yaml:"messages"`
		} `yaml:"components"`
	}
	b, err := os.ReadFile("asyncapi.yaml")
	if err == nil {
		err = yaml.Unmarshal(b, &examples)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, ex := range examples.Components.Messages["trackingEvent"].Examples {
		b, err := json.Marshal(ex.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := publish.ScanEvent(b); err != nil {
			t.Errorf("example %s: %s is not published: %v", ex.Name, b, err)
		}
		if err := visit(payload, b); err != nil {
			t.Errorf("example %s: %s does not match the payload schema: %v", ex.Name, b, err)
		}
	}
}

// trackingEvent returns openapi.yaml's TrackingEvent as the payload schema reaches it.
func trackingEvent(t *testing.T, schemas openapi3.Schemas) *openapi3.Schema {
	t.Helper()
	s := schemas["EventData"]
	if s == nil || s.Value == nil {
		t.Fatal("no schema EventData")
	}
	for _, b := range s.Value.AnyOf {
		if b.Ref == "./openapi.yaml#/components/schemas/TrackingEvent" {
			return b.Value
		}
	}
	t.Fatal("EventData does not name openapi.yaml's TrackingEvent as the documented shape")
	return nil
}
