package deploy_test

// Tests of docker-compose.yml, loaded by compose-go (the Compose Specification's reference loader, the
// one docker compose uses), and of the NATS configurations it mounts, read by nats-server's own parser.

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/template"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

const (
	composeFile = "docker-compose.yml"
	natsConf    = "deploy/nats/nats-server.conf"  // the single server's configuration
	clusterConf = "deploy/nats/nats-cluster.conf" // each node's of the ha profile's cluster
)

// composeDetails names docker-compose.yml, with the repository as the project directory and nothing set
// in the environment, as for the demo: every ${VAR:-default} takes its default.
func composeDetails(t *testing.T) types.ConfigDetails {
	return types.ConfigDetails{
		WorkingDir:  repoAbs(t, "."),
		ConfigFiles: []types.ConfigFile{{Filename: repoAbs(t, composeFile)}},
		Environment: types.Mapping{},
	}
}

// loadCompose loads docker-compose.yml as docker compose does (schema validation, interpolation,
// normalisation, consistency checks), with every profile enabled. Paths come out absolute. With raw,
// the ${...} references are left as written.
func loadCompose(t *testing.T, raw bool) *types.Project {
	t.Helper()
	p, err := loader.LoadWithContext(context.Background(), composeDetails(t), loader.WithProfiles([]string{"*"}),
		func(o *loader.Options) { o.SkipInterpolation = raw })
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	return p
}

// service returns the service named name.
func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("%s has no service %s", composeFile, name)
	}
	return s
}

// environment returns a service's environment; a variable without a value (taken from the shell) fails
// the test.
func environment(t *testing.T, s types.ServiceConfig) map[string]string {
	t.Helper()
	env := map[string]string{}
	for k, v := range s.Environment {
		if v == nil {
			t.Fatalf("service %s: environment %s has no value", s.Name, k)
		}
		env[k] = *v
	}
	return env
}

// publishes reports whether s publishes container port port.
func publishes(s types.ServiceConfig, port string) bool {
	return slices.ContainsFunc(s.Ports, func(p types.ServicePortConfig) bool { return fmt.Sprint(p.Target) == port })
}

// checkCommand checks that a service running the bridge's image keeps its entrypoint (the binary) and,
// if it gives a command, gives run.
func checkCommand(t *testing.T, s types.ServiceConfig) {
	t.Helper()
	if len(s.Entrypoint) > 0 {
		t.Errorf("service %s overrides the image's entrypoint with %q", s.Name, s.Entrypoint)
	}
	if len(s.Command) > 0 && s.Command[0] != "run" {
		t.Errorf("service %s: command %q; the daemon is run", s.Name, s.Command)
	}
}

// checkHardened checks what every service of ours has: a read-only root, no capabilities, no privilege
// escalation.
func checkHardened(t *testing.T, s types.ServiceConfig) {
	t.Helper()
	if !s.ReadOnly || !slices.Equal(s.CapDrop, []string{"ALL"}) || !slices.Equal(s.SecurityOpt, []string{"no-new-privileges:true"}) {
		t.Errorf("service %s: read_only %v, cap_drop %q, security_opt %q; want true, [ALL], [no-new-privileges:true]",
			s.Name, s.ReadOnly, s.CapDrop, s.SecurityOpt)
	}
}

// includes are the files a NATS configuration includes, relative to it.
var includes = regexp.MustCompile(`(?m)^include\s+(\S+)`)

// checkNATSService checks NATS service s, which must run conf (relative to the repository): its command
// names the configuration, which is mounted read-only from conf with every file it includes beside it,
// and a named volume holds storeDir. It returns that volume's name.
func checkNATSService(t *testing.T, s types.ServiceConfig, conf, storeDir string) (dataVolume string) {
	t.Helper()
	if len(s.Command) != 2 || s.Command[0] != "--config" {
		t.Fatalf("service %s: command %q, want [--config <path>]", s.Name, s.Command)
	}
	mounts := map[string]string{conf: s.Command[1]} // repository file -> where the server reads it
	for _, m := range includes.FindAllStringSubmatch(readRepo(t, conf), -1) {
		mounts[path.Join(path.Dir(conf), m[1])] = path.Join(path.Dir(s.Command[1]), m[1])
	}
	for file, target := range mounts {
		i := slices.IndexFunc(s.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == target })
		if i < 0 {
			t.Errorf("service %s: nothing is mounted at %s (%s)", s.Name, target, file)
			continue
		}
		v := s.Volumes[i]
		if v.Type != types.VolumeTypeBind || v.Source != repoAbs(t, file) {
			t.Errorf("service %s: %s is mounted from %s %s, want %s", s.Name, target, v.Type, v.Source, file)
		}
		if !v.ReadOnly {
			t.Errorf("service %s: mount %s read-only (:ro)", s.Name, target)
		}
	}
	for _, v := range s.Volumes {
		switch {
		case v.Type == types.VolumeTypeBind:
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("service %s: volume source: %v", s.Name, err)
			}
		case v.Type == types.VolumeTypeVolume && v.Target == storeDir:
			dataVolume = v.Source
		}
	}
	if dataVolume == "" {
		t.Errorf("service %s: no named volume at the store_dir %s", s.Name, storeDir)
	}
	return dataVolume
}

// natsOpts reads a NATS configuration (relative to the repository) with nats-server's parser, as the
// server does at start-up, and checks what every server must have: JetStream with sync_interval always.
// The variables it reads must be set (setNATSPasswords).
func natsOpts(t *testing.T, conf string) *server.Options {
	t.Helper()
	opts, err := server.ProcessConfigFile(repoPath(conf))
	if err != nil {
		t.Fatalf("%s: %v", conf, err)
	}
	if !opts.JetStream || !opts.SyncAlways {
		t.Errorf("%s: JetStream %v, sync_interval always %v; want both", conf, opts.JetStream, opts.SyncAlways)
	}
	return opts
}

// TestComposeVariables: every ${...} reference in docker-compose.yml has a default, so that the demo
// runs with nothing set.
func TestComposeVariables(t *testing.T) {
	model, err := loader.LoadModelWithContext(context.Background(), composeDetails(t), func(o *loader.Options) {
		o.SkipInterpolation = true
	})
	if err != nil {
		t.Fatalf("%s: %v", composeFile, err)
	}
	refs := 0
	walkStrings(model, "", func(where, s string) {
		// One string at a time: ExtractVariables merges the occurrences of a variable.
		for name, v := range template.ExtractVariables(map[string]any{where: s}, nil) {
			refs++
			if v.DefaultValue == "" {
				t.Errorf("%s: %s: ${%s} has no default: the demo would need it set", composeFile, where, name)
			}
		}
	})
	if refs == 0 {
		t.Fatalf("%s: no ${...} reference found", composeFile)
	}
}

// walkStrings calls f with every string of a compose model and where it is.
func walkStrings(v any, where string, f func(where, s string)) {
	switch v := v.(type) {
	case string:
		f(where, v)
	case map[string]any:
		for k, e := range v {
			walkStrings(e, strings.TrimPrefix(where+"."+k, "."), f)
		}
	case []any:
		for i, e := range v {
			walkStrings(e, fmt.Sprintf("%s[%d]", where, i), f)
		}
	}
}

// TestCompose: docker-compose.yml runs NATS with deploy/nats's server configuration, the bridge with
// variables it knows and a configuration that loads, and the simulator in the demo profile from the
// Dockerfile's sim target, with the names, ports and paths agreeing with each other and with the
// Dockerfile.
func TestCompose(t *testing.T) {
	p := loadCompose(t, false)
	nats, bridge, sim := service(t, p, "nats"), service(t, p, "bridge"), service(t, p, "sim")
	d := parseDockerfile(t)

	// The bridge: the image's entrypoint and command, variables the configuration knows, a
	// configuration that loads.
	checkCommand(t, bridge)
	checkHardened(t, bridge)
	if len(bridge.Profiles) > 0 {
		t.Error("the bridge service must run without a profile")
	}
	if bridge.Build == nil {
		t.Fatal("the bridge service has no build section")
	}
	if bridge.Build.Context != repoAbs(t, ".") || bridge.Build.Target != "" {
		t.Errorf("bridge build context %s target %q, want the repository and the default target", bridge.Build.Context, bridge.Build.Target)
	}
	for arg := range bridge.Build.Args {
		if !slices.Contains(d.args(), arg) {
			t.Errorf("build arg %s is not an ARG of the Dockerfile", arg)
		}
	}
	known, _ := bridgeVars(t)
	env := environment(t, bridge)
	for k := range env {
		if !known[k] && !slices.Contains(config.TracingVariables(), k) {
			t.Errorf("the bridge service sets %s, which the bridge does not read", k)
		}
	}
	cfg, err := loadConfig(t, env)
	if err != nil {
		t.Fatalf("the bridge service's environment does not load:\n%v", err)
	}
	testutil.Env(t, "OTEL_", env)
	if tr, err := config.TracingFromEnv(); err != nil || tr.Enabled {
		t.Errorf("the bridge service's tracing: %+v, %v; want it valid and off by default", tr, err)
	}

	// Its ports: the HTTP endpoint, as exposed by the image.
	_, httpPort, _ := net.SplitHostPort(cfg.HTTPAddr)
	if !slices.Contains(d.final().expose, httpPort) {
		t.Errorf("BRIDGE_HTTP_ADDR port %s is not EXPOSEd", httpPort)
	}
	if !publishes(bridge, httpPort) {
		t.Errorf("bridge ports %v do not publish %s", bridge.Ports, httpPort)
	}

	// NATS: the service the bridge connects to, configured by deploy/nats/nats-server.conf.
	natsURL, _ := url.Parse(cfg.NATSServers()[0])
	if natsURL.Hostname() != "nats" {
		t.Errorf("BRIDGE_NATS_URL host %q is not the nats service", natsURL.Hostname())
	}
	setNATSPasswords(t, environment(t, nats), "services.nats")
	opts := natsOpts(t, natsConf)
	if vol := checkNATSService(t, nats, natsConf, opts.StoreDir); vol != "nats-data" {
		t.Errorf("the nats service's data volume is %q, want nats-data", vol)
	}
	if _, ok := p.Volumes["nats-data"]; !ok {
		t.Error("the nats-data volume is not declared")
	}
	if natsURL.Port() != strconv.Itoa(opts.Port) {
		t.Errorf("BRIDGE_NATS_URL port %s, the server listens on %d", natsURL.Port(), opts.Port)
	}

	// Every image pulled names its registry (images of services with a build section are built here).
	for name, s := range p.Services {
		if s.Build == nil && !qualified(s.Image) {
			t.Errorf("service %s: image %q does not name its registry (docker.io/library/...)", name, s.Image)
		}
	}

	// The simulator: demo profile only, the Dockerfile's sim target (not a second build of the bridge's
	// image), listening where the demo defaults point.
	if !slices.Equal(sim.Profiles, []string{"demo"}) {
		t.Errorf("sim profiles %q, want [demo]", sim.Profiles)
	}
	checkHardened(t, sim)
	if sim.Build == nil || sim.Build.Context != repoAbs(t, ".") {
		t.Fatal("the sim service is not built from the repository")
	}
	if sim.Build.Target != "sim" || d.stage("sim") == nil {
		t.Errorf("the sim service builds target %q; want sim, a stage of the Dockerfile", sim.Build.Target)
	}
	if sim.Image == "" || sim.Image == bridge.Image {
		t.Errorf("the sim service's image %q must be a name of its own (the bridge's is %q)", sim.Image, bridge.Image)
	}
	if len(sim.Entrypoint) > 0 {
		t.Error("the sim service overrides the sim image's entrypoint")
	}
	if len(sim.Command) != 2 || sim.Command[0] != "-addr" {
		t.Fatalf("sim command %q, want [-addr <host:port>]", sim.Command)
	}
	_, simPort, _ := net.SplitHostPort(sim.Command[1])
	for _, u := range []string{cfg.UpstreamURL, cfg.TokenURL} {
		pu, _ := url.Parse(u)
		if pu.Hostname() != "sim" || pu.Port() != simPort {
			t.Errorf("demo default %s does not point at the sim service on port %s", u, simPort)
		}
	}
	if s := d.stage("sim"); s != nil && !slices.Contains(s.expose, simPort) {
		t.Errorf("the sim stage EXPOSEs %q, not the port %s it listens on", s.expose, simPort)
	}
	if !publishes(sim, simPort) {
		t.Errorf("sim ports %v do not publish %s", sim.Ports, simPort)
	}
}

// haProfile is docker-compose.yml's ha profile: its NATS nodes and bridges, by service name.
type haProfile struct {
	project *types.Project
	nats    []string // services running the nats service's image (the cluster's nodes)
	bridges []string // services running the bridge's image
}

// loadHA loads docker-compose.yml and sorts the ha profile's services into NATS nodes and bridges; any
// other service in the profile is an error.
func loadHA(t *testing.T) haProfile {
	t.Helper()
	ha := haProfile{project: loadCompose(t, false)}
	natsImage, bridgeImage := service(t, ha.project, "nats").Image, service(t, ha.project, "bridge").Image
	for name, s := range ha.project.Services {
		if !slices.Contains(s.Profiles, "ha") {
			continue
		}
		switch s.Image {
		case natsImage:
			ha.nats = append(ha.nats, name)
		case bridgeImage:
			ha.bridges = append(ha.bridges, name)
		default:
			t.Errorf("service %s in profile ha runs %s, neither the nats service's image nor the bridge's", name, s.Image)
		}
	}
	slices.Sort(ha.nats)
	slices.Sort(ha.bridges)
	if len(ha.nats) != 3 {
		t.Fatalf("profile ha has NATS services %q, want 3", ha.nats)
	}
	if len(ha.bridges) < 2 {
		t.Fatalf("profile ha has bridges %q, want at least 2", ha.bridges)
	}
	return ha
}

// clusterOpts reads deploy/nats/nats-cluster.conf as node serverName reads it (its passwords set from
// the node's environment env), and checks what every node must have: JetStream with sync_interval
// always, the cluster's name, its name from the environment, routes, and the single server's limits and
// ports.
func clusterOpts(t *testing.T, serverName string, env map[string]string, where string) *server.Options {
	t.Helper()
	setNATSPasswords(t, env, where)
	t.Setenv("NATS_SERVER_NAME", serverName)
	opts := natsOpts(t, clusterConf)
	if opts.ServerName != serverName {
		t.Errorf("%s: server_name %q with NATS_SERVER_NAME=%s", clusterConf, opts.ServerName, serverName)
	}
	if opts.Cluster.Name == "" || opts.Cluster.Port == 0 || len(opts.Routes) == 0 {
		t.Errorf("%s: cluster name %q, port %d, %d routes; want all three", clusterConf, opts.Cluster.Name, opts.Cluster.Port, len(opts.Routes))
	}
	single := natsOpts(t, natsConf)
	if opts.MaxPayload != single.MaxPayload || opts.Port != single.Port || opts.HTTPPort != single.HTTPPort {
		t.Errorf("%s: max_payload %d, port %d, http port %d; %s has %d, %d, %d", clusterConf,
			opts.MaxPayload, opts.Port, opts.HTTPPort, natsConf, single.MaxPayload, single.Port, single.HTTPPort)
	}
	return opts
}

// TestComposeHA: the ha profile is three NATS nodes, each with its own data volume and a configuration
// that makes them one JetStream cluster, and at least two bridges that list every node, create replicated
// streams, agree with the single-server bridge on everything else, and can run beside it.
func TestComposeHA(t *testing.T) {
	ha := loadHA(t)
	p := ha.project
	raw := loadCompose(t, true) // as written, to compare ${...} references rather than their defaults

	// The default services are as before: nats and bridge without a profile (TestCompose checks the
	// rest of them).
	for _, name := range []string{"nats", "bridge"} {
		if s := service(t, p, name); len(s.Profiles) > 0 {
			t.Errorf("service %s has profiles %q; it must run without one", name, s.Profiles)
		}
	}

	// The NATS nodes: the cluster configuration, a data volume each at its store_dir, a name each.
	dataVolumes := map[string]string{}
	serverNames := map[string]string{}
	var nodeOpts *server.Options
	for _, name := range ha.nats {
		s := service(t, p, name)
		env := environment(t, s)
		serverName := env["NATS_SERVER_NAME"]
		if serverName == "" {
			t.Fatalf("%s: no NATS_SERVER_NAME, which %s reads", name, clusterConf)
		}
		if other, dup := serverNames[serverName]; dup {
			t.Errorf("%s and %s are both server %s", other, name, serverName)
		}
		serverNames[serverName] = name
		opts := clusterOpts(t, serverName, env, "services."+name)
		nodeOpts = opts
		data := checkNATSService(t, s, clusterConf, opts.StoreDir)
		switch other, dup := dataVolumes[data]; {
		case data == "":
		case data == "nats-data":
			t.Errorf("%s uses the single server's volume nats-data", name)
		case dup:
			t.Errorf("%s and %s share the data volume %s", other, name, data)
		default:
			dataVolumes[data] = name
			if _, ok := p.Volumes[data]; !ok {
				t.Errorf("%s: volume %s is not declared", name, data)
			}
		}
	}

	// The routes: one per node, to the services' cluster port, so that the nodes find each other by
	// service name.
	var routeHosts []string
	for _, r := range nodeOpts.Routes {
		routeHosts = append(routeHosts, r.Hostname())
		if r.Port() != strconv.Itoa(nodeOpts.Cluster.Port) {
			t.Errorf("route %s: port %s, the nodes listen for routes on %d", r, r.Port(), nodeOpts.Cluster.Port)
		}
	}
	slices.Sort(routeHosts)
	if !slices.Equal(routeHosts, ha.nats) {
		t.Errorf("%s routes to %q, the ha NATS services are %q", clusterConf, routeHosts, ha.nats)
	}

	// The bridges.
	known, _ := bridgeVars(t)
	grace := shutdownGrace(t)
	single := service(t, raw, "bridge")
	hostnames := map[string]string{}
	for _, name := range ha.bridges {
		s, written := service(t, p, name), service(t, raw, name)
		if !slices.Equal(s.Profiles, []string{"ha"}) {
			t.Errorf("%s: profiles %q, want [ha]", name, s.Profiles)
		}
		if !reflect.DeepEqual(written.Build, single.Build) {
			t.Errorf("%s: build %+v, want the bridge service's %+v", name, written.Build, single.Build)
		}
		checkCommand(t, s)
		checkHardened(t, s)
		if h := s.Hostname; h == "" {
			t.Errorf("%s: no hostname; the lease holder's name would be a container id", name)
		} else if other, dup := hostnames[h]; dup {
			t.Errorf("%s and %s have the host name %s: the lease could not tell them apart", other, name, h)
		} else {
			hostnames[h] = name
		}
		if deps := slices.Sorted(maps.Keys(s.DependsOn)); !slices.Equal(deps, ha.nats) {
			t.Errorf("%s: depends_on %q, want %q", name, deps, ha.nats)
		}

		env := environment(t, s)
		for k := range env {
			if !known[k] && !slices.Contains(config.TracingVariables(), k) {
				t.Errorf("%s sets %s, which the bridge does not read", name, k)
			}
		}
		// Everything but NATS and the replicas' variables as the single bridge has it, as written: the
		// same upstream (the demo's simulator by default), the same HTTP port and logs.
		for k, v := range single.Environment {
			if w := written.Environment[k]; k != "BRIDGE_NATS_URL" && !reflect.DeepEqual(w, v) {
				t.Errorf("%s: %s=%v, the bridge service has %v", name, k, deref(w), deref(v))
			}
		}
		checkReplicaVars(t, name, env, len(ha.nats))
		cfg, err := loadConfig(t, env)
		if err != nil {
			t.Fatalf("%s: the environment does not load:\n%v", name, err)
		}
		var urlHosts []string
		for _, s := range cfg.NATSServers() {
			u, err := url.Parse(s)
			if err != nil {
				t.Fatalf("%s: BRIDGE_NATS_URL entry %q: %v", name, s, err)
			}
			urlHosts = append(urlHosts, u.Hostname())
			if u.Port() != strconv.Itoa(nodeOpts.Port) {
				t.Errorf("%s: BRIDGE_NATS_URL entry %s: port %s, the nodes listen on %d", name, s, u.Port(), nodeOpts.Port)
			}
		}
		slices.Sort(urlHosts)
		if !slices.Equal(urlHosts, ha.nats) {
			t.Errorf("%s: BRIDGE_NATS_URL lists %q, want every ha NATS service %q", name, urlHosts, ha.nats)
		}
		_, httpPort, _ := net.SplitHostPort(cfg.HTTPAddr)
		if !publishes(s, httpPort) {
			t.Errorf("%s: ports %v do not publish %s", name, s.Ports, httpPort)
		}
		if s.StopGracePeriod == nil || time.Duration(*s.StopGracePeriod) <= cfg.ShutdownTimeout+grace {
			t.Errorf("%s: stop_grace_period %v; want more than BRIDGE_SHUTDOWN_TIMEOUT (%v) plus %v", name, s.StopGracePeriod, cfg.ShutdownTimeout, grace)
		}
	}

	// Every service can run at once (docker compose --profile ha --profile demo up starts them all): no
	// host port is published twice, and every published port stays on the loopback interface.
	published := map[string]string{}
	for name, s := range p.Services {
		for _, port := range s.Ports {
			host := net.JoinHostPort(port.HostIP, port.Published)
			if port.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes %s beyond the loopback interface", name, host)
			}
			if other, dup := published[host]; dup {
				t.Errorf("%s and %s both publish %s", other, name, host)
			}
			published[host] = name
		}
	}

	checkNames(t, composeFile, known)

	// The header says how to run it.
	header := readRepo(t, composeFile)
	for _, want := range []string{"--profile ha --profile demo up sim " + strings.Join(ha.bridges, " "), "--profile ha up -d " + strings.Join(ha.bridges, " ")} {
		if !strings.Contains(header, want) {
			t.Errorf("%s's header lacks the command %q", composeFile, want)
		}
	}
}

// deref prints a compose environment value, which is nil when it is taken from the shell.
func deref(s *string) string {
	if s == nil {
		return "<unset>"
	}
	return *s
}
