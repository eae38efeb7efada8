package config_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
)

// TestAPIEndpointNames: the names BRIDGE_API_ENDPOINTS accepts (layout.APIOperations) are the API
// service's endpoints, in its order.
func TestAPIEndpointNames(t *testing.T) {
	if got := service.EndpointNames(); !slices.Equal(config.APIEndpointNames, got) {
		t.Errorf("config.APIEndpointNames = %q, the service's endpoints are %q", config.APIEndpointNames, got)
	}
}

// TestAPIEndpointsDescribed: the description of BRIDGE_API_ENDPOINTS, a struct tag that cannot be built
// from APIEndpointNames, lists them all, in order.
func TestAPIEndpointsDescribed(t *testing.T) {
	f, _ := reflect.TypeFor[config.Config]().FieldByName("APIEndpoints")
	if desc, want := f.Tag.Get("desc"), strings.Join(config.APIEndpointNames, ", ")+";"; !strings.Contains(desc, want) {
		t.Errorf("BRIDGE_API_ENDPOINTS is described as %q, which does not list %q", desc, want)
	}
}
