package config

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestTracingFromEnv: tracing is off unless an OTLP endpoint is set, OTEL_SDK_DISABLED and
// OTEL_TRACES_EXPORTER=none turn it off, and the values are read as OpenTelemetry defines them.
func TestTracingFromEnv(t *testing.T) {
	files := newTestFiles(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Tracing
	}{
		{"unset", nil, Tracing{}},
		{"base endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			Tracing{Enabled: true, TracesURL: "http://collector:4318/v1/traces"}},
		{"base endpoint with path", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://c.example/otlp/"},
			Tracing{Enabled: true, TracesURL: "https://c.example/otlp/v1/traces"}},
		{"traces endpoint wins", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://b:4318/x"}, Tracing{Enabled: true, TracesURL: "http://b:4318/x"}},
		{"disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_SDK_DISABLED": "TRUE"},
			Tracing{TracesURL: "http://a:4318/v1/traces"}},
		{"exporter none", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318", "OTEL_TRACES_EXPORTER": "none"},
			Tracing{TracesURL: "http://a:4318/v1/traces"}},
		{"sampler and ratio", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://a:4318",
			"OTEL_TRACES_SAMPLER": "TraceIdRatio", "OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_SERVICE_NAME": "gate-bridge",
			"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2500"},
			Tracing{Enabled: true, TracesURL: "http://a:4318/v1/traces", ServiceName: "gate-bridge", Sampler: "traceidratio",
				Ratio: 0.25, Timeout: 2500 * time.Millisecond}},
		{"white space around values, and only white space as unset", map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": " http://a:4318 ", "OTEL_TRACES_SAMPLER": "\talways_off ", "OTEL_SERVICE_NAME": "  "},
			Tracing{Enabled: true, TracesURL: "http://a:4318/v1/traces", Sampler: "always_off"}},
		{"argument of another sampler ignored", map[string]string{"OTEL_TRACES_SAMPLER": "always_on", "OTEL_TRACES_SAMPLER_ARG": "x"},
			Tracing{Sampler: "always_on"}},
		{"headers, percent-decoded", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "api-key=a%20b%2Cc, X-Team = yard"},
			Tracing{Headers: []TracingHeader{{"api-key", "a b,c"}, {"X-Team", "yard"}}}},
		{"the traces' headers replace the others", map[string]string{"OTEL_EXPORTER_OTLP_HEADERS": "a=1,b=2",
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS": "c=3"}, Tracing{Headers: []TracingHeader{{"c", "3"}}}},
		{"gzip", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}, Tracing{Gzip: true}},
		{"the traces' compression wins", map[string]string{"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
			"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none"}, Tracing{}},
		{"certificates", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": files.ca,
			"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": files.cert, "OTEL_EXPORTER_OTLP_CLIENT_KEY": files.key},
			Tracing{CAFile: files.ca, CertFile: files.cert, KeyFile: files.key}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.want
			if want.ServiceName == "" {
				want.ServiceName = DefaultServiceName
			}
			if want.Sampler == "" {
				want.Sampler = DefaultTracingSampler
			}
			if want.Ratio == 0 {
				want.Ratio = 1
			}
			if want.Timeout == 0 {
				want.Timeout = DefaultTracingTimeout
			}
			testutil.Env(t, "OTEL_", tc.env)
			got, err := TracingFromEnv()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v, want %+v", got, want)
			}
		})
	}
}

// TestTracingFromEnvProblems: every bad value is reported at once, each naming its variable, and no
// problem shows a header's value or a URL's credentials.
func TestTracingFromEnvProblems(t *testing.T) {
	env := map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT":           "grpc://collector:4317",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":    "http://user:s3cret@collector:4318/v1/traces",
		"OTEL_EXPORTER_OTLP_PROTOCOL":           "grpc",
		"OTEL_EXPORTER_OTLP_HEADERS":            "api-key=s3cret,broken",
		"OTEL_EXPORTER_OTLP_TRACES_HEADERS":     "api-key=s3cret\x01",
		"OTEL_EXPORTER_OTLP_CERTIFICATE":        "/nonexistent/ca.pem",
		"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": "/nonexistent/cert.pem",
		"OTEL_EXPORTER_OTLP_TIMEOUT":            "10s",
		"OTEL_EXPORTER_OTLP_COMPRESSION":        "zstd",
		"OTEL_SDK_DISABLED":                     "yes",
		"OTEL_TRACES_EXPORTER":                  "zipkin",
		"OTEL_RESOURCE_ATTRIBUTES":              "team=yard,%zz",
		"OTEL_TRACES_SAMPLER":                   "parentbased_traceidratio",
		"OTEL_TRACES_SAMPLER_ARG":               "1.5",
	}
	testutil.Env(t, "OTEL_", env)
	_, err := TracingFromEnv()
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for k := range env {
		if k == "OTEL_TRACES_SAMPLER" {
			continue // valid: its argument is not
		}
		if !strings.Contains(msg, k+": ") {
			t.Errorf("no problem names %s:\n%s", k, msg)
		}
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("a problem shows a secret:\n%s", msg)
	}
	testutil.Env(t, "OTEL_", map[string]string{"OTEL_TRACES_SAMPLER": "jaeger_remote"})
	if _, err := TracingFromEnv(); err == nil ||
		!strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER: ") {
		t.Errorf("an unsupported sampler: %v", err)
	}
}

// TestTracingFilesProblems: a certificate or key problem names the variable that gave the path (the
// traces' own when it is the one set), and a key pasted where its path goes is never repeated.
func TestTracingFilesProblems(t *testing.T) {
	files := newTestFiles(t)
	key := "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIKEYMATERIALs3cret\n-----END EC PRIVATE KEY-----"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the variable the problem names
	}{
		{"traces' CA file missing", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": "/nonexistent/ca.pem"},
			"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE"},
		{"CA file without a certificate", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": files.key},
			"OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{"CA file endless", map[string]string{"OTEL_EXPORTER_OTLP_CERTIFICATE": "/dev/zero"}, // read up to a bound
			"OTEL_EXPORTER_OTLP_CERTIFICATE"},
		{"traces' key missing", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": files.cert,
			"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": "/nonexistent/key.pem"}, "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY"},
		{"key without certificate", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_KEY": files.key},
			"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
		{"key that does not match", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": files.cert,
			"OTEL_EXPORTER_OTLP_CLIENT_KEY": files.cert}, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"},
		{"key pasted as the path", map[string]string{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": files.cert,
			"OTEL_EXPORTER_OTLP_CLIENT_KEY": key}, "OTEL_EXPORTER_OTLP_CLIENT_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.Env(t, "OTEL_", tc.env)
			_, err := TracingFromEnv()
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, tc.want+": ") || strings.Count(msg, "\n") > 0 {
				t.Errorf("want one line naming %s, got:\n%s", tc.want, msg)
			}
			if strings.Contains(msg, "s3cret") {
				t.Errorf("the problem repeats the key:\n%s", msg)
			}
		})
	}
}
