package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Tracing is the OpenTelemetry configuration of the bridge's traces, read from the standard OTEL_*
// variables as the OpenTelemetry specification defines them (docs/operations.md#tracing). Tracing is off
// unless an OTLP endpoint is set; spans then go out over OTLP/HTTP with protobuf. The variables of the
// exporter that this type does not hold (OTEL_EXPORTER_OTLP_HEADERS, _CERTIFICATE, _COMPRESSION, ...) are
// read by the OpenTelemetry SDK itself; TracingFromEnv checks the values it can check, so that a
// mistake there is reported at start-up and by bridge check-config rather than dropped by the SDK with a
// log line.
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

// TracingFromEnv reads the tracing configuration from the process's environment; see TracingFromLookup.
func TracingFromEnv() (Tracing, error) { return TracingFromLookup(os.LookupEnv) }

// TracingFromLookup reads the tracing configuration through lookup (os.LookupEnv) and reports every
// problem at once (errors.Join), one per line, each naming its variable. A variable set to the empty
// string counts as unset, as the OpenTelemetry specification says. No problem shows a header's value,
// which may be a collector's key; a URL's user information and query are left out of problems too.
func TracingFromLookup(lookup func(string) (string, bool)) (Tracing, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	t := Tracing{ServiceName: DefaultServiceName, Sampler: DefaultTracingSampler, Ratio: 1, Timeout: DefaultTracingTimeout}

	disabled := false
	switch v := strings.ToLower(get("OTEL_SDK_DISABLED")); v {
	case "", "false":
	case "true":
		disabled = true
	default:
		add("OTEL_SDK_DISABLED", "must be true or false")
	}
	switch v := strings.ToLower(get("OTEL_TRACES_EXPORTER")); v {
	case "", "otlp":
	case "none":
		disabled = true
	default:
		add("OTEL_TRACES_EXPORTER", "%q is not supported; use otlp (the default) or none", clipValue(v))
	}

	base, traces := get("OTEL_EXPORTER_OTLP_ENDPOINT"), get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	if base != "" {
		if u, err := otlpURL(base); err != nil {
			add("OTEL_EXPORTER_OTLP_ENDPOINT", "%v", err)
		} else {
			u.Path = strings.TrimSuffix(u.Path, "/") + "/v1/traces"
			t.TracesURL = u.String()
		}
	}
	if traces != "" {
		if u, err := otlpURL(traces); err != nil {
			add("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "%v", err)
		} else {
			t.TracesURL = u.String()
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v := get(k); v != "" && v != "http/protobuf" {
			add(k, "%q is not supported; the bridge exports over http/protobuf", clipValue(v))
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"} {
		if v := get(k); v != "" && v != "gzip" && v != "none" {
			add(k, "%q is not supported; use gzip or none", clipValue(v))
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"} {
		if err := checkPairs(get(k), false); err != nil {
			add(k, "%v", err)
		}
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"} {
		v := get(k)
		if v == "" {
			continue
		}
		ms, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || ms < 0:
			add(k, "%q is not a number of milliseconds", clipValue(v))
		case ms == 0 || time.Duration(ms)*time.Millisecond > MaxTracingTimeout:
			add(k, "must be from 1 to %d milliseconds", MaxTracingTimeout.Milliseconds())
		default:
			t.Timeout = time.Duration(ms) * time.Millisecond // the traces' own variable, read last, wins
		}
	}

	if v := get("OTEL_SERVICE_NAME"); v != "" {
		t.ServiceName = v
	}
	if err := checkPairs(get("OTEL_RESOURCE_ATTRIBUTES"), true); err != nil {
		add("OTEL_RESOURCE_ATTRIBUTES", "%v", err)
	}

	if v := strings.ToLower(get("OTEL_TRACES_SAMPLER")); v != "" {
		known := false
		for _, s := range samplers {
			known = known || s == v
		}
		if known {
			t.Sampler = v
		} else {
			add("OTEL_TRACES_SAMPLER", "%q is not supported; use one of %s", clipValue(v), strings.Join(samplers, ", "))
		}
	}
	if v := get("OTEL_TRACES_SAMPLER_ARG"); v != "" && strings.HasSuffix(t.Sampler, "traceidratio") {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r < 0 || r > 1 {
			add("OTEL_TRACES_SAMPLER_ARG", "%q is not a ratio from 0 to 1", clipValue(v))
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

// checkPairs checks a list of key=value pairs separated by commas, values percent-encoded, as
// OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES have it. Its errors name the pair by position
// and never show a value; a header's key too must be a token.
func checkPairs(s string, resource bool) error {
	if s == "" {
		return nil
	}
	for i, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, "=")
		k = strings.TrimSpace(k)
		switch {
		case strings.TrimSpace(pair) == "" && resource:
			continue
		case !ok || k == "":
			return fmt.Errorf("entry %d is not key=value", i+1)
		case !resource && !headerToken(k):
			return fmt.Errorf("entry %d: the key is not a valid header name", i+1)
		}
		if _, err := url.PathUnescape(strings.TrimSpace(v)); err != nil {
			return fmt.Errorf("entry %d: the value is not percent-encoded correctly", i+1)
		}
	}
	return nil
}

// headerToken reports whether k is an HTTP header name (RFC 9110 token).
func headerToken(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

// clipValue bounds a value quoted in a problem.
func clipValue(v string) string {
	if len(v) > 40 {
		return v[:40] + "..."
	}
	return v
}
