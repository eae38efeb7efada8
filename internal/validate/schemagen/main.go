// Command schemagen writes package validate's schemas.json: the request bodies the bridge checks, as
// JSON Schema (draft 2020-12) converted from the OpenAPI document api/openapi.yaml with the bridge's
// policies (convert.go). It runs at build time, by 'go generate ./internal/validate', so that the daemon
// needs no OpenAPI, YAML or JSON Schema library: package validate embeds the file and checks bodies
// against it itself. TestSchemasUpToDate fails when the committed file differs from what this writes.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/tracking-bridge/tracking-bridge/api"
)

// bodies are the schemas converted, by their name in the document's components, with their policy.
var bodies = []struct {
	name   string
	strict bool
}{
	{"TrackingEventReport", false}, // the report consumer's policy: the shape, not the values
	{"BookingOrder", true},         // the document's own strictness
}

func main() {
	out := flag.String("o", "schemas.json", "file to write")
	flag.Parse()
	b, err := generate()
	if err == nil {
		err = os.WriteFile(*out, b, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "schemagen:", err)
		os.Exit(1)
	}
}

// file is schemas.json: for each body, its JSON Schema and the words for the JSON types of convert's
// kinds.
type file struct {
	Generated string           `json:"$comment"`
	Schemas   map[string]entry `json:"schemas"`
}

type entry struct {
	Schema map[string]any    `json:"schema"`
	Kinds  map[string]string `json:"kinds"`
}

// generate returns the content of schemas.json. encoding/json writes map keys sorted, so the same
// document always gives the same bytes.
func generate() ([]byte, error) {
	doc, err := api.Document()
	if err != nil {
		return nil, err
	}
	f := file{
		Generated: "Generated from api/openapi.yaml by internal/validate/schemagen ('go generate ./internal/validate'). DO NOT EDIT.",
		Schemas:   map[string]entry{},
	}
	for _, b := range bodies {
		schema, kinds, err := convert(doc, b.name, b.strict)
		if err != nil {
			return nil, err
		}
		f.Schemas[b.name] = entry{Schema: schema, Kinds: kinds}
	}
	buf, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(buf, '\n'), nil
}
