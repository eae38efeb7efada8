// Package validate checks the request bodies the bridge sends upstream on a client's behalf against the
// OpenAPI document (package api): a TrackingEventReport, which the report consumer
// (internal/consume), the API service (internal/service) and package tracking's Reporter check alike, and
// a BookingOrder, which the API service checks before creating or updating an order.
//
// The document is converted at build time (schemagen, 'go generate ./internal/validate') into JSON
// Schema with the bridge's policies, schemas.json, which this package embeds and checks bodies against
// itself: neither the daemon nor a program importing package tracking links an OpenAPI, YAML or JSON
// Schema library. It is a leaf: it imports the standard library and internal/rfc3339 only.
//
// Files: validate.go (Report, BookingOrder), schema.go (schemas.json and the check against it),
// problems.go (their words and their order in the body), fastpath.go and fasttable.go (the walker that
// accepts valid reports without decoding them).
package validate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"unicode/utf8"

	"github.com/tracking-bridge/tracking-bridge/internal/jsonscan"
)

// MaxProblems bounds every problem list the bridge gives back, here Report's and BookingOrder's and in
// the API service its refusals: further problems are counted in a last entry (MoreProblems), so that a
// body of thousands of faults gets an answer of bounded size.
const MaxProblems = 50

// MoreProblems is the last entry of a problem list cut at MaxProblems: n problems were left out.
func MoreProblems(n int) string { return fmt.Sprintf("and %d more problems", n) }

// Report checks that body is a TrackingEventReport the upstream can be asked to take, and
// returns every problem found, in the spirit of the provider's ApiResponseMessage ("event.timestamp is
// missing"), or nil when there is none.
//
// The checks of the body's shape come from the TrackingEventReport schema of the OpenAPI document
// (package api), converted into JSON Schema at build time: required fields (event, event.timestamp,
// event.type, and order.orderId and order.positionId when order is given), the JSON type of every field
// the document describes at any depth, integers where it says int32, and its array limits (seals: at
// most 100 items). Optional fields may be null. Unknown fields are allowed, and so are values
// of enumerations the document does not list (the provider may add them; see schemagen's converter). Other
// rules the upstream may apply are left to it; it answers them with 400 and its own messages.
//
// Checked by hand, because a schema cannot say them: the size (at most maxBytes bytes; no bound when
// maxBytes <= 0), valid UTF-8 (raw and in \u escapes), no key given twice in an object (Unambiguous),
// one JSON object and nothing after it, and the date-time format, RFC 3339 strictly (internal/rfc3339).
//
// A valid report is usually accepted by a walker on a field table derived from the same schema
// (fastpath.go), without decoding it; the check against the schema decides on everything else.
//
// Problems are listed in the order of the body, a missing field at the end of its object. At most 50
// are listed, then a count of the rest. Quoted input values are cut to 40 characters and escaped, so a
// problem is safe to put in a header or a log line. It is safe for concurrent use.
func Report(body []byte, maxBytes int) []string {
	if ps := reportBody.prelude(body, maxBytes); ps != nil {
		return ps
	}
	if fast := reportFields(); fast != nil && fastValid(body, fast) {
		return nil
	}
	return reportBody.check(body)
}

// BookingOrder checks that body is a BookingOrder exactly as strictly as the document says
// (null only where it says nullable; enumerations, string lengths, patterns, minimum and maximum), so that
// the bridge refuses what the upstream would refuse and nothing more. It returns every problem in
// Report's words ("unit.loadingState is missing"), in the order of the body, or nil when there is none.
// It is safe for concurrent use.
func BookingOrder(body []byte) []string {
	if ps := orderBody.prelude(body, 0); ps != nil {
		return ps
	}
	return orderBody.check(body)
}

// bodyType is a body the package checks: its schema's name in schemas.json and how problems name it.
type bodyType struct {
	name string // "TrackingEventReport"
	noun string // "the report"
}

var (
	reportBody = bodyType{"TrackingEventReport", "the report"}
	orderBody  = bodyType{"BookingOrder", "the booking order"}
)

// prelude returns the one problem of a body larger than maxBytes (0: no bound), empty, not UTF-8 or
// ambiguous (see Unambiguous), nil when it has none of them.
func (k bodyType) prelude(body []byte, maxBytes int) []string {
	switch {
	case maxBytes > 0 && len(body) > maxBytes:
		return []string{fmt.Sprintf("%s is %d bytes, more than the limit of %d bytes", k.noun, len(body), maxBytes)}
	case len(bytes.TrimSpace(body)) == 0:
		return []string{k.noun + " is empty; a " + k.name + " JSON object is expected"}
	}
	return Unambiguous(body, k.noun)
}

// Unambiguous returns the one problem of a JSON body that readers may read in different ways, named
// noun in the problem ("the report", "the request"), or nil when it has none. Such a body would be
// checked as one thing and acted on as another: the bridge refuses it before it is checked further, in
// every body it forwards or reads. The problems are, in this order:
//
//   - bytes that are not UTF-8 (an id with them would reach the upstream as it was sent, which an
//     upstream may read as another id, or refuse);
//   - a \u escape of half a UTF-16 surrogate pair ("\ud800" alone: encoding/json reads U+FFFD, other
//     readers keep it or refuse the body);
//   - an object, at any depth, with a key given twice ({"id":"A","id":"B"}: encoding/json keeps the last
//     value, other readers the first).
//
// A body that is not JSON has none of them: its syntax is left to the caller, which words it.
func Unambiguous(body []byte, noun string) []string {
	if !utf8.Valid(body) {
		return []string{noun + " is not valid UTF-8"}
	}
	err := jsonscan.Strict(body)
	if err != nil && !jsonscan.Valid(body) {
		return nil // not JSON after the problem found: its syntax is the problem to name
	}
	switch err := err.(type) {
	case *jsonscan.DuplicateKeyError:
		if err.First != err.Key {
			return []string{fmt.Sprintf("%s gives the keys %s and %s%s, which differ only in case; readers that "+
				"ignore case take them as one key given twice and differ on its value", noun, quote(err.First),
				quote(err.Key), within(err.Path))}
		}
		return []string{fmt.Sprintf("%s gives the key %s twice%s; a key may appear only once in an object, "+
			"or readers differ on its value", noun, quote(err.Key), within(err.Path))}
	case *jsonscan.SurrogateError:
		return []string{fmt.Sprintf("%s is not valid UTF-8: the escape %s%s is half of a UTF-16 surrogate "+
			"pair without the other half", noun, err.Escape, within(err.Path))}
	}
	return nil
}

// within names a place in a body for a problem: " in " and its path, cut to keep the problem short; ""
// for the body itself.
func within(path string) string {
	const maxPath = 120
	if path == "" {
		return ""
	}
	if len(path) > maxPath {
		n := maxPath
		for n > 0 && !utf8.RuneStart(path[n]) {
			n--
		}
		path = path[:n] + "…"
	}
	return " in " + path
}

// decode decodes body, which passed prelude, into the JSON object it must be, or says why it is none.
func (k bodyType) decode(body []byte) (map[string]any, []string) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, []string{k.noun + " is not valid JSON: " + syntaxError(body)}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, []string{k.noun + " is not valid JSON: " + syntaxError(body)}
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, []string{k.noun + " must be a JSON object (" + k.name + "), not " + describe(v)}
	}
	return m, nil
}

// check checks body, which passed prelude, against the schema and words its problems.
func (k bodyType) check(body []byte) []string { return k.checkWith(schemas()[k.name], body) }

// checkWith is check against the schema root.
func (k bodyType) checkWith(root *node, body []byte) []string {
	m, bad := k.decode(body)
	if bad != nil {
		return bad
	}
	var ps []problem
	root.check(m, "", "", &ps)
	return words(body, ps)
}

// words lists the problems found in body in the order of the body, at most MaxProblems of them; nil for
// none.
func words(body []byte, ps []problem) []string {
	if len(ps) == 0 {
		return nil
	}
	if len(ps) > 1 {
		pos := positions(body, ps)
		slices.SortStableFunc(ps, func(a, b problem) int { return pos.of(a) - pos.of(b) })
	}
	var p problems
	for _, x := range ps {
		p.addf("%s", x.text)
	}
	return p.list()
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

// problems collects what Report finds.
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
