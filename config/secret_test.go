package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestSecretFormat(t *testing.T) {
	t.Parallel()
	s := Secret(testPassword)
	tests := []struct {
		format string
		want   string // "" means: only check that the value does not appear
	}{
		{"%v", "[redacted]"},
		{"%s", "[redacted]"},
		{"%+v", "[redacted]"},
		{"%#v", `"[redacted]"`},
		{"%q", `"[redacted]"`},
		{"%12s|", "  [redacted]|"},
		{"%-12v|", "[redacted]  |"},
		{"%x", ""},
		{"%X", ""},
		{"%d", ""},
	}
	for _, tt := range tests {
		for _, arg := range []any{s, &s} {
			got := fmt.Sprintf(tt.format, arg)
			if _, isPtr := arg.(*Secret); !isPtr && tt.want != "" && got != tt.want {
				t.Errorf("Sprintf(%q, Secret) = %q, want %q", tt.format, got, tt.want)
			}
			if strings.Contains(got, testPassword) || strings.Contains(got, fmt.Sprintf("%x", testPassword)) ||
				strings.Contains(got, fmt.Sprintf("%X", testPassword)) {
				t.Errorf("Sprintf(%q, %T) reveals the secret: %q", tt.format, arg, got)
			}
		}
	}
	if got := s.String(); got != "[redacted]" {
		t.Errorf("String() = %q", got)
	}
	if got := fmt.Sprint(s) + fmt.Sprintln(s) + fmt.Sprint([]Secret{s}) + fmt.Sprint(map[string]Secret{"k": s}); strings.Contains(got, testPassword) {
		t.Errorf("Sprint reveals the secret: %q", got)
	}
	if got := s.Reveal(); got != testPassword {
		t.Errorf("Reveal() = %q, want the value", got)
	}
}

func TestSecretMarshal(t *testing.T) {
	t.Parallel()
	s := Secret(testPassword)
	b, err := json.Marshal(map[string]any{"v": s, "p": &s, "s": []Secret{s}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"p":"[redacted]","s":["[redacted]"],"v":"[redacted]"}`; string(b) != want {
		t.Errorf("json.Marshal = %s, want %s", b, want)
	}
	text, err := s.MarshalText()
	if err != nil || string(text) != "[redacted]" {
		t.Errorf("MarshalText = %q, %v", text, err)
	}
}

// loadedConfig returns a Config with every secret set.
func loadedConfig(t *testing.T) *Config {
	t.Helper()
	c, err := load(t, minimalEnv(map[string]string{
		"BRIDGE_NATS_URL":      "nats://bridge:" + testPassword + "@127.0.0.1:4222",
		"BRIDGE_NATS_USER":     "bridge",
		"BRIDGE_NATS_PASSWORD": testPassword,
	}))
	if err != nil {
		t.Fatal(err)
	}
	c.NATSToken = testPassword // not valid together with a user, but Load is done: only printing is tested
	return c
}

func TestConfigNeverRevealsSecrets(t *testing.T) {
	c := loadedConfig(t)
	check := func(what, out string) {
		t.Helper()
		if strings.Contains(out, testPassword) {
			t.Errorf("%s reveals a secret:\n%s", what, out)
		}
		if !strings.Contains(out, "[redacted]") {
			t.Errorf("%s shows no [redacted]:\n%s", what, out)
		}
	}
	// Secrets in fields are redacted by their type, wherever they are; the password in BRIDGE_NATS_URL is
	// only hidden by Config.LogValue, so it is blanked out for the other renderings.
	plain := *c
	plain.NATSURL = "nats://127.0.0.1:4222"
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		check("Sprintf("+format+", *Config)", fmt.Sprintf(format, &plain))
		check("Sprintf("+format+", Config)", fmt.Sprintf(format, plain))
	}
	for _, v := range []any{&plain, plain} {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("json.Marshal(%T)", v), string(b))
	}

	for _, h := range []struct {
		name string
		new  func(*bytes.Buffer) slog.Handler
	}{
		{"JSON", func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) }},
		{"text", func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) }},
	} {
		var buf bytes.Buffer
		log := slog.New(h.new(&buf))
		log.Info("secret", "password", c.Password, "ptr", &c.Password)
		log.Info("config", "config", c)               // Config.LogValue
		log.Info("config value", "config", plain)     // no LogValue on the value: reflection, JSON or fmt
		log.Info("config any", slog.Any("config", c)) // the same as the first through Any
		check("slog "+h.name+" handler", buf.String())
	}
}

func TestConfigLogValue(t *testing.T) {
	c := loadedConfig(t)
	c.NATSToken = ""
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("starting", "config", c)
	var rec struct {
		Config map[string]any `json:"config"`
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("%v: %s", err, buf.Bytes())
	}
	want := map[string]any{
		"upstream_url":           "https://api.example.com/v1.0",
		"password":               "[redacted]",
		"nats_password":          "[redacted]",
		"nats_token":             "",
		"nats_url":               "nats://xxxxx@127.0.0.1:4222",
		"refresh_margin":         "30s",
		"report_max_age":         "0s",
		"stream_max_event_bytes": float64(1 << 20),
		"create_streams":         true,
	}
	for k, v := range want {
		if got := rec.Config[k]; got != v {
			t.Errorf("config.%s = %#v, want %#v", k, got, v)
		}
	}
	if len(rec.Config) != len(fields) {
		t.Errorf("config has %d attributes, want one per variable (%d)", len(rec.Config), len(fields))
	}
	if strings.Contains(buf.String(), testPassword) {
		t.Errorf("log reveals a secret: %s", buf.String())
	}
}

func TestRedactURLs(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"nats://a:4222", "nats://a:4222"},
		{"nats://user:pw@a:4222,nats://b:4222", "nats://xxxxx@a:4222,nats://b:4222"},
		{"nats://token@a:4222", "nats://xxxxx@a:4222"},
		{"nats://tok en@a:bad", "[unparsable URL]"},
		{"/tracking/events", "/tracking/events"},
		{"https://auth.example.com/token?client_secret=s3cret&realm=x", "https://auth.example.com/token?client_secret=REDACTED&realm=REDACTED"},
		{"https://auth.example.com/token?s3cret", "https://auth.example.com/token?REDACTED"},
		{"https://u:pw@auth.example.com/token#s3cret", "https://xxxxx@auth.example.com/token#REDACTED"},
		{"https://auth.example.com/t?%zz=s3cret%", "https://auth.example.com/t?%zz=REDACTED"},
	}
	for _, tt := range tests {
		if got := redactURLs(tt.in); got != tt.want {
			t.Errorf("redactURLs(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
