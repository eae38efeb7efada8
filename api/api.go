// Package api holds the OpenAPI 3.0.3 description of the provider's API at the paths the bridge and its
// simulator use (docs/upstream.md#operations): the one description the simulator's request checks, the
// bridge's report validation and the Go types for downstream services are built from. The validation and the
// types are generated from it at build time (internal/validate/schemagen, tracking/types.gen.go), so neither
// the daemon nor package tracking imports this package or its OpenAPI parser.
package api

import (
	_ "embed"
	"fmt"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
)

//go:embed openapi.yaml
var spec []byte

// OpenAPI returns the document as YAML. The slice is shared: do not modify it.
func OpenAPI() []byte { return spec }

var load = sync.OnceValues(func() (*openapi3.T, error) {
	l := openapi3.NewLoader()
	doc, err := l.LoadFromData(spec)
	if err != nil {
		return nil, fmt.Errorf("api: load openapi.yaml: %w", err)
	}
	if err := doc.Validate(l.Context); err != nil {
		return nil, fmt.Errorf("api: openapi.yaml is not a valid OpenAPI document: %w", err)
	}
	return doc, nil
})

// Document returns the document loaded and validated by kin-openapi, parsed once. Callers must not
// modify it.
func Document() (*openapi3.T, error) { return load() }
