package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// testPassword is the account password of the test environments; no error or output may contain it.
const testPassword = "hunter2-Sup3r-s3cret"

// load runs FromEnv with exactly the BRIDGE_* variables of env set in the process environment: every
// other BRIDGE_* variable is unset for the test. Tests that call it cannot run in parallel (t.Setenv).
func load(t *testing.T, env map[string]string) (*Config, error) {
	t.Helper()
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, Prefix+"_") {
			unsetenv(t, name)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	return FromEnv()
}

// unsetenv unsets the variable name for the test; it is set again as it was when the test ends.
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	os.Unsetenv(name)
}

// minimalEnv returns the required variables with valid values, plus extra (a "" value is kept as set
// but empty; use delete to unset).
func minimalEnv(extra map[string]string) map[string]string {
	m := map[string]string{
		"BRIDGE_UPSTREAM_URL": "https://api.example.com/v1.0",
		"BRIDGE_TOKEN_URL":    "https://auth.example.com/token",
		"BRIDGE_CLIENT_ID":    "tracking-client",
		"BRIDGE_USERNAME":     "alice",
		"BRIDGE_PASSWORD":     testPassword,
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// problems splits a joined error into its problems.
func problems(t *testing.T, err error) []error {
	t.Helper()
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("error is not joined: %v", err)
	}
	return j.Unwrap()
}

// writeFile writes content to a new file in a test directory and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadDefaults(t *testing.T) {
	c, err := load(t, minimalEnv(nil))
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	want := &Config{
		UpstreamURL:           "https://api.example.com/v1.0",
		TokenURL:              "https://auth.example.com/token",
		ClientID:              "tracking-client",
		Username:              "alice",
		Password:              testPassword,
		StreamPath:            "/tracking/events/stream",
		ReportPath:            "/tracking/events",
		InsecureHTTP:          false,
		NATSURL:               "nats://127.0.0.1:4222",
		SubjectPrefix:         "tracking",
		HTTPAddr:              ":8080",
		HTTPMaxConns:          64,
		LogFormat:             "json",
		LogLevel:              "info",
		StreamIdleTimeout:     60 * time.Second,
		StreamMaxEventBytes:   1 << 20,
		ReconnectMin:          time.Second,
		ReconnectMax:          60 * time.Second,
		UnavailableRetry:      5 * time.Minute,
		StreamRetryHintMax:    2 * time.Minute,
		LoginRetry:            time.Minute,
		RefreshMargin:         30 * time.Second,
		HTTPTimeout:           30 * time.Second,
		PublishWindow:         1024,
		PublishTimeout:        10 * time.Second,
		DuplicateWindow:       10 * time.Minute,
		CreateStreams:         true,
		StreamReplicas:        1,
		EventsStreamMaxBytes:  4 << 30,
		EventsStreamMaxAge:    0,
		ReportsStreamMaxBytes: 1 << 30,
		ReportsStreamMaxAge:   0,
		DLQStreamMaxBytes:     1 << 30,
		DLQStreamMaxAge:       30 * 24 * time.Hour,
		LeaseTTL:              10 * time.Second,
		ReportConcurrency:     16,
		ReportMaxBytes:        256 << 10,
		ReportMaxAge:          0,
		ReportBackoffMin:      time.Second,
		ReportBackoffMax:      5 * time.Minute,
		ReportDurable:         "tracking-bridge-reports",
		APIEnabled:            true,
		APIConcurrency:        32,
		APITimeout:            30 * time.Second,
		APIEndpoints:          "all",
		APIReplyPrefixes:      "_INBOX.",
		APIMaxBodyBytes:       256 << 10,
		UnitsView:             true,
		NATSInboxPrefix:       "_INBOX_bridge",
		ShutdownTimeout:       30 * time.Second,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("Load with only the required variables:\n got %#v\nwant %#v", *c, *want)
	}

	// Default is the same without the required values.
	d := Default()
	want.UpstreamURL, want.TokenURL, want.ClientID, want.Username, want.Password = "", "", "", "", ""
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Default:\n got %#v\nwant %#v", *d, *want)
	}
}

func TestLoadValues(t *testing.T) {
	ca := newTestFiles(t).ca
	c, err := load(t, minimalEnv(map[string]string{
		"BRIDGE_UPSTREAM_URL":        "http://127.0.0.1:8081/v1.0/",
		"BRIDGE_TOKEN_URL":           "http://127.0.0.1:8081/auth/token",
		"BRIDGE_INSECURE_HTTP":       "true",
		"BRIDGE_NATS_URL":            "nats://a:4222, tls://b:4222 ,ws://c:8080,wss://d",
		"BRIDGE_SUBJECT_PREFIX":      "acme.tracking",
		"BRIDGE_LOG_FORMAT":          "TEXT",
		"BRIDGE_LOG_LEVEL":           "Debug",
		"BRIDGE_STREAM_IDLE_TIMEOUT": "90s",
		"BRIDGE_PUBLISH_WINDOW":      "64",
		"BRIDGE_CREATE_STREAMS":      "false",
		"BRIDGE_REPORT_MAX_AGE":      "24h",
		"BRIDGE_NATS_USER":           "bridge",
		"BRIDGE_NATS_PASSWORD":       "nats-pw",
		"BRIDGE_NATS_CA_FILE":        ca,
	}))
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	if !c.InsecureHTTP || c.CreateStreams || c.StreamIdleTimeout != 90*time.Second || c.PublishWindow != 64 ||
		c.ReportMaxAge != 24*time.Hour || c.NATSPassword.Reveal() != "nats-pw" || c.NATSCAFile != ca ||
		c.LogFormat != "text" || c.LogLevel != "debug" {
		t.Errorf("values not loaded: %+v", c)
	}
	if got, want := c.StreamURL(), "http://127.0.0.1:8081/v1.0/tracking/events/stream"; got != want {
		t.Errorf("StreamURL = %q, want %q", got, want)
	}
	if got, want := c.NATSServers(), []string{"nats://a:4222", "tls://b:4222", "ws://c:8080", "wss://d"}; !reflect.DeepEqual(got, want) {
		t.Errorf("NATSServers = %q, want %q", got, want)
	}
}

func TestLoadSetButEmptyGetsDefault(t *testing.T) {
	d := Default()
	dv := reflect.ValueOf(d).Elem()
	for _, f := range fields {
		if f.required {
			continue
		}
		t.Run(f.key, func(t *testing.T) {
			extra := map[string]string{f.key: ""}
			if f.secret {
				extra[f.key+"_FILE"] = ""
			}
			c, err := load(t, minimalEnv(extra))
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			got := reflect.ValueOf(c).Elem().Field(f.index).Interface()
			if want := dv.Field(f.index).Interface(); got != want {
				t.Errorf("%s set to \"\" gives %v, want the default %v", f.key, got, want)
			}
		})
	}
}

func TestLoadRequired(t *testing.T) {
	required := []string{"BRIDGE_UPSTREAM_URL", "BRIDGE_TOKEN_URL", "BRIDGE_CLIENT_ID", "BRIDGE_USERNAME", "BRIDGE_PASSWORD"}
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"unset", map[string]string{}},
		{"set but empty", map[string]string{
			"BRIDGE_UPSTREAM_URL": "", "BRIDGE_TOKEN_URL": "", "BRIDGE_CLIENT_ID": "", "BRIDGE_USERNAME": "",
			"BRIDGE_PASSWORD": "", "BRIDGE_PASSWORD_FILE": "",
		}},
		{"empty password file", map[string]string{"BRIDGE_PASSWORD_FILE": writeFile(t, "empty", "\n")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.env)
			if c != nil || err == nil {
				t.Fatalf("Load = %v, %v; want an error", c, err)
			}
			ps := problems(t, err)
			if len(ps) != len(required) {
				t.Errorf("got %d problems, want %d (one per required variable):\n%v", len(ps), len(required), err)
			}
			for _, key := range required {
				if !strings.Contains(err.Error(), key+": is required") {
					t.Errorf("error does not report %s as required:\n%v", key, err)
				}
			}
			if !strings.Contains(err.Error(), "BRIDGE_PASSWORD_FILE") {
				t.Errorf("the password's message does not mention BRIDGE_PASSWORD_FILE:\n%v", err)
			}
		})
	}
}

func TestLoadSecretFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    string
	}{
		{"no newline", testPassword, testPassword},
		{"LF", testPassword + "\n", testPassword},
		{"CRLF", testPassword + "\r\n", testPassword},
		{"several newlines", testPassword + "\n\r\n\n", testPassword},
		{"inner spaces and newlines kept", " a b\nc ", " a b\nc "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := minimalEnv(map[string]string{
				"BRIDGE_PASSWORD_FILE":   writeFile(t, "password", tt.content),
				"BRIDGE_NATS_TOKEN_FILE": writeFile(t, "token", "tok\n"),
			})
			delete(env, "BRIDGE_PASSWORD")
			c, err := load(t, env)
			if err != nil {
				t.Fatalf("FromEnv: %v", err)
			}
			if got := c.Password.Reveal(); got != tt.want {
				t.Errorf("Password = %q, want %q", got, tt.want)
			}
			if got := c.NATSToken.Reveal(); got != "tok" {
				t.Errorf("NATSToken = %q, want %q", got, "tok")
			}
		})
	}
}

func TestLoadSecretFileErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name     string
		env      map[string]string
		wantVars []string // each must open a line of the error
		wantIn   string
		wantIs   error
	}{
		{
			name:     "both set",
			env:      map[string]string{"BRIDGE_PASSWORD_FILE": writeFile(t, "pw", testPassword)},
			wantVars: []string{"BRIDGE_PASSWORD, BRIDGE_PASSWORD_FILE"},
			wantIn:   "set only one",
		},
		{
			name:     "both set, NATS token",
			env:      map[string]string{"BRIDGE_NATS_TOKEN": "t", "BRIDGE_NATS_TOKEN_FILE": writeFile(t, "t", "t")},
			wantVars: []string{"BRIDGE_NATS_TOKEN, BRIDGE_NATS_TOKEN_FILE"},
		},
		{
			name:     "missing file",
			env:      map[string]string{"BRIDGE_PASSWORD": "", "BRIDGE_PASSWORD_FILE": missing},
			wantVars: []string{"BRIDGE_PASSWORD_FILE"},
			wantIn:   missing,
			wantIs:   fs.ErrNotExist,
		},
		{
			name:     "directory",
			env:      map[string]string{"BRIDGE_PASSWORD": "", "BRIDGE_PASSWORD_FILE": dir},
			wantVars: []string{"BRIDGE_PASSWORD_FILE"},
			wantIn:   dir,
		},
		{
			name: "too large",
			env: map[string]string{"BRIDGE_PASSWORD": "",
				"BRIDGE_PASSWORD_FILE": writeFile(t, "big", testPassword+strings.Repeat("x", maxSecretFileBytes))},
			wantVars: []string{"BRIDGE_PASSWORD_FILE"},
			wantIn:   "larger than",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, minimalEnv(tt.env))
			checkErr(t, err, tt.wantVars, tt.wantIn, tt.wantIs)
			// The failed secret is not also reported as missing.
			if strings.Contains(err.Error(), "is required") {
				t.Errorf("a failed _FILE is also reported as missing:\n%v", err)
			}
		})
	}
}

// checkErr checks that err has exactly len(wantVars) problems, one starting with each of wantVars, that
// its text contains wantIn, that it matches wantIs, and that it does not contain testPassword.
func checkErr(t *testing.T, err error, wantVars []string, wantIn string, wantIs error) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want one about %v", wantVars)
	}
	ps := problems(t, err)
	if len(ps) != len(wantVars) {
		t.Errorf("got %d problems, want %d:\n%v", len(ps), len(wantVars), err)
	}
	for _, v := range wantVars {
		found := false
		for _, p := range ps {
			found = found || strings.HasPrefix(p.Error(), v+": ")
		}
		if !found {
			t.Errorf("no problem about %s:\n%v", v, err)
		}
	}
	if !strings.Contains(err.Error(), wantIn) {
		t.Errorf("error does not contain %q:\n%v", wantIn, err)
	}
	if wantIs != nil && !errors.Is(err, wantIs) {
		t.Errorf("errors.Is(err, %v) = false:\n%v", wantIs, err)
	}
	if strings.Contains(err.Error(), testPassword) {
		t.Errorf("error contains the password:\n%v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	f := newTestFiles(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name     string
		env      map[string]string
		wantVars []string
		wantIn   string
		wantIs   error
	}{
		// URLs.
		{"http upstream", map[string]string{"BRIDGE_UPSTREAM_URL": "http://api.example.com/v1.0"},
			[]string{"BRIDGE_UPSTREAM_URL"}, "set BRIDGE_INSECURE_HTTP=true", nil},
		{"http token URL", map[string]string{"BRIDGE_TOKEN_URL": "HTTP://auth.example.com/token"},
			[]string{"BRIDGE_TOKEN_URL"}, "for local development (e.g. the simulator) set BRIDGE_INSECURE_HTTP=true", nil},
		{"http both, explicitly false", map[string]string{"BRIDGE_INSECURE_HTTP": "false",
			"BRIDGE_UPSTREAM_URL": "http://a/v1", "BRIDGE_TOKEN_URL": "http://a/token"},
			[]string{"BRIDGE_UPSTREAM_URL", "BRIDGE_TOKEN_URL"}, "http://", nil},
		{"ftp scheme", map[string]string{"BRIDGE_UPSTREAM_URL": "ftp://api.example.com/v1.0"},
			[]string{"BRIDGE_UPSTREAM_URL"}, `scheme "ftp" is not supported`, nil},
		{"ftp scheme even when insecure", map[string]string{"BRIDGE_INSECURE_HTTP": "true", "BRIDGE_TOKEN_URL": "ftp://a/t"},
			[]string{"BRIDGE_TOKEN_URL"}, "not supported", nil},
		{"no scheme", map[string]string{"BRIDGE_UPSTREAM_URL": "api.example.com/v1.0"},
			[]string{"BRIDGE_UPSTREAM_URL"}, "absolute URL", nil},
		{"no host", map[string]string{"BRIDGE_TOKEN_URL": "https:///token"},
			[]string{"BRIDGE_TOKEN_URL"}, "absolute URL", nil},
		{"relative", map[string]string{"BRIDGE_TOKEN_URL": "/auth/token"},
			[]string{"BRIDGE_TOKEN_URL"}, "absolute URL", nil},
		{"does not parse", map[string]string{"BRIDGE_UPSTREAM_URL": "https://api example.com/v1"},
			[]string{"BRIDGE_UPSTREAM_URL"}, "is not a URL", nil},
		{"bad port", map[string]string{"BRIDGE_UPSTREAM_URL": "https://api.example.com:https/v1"},
			[]string{"BRIDGE_UPSTREAM_URL"}, "is not a URL", nil},
		{"query on base URL", map[string]string{"BRIDGE_UPSTREAM_URL": "https://api.example.com/v1.0?x=1"},
			[]string{"BRIDGE_UPSTREAM_URL"}, "query", nil},
		{"user information", map[string]string{"BRIDGE_UPSTREAM_URL": "https://alice:" + testPassword + "@api.example.com/v1.0"},
			[]string{"BRIDGE_UPSTREAM_URL"}, "user information", nil},
		{"bad CE source", map[string]string{"BRIDGE_CE_SOURCE": "https://x/%zz"},
			[]string{"BRIDGE_CE_SOURCE"}, "URI reference", nil},

		// Paths.
		{"relative path", map[string]string{"BRIDGE_STREAM_PATH": "tracking/events/stream"},
			[]string{"BRIDGE_STREAM_PATH"}, "must start with /", nil},
		{"path with space", map[string]string{"BRIDGE_REPORT_PATH": "/tracking/ events"},
			[]string{"BRIDGE_REPORT_PATH"}, "white space", nil},

		// NATS URLs.
		{"NATS http scheme", map[string]string{"BRIDGE_NATS_URL": "http://127.0.0.1:4222"},
			[]string{"BRIDGE_NATS_URL"}, "use nats, tls, ws or wss", nil},
		{"NATS no scheme", map[string]string{"BRIDGE_NATS_URL": "localhost"},
			[]string{"BRIDGE_NATS_URL"}, "no scheme", nil},
		{"NATS host:port without scheme", map[string]string{"BRIDGE_NATS_URL": "127.0.0.1:4222"},
			[]string{"BRIDGE_NATS_URL"}, "entry 1 of 1", nil},
		{"NATS empty entry", map[string]string{"BRIDGE_NATS_URL": "nats://a:4222,,nats://b:4222"},
			[]string{"BRIDGE_NATS_URL"}, "entry 2 of 3 is empty", nil},
		{"NATS no host", map[string]string{"BRIDGE_NATS_URL": "nats://:4222"},
			[]string{"BRIDGE_NATS_URL"}, "no host", nil},
		{"NATS two bad entries", map[string]string{"BRIDGE_NATS_URL": "nats://a, http://b, tls://c,"},
			[]string{"BRIDGE_NATS_URL", "BRIDGE_NATS_URL"}, "entry 4 of 4", nil},

		// Subject prefix.
		{"prefix double dot", map[string]string{"BRIDGE_SUBJECT_PREFIX": "a..b"},
			[]string{"BRIDGE_SUBJECT_PREFIX"}, "empty token", nil},
		{"prefix leading dot", map[string]string{"BRIDGE_SUBJECT_PREFIX": ".a"},
			[]string{"BRIDGE_SUBJECT_PREFIX"}, "empty token", nil},
		{"prefix trailing dot", map[string]string{"BRIDGE_SUBJECT_PREFIX": "a."},
			[]string{"BRIDGE_SUBJECT_PREFIX"}, "empty token", nil},
		{"prefix star", map[string]string{"BRIDGE_SUBJECT_PREFIX": "a.*"},
			[]string{"BRIDGE_SUBJECT_PREFIX"}, "wildcards", nil},
		{"prefix gt inside token", map[string]string{"BRIDGE_SUBJECT_PREFIX": "a>b"},
			[]string{"BRIDGE_SUBJECT_PREFIX"}, "wildcards", nil},
		{"prefix space", map[string]string{"BRIDGE_SUBJECT_PREFIX": "my tracking"},
			[]string{"BRIDGE_SUBJECT_PREFIX"}, "white space", nil},
		{"prefix tab and wildcard", map[string]string{"BRIDGE_SUBJECT_PREFIX": "a\t.>"},
			[]string{"BRIDGE_SUBJECT_PREFIX", "BRIDGE_SUBJECT_PREFIX"}, "wildcards", nil},

		// Values that do not parse.
		{"duration without unit", map[string]string{"BRIDGE_RECONNECT_MIN": "5"},
			[]string{"BRIDGE_RECONNECT_MIN"}, `"5" is not a duration`, nil},
		{"duration garbage", map[string]string{"BRIDGE_STREAM_IDLE_TIMEOUT": "a minute"},
			[]string{"BRIDGE_STREAM_IDLE_TIMEOUT"}, "is not a duration", nil},
		{"integer garbage", map[string]string{"BRIDGE_PUBLISH_WINDOW": "1k"},
			[]string{"BRIDGE_PUBLISH_WINDOW"}, `"1k" is not an integer`, nil},
		{"boolean garbage", map[string]string{"BRIDGE_INSECURE_HTTP": "yes"},
			[]string{"BRIDGE_INSECURE_HTTP"}, "is not a boolean", nil},
		{"a parse error is not reported twice", map[string]string{"BRIDGE_RECONNECT_MIN": "2m", "BRIDGE_RECONNECT_MAX": "lots"},
			[]string{"BRIDGE_RECONNECT_MAX"}, "is not a duration", nil},

		// Ranges.
		{"zero duration", map[string]string{"BRIDGE_HTTP_TIMEOUT": "0s"},
			[]string{"BRIDGE_HTTP_TIMEOUT"}, "must be positive", nil},
		{"negative duration", map[string]string{"BRIDGE_SHUTDOWN_TIMEOUT": "-1s"},
			[]string{"BRIDGE_SHUTDOWN_TIMEOUT"}, "must be positive", nil},
		{"zero size", map[string]string{"BRIDGE_REPORT_MAX_BYTES": "0"},
			[]string{"BRIDGE_REPORT_MAX_BYTES"}, "must be positive", nil},
		{"negative count", map[string]string{"BRIDGE_REPORT_CONCURRENCY": "-4"},
			[]string{"BRIDGE_REPORT_CONCURRENCY"}, "must be positive", nil},
		// Counts that size start-up allocations: 1e11 made `bridge run` die of "out of memory".
		{"lease TTL not whole seconds", map[string]string{"BRIDGE_LEASE_TTL": "1500ms"},
			[]string{"BRIDGE_LEASE_TTL"}, "whole number of seconds", nil},
		{"lease TTL under a second", map[string]string{"BRIDGE_LEASE_TTL": "0s"},
			[]string{"BRIDGE_LEASE_TTL"}, "at least 1s", nil},
		{"stream replicas", map[string]string{"BRIDGE_STREAM_REPLICAS": "7"},
			[]string{"BRIDGE_STREAM_REPLICAS"}, "between 1 and 5", nil},
		{"huge publish window", map[string]string{"BRIDGE_PUBLISH_WINDOW": "100000000000"},
			[]string{"BRIDGE_PUBLISH_WINDOW"}, "must be at most 65536", nil},
		{"huge report concurrency", map[string]string{"BRIDGE_REPORT_CONCURRENCY": "100000000000"},
			[]string{"BRIDGE_REPORT_CONCURRENCY"}, "must be at most 4096", nil},
		{"reconnect min above max", map[string]string{"BRIDGE_RECONNECT_MIN": "2m", "BRIDGE_RECONNECT_MAX": "1m"},
			[]string{"BRIDGE_RECONNECT_MIN, BRIDGE_RECONNECT_MAX"}, "greater than the maximum", nil},
		{"report backoff min above max", map[string]string{"BRIDGE_REPORT_BACKOFF_MIN": "10m"},
			[]string{"BRIDGE_REPORT_BACKOFF_MIN, BRIDGE_REPORT_BACKOFF_MAX"}, "greater than the maximum", nil},
		{"refresh margin too small", map[string]string{"BRIDGE_REFRESH_MARGIN": "29s"},
			[]string{"BRIDGE_REFRESH_MARGIN"}, "at least 30s", nil},
		{"login retry too fast", map[string]string{"BRIDGE_LOGIN_RETRY": "59s"},
			[]string{"BRIDGE_LOGIN_RETRY"}, "at least 1m0s", nil},
		{"negative report max age", map[string]string{"BRIDGE_REPORT_MAX_AGE": "-1h"},
			[]string{"BRIDGE_REPORT_MAX_AGE"}, "must not be negative", nil},

		// Stream limits.
		{"size without unit garbage", map[string]string{"BRIDGE_EVENTS_STREAM_MAX_BYTES": "4GB"},
			[]string{"BRIDGE_EVENTS_STREAM_MAX_BYTES"}, `"4GB" is not a size in bytes`, nil},
		{"size overflow", map[string]string{"BRIDGE_DLQ_STREAM_MAX_BYTES": "9000000000TiB"},
			[]string{"BRIDGE_DLQ_STREAM_MAX_BYTES"}, "fits in 64 bits", nil},
		{"zero stream size", map[string]string{"BRIDGE_REPORTS_STREAM_MAX_BYTES": "0"},
			[]string{"BRIDGE_REPORTS_STREAM_MAX_BYTES"}, "must be positive", nil},
		{"negative stream size", map[string]string{"BRIDGE_DLQ_STREAM_MAX_BYTES": "-1GiB"},
			[]string{"BRIDGE_DLQ_STREAM_MAX_BYTES"}, "must be positive", nil},
		{"events stream below its largest event", map[string]string{"BRIDGE_EVENTS_STREAM_MAX_BYTES": "1MiB"},
			[]string{"BRIDGE_EVENTS_STREAM_MAX_BYTES, BRIDGE_STREAM_MAX_EVENT_BYTES"}, "below its largest message, 1114112 bytes", nil},
		{"reports stream below its largest report", map[string]string{"BRIDGE_REPORT_MAX_BYTES": "2000000",
			"BRIDGE_REPORTS_STREAM_MAX_BYTES": "1MiB"},
			[]string{"BRIDGE_REPORTS_STREAM_MAX_BYTES, BRIDGE_REPORT_MAX_BYTES"}, "below its largest message", nil},
		{"dlq below its largest dead letter", map[string]string{"BRIDGE_DLQ_STREAM_MAX_BYTES": "1MiB"},
			[]string{"BRIDGE_DLQ_STREAM_MAX_BYTES, BRIDGE_STREAM_MAX_EVENT_BYTES, BRIDGE_REPORT_MAX_BYTES"}, "below its largest message", nil},
		{"event bound beyond int32", map[string]string{"BRIDGE_STREAM_MAX_EVENT_BYTES": "2147483000",
			"BRIDGE_EVENTS_STREAM_MAX_BYTES": "8GiB", "BRIDGE_DLQ_STREAM_MAX_BYTES": "8GiB"},
			[]string{"BRIDGE_STREAM_MAX_EVENT_BYTES"}, "holds in 32 bits", nil},
		{"negative stream age", map[string]string{"BRIDGE_EVENTS_STREAM_MAX_AGE": "-1h"},
			[]string{"BRIDGE_EVENTS_STREAM_MAX_AGE"}, "must not be negative", nil},
		{"stream age below the duplicate window", map[string]string{"BRIDGE_DLQ_STREAM_MAX_AGE": "5m"},
			[]string{"BRIDGE_DLQ_STREAM_MAX_AGE, BRIDGE_DUPLICATE_WINDOW"}, "shorter than the stream's duplicate window 10m0s", nil},
		{"reports age below its window", map[string]string{"BRIDGE_REPORTS_STREAM_MAX_AGE": "1m",
			"BRIDGE_REPORT_MAX_AGE": "30s"},
			[]string{"BRIDGE_REPORTS_STREAM_MAX_AGE"}, "duplicate window 2m0s", nil},
		{"reports age while retrying forever", map[string]string{"BRIDGE_REPORTS_STREAM_MAX_AGE": "168h"},
			[]string{"BRIDGE_REPORTS_STREAM_MAX_AGE, BRIDGE_REPORT_MAX_AGE"}, "must be set and shorter", nil},
		{"reports age before the dead letter", map[string]string{"BRIDGE_REPORTS_STREAM_MAX_AGE": "24h",
			"BRIDGE_REPORT_MAX_AGE": "24h"},
			[]string{"BRIDGE_REPORTS_STREAM_MAX_AGE, BRIDGE_REPORT_MAX_AGE"}, "must be set and shorter", nil},
		// The API's endpoints, reply prefixes and body bound.
		{"unknown endpoint", map[string]string{"BRIDGE_API_ENDPOINTS": "orders.get,orders.fetch"},
			[]string{"BRIDGE_API_ENDPOINTS"}, `an unknown endpoint "orders.fetch"; use all, or a comma-separated list of: locations.search, orders.list, orders.create, orders.get, orders.update, orders.delete, tracking.query, tracking.report`, nil},
		{"unknown endpoints, one problem", map[string]string{"BRIDGE_API_ENDPOINTS": "orders.fetch, *"},
			[]string{"BRIDGE_API_ENDPOINTS"}, `unknown endpoints "orders.fetch", "*"`, nil},
		{"long unknown endpoint, cut on a rune boundary", map[string]string{"BRIDGE_API_ENDPOINTS": strings.Repeat("x", 63) + "éé"},
			[]string{"BRIDGE_API_ENDPOINTS"}, `an unknown endpoint "` + strings.Repeat("x", 63) + `…";`, nil},
		{"empty endpoint entry", map[string]string{"BRIDGE_API_ENDPOINTS": "orders.get,,orders.list"},
			[]string{"BRIDGE_API_ENDPOINTS"}, "entry 2 of 3 is empty", nil},
		{"no endpoint", map[string]string{"BRIDGE_API_ENDPOINTS": " , "},
			[]string{"BRIDGE_API_ENDPOINTS", "BRIDGE_API_ENDPOINTS"}, "entry 1 of 2 is empty", nil},
		{"all and more", map[string]string{"BRIDGE_API_ENDPOINTS": "all,orders.get"},
			[]string{"BRIDGE_API_ENDPOINTS"}, `"all" stands alone`, nil},
		{"reply prefix wildcard", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX.>"},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, `"_INBOX.>" must not contain the wildcards`, nil},
		{"reply prefix star", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX.*.x"},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, "wildcards", nil},
		{"reply prefix space", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX., my inbox"},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, `"my inbox" must not contain white space`, nil},
		{"reply prefix empty token", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX..x"},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, "empty token", nil},
		{"reply prefix leading dot", map[string]string{"BRIDGE_API_REPLY_PREFIXES": ".x"},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, "empty token", nil},
		{"reply prefix only a dot", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "."},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, "empty token", nil},
		{"reply prefix empty entry", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX.,"},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, "entry 2 of 2 is empty", nil},
		{"reply prefixes blank", map[string]string{"BRIDGE_API_REPLY_PREFIXES": " "},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, "names no prefix", nil},
		{"reply prefix system subject", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX.,$KV."},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, `"$KV." is a system subject prefix`, nil},
		{"reply prefix the bridge's own", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "tracking"},
			[]string{"BRIDGE_API_REPLY_PREFIXES"}, "covers the bridge's own subjects", nil},
		{"reply prefix under the bridge's own", map[string]string{"BRIDGE_SUBJECT_PREFIX": "acme.tracking",
			"BRIDGE_API_REPLY_PREFIXES": "acme.tracking.events."}, []string{"BRIDGE_API_REPLY_PREFIXES"}, "covers the bridge's own subjects", nil},
		{"own inboxes are the reply prefix", map[string]string{"BRIDGE_NATS_INBOX_PREFIX": "_INBOX"},
			[]string{"BRIDGE_NATS_INBOX_PREFIX, BRIDGE_API_REPLY_PREFIXES"}, `the bridge's own inboxes "_INBOX" lie under the reply prefix "_INBOX."`, nil},
		{"own inboxes under the reply prefix", map[string]string{"BRIDGE_NATS_INBOX_PREFIX": "_INBOX.bridge"},
			[]string{"BRIDGE_NATS_INBOX_PREFIX, BRIDGE_API_REPLY_PREFIXES"}, `"_INBOX.bridge" lie under the reply prefix "_INBOX."`, nil},
		{"own inboxes under a per-user reply prefix", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX_alice, _INBOX_bridge"},
			[]string{"BRIDGE_NATS_INBOX_PREFIX, BRIDGE_API_REPLY_PREFIXES"}, `"_INBOX_bridge" lie under the reply prefix "_INBOX_bridge."`, nil},
		{"a reply prefix under the own inboxes", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX., _INBOX_bridge.erp"},
			[]string{"BRIDGE_NATS_INBOX_PREFIX, BRIDGE_API_REPLY_PREFIXES"}, `the reply prefix "_INBOX_bridge.erp." lies under the bridge's own inboxes "_INBOX_bridge"`, nil},
		{"own inboxes under _R_.", map[string]string{"BRIDGE_NATS_INBOX_PREFIX": "_R_.bridge", "BRIDGE_API_ENABLED": "false"},
			[]string{"BRIDGE_NATS_INBOX_PREFIX"}, `"_R_.bridge" lies under _R_., the reply subjects the NATS server writes itself`, nil},
		{"own inboxes _R_", map[string]string{"BRIDGE_NATS_INBOX_PREFIX": "_R_"},
			[]string{"BRIDGE_NATS_INBOX_PREFIX"}, `"_R_" lies under _R_.`, nil},
		{"reply prefix every problem", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "a b.*, ,$SYS"},
			[]string{"BRIDGE_API_REPLY_PREFIXES", "BRIDGE_API_REPLY_PREFIXES", "BRIDGE_API_REPLY_PREFIXES", "BRIDGE_API_REPLY_PREFIXES"}, "entry 2 of 3 is empty", nil},
		{"zero API body bound", map[string]string{"BRIDGE_API_MAX_BODY_BYTES": "0"},
			[]string{"BRIDGE_API_MAX_BODY_BYTES"}, "must be positive", nil},
		{"huge API body bound", map[string]string{"BRIDGE_API_MAX_BODY_BYTES": "100000000000"},
			[]string{"BRIDGE_API_MAX_BODY_BYTES"}, "must be at most 67108864", nil},

		// Enumerations and names.
		{"log format", map[string]string{"BRIDGE_LOG_FORMAT": "xml"},
			[]string{"BRIDGE_LOG_FORMAT"}, "json, text", nil},
		{"log level", map[string]string{"BRIDGE_LOG_LEVEL": "verbose"},
			[]string{"BRIDGE_LOG_LEVEL"}, "debug, info, warn, error", nil},
		{"listen address without colon", map[string]string{"BRIDGE_HTTP_ADDR": "8080"},
			[]string{"BRIDGE_HTTP_ADDR"}, "listen address", nil},
		{"listen address port out of range", map[string]string{"BRIDGE_HTTP_ADDR": ":80800"},
			[]string{"BRIDGE_HTTP_ADDR"}, "listen address", nil},
		{"too few HTTP connections", map[string]string{"BRIDGE_HTTP_MAX_CONNS": "3"},
			[]string{"BRIDGE_HTTP_MAX_CONNS"}, "must be between 4 and 4096 (got 3)", nil},
		{"too many HTTP connections", map[string]string{"BRIDGE_HTTP_MAX_CONNS": "100000"},
			[]string{"BRIDGE_HTTP_MAX_CONNS"}, "must be between 4 and 4096", nil},
		{"durable with a dot", map[string]string{"BRIDGE_REPORT_DURABLE": "bridge.reports"},
			[]string{"BRIDGE_REPORT_DURABLE"}, "must not contain", nil},

		// Files.
		{"missing CA file", map[string]string{"BRIDGE_UPSTREAM_CA_FILE": missing},
			[]string{"BRIDGE_UPSTREAM_CA_FILE"}, missing, fs.ErrNotExist},
		{"NATS CA file is a directory", map[string]string{"BRIDGE_NATS_CA_FILE": dir},
			[]string{"BRIDGE_NATS_CA_FILE"}, "is a directory", nil},
		{"missing creds file", map[string]string{"BRIDGE_NATS_CREDS_FILE": missing},
			[]string{"BRIDGE_NATS_CREDS_FILE"}, missing, fs.ErrNotExist},
		{"missing seed file", map[string]string{"BRIDGE_NATS_NKEY_SEED_FILE": missing},
			[]string{"BRIDGE_NATS_NKEY_SEED_FILE"}, missing, fs.ErrNotExist},
		{"cert without key", map[string]string{"BRIDGE_NATS_CERT_FILE": f.cert},
			[]string{"BRIDGE_NATS_CERT_FILE, BRIDGE_NATS_KEY_FILE"}, "BRIDGE_NATS_KEY_FILE is missing", nil},
		{"missing key file without cert", map[string]string{"BRIDGE_NATS_KEY_FILE": missing},
			[]string{"BRIDGE_NATS_KEY_FILE", "BRIDGE_NATS_CERT_FILE, BRIDGE_NATS_KEY_FILE"}, "BRIDGE_NATS_CERT_FILE is missing", fs.ErrNotExist},

		// NATS authentication.
		{"NATS user without password", map[string]string{"BRIDGE_NATS_USER": "bridge"},
			[]string{"BRIDGE_NATS_USER, BRIDGE_NATS_PASSWORD"}, "BRIDGE_NATS_PASSWORD is missing", nil},
		{"NATS password without user", map[string]string{"BRIDGE_NATS_PASSWORD": testPassword},
			[]string{"BRIDGE_NATS_USER, BRIDGE_NATS_PASSWORD"}, "BRIDGE_NATS_USER is missing", nil},
		{"NATS token and creds", map[string]string{"BRIDGE_NATS_TOKEN": testPassword, "BRIDGE_NATS_CREDS_FILE": f.creds},
			[]string{"BRIDGE_NATS_CREDS_FILE, BRIDGE_NATS_TOKEN"}, "more than one NATS authentication method", nil},
		{"NATS seed, user and token", map[string]string{"BRIDGE_NATS_NKEY_SEED_FILE": f.seed, "BRIDGE_NATS_USER": "u",
			"BRIDGE_NATS_PASSWORD": testPassword, "BRIDGE_NATS_TOKEN": testPassword},
			[]string{"BRIDGE_NATS_NKEY_SEED_FILE, BRIDGE_NATS_USER, BRIDGE_NATS_PASSWORD, BRIDGE_NATS_TOKEN"}, "at most one", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, minimalEnv(tt.env))
			if c != nil {
				t.Errorf("Load returned a Config with an error")
			}
			checkErr(t, err, tt.wantVars, tt.wantIn, tt.wantIs)
		})
	}
}

func TestLoadAccepts(t *testing.T) {
	f := newTestFiles(t)
	tests := []struct {
		name string
		env  map[string]string
	}{
		{"http with opt-in", map[string]string{"BRIDGE_INSECURE_HTTP": "true",
			"BRIDGE_UPSTREAM_URL": "http://127.0.0.1:8081/v1.0", "BRIDGE_TOKEN_URL": "http://127.0.0.1:8081/auth/token"}},
		{"https with opt-in", map[string]string{"BRIDGE_INSECURE_HTTP": "1"}},
		{"upper-case scheme", map[string]string{"BRIDGE_UPSTREAM_URL": "HTTPS://API.EXAMPLE.COM/v1.0"}},
		{"IPv6 upstream", map[string]string{"BRIDGE_UPSTREAM_URL": "https://[::1]:8443/v1.0"}},
		{"token URL with query", map[string]string{"BRIDGE_TOKEN_URL": "https://auth.example.com/token?realm=x"}},
		{"NATS URL list", map[string]string{"BRIDGE_NATS_URL": "nats://a:4222,tls://b:4222,ws://c,wss://d:443"}},
		{"NATS URL with user", map[string]string{"BRIDGE_NATS_URL": "nats://u:p@a:4222"}},
		{"one-token prefix with dash", map[string]string{"BRIDGE_SUBJECT_PREFIX": "acme-tracking"}},
		{"multi-token prefix", map[string]string{"BRIDGE_SUBJECT_PREFIX": "acme.prod.tracking"}},
		{"max age zero", map[string]string{"BRIDGE_REPORT_MAX_AGE": "0"}},
		{"min equals max", map[string]string{"BRIDGE_RECONNECT_MIN": "5s", "BRIDGE_RECONNECT_MAX": "5s"}},
		{"listen on loopback", map[string]string{"BRIDGE_HTTP_ADDR": "127.0.0.1:9090"}},
		{"HTTP connections at the bottom", map[string]string{"BRIDGE_HTTP_MAX_CONNS": "4"}},
		{"HTTP connections at the top", map[string]string{"BRIDGE_HTTP_MAX_CONNS": "4096"}},
		{"NATS user and password", map[string]string{"BRIDGE_NATS_USER": "u", "BRIDGE_NATS_PASSWORD": "p"}},
		{"NATS creds with mTLS", map[string]string{"BRIDGE_NATS_CREDS_FILE": f.creds, "BRIDGE_NATS_CA_FILE": f.ca,
			"BRIDGE_NATS_CERT_FILE": f.cert, "BRIDGE_NATS_KEY_FILE": f.key}},
		{"NATS seed", map[string]string{"BRIDGE_NATS_NKEY_SEED_FILE": f.seed}},
		{"NATS token", map[string]string{"BRIDGE_NATS_TOKEN": "t"}},
		{"upstream CA", map[string]string{"BRIDGE_UPSTREAM_CA_FILE": f.ca}},
		{"CE source URN", map[string]string{"BRIDGE_CE_SOURCE": "urn:example:tracking"}},
		{"stream sizes in bytes and units", map[string]string{"BRIDGE_EVENTS_STREAM_MAX_BYTES": "10737418240",
			"BRIDGE_REPORTS_STREAM_MAX_BYTES": "512MiB", "BRIDGE_DLQ_STREAM_MAX_BYTES": "1TiB"}},
		{"stream ages", map[string]string{"BRIDGE_EVENTS_STREAM_MAX_AGE": "720h", "BRIDGE_DLQ_STREAM_MAX_AGE": "0s",
			"BRIDGE_REPORTS_STREAM_MAX_AGE": "168h", "BRIDGE_REPORT_MAX_AGE": "24h"}},
		{"events stream exactly its largest message", map[string]string{"BRIDGE_EVENTS_STREAM_MAX_BYTES": "1114112"}},
		{"read endpoints", map[string]string{"BRIDGE_API_ENDPOINTS": " locations.search, ORDERS.GET,orders.list,tracking.query"}},
		{"all in capitals", map[string]string{"BRIDGE_API_ENDPOINTS": "ALL"}},
		{"per-user inbox prefixes", map[string]string{"BRIDGE_API_REPLY_PREFIXES": "_INBOX_alice, _INBOX.bob., _R_."}},
		{"a prefix sharing the bridge's first token", map[string]string{"BRIDGE_SUBJECT_PREFIX": "acme.tracking",
			"BRIDGE_API_REPLY_PREFIXES": "acme.inbox"}},
		{"own inboxes apart from every reply prefix, in whole tokens", map[string]string{"BRIDGE_NATS_INBOX_PREFIX": "_INBOX_bridge",
			"BRIDGE_API_REPLY_PREFIXES": "_INBOX., _INBOX_bridgeX, _INBOX_bridg, _R_."}},
		{"own inboxes beside _R_.", map[string]string{"BRIDGE_NATS_INBOX_PREFIX": "_R", "BRIDGE_API_REPLY_PREFIXES": "_R_."}},
		{"own inboxes under the reply prefix of an API not served", map[string]string{"BRIDGE_API_ENABLED": "false",
			"BRIDGE_NATS_INBOX_PREFIX": "_INBOX"}},
		{"API body bound of 64 MiB", map[string]string{"BRIDGE_API_MAX_BODY_BYTES": "67108864"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := load(t, minimalEnv(tt.env)); err != nil {
				t.Errorf("Load: %v", err)
			}
		})
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	env := map[string]string{
		"BRIDGE_UPSTREAM_URL":        "http://api.example.com/v1.0",
		"BRIDGE_PASSWORD":            testPassword,
		"BRIDGE_NATS_URL":            "http://n",
		"BRIDGE_SUBJECT_PREFIX":      "a..b",
		"BRIDGE_RECONNECT_MIN":       "5",
		"BRIDGE_PUBLISH_WINDOW":      "0",
		"BRIDGE_LOG_LEVEL":           "loud",
		"BRIDGE_NATS_TOKEN":          testPassword,
		"BRIDGE_NATS_TOKEN_FILE":     "/nonexistent/token",
		"BRIDGE_STREAM_IDLE_TIMEOUT": "-1s",
	}
	_, err := load(t, env)
	want := []string{
		"BRIDGE_TOKEN_URL", "BRIDGE_CLIENT_ID", "BRIDGE_USERNAME", // required
		"BRIDGE_UPSTREAM_URL", "BRIDGE_NATS_URL", "BRIDGE_SUBJECT_PREFIX", "BRIDGE_RECONNECT_MIN",
		"BRIDGE_PUBLISH_WINDOW", "BRIDGE_LOG_LEVEL", "BRIDGE_NATS_TOKEN, BRIDGE_NATS_TOKEN_FILE",
		"BRIDGE_STREAM_IDLE_TIMEOUT",
	}
	checkErr(t, err, want, "", nil)
}

// TestLoadEveryParseErrorAtOnce: envconfig.Process stops at the first value that does not parse; Load
// reports them all, with the _FILE problems and Validate's, in the order of the fields, each once, in the
// words of the decoders (ByteSize's own).
func TestLoadEveryParseErrorAtOnce(t *testing.T) {
	env := minimalEnv(map[string]string{
		"BRIDGE_PASSWORD_FILE":           filepath.Join(t.TempDir(), "missing"),
		"BRIDGE_INSECURE_HTTP":           "yes",
		"BRIDGE_LOG_LEVEL":               "loud",
		"BRIDGE_RECONNECT_MIN":           "5",
		"BRIDGE_RECONNECT_MAX":           "1m",
		"BRIDGE_PUBLISH_WINDOW":          "0x10", // envconfig alone would read 16
		"BRIDGE_STREAM_REPLICAS":         "1_000",
		"BRIDGE_EVENTS_STREAM_MAX_BYTES": "4GB",
		"BRIDGE_DLQ_STREAM_MAX_BYTES":    "9000000000TiB",
		"BRIDGE_REPORT_BACKOFF_MAX":      "soon",
		"BRIDGE_NATS_TOKEN":              testPassword,
		"BRIDGE_NATS_TOKEN_FILE":         writeFile(t, "token", testPassword),
	})
	delete(env, "BRIDGE_PASSWORD")
	_, err := load(t, env)
	want := []string{
		"BRIDGE_PASSWORD_FILE: cannot read ",
		`BRIDGE_INSECURE_HTTP: "yes" is not a boolean (use true or false)`,
		`BRIDGE_RECONNECT_MIN: "5" is not a duration (use a unit, e.g. 500ms, 30s, 5m, 1h)`,
		`BRIDGE_PUBLISH_WINDOW: "0x10" is not an integer`,
		`BRIDGE_STREAM_REPLICAS: "1_000" is not an integer`,
		`BRIDGE_EVENTS_STREAM_MAX_BYTES: "4GB" is not a size in bytes (a whole number, or with a unit: 512KiB, 256MiB, 4GiB)`,
		`BRIDGE_DLQ_STREAM_MAX_BYTES: "9000000000TiB" is not a size that fits in 64 bits`,
		`BRIDGE_REPORT_BACKOFF_MAX: "soon" is not a duration`,
		"BRIDGE_NATS_TOKEN, BRIDGE_NATS_TOKEN_FILE: both are set; set only one",
		`BRIDGE_LOG_LEVEL: "loud" is not one of debug, info, warn, error`,
	}
	ps := problems(t, err)
	if len(ps) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(ps), len(want), err)
	}
	for i, p := range ps {
		if !strings.HasPrefix(p.Error(), want[i]) {
			t.Errorf("problem %d is %q, want it to start with %q", i, p, want[i])
		}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(err, fs.ErrNotExist) = false:\n%v", err)
	}
	if strings.Contains(err.Error(), testPassword) {
		t.Errorf("error contains the password:\n%v", err)
	}
}

// TestLoadDecimalIntegers: integers are read in decimal, as before envconfig, whose Process reads
// "010" as octal.
func TestLoadDecimalIntegers(t *testing.T) {
	for in, want := range map[string]int{"010": 10, "+64": 64, "0100": 100, "65536": 65536} {
		c, err := load(t, minimalEnv(map[string]string{"BRIDGE_PUBLISH_WINDOW": in}))
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if c.PublishWindow != want {
			t.Errorf("BRIDGE_PUBLISH_WINDOW=%q gives %d, want %d", in, c.PublishWindow, want)
		}
	}
}

// TestLoadSecretFileThroughEnvconfig: a secret read from X_FILE reaches the field through
// envconfig.Process and Secret.Decode, for the required password and an optional NATS password alike,
// and an empty variable beside the _FILE one counts as unset.
func TestLoadSecretFileThroughEnvconfig(t *testing.T) {
	env := minimalEnv(map[string]string{
		"BRIDGE_PASSWORD":           "",
		"BRIDGE_PASSWORD_FILE":      writeFile(t, "pw", testPassword+"\r\n"),
		"BRIDGE_NATS_USER":          "bridge",
		"BRIDGE_NATS_PASSWORD_FILE": writeFile(t, "nats", "nats-pw\n"),
	})
	c, err := load(t, env)
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	if c.Password.Reveal() != testPassword || c.NATSPassword.Reveal() != "nats-pw" || c.NATSToken != "" {
		t.Errorf("secrets not loaded from their files: %q %q %q", c.Password.Reveal(), c.NATSPassword.Reveal(), c.NATSToken.Reveal())
	}
}

// TestFromEnvIgnoresUnprefixedNames: envconfig.Process falls back to a variable's name without the
// prefix (USERNAME for BRIDGE_USERNAME); FromEnv does not, so a login name or a stray LOG_LEVEL in the
// environment never configures the bridge, and one that does not parse is no problem of the bridge's.
func TestFromEnvIgnoresUnprefixedNames(t *testing.T) {
	t.Setenv("USERNAME", "mallory")
	t.Setenv("LOG_LEVEL", "debug")
	t.Setenv("HTTP_TIMEOUT", "garbage")
	t.Setenv("PUBLISH_WINDOW", "7")
	env := minimalEnv(nil)
	delete(env, "BRIDGE_USERNAME")
	_, err := load(t, env)
	checkErr(t, err, []string{"BRIDGE_USERNAME"}, "is required", nil)

	c, err := load(t, minimalEnv(nil))
	if err != nil {
		t.Fatalf("FromEnv: %v", err)
	}
	if c.Username != "alice" || c.LogLevel != "info" || c.HTTPTimeout != 30*time.Second || c.PublishWindow != 1024 {
		t.Errorf("FromEnv read names without the prefix: user %q, log level %q, HTTP timeout %v, window %d",
			c.Username, c.LogLevel, c.HTTPTimeout, c.PublishWindow)
	}

	// The test means something only while envconfig does fall back.
	var spec struct {
		LogLevel string `envconfig:"LOG_LEVEL"`
	}
	if err := envconfig.Process(Prefix, &spec); err != nil || spec.LogLevel != "debug" {
		t.Errorf("envconfig.Process = %q, %v; want it to read LOG_LEVEL", spec.LogLevel, err)
	}
}

// TestFromEnvUnknownVariables: a BRIDGE_* variable the bridge does not read is reported, never ignored,
// each one (envconfig.CheckDisallowed names only the first), with the nearest variable when the name
// looks misspelt, never with its value, and together with every other problem.
func TestFromEnvUnknownVariables(t *testing.T) {
	env := minimalEnv(map[string]string{
		"BRIDGE_NATS_UR":       "nats://nats:4222",
		"BRIDGE_NATS_PASWORD":  testPassword,
		"BRIDGE_FROBNICATE":    "1",
		"BRIDGE_HTTP_PORT":     "9090", // not a Kubernetes service link: its value is no tcp:// URL
		"BRIDGE_RECONNECT_MIN": "5",
	})
	delete(env, "BRIDGE_CLIENT_ID")
	_, err := load(t, env)
	want := []string{
		"BRIDGE_FROBNICATE: is not a variable of the bridge (bridge -h lists them); its value is ignored",
		"BRIDGE_HTTP_PORT: is not a variable of the bridge (bridge -h lists them); its value is ignored",
		"BRIDGE_NATS_PASWORD: is not a variable of the bridge; did you mean BRIDGE_NATS_PASSWORD?",
		"BRIDGE_NATS_UR: is not a variable of the bridge; did you mean BRIDGE_NATS_URL?",
		`BRIDGE_RECONNECT_MIN: "5" is not a duration (use a unit, e.g. 500ms, 30s, 5m, 1h)`,
		"BRIDGE_CLIENT_ID: is required",
	}
	ps := problems(t, err)
	if len(ps) != len(want) {
		t.Fatalf("got %d problems, want %d:\n%v", len(ps), len(want), err)
	}
	for i, p := range ps {
		if p.Error() != want[i] {
			t.Errorf("problem %d is\n%q, want\n%q", i, p, want[i])
		}
	}
	if strings.Contains(err.Error(), testPassword) {
		t.Errorf("the error shows an unknown variable's value:\n%v", err)
	}
	if envconfig.CheckDisallowed(Prefix, new(envSpec)) == nil {
		t.Error("envconfig.CheckDisallowed finds no unknown variable")
	}
}

// TestFromEnvServiceLinks: the variables Kubernetes gives a pod for a Service named bridge-* in its
// namespace are not the operator's and do not stop the bridge.
func TestFromEnvServiceLinks(t *testing.T) {
	links := map[string]string{
		"BRIDGE_SERVICE_HOST":                        "10.0.0.2",
		"BRIDGE_PORT":                                "tcp://10.0.0.2:80",
		"BRIDGE_TRACKING_BRIDGE_SERVICE_HOST":        "10.0.0.1",
		"BRIDGE_TRACKING_BRIDGE_SERVICE_PORT":        "8080",
		"BRIDGE_TRACKING_BRIDGE_SERVICE_PORT_HTTP":   "8080",
		"BRIDGE_TRACKING_BRIDGE_PORT":                "tcp://10.0.0.1:8080",
		"BRIDGE_TRACKING_BRIDGE_PORT_8080_TCP":       "tcp://10.0.0.1:8080",
		"BRIDGE_TRACKING_BRIDGE_PORT_8080_TCP_PROTO": "tcp",
		"BRIDGE_TRACKING_BRIDGE_PORT_8080_TCP_PORT":  "8080",
		"BRIDGE_TRACKING_BRIDGE_PORT_8080_TCP_ADDR":  "10.0.0.1",
		"BRIDGE_NATS_PORT_4222_UDP":                  "udp://10.0.0.3:4222",
	}
	if _, err := load(t, minimalEnv(links)); err != nil {
		t.Errorf("FromEnv with Kubernetes's service links: %v", err)
	}
	for name, value := range map[string]string{
		"BRIDGE_TRACKING_BRIDGE_PORT": "8080", "BRIDGE_X_PORT_80_TCP": "8080", "BRIDGE_X_PORT_80_HTTP_PORT": "80",
		"BRIDGE_SERVICE": "x", "BRIDGE_HOST": "10.0.0.1",
	} {
		if _, err := load(t, minimalEnv(map[string]string{name: value})); err == nil {
			t.Errorf("%s=%s is taken for a service link", name, value)
		}
	}
}

// TestDefaultIsEnvconfigs: Default, which decodes the default tags itself, holds what
// envconfig.Process makes of them.
func TestDefaultIsEnvconfigs(t *testing.T) {
	load(t, nil) // unsets every BRIDGE_* variable
	for _, f := range fields {
		if _, ok := os.LookupEnv(strings.TrimPrefix(f.key, Prefix+"_")); ok {
			unsetenv(t, strings.TrimPrefix(f.key, Prefix+"_"))
		}
		if f.required {
			t.Setenv(f.key, "x")
		}
	}
	var c Config
	if err := envconfig.Process(Prefix, &c); err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.UpstreamURL, want.TokenURL, want.ClientID, want.Username, want.Password = "x", "x", "x", "x", "x"
	if !reflect.DeepEqual(&c, want) {
		t.Errorf("envconfig.Process reads the defaults as\n%+v\nDefault is\n%+v", c, *want)
	}
}

// TestDecodeIsEnvconfigs: decode, which FromEnv uses where envconfig.Process stopped, reads a value of
// every field as Process does (integers written without a leading zero or prefix, where decode keeps to
// decimal).
func TestDecodeIsEnvconfigs(t *testing.T) {
	load(t, nil)
	samples := map[reflect.Type][]string{
		durationType:              {"90s", "1h30m", "250ms", "-2s", "0"},
		bytesType:                 {"512KiB", "3GiB", "1000", "-1"},
		secretType:                {"p@ss word", "x"},
		reflect.TypeFor[int]():    {"7", "+64", "-3", "65536"},
		reflect.TypeFor[bool]():   {"1", "false", "T", "TRUE", "f"},
		reflect.TypeFor[string](): {"a, b", "nats://n:4222"},
	}
	for round := range 5 {
		for _, f := range fields {
			s := samples[f.typ]
			t.Setenv(f.key, s[round%len(s)])
		}
		var c Config
		if err := envconfig.Process(Prefix, &c); err != nil {
			t.Fatal(err)
		}
		pv := reflect.ValueOf(&c).Elem()
		for _, f := range fields {
			raw := samples[f.typ][round%len(samples[f.typ])]
			got := reflect.New(f.typ).Elem()
			if err := decode(f, raw, got); err != nil {
				t.Errorf("decode %s=%q: %v", f.key, raw, err)
				continue
			}
			if want := pv.Field(f.index); !reflect.DeepEqual(got.Interface(), want.Interface()) {
				t.Errorf("%s=%q: decode gives %v, envconfig.Process %v", f.key, raw, got, want)
			}
		}
	}
}

// TestEnvironLoadsBack: the variables Environ gives a child process load back as the Config they came
// from: one with every duration, size and integer doubled, every boolean flipped and strings and
// secrets of its own, and the defaults (only the required variables).
func TestEnvironLoadsBack(t *testing.T) {
	c, err := load(t, minimalEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	vars, err := c.Environ()
	if err != nil {
		t.Fatal(err)
	}
	if len(vars) != 5 {
		t.Errorf("Environ of the defaults and the required variables is %q", vars)
	}

	v := reflect.ValueOf(c).Elem()
	for _, f := range fields {
		switch fv := v.Field(f.index); fv.Kind() {
		case reflect.Int, reflect.Int64:
			fv.SetInt(2 * fv.Int())
		case reflect.Bool:
			fv.SetBool(!fv.Bool())
		}
	}
	c.NATSToken = "tok=en, with spaces"
	c.LogLevel, c.LogFormat, c.SubjectPrefix, c.NATSInboxPrefix = "debug", "text", "acme.tracking", "_INBOX_acme"
	c.CESource, c.APIEndpoints, c.HTTPAddr, c.ReportDurable = "urn:test", "orders.get", "127.0.0.1:9", "reports-2"
	if err := c.Validate(); err != nil {
		t.Fatalf("the test's configuration: %v", err)
	}
	vars, err = c.Environ()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	got, err := load(t, env)
	if err != nil {
		t.Fatalf("Environ's variables do not load: %v\n%q", err, vars)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("Environ gives\n%q\nwhich loads as\n%+v\nnot\n%+v", vars, *got, *c)
	}

	c.HTTPAddr = ""
	if _, err := c.Environ(); err == nil || !strings.HasPrefix(err.Error(), "BRIDGE_HTTP_ADDR: is empty") {
		t.Errorf("Environ of an empty BRIDGE_HTTP_ADDR: %v", err)
	}
}

// TestCheckDisallowedKnowsEveryVariable: envconfig.CheckDisallowed, checking against envSpec, accepts
// every variable the bridge reads, the _FILE ones included.
func TestCheckDisallowedKnowsEveryVariable(t *testing.T) {
	load(t, nil)
	for _, k := range Variables() {
		t.Setenv(k, "x")
	}
	if err := envconfig.CheckDisallowed(Prefix, new(envSpec)); err != nil {
		t.Error(err)
	}
	if errs := unknownVariables(os.Environ()); errs != nil {
		t.Error(errs)
	}
}

// TestEnvconfigNamesTheFields: envconfig names the same variables as FromEnv, Validate and Usage
// (fields), in the same order, with the same defaults and required tags.
func TestEnvconfigNamesTheFields(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	err := envconfig.Usagef(Prefix, new(Config), &buf,
		"{{range .}}{{usage_key .}}|{{usage_default .}}|{{usage_required .}}\n{{end}}")
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, f := range fields {
		req := ""
		if f.required {
			req = "true"
		}
		fmt.Fprintf(&want, "%s|%s|%s\n", f.key, f.def, req)
	}
	if got := buf.String(); got != want.String() {
		t.Errorf("envconfig reads\n%s\nLoad's fields are\n%s", got, want.String())
	}
}

// TestDecoders: the types of their own implement envconfig.Decoder and keep their parse errors.
func TestDecoders(t *testing.T) {
	t.Parallel()
	var b ByteSize
	if err := b.Decode("256MiB"); err != nil || b != 256<<20 {
		t.Errorf("ByteSize.Decode(256MiB) = %v, %v", b, err)
	}
	if err := b.Decode("4GB"); err == nil || !strings.HasPrefix(err.Error(), "a size in bytes") || b != 256<<20 {
		t.Errorf("ByteSize.Decode(4GB) = %v, %v; want ParseByteSize's error and the value unchanged", b, err)
	}
	var s Secret
	if err := s.Decode(testPassword); err != nil || s.Reveal() != testPassword {
		t.Errorf("Secret.Decode = %v", err)
	}
	var _, _ envconfig.Decoder = &b, &s
}

// TestNoSecretInErrors puts known secrets everywhere a careless message could echo them.
func TestNoSecretInErrors(t *testing.T) {
	const natsPassword, natsToken, urlToken = "nats-Pa55word", "nats-T0ken-value", "url-T0ken-value"
	secrets := []string{testPassword, natsPassword, natsToken, urlToken}
	tests := []map[string]string{
		{"BRIDGE_PASSWORD_FILE": writeFile(t, "pw", testPassword)}, // both set
		{"BRIDGE_UPSTREAM_URL": "http://api.example.com/v1.0", "BRIDGE_CLIENT_ID": ""},
		{"BRIDGE_NATS_PASSWORD": natsPassword, "BRIDGE_NATS_TOKEN": natsToken},
		{"BRIDGE_NATS_PASSWORD": natsPassword, "BRIDGE_NATS_TOKEN_FILE": writeFile(t, "tok", natsToken),
			"BRIDGE_NATS_TOKEN": natsToken},
		{"BRIDGE_NATS_URL": "http://" + urlToken + "@nats.example.com:4222"},
		{"BRIDGE_NATS_URL": "nats://user:" + natsPassword + "@:4222"},
		{"BRIDGE_NATS_URL": "nats://" + urlToken + "@nats.example.com:bad"},
		{"BRIDGE_UPSTREAM_URL": "https://alice:" + testPassword + "@api.example.com/v1.0"},
		{"BRIDGE_UPSTREAM_URL": "ftp://alice:" + testPassword + "@api.example.com/v1.0"},
		{"BRIDGE_TOKEN_URL": "https://alice:" + testPassword + "@auth example.com/"},
	}
	for i, extra := range tests {
		env := minimalEnv(extra)
		_, err := load(t, env)
		if err == nil {
			t.Errorf("case %d: no error", i)
			continue
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("case %d: error contains the secret %q:\n%v", i, s, err)
			}
		}
	}

	// Validate on a hand-built Config.
	c := Default()
	c.Password = testPassword
	c.NATSPassword = natsPassword
	c.NATSToken = natsToken
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate: no error")
	}
	for _, s := range secrets {
		if strings.Contains(err.Error(), s) {
			t.Errorf("Validate error contains the secret %q:\n%v", s, err)
		}
	}
}

func TestValidateHandBuilt(t *testing.T) {
	t.Parallel()
	c := Default()
	c.UpstreamURL = "https://api.example.com/v1.0"
	c.TokenURL = "https://auth.example.com/token"
	c.ClientID, c.Username, c.Password = "id", "user", "pw"
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}

	// The zero Config is reported, not a panic: every required value and every field without a usable
	// zero value.
	err := new(Config).Validate()
	for _, key := range []string{"BRIDGE_UPSTREAM_URL", "BRIDGE_STREAM_PATH", "BRIDGE_NATS_URL", "BRIDGE_SUBJECT_PREFIX",
		"BRIDGE_HTTP_ADDR", "BRIDGE_HTTP_MAX_CONNS", "BRIDGE_LOG_FORMAT", "BRIDGE_REFRESH_MARGIN", "BRIDGE_REPORT_DURABLE", "BRIDGE_SHUTDOWN_TIMEOUT"} {
		if err == nil || !strings.Contains(err.Error(), key+": ") {
			t.Errorf("Validate of the zero Config does not report %s:\n%v", key, err)
		}
	}
}

func TestURLs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		upstream, path, want string
	}{
		{"https://h/v1.0", "/tracking/events", "https://h/v1.0/tracking/events"},
		{"https://h/v1.0/", "/tracking/events", "https://h/v1.0/tracking/events"},
		{"https://h/v1.0//", "//tracking/events", "https://h/v1.0/tracking/events"},
		{"https://h", "/tracking/events/stream", "https://h/tracking/events/stream"},
		{"https://h/v1.0", "/tracking/events/", "https://h/v1.0/tracking/events/"},
	}
	for _, tt := range tests {
		c := &Config{UpstreamURL: tt.upstream, StreamPath: tt.path, ReportPath: tt.path}
		if got := c.StreamURL(); got != tt.want {
			t.Errorf("StreamURL(%q, %q) = %q, want %q", tt.upstream, tt.path, got, tt.want)
		}
		if got := c.ReportURL(); got != tt.want {
			t.Errorf("ReportURL(%q, %q) = %q, want %q", tt.upstream, tt.path, got, tt.want)
		}
	}
}

func TestNATSServers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"nats://127.0.0.1:4222", []string{"nats://127.0.0.1:4222"}},
		{" nats://a:4222 , tls://b:4222,", []string{"nats://a:4222", "tls://b:4222"}},
		{"", nil},
	}
	for _, tt := range tests {
		c := &Config{NATSURL: tt.in}
		if got := c.NATSServers(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("NATSServers(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAPIEndpointList(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"all", APIEndpointNames},
		{"ALL", APIEndpointNames},
		{"tracking.query, orders.get,Orders.Get", []string{"orders.get", "tracking.query"}},
		{"orders.fetch", nil},
	} {
		c := &Config{APIEndpoints: tt.in}
		if got := c.APIEndpointList(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("APIEndpointList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAPIReplyPrefixList(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want []string
	}{
		{"_INBOX.", []string{"_INBOX."}},
		{" _INBOX_alice , _R_.,", []string{"_INBOX_alice.", "_R_."}},
		{"", nil},
	} {
		c := &Config{APIReplyPrefixes: tt.in}
		if got := c.APIReplyPrefixList(); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("APIReplyPrefixList(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSlogLevel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"debug": "DEBUG", "INFO": "INFO", "Warn": "WARN", "error": "ERROR", "": "INFO"} {
		if got := (&Config{LogLevel: in}).SlogLevel().String(); got != want {
			t.Errorf("SlogLevel(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want ByteSize
		ok   bool
	}{
		{"0", 0, true}, {"1048576", 1 << 20, true}, {"512KiB", 512 << 10, true}, {"256MiB", 256 << 20, true},
		{"4GiB", 4 << 30, true}, {"2TiB", 2 << 40, true}, {"-1GiB", -1 << 30, true},
		{"", 0, false}, {"GiB", 0, false}, {"4 GiB", 0, false}, {"4GB", 0, false}, {"4gib", 0, false},
		{"+4GiB", 0, false}, {"1.5GiB", 0, false}, {"0x10", 0, false}, {"8388608TiB", 0, false},
	} {
		got, err := ParseByteSize(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
		if tt.ok {
			if back, err := ParseByteSize(got.String()); err != nil || back != got {
				t.Errorf("%q: String %q reads back as %d, %v", tt.in, got.String(), back, err)
			}
		}
	}
}
