package consume

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// MaxProblems bounds every problem list the bridge gives back, here Validate's and Schema.Validate's and in
// the API service its refusals: further problems are counted in a last entry (MoreProblems), so that a
// body of thousands of faults gets an answer of bounded size.
const MaxProblems = 50

// MoreProblems is the last entry of a problem list cut at MaxProblems: n problems were left out.
func MoreProblems(n int) string { return fmt.Sprintf("and %d more problems", n) }

// Validate checks that body is a TrackingEventReport (spec 2.17) the upstream can be asked to take, and
// returns every problem found, in the spirit of the spec's ApiResponseMessage ("event.timestamp is
// missing"), or nil when there is none.
//
// The checks of the body's shape come from the TrackingEventReport schema of the OpenAPI document
// (package api), compiled once into a JSON Schema validator: required fields (event, event.timestamp,
// event.type, and order.orderId and order.positionId when order is given), the JSON type of every field
// the spec describes at any depth, integers where the spec says int32, string lengths and the array
// limits of spec §8 (seals: at most 100 items). Optional fields may be null. Unknown fields are allowed,
// and so are values of enumerations the spec does not list (the provider may add them; see converter).
// Other rules the upstream may apply are left to it; it answers them with 400 and its own messages.
//
// Checked by hand, because a schema cannot say them: the size (at most maxBytes bytes; no bound when
// maxBytes <= 0), valid UTF-8, one JSON object and nothing after it, and the date-time format, RFC 3339
// strictly (internal/rfc3339).
//
// A valid report is usually accepted by a walker on a field table derived from the same schema
// (fastpath.go), without decoding it; the JSON Schema validator decides on everything else.
//
// Problems are listed in the order of the body, a missing field at the end of its object; of a key given
// twice, the last value counts, as encoding/json and the upstream read it. At most 50 are listed, then a
// count of the rest. Quoted input values are cut to 40 characters and escaped, so a problem is safe to
// put in a header or a log line.
func Validate(body []byte, maxBytes int) []string {
	if maxBytes > 0 && len(body) > maxBytes {
		return []string{fmt.Sprintf("the report is %d bytes, more than the limit of %d bytes", len(body), maxBytes)}
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return []string{"the report is empty; a TrackingEventReport JSON object is expected"}
	}
	if !utf8.Valid(body) {
		return []string{"the report is not valid UTF-8"}
	}
	rs := reportSchema()
	if rs.fast != nil && fastValid(body, rs.fast) {
		return nil
	}
	return rs.validate(body)
}

// validate checks body with the JSON Schema validator and words its problems: Validate after its own
// checks of size, emptiness and UTF-8, when the fast path did not accept the body.
func (rs *compiledReport) validate(body []byte) []string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []string{rs.noun + " is not valid JSON: " + syntaxError(body)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return []string{rs.noun + " is not valid JSON: " + syntaxError(body)}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return []string{rs.noun + " must be a JSON object (" + rs.name + "), not " + describe(v)}
	}
	err := rs.schema.Validate(m)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{rs.noun + " could not be validated: " + err.Error()}
	}
	return rs.problems(ve, m, body)
}

// syntaxError describes why body is not valid JSON, with the byte offset where it goes wrong. It is the
// slow path, for bad input only.
func syntaxError(body []byte) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	var v any
	err := dec.Decode(&v)
	if err == nil {
		return fmt.Sprintf("unexpected data after the value ending at byte %d", dec.InputOffset())
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s at byte %d", se.Error(), se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "it ends in the middle of a value"
	}
	return err.Error()
}

// problems collects what Validate finds.
type problems struct {
	msgs  []string
	extra int
}

func (p *problems) addf(format string, args ...any) {
	if len(p.msgs) < MaxProblems {
		p.msgs = append(p.msgs, fmt.Sprintf(format, args...))
	} else {
		p.extra++
	}
}

func (p *problems) list() []string {
	if p.extra > 0 {
		return append(p.msgs, MoreProblems(p.extra))
	}
	return p.msgs
}
