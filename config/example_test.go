package config_test

import (
	"fmt"
	"os"

	"github.com/tracking-bridge/tracking-bridge/config"
)

// A program that runs the bridge in-process (the demo, the benchmark, tests) builds its configuration in
// Go: the defaults, then the fields it needs, then the same checks FromEnv applies.
func ExampleDefault() {
	cfg := config.Default()
	cfg.UpstreamURL = "http://127.0.0.1:8081/v1.0"
	cfg.TokenURL = "http://127.0.0.1:8081/auth/token"
	cfg.InsecureHTTP = true // the local simulator speaks plain HTTP
	cfg.ClientID = "tracking-client"
	cfg.Username = "alice"
	cfg.Password = "correct horse battery staple"
	if err := cfg.Validate(); err != nil {
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

// FromEnv reads the process environment, as bridge run does. Every problem is reported at once, one per
// line, each naming its variable: here a misspelt name, a value that does not parse, a required
// variable that is missing and a URL Validate refuses.
func ExampleFromEnv() {
	env := map[string]string{
		"BRIDGE_UPSTREAM_URL":  "http://api.example.com/v1.0",
		"BRIDGE_TOKEN_URL":     "https://auth.example.com/token",
		"BRIDGE_USERNAME":      "alice",
		"BRIDGE_PASSWORD":      "correct horse battery staple",
		"BRIDGE_RECONNECT_MIN": "5",
		"BRIDGE_LOG_LEVL":      "debug",
	}
	for k, v := range env { // as a shell or an orchestrator would
		os.Setenv(k, v)
		defer os.Unsetenv(k)
	}
	_, err := config.FromEnv()
	fmt.Println(err)

	// Output:
	// BRIDGE_LOG_LEVL: is not a variable of the bridge; did you mean BRIDGE_LOG_LEVEL?
	// BRIDGE_RECONNECT_MIN: "5" is not a duration (use a unit, e.g. 500ms, 30s, 5m, 1h)
	// BRIDGE_CLIENT_ID: is required
	// BRIDGE_UPSTREAM_URL: an http:// URL is not allowed; use https://, or for local development (e.g. the simulator) set BRIDGE_INSECURE_HTTP=true
}
