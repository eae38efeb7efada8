package service

import (
	"fmt"
	"sync"

	"github.com/tracking-bridge/tracking-bridge/internal/consume"
)

// OpenAPIValidator is the RequestValidator of the daemon: a booking order is checked against the
// BookingOrder schema of the OpenAPI document (package api) exactly as strictly as the document says,
// so the bridge refuses what the upstream would refuse and forwards everything else; a report gets the
// report consumer's check (consume.Validate), built from the same document.
type OpenAPIValidator struct {
	order          *consume.Schema
	reportMaxBytes int
}

// NewOpenAPIValidator compiles the document's schemas. reportMaxBytes bounds a report's size as
// BRIDGE_REPORT_MAX_BYTES does; 0 means no bound.
func NewOpenAPIValidator(reportMaxBytes int) (*OpenAPIValidator, error) {
	order, err := consume.CompileSchema(SchemaBookingOrder, "the booking order")
	if err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	return &OpenAPIValidator{order: order, reportMaxBytes: reportMaxBytes}, nil
}

// Validate implements RequestValidator. An unknown schema name passes.
func (v *OpenAPIValidator) Validate(schema string, body []byte) []string {
	switch schema {
	case SchemaTrackingEventReport:
		return consume.Validate(body, v.reportMaxBytes)
	case SchemaBookingOrder:
		return v.order.Validate(body)
	}
	return nil
}

// defaultValidator is the OpenAPIValidator of a Config without a validator, compiled once. The document
// is embedded and its compilation is tested, so a failure here is a broken build.
var defaultValidator = sync.OnceValue(func() *OpenAPIValidator {
	v, err := NewOpenAPIValidator(0)
	if err != nil {
		panic(err)
	}
	return v
})
