package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kelseyhightower/envconfig"
	"golang.org/x/net/http/httpguts"

	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// Tracing is the OpenTelemetry configuration of the bridge's traces, read from the standard OTEL_*
// variables as the OpenTelemetry specification defines them (docs/operations.md#tracing). Tracing is off
// unless an OTLP endpoint is set; spans then go out over OTLP/HTTP with protobuf. OTEL_RESOURCE_ATTRIBUTES
// is read by the OpenTelemetry SDK itself; TracingFromEnv checks it too, so that a mistake there is
// reported at start-up and by bridge check-config rather than dropped by the SDK with a log line.
type Tracing struct {
	// Enabled is true when an OTLP endpoint is set and OTEL_SDK_DISABLED is not true.
	Enabled bool
	// TracesURL is the URL the spans are posted to: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as it is, else
	// OTEL_EXPORTER_OTLP_ENDPOINT with v1/traces appended to its path.
	TracesURL string
	// ServiceName is the resource's service.name (OTEL_SERVICE_NAME).
	ServiceName string
	// Sampler is the sampler's name as OTEL_TRACES_SAMPLER spells it (lower case); Ratio its argument for
	// the ratio samplers, from OTEL_TRACES_SAMPLER_ARG (1 when unset).
	Sampler string
	Ratio   float64
	// Timeout bounds one export request (OTEL_EXPORTER_OTLP_TRACES_TIMEOUT or OTEL_EXPORTER_OTLP_TIMEOUT,
	// in milliseconds), at most MaxTracingTimeout.
	Timeout time.Duration
	// Headers go with every export request: OTEL_EXPORTER_OTLP_TRACES_HEADERS when it is set, else
	// OTEL_EXPORTER_OTLP_HEADERS. Their values are secrets (a collector's key).
	Headers []TracingHeader
	// Gzip compresses the export requests: OTEL_EXPORTER_OTLP_TRACES_COMPRESSION, else
	// OTEL_EXPORTER_OTLP_COMPRESSION, is gzip.
	Gzip bool
	// CAFile is a PEM file of the certificates that verify an https:// collector, instead of the system's
	// (OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE, else OTEL_EXPORTER_OTLP_CERTIFICATE). CertFile and KeyFile
	// are the bridge's own certificate and key in PEM for a collector that asks for one
	// (..._CLIENT_CERTIFICATE and ..._CLIENT_KEY); both or neither are set.
	CAFile, CertFile, KeyFile string
}

// TracingHeader is one header of the export requests.
type TracingHeader struct {
	Name  string
	Value Secret
}

// The defaults of Tracing, as the OpenTelemetry specification has them, the service's name aside.
const (
	DefaultServiceName    = "tracking-bridge"
	DefaultTracingSampler = "parentbased_always_on"
	DefaultTracingTimeout = 10 * time.Second
	// MaxTracingTimeout bounds the export timeout: an export request never waits longer, so a collector
	// that hangs cannot hold spans, or a stop, for longer.
	MaxTracingTimeout = 30 * time.Second
)

// samplers are the values of OTEL_TRACES_SAMPLER the OpenTelemetry SDK for Go implements.
var samplers = []string{"always_on", "always_off", "traceidratio", "parentbased_always_on",
	"parentbased_always_off", "parentbased_traceidratio"}

// tracingVar is one OTEL_* variable, for the tables of bridge -h and docs/configuration.md.
type tracingVar struct {
	key, typ, def, desc string
}

// tracingVars are the OTEL_* variables the bridge reads or checks, in the order of the tables.
var tracingVars = []tracingVar{
	{"OTEL_EXPORTER_OTLP_ENDPOINT", "URL", "", "OTLP/HTTP base URL of a collector (http:// or https://); the spans go to its path + v1/traces. Tracing is off unless this or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set"},
	{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "URL", "", "OTLP/HTTP URL the spans are posted to, as it is; takes precedence over OTEL_EXPORTER_OTLP_ENDPOINT"},
	{"OTEL_EXPORTER_OTLP_PROTOCOL", "String", "http/protobuf", "only http/protobuf is supported (also OTEL_EXPORTER_OTLP_TRACES_PROTOCOL)"},
	{"OTEL_EXPORTER_OTLP_HEADERS", "String", "", "headers of every export request, as key=value pairs separated by commas, values percent-encoded (also OTEL_EXPORTER_OTLP_TRACES_HEADERS); never logged"},
	{"OTEL_EXPORTER_OTLP_TIMEOUT", "Integer", "10000", "time one export request may take, in milliseconds, at most 30000 (also OTEL_EXPORTER_OTLP_TRACES_TIMEOUT)"},
	{"OTEL_EXPORTER_OTLP_COMPRESSION", "String", "none", "gzip or none (also OTEL_EXPORTER_OTLP_TRACES_COMPRESSION)"},
	{"OTEL_EXPORTER_OTLP_CERTIFICATE", "String", "", "PEM file of the certificates that verify an https:// collector, instead of the system's (also OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE)"},
	{"OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "String", "", "PEM file of the bridge's certificate, for a collector that asks for one; with OTEL_EXPORTER_OTLP_CLIENT_KEY (also OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE)"},
	{"OTEL_EXPORTER_OTLP_CLIENT_KEY", "String", "", "PEM file of that certificate's private key (also OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY)"},
	{"OTEL_SDK_DISABLED", "Boolean", "false", "true turns tracing off whatever else is set"},
	{"OTEL_TRACES_EXPORTER", "String", "otlp", "otlp, or none to turn tracing off"},
	{"OTEL_SERVICE_NAME", "String", DefaultServiceName, "the service.name of every span's resource"},
	{"OTEL_RESOURCE_ATTRIBUTES", "String", "", "further resource attributes, as key=value pairs separated by commas, values percent-encoded (deployment.environment.name=prod,...)"},
	{"OTEL_TRACES_SAMPLER", "String", DefaultTracingSampler, "always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off or parentbased_traceidratio"},
	{"OTEL_TRACES_SAMPLER_ARG", "Float", "1.0", "the ratio of the traceidratio samplers, from 0 to 1"},
}

// TracingVariables returns the names of the OTEL_* variables the bridge reads or checks.
func TracingVariables() []string {
	out := make([]string, 0, len(tracingVars))
	for _, v := range tracingVars {
		out = append(out, v.key)
	}
	return out
}

// tracingEnv is the OTEL_* variables the bridge reads or checks, as envconfig reads them (prefix OTEL):
// strings, checked by TracingFromEnv, so that every problem is reported at once (envconfig stops at its
// first error) and a set-but-empty variable counts as unset, as the OpenTelemetry specification says.
type tracingEnv struct {
	SDKDisabled        string `envconfig:"SDK_DISABLED"`
	TracesExporter     string `envconfig:"TRACES_EXPORTER"`
	Endpoint           string `envconfig:"EXPORTER_OTLP_ENDPOINT"`
	TracesEndpoint     string `envconfig:"EXPORTER_OTLP_TRACES_ENDPOINT"`
	Protocol           string `envconfig:"EXPORTER_OTLP_PROTOCOL"`
	TracesProtocol     string `envconfig:"EXPORTER_OTLP_TRACES_PROTOCOL"`
	Compression        string `envconfig:"EXPORTER_OTLP_COMPRESSION"`
	TracesCompression  string `envconfig:"EXPORTER_OTLP_TRACES_COMPRESSION"`
	Headers            string `envconfig:"EXPORTER_OTLP_HEADERS"`
	TracesHeaders      string `envconfig:"EXPORTER_OTLP_TRACES_HEADERS"`
	Certificate        string `envconfig:"EXPORTER_OTLP_CERTIFICATE"`
	TracesCertificate  string `envconfig:"EXPORTER_OTLP_TRACES_CERTIFICATE"`
	ClientCert         string `envconfig:"EXPORTER_OTLP_CLIENT_CERTIFICATE"`
	TracesClientCert   string `envconfig:"EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE"`
	ClientKey          string `envconfig:"EXPORTER_OTLP_CLIENT_KEY"`
	TracesClientKey    string `envconfig:"EXPORTER_OTLP_TRACES_CLIENT_KEY"`
	Timeout            string `envconfig:"EXPORTER_OTLP_TIMEOUT"`
	TracesTimeout      string `envconfig:"EXPORTER_OTLP_TRACES_TIMEOUT"`
	ServiceName        string `envconfig:"SERVICE_NAME"`
	ResourceAttributes string `envconfig:"RESOURCE_ATTRIBUTES"`
	Sampler            string `envconfig:"TRACES_SAMPLER"`
	SamplerArg         string `envconfig:"TRACES_SAMPLER_ARG"`
}

// TracingFromEnv reads the tracing configuration from the process's environment and reports every
// problem at once (errors.Join), one per line, each naming its variable. No problem shows a header's
// value, which may be a collector's key; a URL's user information and query are left out of problems too.
func TracingFromEnv() (Tracing, error) {
	var e tracingEnv
	if err := envconfig.Process("OTEL", &e); err != nil { // strings only: it cannot fail to decode
		return Tracing{}, err
	}
	// White space around a value counts for nothing, and a value of white space only as unset.
	for fields, i := reflect.ValueOf(&e).Elem(), 0; i < fields.NumField(); i++ {
		f := fields.Field(i)
		f.SetString(strings.TrimSpace(f.String()))
	}
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	type variable struct{ key, value string }
	t := Tracing{ServiceName: DefaultServiceName, Sampler: DefaultTracingSampler, Ratio: 1, Timeout: DefaultTracingTimeout}

	disabled := false
	switch v := strings.ToLower(e.SDKDisabled); v {
	case "", "false":
	case "true":
		disabled = true
	default:
		add("OTEL_SDK_DISABLED", "must be true or false")
	}
	switch v := strings.ToLower(e.TracesExporter); v {
	case "", "otlp":
	case "none":
		disabled = true
	default:
		add("OTEL_TRACES_EXPORTER", "%q is not supported; use otlp (the default) or none", logging.Cut(v, 40))
	}

	if v := e.Endpoint; v != "" {
		if u, err := otlpURL(v); err != nil {
			add("OTEL_EXPORTER_OTLP_ENDPOINT", "%v", err)
		} else {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			t.TracesURL = u.String()
		}
	}
	if v := e.TracesEndpoint; v != "" {
		if u, err := otlpURL(v); err != nil {
			add("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "%v", err)
		} else {
			t.TracesURL = u.String()
		}
	}
	for _, v := range []variable{{"OTEL_EXPORTER_OTLP_PROTOCOL", e.Protocol}, {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", e.TracesProtocol}} {
		if val := v.value; val != "" && val != "http/protobuf" {
			add(v.key, "%q is not supported; the bridge exports over http/protobuf", logging.Cut(val, 40))
		}
	}
	// Of each pair below, the traces' own variable, read last, wins when it is set.
	for _, v := range []variable{{"OTEL_EXPORTER_OTLP_COMPRESSION", e.Compression}, {"OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", e.TracesCompression}} {
		switch val := v.value; val {
		case "":
		case "gzip", "none":
			t.Gzip = val == "gzip"
		default:
			add(v.key, "%q is not supported; use gzip or none", logging.Cut(val, 40))
		}
	}
	for _, v := range []variable{{"OTEL_EXPORTER_OTLP_HEADERS", e.Headers}, {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", e.TracesHeaders}} {
		if v.value == "" {
			continue
		}
		pairs, err := parsePairs(v.value, false)
		if err != nil {
			add(v.key, "%v", err)
			continue
		}
		t.Headers = t.Headers[:0]
		for _, p := range pairs {
			t.Headers = append(t.Headers, TracingHeader{Name: p[0], Value: Secret(p[1])})
		}
	}
	// Each file's problem names the variable that gave its path.
	caVar, certVar, keyVar := "OTEL_EXPORTER_OTLP_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_KEY"
	for _, f := range []struct {
		dst, name *string
		v         []variable
	}{
		{&t.CAFile, &caVar, []variable{{caVar, e.Certificate}, {"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", e.TracesCertificate}}},
		{&t.CertFile, &certVar, []variable{{certVar, e.ClientCert}, {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE", e.TracesClientCert}}},
		{&t.KeyFile, &keyVar, []variable{{keyVar, e.ClientKey}, {"OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", e.TracesClientKey}}},
	} {
		for _, v := range f.v {
			if v.value != "" {
				*f.dst, *f.name = v.value, v.key
			}
		}
	}
	// The files are loaded as the exporter will load them, so that a missing or malformed one is reported
	// at start-up.
	if t.CAFile != "" {
		if err := checkFile(t.CAFile, pemCertificates); err != nil {
			add(caVar, "%v", err)
		}
	}
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		add(certVar, "goes with %s: set both or neither", keyVar)
	case t.CertFile != "":
		var cert, key []byte
		certErr := checkFile(t.CertFile, func(b []byte) error { cert = b; return nil })
		if certErr != nil {
			add(certVar, "%v", certErr)
		}
		keyErr := checkFile(t.KeyFile, func(b []byte) error { key = b; return nil })
		if keyErr != nil {
			add(keyVar, "%v", keyErr)
		}
		if certErr == nil && keyErr == nil {
			if _, err := tls.X509KeyPair(cert, key); err != nil {
				add(certVar, "with %s: %v", keyVar, err)
			}
		}
	}
	for _, v := range []variable{{"OTEL_EXPORTER_OTLP_TIMEOUT", e.Timeout}, {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", e.TracesTimeout}} {
		val := v.value
		if val == "" {
			continue
		}
		ms, err := strconv.ParseInt(val, 10, 64)
		switch {
		case err != nil || ms < 0:
			add(v.key, "%q is not a number of milliseconds", logging.Cut(val, 40))
		case ms == 0 || time.Duration(ms)*time.Millisecond > MaxTracingTimeout:
			add(v.key, "must be from 1 to %d milliseconds", MaxTracingTimeout.Milliseconds())
		default:
			t.Timeout = time.Duration(ms) * time.Millisecond // the traces' own variable, read last, wins
		}
	}

	if v := e.ServiceName; v != "" {
		t.ServiceName = v
	}
	if _, err := parsePairs(e.ResourceAttributes, true); err != nil {
		add("OTEL_RESOURCE_ATTRIBUTES", "%v", err)
	}

	if v := strings.ToLower(e.Sampler); v != "" {
		if slices.Contains(samplers, v) {
			t.Sampler = v
		} else {
			add("OTEL_TRACES_SAMPLER", "%q is not supported; use one of %s", logging.Cut(v, 40), strings.Join(samplers, ", "))
		}
	}
	if v := e.SamplerArg; v != "" && strings.HasSuffix(t.Sampler, "traceidratio") {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			add("OTEL_TRACES_SAMPLER_ARG", "%q is not a ratio from 0 to 1", logging.Cut(v, 40))
		} else {
			t.Ratio = r
		}
	}

	t.Enabled = t.TracesURL != "" && !disabled
	if len(errs) > 0 {
		return Tracing{}, errors.Join(errs...)
	}
	return t, nil
}

// otlpURL parses an OTLP endpoint: an absolute http:// or https:// URL without user information (a
// collector's key goes in OTEL_EXPORTER_OTLP_HEADERS). Its errors show no part of the value.
func otlpURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("is not a URL: %v", urlReason(err))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("must be an http:// or https:// URL (the bridge exports over OTLP/HTTP)")
	case u.Hostname() == "":
		return nil, errors.New("must name a host")
	case u.User != nil:
		return nil, errors.New("must not contain user information; put a collector's credentials in OTEL_EXPORTER_OTLP_HEADERS")
	case u.Fragment != "":
		return nil, errors.New("must not have a fragment")
	}
	return u, nil
}

// parsePairs reads a list of key=value pairs separated by commas, values percent-encoded, as
// OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES have it, into key and decoded value. Its errors
// name the pair by position and never show a value; a header's key too must be a token.
func parsePairs(s string, resource bool) ([][2]string, error) {
	if s == "" {
		return nil, nil
	}
	var out [][2]string
	for i, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		switch {
		case strings.TrimSpace(pair) == "" && resource:
			continue
		case !ok || k == "":
			return nil, fmt.Errorf("entry %d is not key=value", i+1)
		case !resource && !httpguts.ValidHeaderFieldName(k):
			return nil, fmt.Errorf("entry %d: the key is not a valid header name", i+1)
		}
		val, err := url.PathUnescape(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("entry %d: the value is not percent-encoded correctly", i+1)
		}
		if !resource && !httpguts.ValidHeaderFieldValue(val) {
			return nil, fmt.Errorf("entry %d: the value is not a valid header value", i+1)
		}
		out = append(out, [2]string{k, val})
	}
	return out, nil
}
