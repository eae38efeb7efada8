package deploy_test

// What the tests share: the repository's files, the bridge's configuration variables, and the checks
// that several deployment files must pass alike.

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// repoPath returns the path of a file of the repository, given relative to its root with slashes
// ("docker-compose.yml", "deploy/nats/nats-server.conf").
func repoPath(rel string) string {
	return filepath.Join("..", filepath.FromSlash(rel))
}

// repoAbs is repoPath made absolute, as the compose loader resolves paths.
func repoAbs(t *testing.T, rel string) string {
	t.Helper()
	p, err := filepath.Abs(repoPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// readRepo returns the content of a file of the repository.
func readRepo(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(repoPath(rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// bridgeVars returns the variables the bridge reads, config.Variables (BRIDGE_X and BRIDGE_X_FILE for a
// secret), and the secrets among them: the secret variables, their _FILE variants, and the files that
// hold keys. A secret must reach the bridge as a file, never as a value.
func bridgeVars(t *testing.T) (known, secret map[string]bool) {
	t.Helper()
	known = map[string]bool{}
	for _, k := range config.Variables() {
		known[k] = true
	}
	if len(known) < 10 {
		t.Fatalf("config.Variables names %d variables", len(known))
	}
	secret = map[string]bool{"BRIDGE_NATS_CREDS_FILE": true, "BRIDGE_NATS_NKEY_SEED_FILE": true, "BRIDGE_NATS_KEY_FILE": true}
	for k := range known {
		if known[k+"_FILE"] {
			secret[k], secret[k+"_FILE"] = true, true
		}
	}
	for k := range secret {
		if !known[k] {
			t.Fatalf("%s is not a variable of the bridge; update bridgeVars", k)
		}
	}
	return known, secret
}

// loadConfig runs config.FromEnv with exactly the BRIDGE_* variables of env set in the process
// environment, as the bridge would see them: every other BRIDGE_* variable is unset for the test. Tests
// that call it cannot run in parallel (t.Setenv).
func loadConfig(t *testing.T, env map[string]string) (*config.Config, error) {
	t.Helper()
	testutil.Env(t, "BRIDGE_", env)
	return config.FromEnv()
}

// nameRef finds the BRIDGE_* names a file mentions (BRIDGE_*_FILE, a pattern, is none).
var nameRef = regexp.MustCompile(`\bBRIDGE_[A-Z0-9_]*[A-Z0-9]\b`)

// checkNames reports every BRIDGE_* name that file (relative to the repository) mentions, in settings or
// comments, that the bridge does not read: a misspelt name is silently ignored.
func checkNames(t *testing.T, file string, known map[string]bool) {
	t.Helper()
	for i, line := range strings.Split(readRepo(t, file), "\n") {
		for _, name := range nameRef.FindAllString(line, -1) {
			if !known[name] {
				t.Errorf("%s:%d: %s is not a variable of the bridge", file, i+1, name)
			}
		}
	}
}

// shutdownGrace is what cmd/bridge allows past BRIDGE_SHUTDOWN_TIMEOUT before it exits anyway (its
// shutdownGrace), read from its source so that a change there is seen here.
func shutdownGrace(t *testing.T) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`(?m)^const shutdownGrace = (\d+) \* time\.Second$`).FindStringSubmatch(readRepo(t, "cmd/bridge/main.go"))
	if m == nil {
		t.Fatal("cmd/bridge/main.go: no 'const shutdownGrace = <n> * time.Second'; update shutdownGrace")
	}
	n, _ := strconv.Atoi(m[1])
	return time.Duration(n) * time.Second
}

// readyzTimeout is the longest /readyz takes: the daemon's bound on one evaluation of the checks.
func readyzTimeout(t *testing.T) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*timeout = (\d+) \* time\.Second$`).FindStringSubmatch(readRepo(t, "internal/daemon/health.go"))
	if m == nil {
		t.Fatal("internal/daemon/health.go: no 'timeout = <n> * time.Second'; update readyzTimeout")
	}
	n, _ := strconv.Atoi(m[1])
	return time.Duration(n) * time.Second
}

// clusterLeaseTTL is the least BRIDGE_LEASE_TTL a deployment on a NATS cluster should use: an election of
// the lease bucket's raft group can take seconds, and a default lease tolerates a pause of 5.5-8 s only
// (docs/replicas.md).
const clusterLeaseTTL = 15 * time.Second

// maxReplicas is the most replicas JetStream gives a stream.
const maxReplicas = 5

// checkReplicaVars checks the replicas' variables in env (as the bridge would see them). On a NATS cluster
// of nodes servers (0: not known here) streams and the lease bucket get one replica per server; with
// more than one replica the NATS side is a cluster, and the lease TTL must be long enough for a raft
// election. A TTL is whole seconds. where names the file in messages.
func checkReplicaVars(t *testing.T, where string, env map[string]string, nodes int) {
	t.Helper()
	replicas, err := strconv.Atoi(env["BRIDGE_STREAM_REPLICAS"])
	switch {
	case err != nil:
		t.Errorf("%s: BRIDGE_STREAM_REPLICAS=%q is not a number", where, env["BRIDGE_STREAM_REPLICAS"])
	case nodes > 0 && replicas != nodes:
		t.Errorf("%s: BRIDGE_STREAM_REPLICAS=%d, want %d (one replica per NATS server)", where, replicas, nodes)
	case replicas < 1 || replicas > maxReplicas:
		t.Errorf("%s: BRIDGE_STREAM_REPLICAS=%d, want 1 to %d", where, replicas, maxReplicas)
	}
	raw, set := env["BRIDGE_LEASE_TTL"]
	ttl, err := time.ParseDuration(raw)
	switch {
	case !set && replicas > 1:
		t.Errorf("%s: BRIDGE_LEASE_TTL is not set; on a NATS cluster it should be at least %v (docs/replicas.md)", where, clusterLeaseTTL)
	case !set:
	case err != nil:
		t.Errorf("%s: BRIDGE_LEASE_TTL=%q is not a duration", where, raw)
	case ttl%time.Second != 0:
		t.Errorf("%s: BRIDGE_LEASE_TTL=%v is not whole seconds", where, ttl)
	case replicas > 1 && ttl < clusterLeaseTTL:
		t.Errorf("%s: BRIDGE_LEASE_TTL=%v on a NATS cluster; want at least %v (docs/replicas.md)", where, ttl, clusterLeaseTTL)
	}
}

// usersFile is the NATS accounts and users configuration that both server configurations include.
const usersFile = "deploy/nats/nats-accounts.conf"

// setNATSPasswords sets, for this test, the NATS_*_PASSWORD variables that the users file reads, as
// env (a NATS service's environment) gives them; every one the users file references must be there.
// The server reads them from its environment and refuses to start without them.
func setNATSPasswords(t *testing.T, env map[string]string, where string) {
	t.Helper()
	refs := regexp.MustCompile(`\$(NATS_[A-Z_]+_PASSWORD)`).FindAllStringSubmatch(readRepo(t, usersFile), -1)
	if len(refs) == 0 {
		t.Fatalf("%s references no NATS_*_PASSWORD variable", usersFile)
	}
	for _, m := range refs {
		v, ok := env[m[1]]
		if !ok {
			t.Errorf("%s does not set %s, which %s reads", where, m[1], usersFile)
			continue
		}
		t.Setenv(m[1], v)
	}
}
