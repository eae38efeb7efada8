package api

import (
	"slices"
	"testing"
)

// The document loads, is valid OpenAPI, and describes every operation of contract.md §1.
func TestDocument(t *testing.T) {
	doc, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"GET /locations", "GET /orders", "POST /orders", "GET /orders/{id}", "PUT /orders/{id}",
		"DELETE /orders/{id}", "GET /tracking", "POST /tracking/events", "GET /tracking/events/stream",
	}
	var got []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			got = append(got, method+" "+path)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("operations %q, want %q", got, want)
	}
	for _, name := range []string{"TrackingEventReport", "BookingOrder", "TrackedUnit", "PaginatedLocationResponse",
		"ApiResponseMessage", "TrackingSseEvent", "TokenResponse"} {
		if doc.Components.Schemas[name] == nil {
			t.Errorf("no schema %s", name)
		}
	}
}
