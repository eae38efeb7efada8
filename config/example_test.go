package config_test

import (
	"fmt"

	"github.com/tracking-bridge/tracking-bridge/config"
)

// Load takes a lookup function, so the environment can come from anywhere: os.LookupEnv in the program
// (LoadFromEnv), a map in tests.
func ExampleLoad() {
	env := map[string]string{
		"BRIDGE_UPSTREAM_URL":  "http://127.0.0.1:8081/v1.0",
		"BRIDGE_TOKEN_URL":     "http://127.0.0.1:8081/auth/token",
		"BRIDGE_INSECURE_HTTP": "true", // the local simulator speaks plain HTTP
		"BRIDGE_CLIENT_ID":     "tracking-client",
		"BRIDGE_USERNAME":      "alice",
		"BRIDGE_PASSWORD":      "correct horse battery staple",
		"BRIDGE_LOG_LEVEL":     "", // empty counts as unset: the default applies
	}
	cfg, err := config.Load(func(key string) (string, bool) {
		v, ok := env[key]
		return v, ok
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.StreamURL())
	fmt.Println(cfg.ReportURL())
	fmt.Println(cfg.NATSServers())
	fmt.Println(cfg.LogLevel, cfg.ReconnectMax)
	fmt.Println("password:", cfg.Password)

	// Output:
	// http://127.0.0.1:8081/v1.0/tracking/events/stream
	// http://127.0.0.1:8081/v1.0/tracking/events
	// [nats://127.0.0.1:4222]
	// info 1m0s
	// password: [redacted]
}

// Every problem is reported at once, one per line, each naming its variable.
func ExampleLoad_errors() {
	env := map[string]string{
		"BRIDGE_UPSTREAM_URL":  "http://api.example.com/v1.0",
		"BRIDGE_TOKEN_URL":     "https://auth.example.com/token",
		"BRIDGE_USERNAME":      "alice",
		"BRIDGE_PASSWORD":      "correct horse battery staple",
		"BRIDGE_RECONNECT_MIN": "5",
	}
	_, err := config.Load(func(key string) (string, bool) {
		v, ok := env[key]
		return v, ok
	})
	fmt.Println(err)

	// Output:
	// BRIDGE_RECONNECT_MIN: "5" is not a duration (use a unit, e.g. 500ms, 30s, 5m, 1h)
	// BRIDGE_CLIENT_ID: is required
	// BRIDGE_UPSTREAM_URL: an http:// URL is not allowed; use https://, or for local development (e.g. the simulator) set BRIDGE_INSECURE_HTTP=true
}
