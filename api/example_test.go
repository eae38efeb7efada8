package api_test

import (
	"fmt"

	"github.com/tracking-bridge/tracking-bridge/api"
)

// Find an operation of the document and the schema of its request body.
func ExampleDocument() {
	doc, err := api.Document()
	if err != nil {
		panic(err)
	}
	op := doc.Paths.Find("/tracking/events").Post
	body := op.RequestBody.Value.Content.Get("application/json").Schema
	fmt.Println(op.OperationID, body.Ref, body.Value.Required)
	// Output:
	// reportTrackingEvent #/components/schemas/TrackingEventReport [event]
}
