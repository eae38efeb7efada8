package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/api"
)

// TestSchemasUpToDate regenerates package validate's schemas.json from api/openapi.yaml and compares the
// bytes: after a change to the document (or to the conversion), run 'go generate ./internal/validate'.
func TestSchemasUpToDate(t *testing.T) {
	want, err := generate()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "schemas.json")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: run 'go generate ./internal/validate'", path)
	}
}

// An unknown name is an error, not an empty schema.
func TestConvertUnknownSchema(t *testing.T) {
	doc, err := api.Document()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := convert(doc, "NoSuchSchema", true); err == nil {
		t.Fatal("convert of an unknown name succeeded")
	}
}
