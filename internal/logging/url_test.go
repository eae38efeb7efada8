package logging

import "testing"

// TestRedactURL: user information, query values and fragments never show; keys, host and path do.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://auth.example.com/token", "https://auth.example.com/token"},
		{"https://auth.example.com/token?client_secret=SEKRIT", "https://auth.example.com/token?client_secret=REDACTED"},
		{"https://u:PW@auth.example.com/token?realm=x&client_secret=SEKRIT&SEKRIT2",
			"https://xxxxx@auth.example.com/token?realm=REDACTED&client_secret=REDACTED&REDACTED"},
		{"https://TOKEN@auth.example.com/", "https://xxxxx@auth.example.com/"},
		{"https://u:***@auth.example.com/t", "https://xxxxx@auth.example.com/t"}, // as net/http's errors have it
		{"https://auth.example.com/t#SEKRIT", "https://auth.example.com/t#REDACTED"},
		{"https://auth.example.com/t?", "https://auth.example.com/t?"},
		{"http://u:PW@host:99999999999/%zz?SEKRIT", "[unparsable URL]"},
		{"_INBOX.", "_INBOX."},
		{"", ""},
	} {
		if got := RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
