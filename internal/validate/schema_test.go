package validate

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// keywordsSchema uses every keyword the conversion may write, the value keywords of the strict policy
// too (the document has no minItems, minLength, minimum or maximum in a body the bridge checks today).
const keywordsSchema = `{
  "$ref": "#/$defs/Root", "type": ["object"],
  "$defs": {
    "Root": {
      "required": ["id", "list"],
      "properties": {
        "id": {"type": ["string"], "minLength": 2, "maxLength": 4, "pattern": "^[a-z]+$"},
        "list": {"type": ["array"], "minItems": 1, "maxItems": 3, "items": {"$ref": "#/$defs/Item", "type": ["object"]}},
        "ratio": {"type": ["number", "null"], "minimum": -0.5, "maximum": 1e2},
        "count": {"type": ["number", "null"], "format": "int32", "minimum": 1},
        "big": {"type": ["number"], "format": "integer"},
        "day": {"type": ["string", "null"], "format": "date"},
        "at": {"type": ["string"], "format": "date-time"},
        "mode": {"$ref": "#/$defs/Mode", "type": ["string", "null"]},
        "flag": {"type": ["boolean"]},
        "any": {}
      }
    },
    "Item": {"required": ["n"], "properties": {"n": {"type": ["number"], "format": "int32"}, "next": {"$ref": "#/$defs/Item", "type": ["object", "null"]}}},
    "Mode": {"enum": ["A", "B", null]}
  }
}`

var keywordsKinds = map[string]string{"/$defs/Root/properties/count": "an integer", "/$defs/Root/properties/at": "a date-time string (RFC 3339)"}

// keywordsBodies are bodies valid and invalid in every way keywordsSchema tells.
var keywordsBodies = []string{
	`{"id":"ab","list":[{"n":1}]}`,
	`{"id":"abcd","list":[{"n":1,"next":{"n":2,"next":null}}],"ratio":null,"count":null,"day":null,"mode":null,"any":[1,{}]}`,
	`{}`,
	`{"id":"A","list":[]}`,
	`{"id":"abcdef1","list":[{},{"n":"x"},{"n":1.5},{"n":3000000000}]}`,
	`{"id":7,"list":{},"ratio":"1","count":"2","big":null,"day":1,"at":null,"mode":1,"flag":"no"}`,
	`{"id":"ab","list":[{"n":1}],"ratio":-0.6,"count":0,"big":1.5,"day":"2023-02-29","at":"yesterday","mode":"C"}`,
	`{"id":"ab","list":[{"n":1}],"ratio":100.5,"count":1e10,"big":1e400,"day":"2024-02-29","at":"2024-05-01T12:30:00Z","mode":"A"}`,
	`{"id":"ab","list":[{"n":1}],"ratio":1e2,"count":2.0,"big":12.0,"mode":"B","flag":true}`,
	`{"id":"äöü","list":[{"n":1,"next":{"next":{"n":"x"}}}]}`,
	`{"id":"ab","list":[null,{"n":1},{"n":1},{"n":1}],"id":"abcde"}`,
}

// keywordsCheck returns the check and the reference check against keywordsSchema.
func keywordsCheck(t testing.TB) (own func([]byte) []string, ref func([]byte) []string) {
	nodes, err := load([]byte(`{"schemas":{"K":{"schema":` + keywordsSchema + `,"kinds":` + mustJSON(t, keywordsKinds) + `}}}`))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := compileReference(json.RawMessage(keywordsSchema), keywordsKinds)
	if err != nil {
		t.Fatal(err)
	}
	k := bodyType{"K", "the body"}
	return func(b []byte) []string { return k.checkWith(nodes["K"], b) }, func(b []byte) []string { return referenceCheckWith(rs, k, b) }
}

// TestKeywordsAgreeWithReference checks every keyword against the JSON Schema library on a schema of
// its own, problem for problem and in the same order.
func TestKeywordsAgreeWithReference(t *testing.T) {
	own, ref := keywordsCheck(t)
	for _, body := range keywordsBodies {
		if got, want := own([]byte(body)), ref([]byte(body)); !slices.Equal(got, want) {
			t.Errorf("body %s\n        got %q\n  reference %q", body, got, want)
		}
	}
}

// FuzzKeywordsReference is TestKeywordsAgreeWithReference on any body.
func FuzzKeywordsReference(f *testing.F) {
	for _, b := range keywordsBodies {
		f.Add([]byte(b))
	}
	own, ref := keywordsCheck(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		if got, want := own(body), ref(body); !slices.Equal(got, want) {
			t.Fatalf("body %q\n        got %q\n  reference %q", body, got, want)
		}
	})
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLoadRefusesUnknownKeywords: a schema with a keyword the package does not check is refused, rather
// than checked more leniently than it says.
func TestLoadRefusesUnknownKeywords(t *testing.T) {
	for _, schema := range []string{
		`{"type":["object"],"additionalProperties":false}`,
		`{"type":["object"],"properties":{"a":{"type":["string"],"format":"email"}}}`,
		`{"type":["object"],"properties":{"a":{"type":["integer"]}}}`,
		`{"type":["object"],"properties":{"a":{"enum":[1,2]}}}`,
		`{"type":["object"],"properties":{"a":{"$ref":"#/$defs/Missing"}}}`,
		`{"type":["object"],"properties":{"a":{"$ref":"other.json"}}}`,
		`{"type":["object"],"properties":{"a":{"type":["string"],"pattern":"("}}}`,
		`{"type":["object"],"properties":{"a":{"type":["array"],"maxItems":-1}}}`,
		`{"type":["object"],"properties":{"a":{"$defs":{}}}}`,
	} {
		if _, err := load([]byte(`{"schemas":{"X":{"schema":` + schema + `}}}`)); err == nil {
			t.Errorf("load accepted %s", schema)
		} else if !strings.Contains(err.Error(), "schema X") {
			t.Errorf("load %s: %v does not name the schema", schema, err)
		}
	}
}

// The embedded schemas load, and hold the two bodies the bridge checks.
func TestSchemasLoad(t *testing.T) {
	m, err := load(schemasJSON)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []bodyType{reportBody, orderBody} {
		if m[k.name] == nil || m[k.name].types != tObject {
			t.Errorf("schema %s: %+v", k.name, m[k.name])
		}
	}
}
