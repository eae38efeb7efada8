package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/tracking-bridge/tracking-bridge/internal/consume"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/publish"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// seen is one message the bridge's code produced, with the document's message it must match.
type seen struct {
	what    string // the case, for errors
	message string // the name of the message in components/messages
	msg     *nats.Msg
	want    []string // headers this case must carry beyond the document's required ones
	absent  []string // headers this case must not carry
	foreign []string // headers a producer set that the bridge passes on as they are
}

// fakeCaller answers the API service's upstream calls by the order id in the path.
type fakeCaller struct{}

func (fakeCaller) Call(_ context.Context, r upstream.APIRequest) (*upstream.APIResponse, error) {
	h := http.Header{}
	switch {
	case r.Path == "/orders":
		return &upstream.APIResponse{Status: 200, Header: h, Body: []byte(`{"ids":["BO-1"]}`)}, nil
	case strings.HasSuffix(r.Path, "/BO-429"):
		h.Set("Retry-After", "7")
		return &upstream.APIResponse{Status: 429, Header: h, Body: []byte(`{"messages":["slow down"]}`)}, nil
	default:
		return &upstream.APIResponse{Status: 200, Header: h, Body: []byte("not json")}, nil
	}
}

// rejectSender refuses every report for good, as the upstream's 422 would.
type rejectSender struct{}

func (rejectSender) Send(context.Context, []byte, string) upstream.Outcome {
	return upstream.Outcome{Kind: upstream.Reject, Status: http.StatusUnprocessableEntity, Messages: []string{"unknown order"}}
}

// TestAsyncAPIMessages runs the bridge's own code against a real nats-server (the publisher, the report
// consumer and the API service, with the upstream faked behind their interfaces) and holds every message
// it produces against the document: each header it carries is declared on that message (or is a
// producer's, passed on), each required header is there, the values match the header schemas, the data
// matches the payload schema, and each case carries the optional headers its circumstances call for.
// Unlike TestAsyncAPIDrift it needs no list of the headers the code sets: what the code sends is what is
// checked.
func TestAsyncAPIMessages(t *testing.T) {
	t.Parallel()
	doc, _ := loadAsyncAPI(t)
	schemas := payloadSchemas(t)
	ns := testutil.StartNATS(t, nil)
	nc := ns.Connect()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.Scale(30*time.Second))
	defer cancel()
	discard := slog.New(slog.DiscardHandler)
	streams := layout.Streams{Prefix: "tracking", DuplicateWindow: time.Minute}
	if err := streams.Ensure(ctx, js, true, discard); err != nil {
		t.Fatal(err)
	}
	var all []seen

	// Events and their dead letters, through the publisher.
	p, err := publish.New(nc, publish.Config{Prefix: streams.Prefix, EventsStream: streams.Events(), DLQStream: streams.DLQ(),
		Window: 8, Timeout: 5 * time.Second, Source: "https://upstream.test/v1.0/tracking/events/stream", Logger: discard})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, err := p.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	dlq, unknown := layout.DLQEvents(streams.Prefix), layout.EventSubject(streams.Prefix, layout.UnknownType, layout.NoUnit)
	events := []struct {
		ev           upstream.Event
		subject      string
		want, absent []string
	}{
		{upstream.Event{ID: "ev-1", ResumeID: "ev-1", Data: []byte(`{"id":"ev-1","type":"GATE_IN","timestamp":"2026-11-22T10:00:00Z"}`)},
			layout.EventSubject(streams.Prefix, "GATE_IN", layout.NoUnit), []string{publish.HeaderEventType, "ce-time"}, nil},
		{upstream.Event{ID: "ev-6", ResumeID: "ev-6", Data: []byte(`{"id":"ev-6","type":"GATE_IN","timestamp":"2026-11-22T10:00:02Z",` +
			`"observation":{"observedLoadingUnit":{"loadingUnit":{"number":"MSKU 123456-5"}}}}`)},
			layout.EventSubject(streams.Prefix, "GATE_IN", "MSKU1234565"), []string{publish.HeaderEventType, "ce-time"}, nil},
		{upstream.Event{ID: "ev-2", ResumeID: "ev-2", Data: []byte(`{"x":1}`)}, unknown, nil, []string{publish.HeaderEventType, "ce-time"}},
		{upstream.Event{ResumeID: "ev-2", Data: []byte(`{"type":5,"timestamp":"2026-11-22T10:00:01Z"}`)}, unknown,
			[]string{"ce-time", publish.HeaderStreamID}, []string{publish.HeaderEventType}},
		{upstream.Event{ID: "ev-4", ResumeID: "ev-4", Name: "tracking", Data: []byte("not json")}, dlq,
			[]string{publish.HeaderSSEEvent}, nil},
		{upstream.Event{ID: "ev-5", ResumeID: "ev-5", Data: []byte(`["GATE_IN"]`)}, dlq, nil, []string{publish.HeaderSSEEvent}},
	}
	for _, e := range events {
		if err := p.Handle(ctx, e.ev); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Resume(ctx); err != nil { // waits for every acknowledgement
		t.Fatal(err)
	}
	stored := append(testutil.StreamContents(t, js, streams.Events()), testutil.StreamContents(t, js, streams.DLQ())...)
	for _, e := range events {
		i := slices.IndexFunc(stored, func(m *jetstream.RawStreamMsg) bool { return string(m.Data) == string(e.ev.Data) })
		if i < 0 {
			t.Fatalf("event %s is in neither stream", e.ev.Data)
		}
		m := stored[i]
		name := "trackingEvent"
		if m.Subject == layout.DLQEvents(streams.Prefix) {
			name = "eventDeadLetter"
		}
		if want := e.subject; m.Subject != want {
			t.Errorf("event %s on %s, want %s", e.ev.Data, m.Subject, want)
		}
		all = append(all, seen{what: "event " + string(e.ev.Data), message: name, want: e.want, absent: e.absent,
			msg: &nats.Msg{Subject: m.Subject, Header: m.Header, Data: m.Data}})
	}

	// Report dead letters, through the report consumer: one invalid, one refused by the upstream, and one
	// refused that came without a Nats-Msg-Id (which the document asks for but does not require).
	c := consume.New(js, rejectSender{}, consume.Config{Stream: streams.Reports(), Durable: "asyncapi-test",
		Subject: streams.ReportsSubject(), DLQSubject: streams.ReportsDLQSubject(), DLQStream: streams.DLQ(),
		Logger: discard})
	runCtx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := c.Run(runCtx); err != nil {
			t.Errorf("consumer: %v", err)
		}
	})
	defer wg.Wait()
	defer stop()
	const valid = `{"order":{"orderId":"BO-1","positionId":"1"},"event":{"timestamp":"2026-11-22T10:00:0%dZ","type":"GATE_IN"}}`
	reports := []struct {
		body, id string
		want     []string
	}{
		{`{"x":1}`, "report-a", nil},
		{fmt.Sprintf(valid, 0), "report-b", []string{layout.HeaderUpstreamStatus}},
		{fmt.Sprintf(valid, 1), "", []string{layout.HeaderUpstreamStatus}},
	}
	for _, r := range reports {
		m := nats.NewMsg(streams.ReportsSubject())
		m.Data = []byte(r.body)
		if r.id != "" {
			m.Header.Set(jetstream.MsgIDHeader, r.id)
		}
		m.Header.Set("Producer", "scanner-7")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	var dead []*jetstream.RawStreamMsg
	testutil.Eventually(t, 10*time.Second, "the reports dead-lettered", func() bool {
		dead = slices.DeleteFunc(testutil.StreamContents(t, js, streams.DLQ()), func(m *jetstream.RawStreamMsg) bool {
			return m.Subject != streams.ReportsDLQSubject()
		})
		return len(dead) == len(reports)
	})
	for _, r := range reports {
		i := slices.IndexFunc(dead, func(m *jetstream.RawStreamMsg) bool { return string(m.Data) == r.body })
		if i < 0 {
			t.Fatalf("report %s: no dead letter", r.body)
		}
		all = append(all, seen{what: "report " + r.body, message: "reportDeadLetter", want: r.want, foreign: []string{"Producer"},
			msg: &nats.Msg{Subject: dead[i].Subject, Header: dead[i].Header, Data: dead[i].Data}})
	}

	// Replies of the API service: a success, the upstream's failure, a refusal, an unusable answer.
	svc := service.New(nc, fakeCaller{}, service.Config{Prefix: streams.Prefix, Version: "dev",
		Validator: service.NewOpenAPIValidator(256 << 10), Logger: discard})
	wg.Go(func() {
		if err := svc.Run(runCtx); err != nil {
			t.Errorf("service: %v", err)
		}
	})
	testutil.Eventually(t, 5*time.Second, "the service up", func() bool { return svc.Ready() == nil })
	caller := ns.Connect()
	for _, r := range []struct {
		what, op, body string
		message        string
		want           []string
	}{
		{"success", "orders.list", `{}`, "listOrdersReply", nil},
		{"the upstream's 429", "orders.get", `{"id":"BO-429"}`, "apiError", []string{service.UpstreamStatusHeader, service.RetryAfterHeader}},
		{"refused", "orders.get", `{}`, "apiError", nil},
		{"too large", "orders.get", `{"id":"BO-1"}` + strings.Repeat(" ", service.MaxEnvelopeBytes), "apiError", nil},
		{"not JSON from the upstream", "orders.get", `{"id":"BO-1"}`, "apiError", []string{service.UpstreamStatusHeader}},
	} {
		m, err := caller.Request(svc.Subject(r.op), []byte(r.body), 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", r.what, err)
		}
		isErr := m.Header.Get(micro.ErrorCodeHeader) != ""
		if isErr != (r.message == "apiError") {
			t.Fatalf("%s: reply %q %v, want %s", r.what, m.Data, m.Header, r.message)
		}
		all = append(all, seen{what: "API " + r.what, message: r.message, want: r.want, msg: m})
	}
	for verb, message := range map[string]string{"PING": "discoveryPing", "INFO": "discoveryInfo", "STATS": "discoveryStats"} {
		m, err := caller.Request(micro.APIPrefix+"."+verb+"."+service.Name, nil, 5*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		all = append(all, seen{what: "discovery " + verb, message: message, msg: m})
	}

	// Every kind of message the bridge sends is among them.
	for _, k := range []string{"trackingEvent", "eventDeadLetter", "reportDeadLetter", "apiError", "listOrdersReply",
		"discoveryPing", "discoveryInfo", "discoveryStats"} {
		if !slices.ContainsFunc(all, func(s seen) bool { return s.message == k }) {
			t.Errorf("no %s produced", k)
		}
	}
	for _, s := range all {
		checkMessage(t, doc, schemas, s)
	}
}

// checkMessage holds one message the code produced against its message in the document.
func checkMessage(t *testing.T, doc *asyncAPI, schemas openapi3.Schemas, s seen) {
	t.Helper()
	m, ok := doc.Components.Messages[s.message]
	if !ok {
		t.Fatalf("%s: no message %s in asyncapi.yaml", s.what, s.message)
	}
	hs, declared := doc.headers(t, m)
	values := map[string]any{}
	for name, vs := range s.msg.Header {
		if len(vs) != 1 {
			t.Errorf("%s (%s): header %s has %d values", s.what, s.message, name, len(vs))
		}
		values[name] = vs[0]
		if slices.Contains(s.foreign, name) {
			continue
		}
		if !slices.ContainsFunc(declared, func(d string) bool {
			return d == name || strings.HasSuffix(d, "-") && strings.HasPrefix(name, d)
		}) {
			t.Errorf("%s: the code sets header %s, which asyncapi.yaml does not declare on %s", s.what, name, s.message)
		}
	}
	for _, name := range hs.Required {
		if _, ok := s.msg.Header[name]; !ok {
			t.Errorf("%s: header %s, required on %s by asyncapi.yaml, is missing: %v", s.what, name, s.message, s.msg.Header)
		}
	}
	for _, name := range s.want {
		if _, ok := s.msg.Header[name]; !ok {
			t.Errorf("%s: header %s is missing: %v", s.what, name, s.msg.Header)
		}
	}
	for _, name := range s.absent {
		if _, ok := s.msg.Header[name]; ok {
			t.Errorf("%s: header %s is set: %v", s.what, name, s.msg.Header)
		}
	}
	// A failure's code is the upstream's status, or one of the codes the document lets the bridge set.
	if code := s.msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		own := hs.Properties[micro.ErrorCodeHeader].Codes
		if up := s.msg.Header.Get(service.UpstreamStatusHeader); code != up && !slices.Contains(own, code) {
			t.Errorf("%s: %s %s is neither the upstream's status (%q) nor one of the bridge's own codes %q",
				s.what, micro.ErrorCodeHeader, code, up, own)
		}
	}
	if m.Headers != nil {
		if err := schemas[refName(t, m.Headers.Ref, "#/components/schemas/")].Value.VisitJSON(values); err != nil {
			t.Errorf("%s: the headers do not match %s: %v", s.what, m.Headers.Ref, err)
		}
	} else if len(s.msg.Header) > 0 {
		t.Errorf("%s: headers %v on %s, which asyncapi.yaml describes without headers", s.what, s.msg.Header, s.message)
	}
	if m.Payload != nil && json.Valid(s.msg.Data) {
		if err := visit(payloadSchema(t, doc, schemas, s.message), s.msg.Data); err != nil {
			t.Errorf("%s: the data %s does not match the payload of %s: %v", s.what, s.msg.Data, s.message, err)
		}
	}
}
