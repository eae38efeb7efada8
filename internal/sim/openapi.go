package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/tracking-bridge/tracking-bridge/api"
	"github.com/tracking-bridge/tracking-bridge/internal/rfc3339"
)

// OpenAPIPath is where the simulator serves the OpenAPI document of the API (package api), outside the
// base path and without authentication.
const OpenAPIPath = "/openapi.yaml"

// document is the OpenAPI description every API request is checked against: one route per operation,
// found by the simulator's own mux pattern rather than by matching the document's servers, so that any
// base path and host work.
type document struct {
	routes map[string]*routers.Route // "GET /orders/{id}" → its operation
	opts   *openapi3filter.Options
}

func newDocument() (*document, error) {
	doc, err := api.Document()
	if err != nil {
		return nil, err
	}
	d := &document{
		routes: make(map[string]*routers.Route),
		opts:   documentOptions(),
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			d.routes[method+" "+path] = &routers.Route{Spec: doc, Path: path, PathItem: item, Method: method, Operation: op}
		}
	}
	return d, nil
}

// documentOptions are the options of the simulator's checks against the document.
func documentOptions() *openapi3filter.Options {
	return &openapi3filter.Options{
		MultiError: true,
		// Authentication is the simulator's own (its 401 answers, docs/upstream.md#expired-tokens), done before
		// this check.
		AuthenticationFunc:  openapi3filter.NoopAuthenticationFunc,
		SkipSettingDefaults: true,
		// An id in a create or update body is ignored, as it always was: readOnly says a client should
		// not send it (OpenAPI 3.0.3), not that the service refuses it.
		ExcludeReadOnlyValidations: true,
		// RFC 3339 as the simulator's own checks read it (internal/rfc3339): kin-openapi's pattern
		// refuses the lower-case "t" and "z" that RFC 3339 section 5.6 allows.
		SchemaValidationOptions: []openapi3.SchemaValidationOption{
			openapi3.WithStringFormatValidator("date-time", openapi3.NewCallbackValidator(func(s string) error {
				if !rfc3339.Valid(s) {
					return errors.New("not an RFC 3339 date-time")
				}
				return nil
			})),
		},
	}
}

// route returns the operation of method and path (the document's, like "/orders/{id}"), or nil.
func (d *document) route(method, path string) *routers.Route { return d.routes[method+" "+path] }

// input returns the validation input of r for the operation at route.
func (d *document) input(r *http.Request, route *routers.Route) *openapi3filter.RequestValidationInput {
	params := map[string]string{}
	for _, p := range route.Operation.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInPath {
			params[p.Value.Name] = r.PathValue(p.Value.Name)
		}
	}
	for _, p := range route.PathItem.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInPath {
			params[p.Value.Name] = r.PathValue(p.Value.Name)
		}
	}
	return &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: d.opts}
}

// check validates r against its operation and returns every problem, in the simulator's style of a
// property path and what is wrong. It reads and restores the body (when not larger than maxBody; a
// larger one the handler refuses itself).
func (d *document) check(r *http.Request, route *routers.Route) []string {
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
		if err != nil || len(b) > maxBody {
			return nil
		}
		defer func() { r.Body = io.NopCloser(bytes.NewReader(b)) }()
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	err := openapi3filter.ValidateRequest(r.Context(), d.input(r, route))
	if err == nil {
		return nil
	}
	return documentProblems(err)
}

// documentProblems flattens kin-openapi's errors into messages.
func documentProblems(err error) []string {
	var out []string
	var walk func(err error, prefix string)
	walk = func(err error, prefix string) {
		var me openapi3.MultiError
		if errors.As(err, &me) {
			for _, e := range me {
				walk(e, prefix)
			}
			return
		}
		var re *openapi3filter.RequestError
		if errors.As(err, &re) {
			switch {
			case re.Parameter != nil:
				prefix = re.Parameter.Name
			case re.RequestBody != nil:
				prefix = ""
			}
			if re.Err != nil {
				walk(re.Err, prefix)
			} else {
				out = append(out, strings.TrimPrefix(prefix+": "+re.Reason, ": "))
			}
			return
		}
		var se *openapi3.SchemaError
		if errors.As(err, &se) {
			if se.SchemaField == "nullable" || se.SchemaField == "enum" && se.Value == nil {
				out = append(out, schemaPath(prefix, se.JSONPointer())+" must not be null (the document does not mark it nullable)")
				return
			}
			out = append(out, schemaPath(prefix, se.JSONPointer())+": "+se.Reason)
			return
		}
		out = append(out, strings.TrimPrefix(prefix+": "+err.Error(), ": "))
	}
	walk(err, "")
	return out
}

// schemaPath writes a JSON pointer below prefix as the simulator's messages do: "unit.seals[3].type".
func schemaPath(prefix string, ptr []string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, tok := range ptr {
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			fmt.Fprintf(&b, "[%s]", tok)
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(tok)
	}
	if b.Len() == 0 {
		return "body"
	}
	return b.String()
}

// docProblemsKey is the request context key of the document's problems with a request.
type docProblemsKey struct{}

// withDocumentCheck checks r against the document's operation and keeps the problems in its context,
// for the handler to answer with once its own checks (which speak of the provider's rules in their
// own words and come first, as they always have) pass: see rejectByDocument.
func (s *Server) withDocumentCheck(r *http.Request, method, path string) *http.Request {
	route := s.doc.route(method, path)
	if route == nil {
		return r
	}
	if msgs := s.doc.check(r, route); len(msgs) > 0 {
		return r.WithContext(context.WithValue(r.Context(), docProblemsKey{}, msgs))
	}
	return r
}

// rejectByDocument answers 400 with the document's problems with r, if any, and reports whether it did.
// A handler calls it after its own checks passed, before acting on the request.
func rejectByDocument(w http.ResponseWriter, r *http.Request) bool {
	msgs, _ := r.Context().Value(docProblemsKey{}).([]string)
	if len(msgs) == 0 {
		return false
	}
	writeMessages(w, http.StatusBadRequest, msgs...)
	return true
}

// handleOpenAPI serves the OpenAPI document.
func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(api.OpenAPI())
}
