package config

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"strings"
	"testing"

	"github.com/nats-io/nkeys"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// testFiles are well-formed files of every kind a variable names: a CA bundle, a certificate and its
// key, an NKey seed and a NATS credentials file.
type testFiles struct{ ca, cert, key, seed, creds string }

func newTestFiles(t *testing.T) testFiles {
	t.Helper()
	cert, key := testutil.WriteKeyPair(t, t.TempDir(), "test", x509.Certificate{Subject: pkix.Name{CommonName: "test"},
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature})
	user, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := user.Seed()
	if err != nil {
		t.Fatal(err)
	}
	// A credentials file as nsc writes it; the JWT is only parsed out here, not verified.
	creds := "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln\n------END NATS USER JWT------\n\n" +
		"-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n"
	return testFiles{
		ca:    cert, // self-signed: its own authority
		cert:  cert,
		key:   key,
		seed:  writeFile(t, "user.nk", string(seed)+"\n"),
		creds: writeFile(t, "user.creds", creds),
	}
}

// TestLoadFileContents: a file that exists but does not hold what its variable says is a configuration
// problem (bridge run would stop on it at start-up), named by the variable, without quoting the file.
func TestLoadFileContents(t *testing.T) {
	f := newTestFiles(t)
	junk := writeFile(t, "junk", "not what it should be\n")
	tests := []struct {
		name     string
		env      map[string]string
		wantVars []string
		wantIn   string
	}{
		{"upstream CA not PEM", map[string]string{"BRIDGE_UPSTREAM_CA_FILE": junk},
			[]string{"BRIDGE_UPSTREAM_CA_FILE"}, "no PEM certificate found"},
		{"NATS CA not PEM", map[string]string{"BRIDGE_NATS_CA_FILE": junk},
			[]string{"BRIDGE_NATS_CA_FILE"}, "no PEM certificate found"},
		{"NATS seed not a seed", map[string]string{"BRIDGE_NATS_NKEY_SEED_FILE": junk},
			[]string{"BRIDGE_NATS_NKEY_SEED_FILE"}, "no NKey seed found"},
		{"NATS creds without a JWT", map[string]string{"BRIDGE_NATS_CREDS_FILE": f.seed},
			[]string{"BRIDGE_NATS_CREDS_FILE"}, "no user JWT found"},
		{"NATS cert with another file as key", map[string]string{"BRIDGE_NATS_CERT_FILE": f.cert, "BRIDGE_NATS_KEY_FILE": junk},
			[]string{"BRIDGE_NATS_CERT_FILE, BRIDGE_NATS_KEY_FILE"}, "not a certificate and its key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, minimalEnv(tt.env))
			checkErr(t, err, tt.wantVars, tt.wantIn, nil)
			if err != nil && strings.Contains(err.Error(), "not what it should be") {
				t.Errorf("the error quotes the file: %v", err)
			}
		})
	}
}
