package config_test

// Tests of the replicas' deployment files: docker-compose.yml's ha profile and deploy/nats/nats-cluster.conf.
// The compose file is checked as TestCompose checks the rest of it; the cluster configuration is started,
// three real nats-servers over loopback, until JetStream reports a cluster of three.

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// deployClusterLeaseTTL is the least BRIDGE_LEASE_TTL a deployment on a NATS cluster should use: an
// election of the lease bucket's raft group can take seconds, and a default lease tolerates a pause of
// 5.5-8 s only (docs/replicas.md).
const deployClusterLeaseTTL = 15 * time.Second

// deployMaxReplicas is the most replicas JetStream gives a stream.
const deployMaxReplicas = 5

// deployCheckReplicaVars checks the replicas' variables in env (as the bridge would see them). On a NATS
// cluster of nodes servers (0: not known here) streams and the lease bucket get one replica per server;
// with more than one replica the NATS side is a cluster, and the lease TTL must be long enough for a
// raft election. A TTL is whole seconds. where names the file in messages.
func deployCheckReplicaVars(t *testing.T, where string, env map[string]string, nodes int) {
	t.Helper()
	replicas, err := strconv.Atoi(env["BRIDGE_STREAM_REPLICAS"])
	switch {
	case err != nil:
		t.Errorf("%s: BRIDGE_STREAM_REPLICAS=%q is not a number", where, env["BRIDGE_STREAM_REPLICAS"])
	case nodes > 0 && replicas != nodes:
		t.Errorf("%s: BRIDGE_STREAM_REPLICAS=%d, want %d (one replica per NATS server)", where, replicas, nodes)
	case replicas < 1 || replicas > deployMaxReplicas:
		t.Errorf("%s: BRIDGE_STREAM_REPLICAS=%d, want 1 to %d", where, replicas, deployMaxReplicas)
	}
	raw, set := env["BRIDGE_LEASE_TTL"]
	ttl, err := time.ParseDuration(raw)
	switch {
	case !set && replicas > 1:
		t.Errorf("%s: BRIDGE_LEASE_TTL is not set; on a NATS cluster it should be at least %v (docs/replicas.md)", where, deployClusterLeaseTTL)
	case !set:
	case err != nil:
		t.Errorf("%s: BRIDGE_LEASE_TTL=%q is not a duration", where, raw)
	case ttl%time.Second != 0:
		t.Errorf("%s: BRIDGE_LEASE_TTL=%v is not whole seconds", where, ttl)
	case replicas > 1 && ttl < deployClusterLeaseTTL:
		t.Errorf("%s: BRIDGE_LEASE_TTL=%v on a NATS cluster; want at least %v (docs/replicas.md)", where, ttl, deployClusterLeaseTTL)
	}
}

// deployNameRef finds the BRIDGE_* names a file mentions (BRIDGE_*_FILE, a pattern, is none).
var deployNameRef = regexp.MustCompile(`\bBRIDGE_[A-Z0-9_]*[A-Z0-9]\b`)

// deployCheckNames reports every BRIDGE_* name that file (relative to the repository) mentions, in
// settings or comments, that the bridge does not read: a misspelt name is silently ignored.
func deployCheckNames(t *testing.T, file string, known map[string]bool) {
	t.Helper()
	for i, line := range strings.Split(deployRead(t, file), "\n") {
		for _, name := range deployNameRef.FindAllString(line, -1) {
			if !known[name] {
				t.Errorf("%s:%d: %s is not a variable of the bridge", file, i+1, name)
			}
		}
	}
}

// deployShutdownGrace is what cmd/bridge allows past BRIDGE_SHUTDOWN_TIMEOUT before it exits anyway
// (its shutdownGrace), read from its source so that a change there is seen here.
func deployShutdownGrace(t *testing.T) time.Duration {
	t.Helper()
	m := regexp.MustCompile(`(?m)^const shutdownGrace = (\d+) \* time\.Second$`).FindStringSubmatch(deployRead(t, "cmd/bridge/main.go"))
	if m == nil {
		t.Fatal("cmd/bridge/main.go: no 'const shutdownGrace = <n> * time.Second'; update deployShutdownGrace")
	}
	n, _ := strconv.Atoi(m[1])
	return time.Duration(n) * time.Second
}

// deployHostPort returns the host side (address and port) of a compose port mapping "ip:host:container".
func deployHostPort(mapping string) string {
	i := strings.LastIndex(mapping, ":")
	return mapping[:i]
}

// deployHA is docker-compose.yml's ha profile: its NATS nodes and bridges, by service name.
type deployHA struct {
	services map[string]any
	nats     []string // services running deploy/nats/nats-cluster.conf
	bridges  []string // services running the bridge's image
}

// deployReadHA parses docker-compose.yml and sorts the ha profile's services into NATS nodes and bridges;
// any other service in the profile is an error.
func deployReadHA(t *testing.T) (doc map[string]any, ha deployHA) {
	t.Helper()
	doc = deployYAML(t, deployRead(t, "docker-compose.yml"))
	ha.services = deployMap(t, doc["services"], "services")
	bridgeImage := deployMap(t, ha.services["bridge"], "services.bridge")["image"]
	natsImage := deployMap(t, ha.services["nats"], "services.nats")["image"]
	for name, v := range ha.services {
		svc := deployMap(t, v, "services."+name)
		p, ok := svc["profiles"]
		if !ok || !slices.Contains(deployStrings(t, p, "services."+name+".profiles"), "ha") {
			continue
		}
		switch svc["image"] {
		case natsImage:
			ha.nats = append(ha.nats, name)
		case bridgeImage:
			ha.bridges = append(ha.bridges, name)
		default:
			t.Errorf("service %s in profile ha runs %v, neither the nats service's image nor the bridge's", name, svc["image"])
		}
	}
	slices.Sort(ha.nats)
	slices.Sort(ha.bridges)
	return doc, ha
}

// TestComposeHA: the ha profile is three NATS nodes, each with its own data volume and a configuration
// that makes them one JetStream cluster, and at least two bridges that list every node, create replicated
// streams, agree with the single-server bridge on everything else, and can run beside it.
func TestComposeHA(t *testing.T) {
	doc, ha := deployReadHA(t)
	if len(ha.nats) != 3 {
		t.Fatalf("profile ha has NATS services %q, want 3", ha.nats)
	}
	if len(ha.bridges) < 2 {
		t.Fatalf("profile ha has bridges %q, want at least 2", ha.bridges)
	}

	// The default services are as before: nats and bridge without a profile, sim in demo alone
	// (TestCompose checks the rest of them).
	for _, name := range []string{"nats", "bridge"} {
		if _, ok := deployMap(t, ha.services[name], "services."+name)["profiles"]; ok {
			t.Errorf("service %s has a profile; it must run without one", name)
		}
	}

	// The NATS nodes: the cluster configuration, a data volume each at its store_dir, a name each.
	volumes := deployMap(t, doc["volumes"], "volumes")
	const clusterConf = "./deploy/nats/nats-cluster.conf"
	dataVolumes := map[string]string{}
	serverNames := map[string]string{}
	var nodeOpts *server.Options
	for _, name := range ha.nats {
		svc := deployMap(t, ha.services[name], "services."+name)
		cmd := deployStrings(t, svc["command"], "services."+name+".command")
		if len(cmd) != 2 || cmd[0] != "--config" {
			t.Fatalf("%s: command %q, want [--config <path>]", name, cmd)
		}
		env := deployMap(t, svc["environment"], "services."+name+".environment")
		serverName, _ := env["NATS_SERVER_NAME"].(string)
		if serverName == "" {
			t.Fatalf("%s: no NATS_SERVER_NAME, which deploy/nats/nats-cluster.conf reads", name)
		}
		if other, dup := serverNames[serverName]; dup {
			t.Errorf("%s and %s are both server %s", other, name, serverName)
		}
		serverNames[serverName] = name
		deployNATSPasswords(t, svc, "services."+name)
		opts := deployClusterOpts(t, serverName)
		nodeOpts = opts
		var conf, data string
		for _, v := range deployStrings(t, svc["volumes"], "services."+name+".volumes") {
			parts := strings.Split(v, ":")
			switch {
			case strings.HasPrefix(v, "./"):
				if parts[1] == cmd[1] {
					conf = parts[0]
					if len(parts) != 3 || parts[2] != "ro" {
						t.Errorf("%s: mount %q read-only (:ro)", name, v)
					}
				}
			case len(parts) == 2 && parts[1] == opts.StoreDir:
				data = parts[0]
			}
		}
		if conf != clusterConf {
			t.Errorf("%s: %s is not mounted from %s", name, cmd[1], clusterConf)
		}
		if data == "" {
			t.Errorf("%s: no named volume at the store_dir %s", name, opts.StoreDir)
		} else if other, dup := dataVolumes[data]; dup {
			t.Errorf("%s and %s share the data volume %s", other, name, data)
		} else {
			dataVolumes[data] = name
			if _, ok := volumes[data]; !ok {
				t.Errorf("%s: volume %s is not declared", name, data)
			}
		}
		if data == "nats-data" {
			t.Errorf("%s uses the single server's volume nats-data", name)
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
		t.Errorf("deploy/nats/nats-cluster.conf routes to %q, the ha NATS services are %q", routeHosts, ha.nats)
	}

	// The bridges.
	known := deployKnown(t)
	grace := deployShutdownGrace(t)
	single := deployMap(t, ha.services["bridge"], "services.bridge")
	singleEnv := deployMap(t, single["environment"], "services.bridge.environment")
	hostnames := map[string]string{}
	for _, name := range ha.bridges {
		svc := deployMap(t, ha.services[name], "services."+name)
		if p := deployStrings(t, svc["profiles"], "services."+name+".profiles"); !slices.Equal(p, []string{"ha"}) {
			t.Errorf("%s: profiles %q, want [ha]", name, p)
		}
		if !reflect.DeepEqual(svc["build"], single["build"]) {
			t.Errorf("%s: build %v, want the bridge service's %v", name, svc["build"], single["build"])
		}
		if _, ok := svc["entrypoint"]; ok {
			t.Errorf("%s overrides the image's entrypoint", name)
		}
		if h, _ := svc["hostname"].(string); h == "" {
			t.Errorf("%s: no hostname; the lease holder's name would be a container id", name)
		} else if other, dup := hostnames[h]; dup {
			t.Errorf("%s and %s have the host name %s: the lease could not tell them apart", other, name, h)
		} else {
			hostnames[h] = name
		}
		if deps := deployStrings(t, svc["depends_on"], "services."+name+".depends_on"); !slices.Equal(slices.Sorted(slices.Values(deps)), ha.nats) {
			t.Errorf("%s: depends_on %q, want %q", name, deps, ha.nats)
		}

		rawEnv := deployMap(t, svc["environment"], "services."+name+".environment")
		env := map[string]string{}
		for k, v := range rawEnv {
			if !known[k] {
				t.Errorf("%s sets %s, which the bridge does not read", name, k)
			}
			s, ok := v.(string)
			if !ok {
				t.Fatalf("%s: environment %s is not a string", name, k)
			}
			env[k] = deployResolve(t, s)
		}
		// Everything but NATS and the replicas' variables as the single bridge has it: the same upstream
		// (the demo's simulator by default), the same HTTP port and logs.
		for k, v := range singleEnv {
			if k != "BRIDGE_NATS_URL" && rawEnv[k] != v {
				t.Errorf("%s: %s=%v, the bridge service has %v", name, k, rawEnv[k], v)
			}
		}
		deployCheckReplicaVars(t, name, env, len(ha.nats))
		cfg, err := deployLoad(env)
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
		if ports := deployStrings(t, svc["ports"], "services."+name+".ports"); !slices.ContainsFunc(ports, func(p string) bool {
			return strings.HasSuffix(p, ":"+httpPort)
		}) {
			t.Errorf("%s: ports %q do not publish %s", name, ports, httpPort)
		}
		stop, err := time.ParseDuration(fmt.Sprint(svc["stop_grace_period"]))
		if err != nil || stop <= cfg.ShutdownTimeout+grace {
			t.Errorf("%s: stop_grace_period %v; want more than BRIDGE_SHUTDOWN_TIMEOUT (%v) plus %v", name, svc["stop_grace_period"], cfg.ShutdownTimeout, grace)
		}
		for k, want := range map[string]any{"read_only": "true", "cap_drop": []any{"ALL"}, "security_opt": []any{"no-new-privileges:true"}} {
			if !reflect.DeepEqual(svc[k], want) {
				t.Errorf("%s: %s is %v, want %v (as the bridge service)", name, k, svc[k], want)
			}
		}
	}

	// Every service can run at once (docker compose --profile ha --profile demo up starts them all): no
	// host port is published twice, and every published port stays on the loopback interface.
	published := map[string]string{}
	for name, v := range ha.services {
		svc := deployMap(t, v, "services."+name)
		if _, ok := svc["ports"]; !ok {
			continue
		}
		for _, p := range deployStrings(t, svc["ports"], "services."+name+".ports") {
			host := deployHostPort(p)
			if !strings.HasPrefix(host, "127.0.0.1:") {
				t.Errorf("%s publishes %s beyond the loopback interface", name, p)
			}
			if other, dup := published[host]; dup {
				t.Errorf("%s and %s both publish %s", other, name, host)
			}
			published[host] = name
		}
	}

	deployCheckNames(t, "docker-compose.yml", known)

	// The header says how to run it.
	header := deployRead(t, "docker-compose.yml")
	for _, want := range []string{"--profile ha --profile demo up sim " + strings.Join(ha.bridges, " "), "--profile ha up -d " + strings.Join(ha.bridges, " ")} {
		if !strings.Contains(header, want) {
			t.Errorf("docker-compose.yml's header lacks the command %q", want)
		}
	}
}

// deployClusterOpts reads deploy/nats/nats-cluster.conf as node serverName reads it, and checks what every
// node must have: JetStream with sync_interval always, the cluster's name, its name from the
// environment, routes.
func deployClusterOpts(t *testing.T, serverName string) *server.Options {
	t.Helper()
	t.Setenv("NATS_SERVER_NAME", serverName)
	opts, err := server.ProcessConfigFile(filepath.Join("..", "deploy", "nats", "nats-cluster.conf"))
	if err != nil {
		t.Fatalf("deploy/nats/nats-cluster.conf: %v", err)
	}
	if opts.ServerName != serverName {
		t.Errorf("deploy/nats/nats-cluster.conf: server_name %q with NATS_SERVER_NAME=%s", opts.ServerName, serverName)
	}
	if !opts.JetStream || !opts.SyncAlways {
		t.Errorf("deploy/nats/nats-cluster.conf: JetStream %v, sync_interval always %v; want both", opts.JetStream, opts.SyncAlways)
	}
	if opts.Cluster.Name == "" || opts.Cluster.Port == 0 || len(opts.Routes) == 0 {
		t.Errorf("deploy/nats/nats-cluster.conf: cluster name %q, port %d, %d routes; want all three", opts.Cluster.Name, opts.Cluster.Port, len(opts.Routes))
	}
	single, err := server.ProcessConfigFile(filepath.Join("..", "deploy", "nats", "nats-server.conf"))
	if err != nil {
		t.Fatalf("deploy/nats/nats-server.conf: %v", err)
	}
	if opts.MaxPayload != single.MaxPayload || opts.Port != single.Port || opts.HTTPPort != single.HTTPPort {
		t.Errorf("deploy/nats/nats-cluster.conf: max_payload %d, port %d, http port %d; deploy/nats/nats-server.conf has %d, %d, %d",
			opts.MaxPayload, opts.Port, opts.HTTPPort, single.MaxPayload, single.Port, single.HTTPPort)
	}
	return opts
}

// deployFreePort returns a loopback TCP port that was free a moment ago.
func deployFreePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestNATSClusterConfig starts the ha profile's three NATS nodes from deploy/nats/nats-cluster.conf, as
// compose names them, with their addresses moved to loopback ports and their stores to temporary
// directories, and the routes' service names resolved to those ports. The nodes must form one JetStream
// cluster of three with a meta leader, and a stream with the bridges' BRIDGE_STREAM_REPLICAS must be
// placed on all three.
func TestNATSClusterConfig(t *testing.T) {
	_, ha := deployReadHA(t)
	if len(ha.nats) != 3 {
		t.Fatalf("profile ha has NATS services %q, want 3", ha.nats)
	}
	type node struct {
		name            string // the service's NATS_SERVER_NAME
		port, routePort int
		srv             *server.Server
		opts            *server.Options
	}
	nodes := map[string]*node{} // by service name, the routes' host names
	for _, svc := range ha.nats {
		env := deployMap(t, deployMap(t, ha.services[svc], "services."+svc)["environment"], "environment")
		nodes[svc] = &node{name: env["NATS_SERVER_NAME"].(string), port: deployFreePort(t), routePort: deployFreePort(t)}
	}
	for _, svc := range ha.nats {
		n := nodes[svc]
		deployNATSPasswords(t, deployMap(t, ha.services[svc], "services."+svc), "services."+svc)
		opts := deployClusterOpts(t, n.name)
		opts.Host, opts.Port = "127.0.0.1", n.port
		opts.HTTPPort = 0 // no monitoring port: nothing here reads it
		opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", n.routePort
		for i, r := range opts.Routes {
			peer, ok := nodes[r.Hostname()]
			if !ok {
				t.Fatalf("route %s names no ha NATS service", r)
			}
			opts.Routes[i] = &url.URL{Scheme: r.Scheme, Host: fmt.Sprintf("127.0.0.1:%d", peer.routePort)}
		}
		opts.StoreDir = t.TempDir()
		opts.NoLog, opts.NoSigs = true, true
		n.opts = opts
	}
	for _, svc := range ha.nats {
		n := nodes[svc]
		s, err := server.NewServer(n.opts)
		if err != nil {
			t.Fatalf("%s: %v", svc, err)
		}
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("%s: not ready for connections within 10s", svc)
		}
		n.srv = s
	}

	testutil.EventuallyState(t, 30*time.Second, "a JetStream cluster of 3 with a meta leader", func() (bool, string) {
		var state []string
		ok := true
		for _, svc := range ha.nats {
			n := nodes[svc]
			jsz, err := n.srv.Jsz(nil)
			switch {
			case err != nil:
				ok = false
				state = append(state, fmt.Sprintf("%s: %v", svc, err))
			case jsz.Meta == nil:
				ok = false
				state = append(state, svc+": no meta group")
			default:
				if jsz.Meta.Size != 3 || jsz.Meta.Leader == "" || jsz.Meta.Name != n.opts.Cluster.Name || !n.srv.JetStreamIsCurrent() {
					ok = false
				}
				state = append(state, fmt.Sprintf("%s: cluster %q size %d leader %q current %v", svc, jsz.Meta.Name, jsz.Meta.Size, jsz.Meta.Leader, n.srv.JetStreamIsCurrent()))
			}
		}
		return ok, strings.Join(state, "; ")
	})

	// A stream as the bridges create theirs: BRIDGE_STREAM_REPLICAS replicas, one on each node.
	env := deployMap(t, deployMap(t, ha.services[ha.bridges[0]], "services."+ha.bridges[0])["environment"], "environment")
	replicas, err := strconv.Atoi(fmt.Sprint(env["BRIDGE_STREAM_REPLICAS"]))
	if err != nil {
		t.Fatalf("BRIDGE_STREAM_REPLICAS: %v", err)
	}
	var urls []string
	for _, svc := range ha.nats {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nodes[svc].port))
	}
	// As the bridges connect: their user, password and inbox prefix.
	nc, err := nats.Connect(strings.Join(urls, ","), nats.UserInfo(fmt.Sprint(env["BRIDGE_NATS_USER"]),
		deployResolve(t, fmt.Sprint(env["BRIDGE_NATS_PASSWORD"]))), nats.CustomInboxPrefix(fmt.Sprint(env["BRIDGE_NATS_INBOX_PREFIX"])))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := strings.ToUpper(config.Default().SubjectPrefix)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: prefix + "_EVENTS", Subjects: []string{config.Default().SubjectPrefix + ".events.>"},
		Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		t.Fatalf("creating an R%d stream: %v", replicas, err)
	}
	if _, err := js.Publish(ctx, config.Default().SubjectPrefix+".events.GATE_IN", []byte(`{}`)); err != nil {
		t.Fatalf("publishing to the R%d stream: %v", replicas, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The lease bucket as the bridges create it: the same replicas, per-message TTLs.
	ttl := deployClusterLeaseTTL
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: prefix + "_LEASES", History: 1, Replicas: replicas, LimitMarkerTTL: ttl,
	})
	if err != nil {
		t.Fatalf("creating an R%d key-value bucket with TTL markers: %v", replicas, err)
	}
	if _, err := kv.Create(ctx, "events", []byte(`{}`), jetstream.KeyTTL(ttl)); err != nil {
		t.Fatalf("creating a key with a TTL in the R%d bucket: %v", replicas, err)
	}

	placed := []string{info.Cluster.Leader}
	for _, r := range info.Cluster.Replicas {
		placed = append(placed, r.Name)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.name)
	}
	if !slices.Equal(slices.Sorted(slices.Values(placed)), slices.Sorted(slices.Values(names))) {
		t.Errorf("the R%d stream is on %q, want every node %q", replicas, placed, names)
	}
}
