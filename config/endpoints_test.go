package config_test

import (
	"slices"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
)

// TestAPIEndpointNames: the names BRIDGE_API_ENDPOINTS accepts are the API service's endpoints, in its
// order. The list is kept here too so that the configuration does not import the service.
func TestAPIEndpointNames(t *testing.T) {
	if got := service.EndpointNames(); !slices.Equal(config.APIEndpointNames, got) {
		t.Errorf("config.APIEndpointNames = %q, the service's endpoints are %q", config.APIEndpointNames, got)
	}
}
