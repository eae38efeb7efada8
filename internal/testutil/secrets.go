package testutil

import (
	"strings"
	"testing"
)

// NoSecrets fails the test for every secret that appears in output, showing where, and when output holds
// an Authorization header's "Bearer " (a token printed with it).
func NoSecrets(tb testing.TB, output string, secrets ...string) {
	tb.Helper()
	for _, s := range secrets {
		if i := strings.Index(output, s); s != "" && i >= 0 {
			tb.Errorf("secret %.12s… appears in the output: …%s…", s, output[max(0, i-200):min(len(output), i+len(s)+50)])
		}
	}
	if strings.Contains(output, "Bearer ") {
		tb.Error(`"Bearer " appears in the output`)
	}
}
