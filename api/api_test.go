package api

import (
	"slices"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/internal/service"
)

// The document loads, is valid OpenAPI, and describes every operation the bridge and the simulator use
// (docs/upstream.md#operations).
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

// TestServiceOperationIDs: every endpoint of the API on NATS names, by its id, an operation of the
// document with the method and path the endpoint calls, so a comment or a discovery answer that names an
// operation id names one that exists.
func TestServiceOperationIDs(t *testing.T) {
	doc, err := Document()
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range service.Operations {
		if op.FromNATS() {
			continue // answered from NATS: no upstream operation
		}
		item := doc.Paths.Find(op.Path)
		if item == nil {
			t.Errorf("%s: the document has no path %s", op.Name, op.Path)
			continue
		}
		o := item.GetOperation(op.Method)
		if o == nil || o.OperationID != op.OpenAPI {
			got := "none"
			if o != nil {
				got = o.OperationID
			}
			t.Errorf("%s: %s %s is operation %s in the document, the code says %s", op.Name, op.Method, op.Path, got, op.OpenAPI)
		}
	}
}
