package config

import (
	"fmt"
	"log/slog"
)

// redacted is what every rendering of a Secret shows instead of its value.
const redacted = "[redacted]"

// Secret is a configuration value that must never be printed: a password or a token. fmt (every verb),
// log/slog, encoding/json and encoding.TextMarshaler render it as "[redacted]", alone or in an exported
// field of a struct such as Config; only Reveal, or an explicit string conversion, yields the value.
//
// Two renderings bypass these methods, so keep a Secret out of them: a map key in encoding/json, and an
// unexported struct field printed by fmt.
type Secret string

// Reveal returns the secret's value.
func (s Secret) Reveal() string { return string(s) }

// Decode implements envconfig.Decoder: it takes the value as it is, and never fails, so that no parse
// error can carry a secret.
func (s *Secret) Decode(value string) error {
	*s = Secret(value)
	return nil
}

// String returns "[redacted]".
func (Secret) String() string { return redacted }

// GoString returns "[redacted]" quoted, for %#v.
func (Secret) GoString() string { return fmt.Sprintf("%q", redacted) }

// Format makes every fmt verb, with its flags and width, render "[redacted]" instead of the value.
func (Secret) Format(f fmt.State, verb rune) {
	fmt.Fprintf(f, fmt.FormatString(f, verb), redacted)
}

// LogValue implements slog.LogValuer: a Secret is logged as "[redacted]".
func (Secret) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON implements json.Marshaler: a Secret is encoded as "[redacted]".
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText implements encoding.TextMarshaler: a Secret is encoded as "[redacted]".
func (Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }
