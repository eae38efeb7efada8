package deploy_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/daemon"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
)

// TestNATSClusterConfig starts the ha profile's three NATS nodes from deploy/nats/nats-cluster.conf, as
// compose names them, with their addresses moved to loopback ports and their stores to temporary
// directories, and the routes' service names resolved to those ports. The nodes must form one JetStream
// cluster of three with a meta leader; a bridge configured as compose's bridge-1 (against the simulator)
// must create its stream and lease bucket with BRIDGE_STREAM_REPLICAS replicas placed on all three and
// publish events, and the example report producer and API reader, each in its own account, must reach it.
func TestNATSClusterConfig(t *testing.T) {
	ha := loadHA(t)
	type node struct {
		name            string // the service's NATS_SERVER_NAME
		port, routePort int
		srv             *server.Server
		opts            *server.Options
	}
	nodes := map[string]*node{} // by service name, the routes' host names
	for _, svc := range ha.nats {
		env := environment(t, service(t, ha.project, svc))
		nodes[svc] = &node{name: env["NATS_SERVER_NAME"], port: testutil.FreePort(t), routePort: testutil.FreePort(t)}
	}
	for _, svc := range ha.nats {
		n := nodes[svc]
		opts := clusterOpts(t, n.name, environment(t, service(t, ha.project, svc)), "services."+svc)
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

	// A bridge as compose runs bridge-1 (its user, password, inbox prefix, replicas and lease TTL), with
	// the simulator as its upstream: it creates its streams and lease bucket with BRIDGE_STREAM_REPLICAS
	// replicas, one on each node, leads and publishes events; a report producer and an API reader, each
	// in its account, reach it through their imports.
	env := environment(t, service(t, ha.project, ha.bridges[0]))
	replicas, err := strconv.Atoi(env["BRIDGE_STREAM_REPLICAS"])
	if err != nil {
		t.Fatalf("BRIDGE_STREAM_REPLICAS: %v", err)
	}
	var urls []string
	for _, svc := range ha.nats {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nodes[svc].port))
	}
	up := simtest.Start(t, false, sim.Options{EventRate: 50})
	// The upstream is the simulator, the servers are on loopback, the HTTP port is any free one.
	simEnv := up.Env(strings.Join(urls, ","), nil)
	for _, k := range []string{"BRIDGE_UPSTREAM_URL", "BRIDGE_TOKEN_URL", "BRIDGE_CLIENT_ID", "BRIDGE_USERNAME",
		"BRIDGE_PASSWORD", "BRIDGE_INSECURE_HTTP", "BRIDGE_NATS_URL", "BRIDGE_HTTP_ADDR", "BRIDGE_SHUTDOWN_TIMEOUT"} {
		env[k] = simEnv[k]
	}
	cfg, err := loadConfig(t, env)
	if err != nil {
		t.Fatalf("bridge-1's configuration: %v", err)
	}
	var logs testutil.Buffer
	d, err := daemon.New(cfg, logging.New(&logs, "json", slog.LevelInfo), daemon.BuildInfo{})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- d.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("the bridge's Run: %v", err)
		}
		if t.Failed() {
			t.Logf("bridge logs:\n%s", logs.String())
		}
	})

	nc, err := nats.Connect(strings.Join(urls, ","), nats.UserInfo(env["BRIDGE_NATS_USER"], env["BRIDGE_NATS_PASSWORD"]),
		nats.CustomInboxPrefix(env["BRIDGE_NATS_INBOX_PREFIX"]))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := config.Default().SubjectPrefix
	events := strings.ToUpper(prefix) + "_EVENTS"
	testutil.EventuallyState(t, 30*time.Second, "events stored by the bridge", func() (bool, string) {
		sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
		defer scancel()
		st, err := js.Stream(sctx, events)
		if err != nil {
			return false, err.Error()
		}
		n := st.CachedInfo().State.Msgs
		return n > 10, fmt.Sprint(n)
	})
	var names []string
	for _, n := range nodes {
		names = append(names, n.name)
	}
	for _, stream := range []string{events, "KV_" + strings.ToUpper(prefix) + "_LEASES"} {
		st, err := js.Stream(ctx, stream)
		if err != nil {
			t.Fatalf("%s: %v", stream, err)
		}
		info := st.CachedInfo()
		placed := []string{info.Cluster.Leader}
		for _, r := range info.Cluster.Replicas {
			placed = append(placed, r.Name)
		}
		if info.Config.Replicas != replicas || !slices.Equal(slices.Sorted(slices.Values(placed)), slices.Sorted(slices.Values(names))) {
			t.Errorf("%s: R%d on %q, want R%d on every node %q", stream, info.Config.Replicas, placed, replicas, names)
		}
	}

	nats1 := environment(t, service(t, ha.project, ha.nats[0]))
	client := func(user, passwordVar string) *nats.Conn {
		c, err := nats.Connect(strings.Join(urls, ","), nats.UserInfo(user, nats1[passwordVar]))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		t.Cleanup(c.Close)
		return c
	}
	pjs, _ := jetstream.New(client("report-producer", "NATS_PRODUCER_PASSWORD"))
	order := up.Sim().TrackedOrders("demo")[0]
	report := fmt.Appendf(nil, `{"order":{"orderId":%q,"positionId":%q},"transport":{"identifier":"truck-7"},`+
		`"event":{"timestamp":"2026-05-01T12:00:00Z","type":"GATE_IN","observation":{"observedMeansOfTransport":`+
		`{"modeOfTransport":"TRUCK","truck":{"countryCode":"DE","licensePlate":"HH-CL 1"}},"observedLoadingUnit":`+
		`{"loadingUnit":{"containerClass":"CONTAINER","number":"MSCU1234565"},"loadingState":"FULL"}}},`+
		`"reporter":{"id":"op-1","name":"Test Operator"}}`, order.OrderID, order.PositionID)
	if _, err := pjs.Publish(ctx, prefix+".reports", report, jetstream.WithMsgID("cluster-report-1")); err != nil {
		t.Fatalf("the report producer publishing a report: %v", err)
	}
	testutil.EventuallyState(t, 30*time.Second, "the report delivered upstream", func() (bool, string) {
		n := len(up.Sim().Reports("demo"))
		return n == 1, fmt.Sprint(n)
	})
	reader := client("api-reader", "NATS_API_READER_PASSWORD")
	testutil.EventuallyState(t, 10*time.Second, "the API reader answered", func() (bool, string) {
		m, err := reader.Request(prefix+".api.orders.list", nil, 2*time.Second)
		return err == nil && m.Header.Get("Nats-Service-Error-Code") == "", fmt.Sprint(m, err)
	})
	// The units endpoints, which the bridge answers from the replicated streams with its own permissions:
	// the report's unit's events (the report came back as an event on its unit's subject), and its
	// latest event (404 or 503 while the view has none).
	testutil.EventuallyState(t, 30*time.Second, "the reported event among its unit's events", func() (bool, string) {
		m, err := reader.Request(prefix+".api.units.events", []byte(`{"unit":"MSCU1234565"}`), 5*time.Second)
		if err != nil || m.Header.Get("Nats-Service-Error-Code") != "" {
			return false, fmt.Sprint(m, err)
		}
		return strings.HasPrefix(string(m.Data), `{"unit":"MSCU1234565","events":[`) && strings.Contains(string(m.Data), "HH-CL 1"), string(m.Data)
	})
	m, err := reader.Request(prefix+".api.units.get", []byte(`{"unit":"MSCU1234565"}`), 5*time.Second)
	if err != nil {
		t.Errorf("the API reader, units.get: %v", err)
	} else if code := m.Header.Get("Nats-Service-Error-Code"); code != "" && code != "404" && code != "503" {
		t.Errorf("the API reader, units.get: %v %q", m.Header, m.Data)
	}
}
