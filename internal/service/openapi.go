package service

import "github.com/tracking-bridge/tracking-bridge/internal/validate"

// OpenAPIValidator is the RequestValidator of the daemon, the check against the OpenAPI document
// (internal/validate, converted from package api at build time): a booking order is checked against the
// BookingOrder schema exactly as strictly as the document says, so the bridge refuses what the upstream
// would refuse and forwards everything else; a report gets the report consumer's check
// (validate.Report).
type OpenAPIValidator struct {
	reportMaxBytes int
}

// NewOpenAPIValidator returns the validator. reportMaxBytes bounds a report's size as
// BRIDGE_REPORT_MAX_BYTES does; 0 means no bound.
func NewOpenAPIValidator(reportMaxBytes int) *OpenAPIValidator {
	return &OpenAPIValidator{reportMaxBytes: reportMaxBytes}
}

// Validate implements RequestValidator. An unknown schema name passes.
func (v *OpenAPIValidator) Validate(schema string, body []byte) []string {
	switch schema {
	case SchemaTrackingEventReport:
		return validate.Report(body, v.reportMaxBytes)
	case SchemaBookingOrder:
		return validate.BookingOrder(body)
	}
	return nil
}

// defaultValidator is the OpenAPIValidator of a Config without a validator.
func defaultValidator() *OpenAPIValidator { return NewOpenAPIValidator(0) }
