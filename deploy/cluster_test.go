package deploy_test

import (
	"context"
	"fmt"
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
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// TestNATSClusterConfig starts the ha profile's three NATS nodes from deploy/nats/nats-cluster.conf, as
// compose names them, with their addresses moved to loopback ports and their stores to temporary
// directories, and the routes' service names resolved to those ports. The nodes must form one JetStream
// cluster of three with a meta leader, and a stream and a lease bucket with the bridges'
// BRIDGE_STREAM_REPLICAS must be placed on all three, created as a bridge connects (its user, password
// and inbox prefix).
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
		nodes[svc] = &node{name: env["NATS_SERVER_NAME"], port: freePort(t), routePort: freePort(t)}
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

	// A stream as the bridges create theirs: BRIDGE_STREAM_REPLICAS replicas, one on each node.
	env := environment(t, service(t, ha.project, ha.bridges[0]))
	replicas, err := strconv.Atoi(env["BRIDGE_STREAM_REPLICAS"])
	if err != nil {
		t.Fatalf("BRIDGE_STREAM_REPLICAS: %v", err)
	}
	var urls []string
	for _, svc := range ha.nats {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", nodes[svc].port))
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := config.Default().SubjectPrefix
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: strings.ToUpper(prefix) + "_EVENTS", Subjects: []string{prefix + ".events.>"},
		Storage: jetstream.FileStorage, Replicas: replicas,
	})
	if err != nil {
		t.Fatalf("creating an R%d stream: %v", replicas, err)
	}
	if _, err := js.Publish(ctx, prefix+".events.GATE_IN", []byte(`{}`)); err != nil {
		t.Fatalf("publishing to the R%d stream: %v", replicas, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The lease bucket as the bridges create it: the same replicas, per-message TTLs.
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: strings.ToUpper(prefix) + "_LEASES", History: 1, Replicas: replicas, LimitMarkerTTL: clusterLeaseTTL,
	})
	if err != nil {
		t.Fatalf("creating an R%d key-value bucket with TTL markers: %v", replicas, err)
	}
	if _, err := kv.Create(ctx, "events", []byte(`{}`), jetstream.KeyTTL(clusterLeaseTTL)); err != nil {
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
