package tracing

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// Transport returns base wrapped so that every request is a client span in OpenTelemetry's HTTP
// conventions, a child of the span in the request's context (a root span when there is none), and
// carries that span's traceparent. template names the request's URL template for the span's name
// ("POST /auth/token"); "" leaves the method alone as the name. With tracing off it returns base.
//
// The span holds the method, the URL with its user information and query values redacted (as the logs
// show URLs), the server's address and the response's status: never a header's value (Authorization
// among them) nor a body. It ends when the response's headers arrive: a streamed body (the event stream)
// is not part of it.
func (p *Provider) Transport(base http.RoundTripper, template func(*http.Request) string) http.RoundTripper {
	if !p.Enabled() {
		return base
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base, tracer: p.Tracer("github.com/tracking-bridge/tracking-bridge/internal/upstream"),
		template: template}
}

type transport struct {
	base     http.RoundTripper
	tracer   trace.Tracer
	template func(*http.Request) string
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	name, tmpl := req.Method, ""
	if t.template != nil {
		if tmpl = t.template(req); tmpl != "" {
			name += " " + tmpl
		}
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(req.Method),
		semconv.URLFull(logging.RedactURL(req.URL.String())), semconv.ServerAddress(req.URL.Hostname())}
	if port := req.URL.Port(); port != "" {
		if n, err := strconv.Atoi(port); err == nil {
			attrs = append(attrs, semconv.ServerPort(n))
		}
	}
	if tmpl != "" {
		attrs = append(attrs, semconv.URLTemplate(tmpl))
	}
	ctx, span := t.tracer.Start(req.Context(), name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	req = req.Clone(ctx) // a RoundTripper must not change the caller's request
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		span.SetAttributes(semconv.ErrorTypeKey.String(errorType(err)))
		span.SetStatus(codes.Error, errorMessage(err))
		return resp, err
	}
	span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		span.SetAttributes(semconv.ErrorTypeKey.String(strconv.Itoa(resp.StatusCode)))
		span.SetStatus(codes.Error, "")
	}
	return resp, nil
}

// errorMessage is a failed request's error without its URL, whose query may hold a secret: net/http's
// *url.Error names it.
func errorMessage(err error) string {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		err = ue.Err
	}
	return logging.Value(err.Error(), 256)
}

// errorType is error.type of a failed request: a low-cardinality class, never the message.
func errorType(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "_OTHER"
}
