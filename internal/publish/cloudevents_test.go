package publish

import (
	"bytes"
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/binding/spec"
	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestCloudEventsSDKReadsEvents: a message the bridge stored, read back from JetStream, decodes with the
// CloudEvents SDK for Go (binary content mode) into an event with the right id, source, type, time, data
// content type and data, also when the id and the source hold characters the binding percent-encodes.
func TestCloudEventsSDKReadsEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Minute)
	const source = `urn:tracking bridge:"100%"-ü`
	p, err := New(e.nc, Config{Prefix: "tracking", EventsStream: e.layout.Events(), DLQStream: e.layout.DLQ(),
		Window: 8, Timeout: 2 * time.Second, Source: source, Logger: discard()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	ids := []string{"evt-000123", `unit 7 "gate" 50% ü`}
	for _, id := range ids {
		ev := ev(id, "GATE_IN")
		ev.Data = bytes.Replace(ev.Data, []byte("2026-11-22T10:00:00Z"), []byte("2026-11-22t10:00:00.25z"), 1)
		if err := p.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := e.messages(e.layout.Events())
	if len(msgs) != len(ids) {
		t.Fatalf("%d messages stored, want %d", len(msgs), len(ids))
	}
	for i, m := range msgs {
		for k, vs := range m.Header {
			if strings.HasPrefix(strings.ToLower(k), "ce-") && strings.ContainsFunc(vs[0], func(r rune) bool {
				return r <= ' ' || r >= 0x7f || r == '"'
			}) {
				t.Errorf("%s: %q is not percent-encoded", k, vs[0])
			}
		}
		got, err := binding.ToEvent(ctx, &ceMessage{h: m.Header, data: m.Data})
		if err != nil {
			t.Fatalf("message %d: the SDK cannot read it: %v (headers %v)", i, err, m.Header)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("message %d: invalid event: %v", i, err)
		}
		wantTime := time.Date(2026, 11, 22, 10, 0, 0, 250_000_000, time.UTC)
		if got.ID() != ids[i] || got.Source() != source || got.Type() != "tracking.events.GATE_IN" ||
			!got.Time().Equal(wantTime) || got.DataContentType() != "application/json" || got.SpecVersion() != "1.0" {
			t.Errorf("message %d: id %q source %q type %q time %v content type %q version %q", i, got.ID(),
				got.Source(), got.Type(), got.Time(), got.DataContentType(), got.SpecVersion())
		}
		if !bytes.Equal(got.Data(), m.Data) {
			t.Errorf("message %d: data %s, want %s", i, got.Data(), m.Data)
		}
	}
}

// ceMessage is a stored NATS message as the CloudEvents SDK's protocol bindings present one in binary
// content mode: every ce- header an attribute or extension, its value percent-decoded, the body the data.
type ceMessage struct {
	h    nats.Header
	data []byte
}

var ceSpecs = spec.WithPrefix("ce-")

func (m *ceMessage) ReadEncoding() binding.Encoding { return binding.EncodingBinary }

func (m *ceMessage) ReadStructured(context.Context, binding.StructuredWriter) error {
	return binding.ErrNotStructured
}

func (m *ceMessage) ReadBinary(_ context.Context, w binding.BinaryWriter) error {
	version := ceSpecs.Version(m.h.Get("ce-specversion"))
	if version == nil {
		return binding.ErrUnknownEncoding
	}
	for k, vs := range m.h {
		k = strings.ToLower(k)
		if !strings.HasPrefix(k, "ce-") {
			continue
		}
		v, err := url.PathUnescape(vs[0])
		if err != nil {
			return err
		}
		if attr := version.Attribute(k); attr != nil {
			err = w.SetAttribute(attr, v)
		} else {
			err = w.SetExtension(strings.TrimPrefix(k, "ce-"), v)
		}
		if err != nil {
			return err
		}
	}
	return w.SetData(bytes.NewReader(m.data))
}

func (m *ceMessage) Finish(error) error { return nil }

func (m *ceMessage) GetAttribute(k spec.Kind) (spec.Attribute, any) {
	attr := ceSpecs.Version(m.h.Get("ce-specversion")).AttributeFromKind(k)
	if attr == nil {
		return nil, nil
	}
	return attr, m.value(attr.PrefixedName())
}

func (m *ceMessage) GetExtension(name string) any { return m.value("ce-" + name) }

// value returns the percent-decoded value of header k, nil when it is absent or not decodable.
func (m *ceMessage) value(k string) any {
	v, err := url.PathUnescape(m.h.Get(k))
	if v == "" || err != nil {
		return nil
	}
	return v
}

func TestCEValue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"evt-000123", "evt-000123"},
		{"", ""},
		{"a b", "a%20b"},
		{`"q"`, "%22q%22"},
		{"50%", "50%25"},
		{"ü", "%C3%BC"},
		{"tab\there", "tab%09here"},
		{"del\x7f", "del%7F"},
		{"https://x.example/a?b=c&d=~", "https://x.example/a?b=c&d=~"},
	} {
		if got := ceValue(tc.in); got != tc.want {
			t.Errorf("ceValue(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if back, err := url.PathUnescape(ceValue(tc.in)); err != nil || back != tc.in {
			t.Errorf("ceValue(%q) decodes to %q, %v", tc.in, back, err)
		}
	}
}
