package service_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/embedded"
	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// floodChildEnv, set, makes TestFloodChild the flood's other process: the nats-server and the flooding
// clients, so that the heap BenchmarkHostileFlood measures is the service's alone.
const floodChildEnv = "SERVICE_FLOOD_CHILD"

// floodOrder is what the benchmark asks the child to send.
type floodOrder struct {
	Endpoints   []string // each flooded from a connection of its own, all at once
	PerEndpoint int      // requests per endpoint
	Size        int      // body size in bytes: a JSON object of unknown members
	Rate        int      // bytes per second per endpoint; 0 sends as fast as the connection takes them
}

// BenchmarkHostileFlood floods every endpoint at once with large hostile requests (bodies of unknown
// members, with an inbox as reply subject, so the service handles each one) from another process, and
// meanwhile asks orders.list a good question every 100 ms. It reports the service process's heap
// (runtime.MemStats.HeapInuse, sampled every 10 ms: before the flood and its peak), how long the flood
// took to send and until every endpoint answered again, the good requests answered and their latency,
// and whether the server cut the service's connection as a slow consumer. A burst sends as fast as
// NATS takes it (the server then cuts the service's connection, whatever the service does); a paced
// flood sends 10 MB/s per endpoint, which the client can read, so what it holds is up to its pending
// limits. Run it once per case:
//
//	go test -run XXX -bench BenchmarkHostileFlood -benchtime 1x ./internal/service/
//
// docs/performance.md has the figures.
func BenchmarkHostileFlood(b *testing.B) {
	for _, tc := range []struct {
		name       string
		size, rate int
	}{
		{"burst/body=900KB", 900_000, 0},
		{"burst/body=255KiB", 255 << 10, 0}, // just within the default bound: read and checked in full
		{"paced/body=900KB", 900_000, 10_000_000},
		{"paced/body=255KiB", 255 << 10, 10_000_000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				hostileFlood(b, floodOrder{Endpoints: service.EndpointNames(), PerEndpoint: 100, Size: tc.size, Rate: tc.rate})
			}
		})
	}
}

func hostileFlood(b *testing.B, order floodOrder) {
	natsURL, stopChild := startFloodChild(b)
	defer stopChild()

	up := simtest.Start(b, false, sim.Options{})
	client, err := upstream.NewHTTPClient(upstream.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	api := upstream.NewAPIClient(upstream.APIConfig{BaseURL: up.Srv.URL + sim.DefaultBasePath,
		Tokens: newTokens(up.Srv.URL, "demo", "demo"), Client: client})
	validator := service.NewOpenAPIValidator(256 << 10)
	connect := func() *nats.Conn {
		nc, err := nats.Connect(natsURL)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(nc.Close)
		return nc
	}
	// The daemon's defaults: BRIDGE_API_CONCURRENCY, BRIDGE_API_TIMEOUT, BRIDGE_REPORT_MAX_BYTES.
	bridgeNC := connect()
	svc := service.New(bridgeNC, api, service.Config{Prefix: "tracking", Concurrency: 32, Timeout: 30 * time.Second,
		Version: "1.0.0", Validator: validator})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testutil.Eventually(b, 5*time.Second, "service up", func() bool { return svc.Ready() == nil })
	caller := connect()
	if _, err := caller.Request("tracking.api.orders.list", nil, 10*time.Second); err != nil {
		b.Fatal(err) // and the token is had
	}

	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseline := ms.HeapInuse
	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-t.C:
			case <-stopSampling:
				return
			}
		}
	})

	// The good requests, every 100 ms until the flood is over and every endpoint answers again.
	var good struct {
		sync.Mutex
		ok, failed int
		lat        []time.Duration
	}
	stopGood := make(chan struct{})
	var asking sync.WaitGroup
	asking.Go(func() {
		for {
			t0 := time.Now()
			m, err := caller.Request("tracking.api.orders.list", nil, 5*time.Second)
			good.Lock()
			if err == nil && m.Header.Get("Nats-Service-Error-Code") == "" {
				good.ok++
				good.lat = append(good.lat, time.Since(t0))
			} else {
				good.failed++
			}
			good.Unlock()
			select {
			case <-stopGood:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})

	b.ResetTimer()
	begin := time.Now()
	req, _ := json.Marshal(order)
	if _, err := caller.Request("flood.go", req, 10*time.Minute); err != nil {
		b.Fatalf("flood: %v", err)
	}
	sent := time.Since(begin)
	// Every endpoint answers again: a request on each, repeated until answered (a full pending queue
	// drops it), comes after the flood's requests it queued behind.
	var answered sync.WaitGroup
	for _, ep := range order.Endpoints {
		answered.Go(func() {
			for time.Since(begin) < 10*time.Minute {
				if _, err := caller.Request("tracking.api."+ep, []byte(`{"unknown":1}`), 10*time.Second); err == nil {
					return
				}
			}
			b.Errorf("%s did not answer within 10 minutes", ep)
		})
	}
	answered.Wait()
	over := time.Since(begin)
	b.StopTimer()
	close(stopGood)
	asking.Wait()
	close(stopSampling)
	sampling.Wait()

	good.Lock()
	defer good.Unlock()
	slices.Sort(good.lat)
	pct := func(p float64) float64 {
		if len(good.lat) == 0 {
			return 0
		}
		return float64(good.lat[min(len(good.lat)-1, int(p*float64(len(good.lat))))].Microseconds()) / 1000
	}
	const mib = 1 << 20
	b.ReportMetric(float64(baseline)/mib, "heap-before-MiB")
	b.ReportMetric(float64(peak.Load())/mib, "heap-peak-MiB")
	b.ReportMetric(float64(len(order.Endpoints)*order.PerEndpoint*order.Size)/mib, "flood-MiB")
	b.ReportMetric(sent.Seconds(), "flood-send-s")
	b.ReportMetric(over.Seconds(), "until-answering-s")
	b.ReportMetric(float64(good.ok), "good-ok")
	b.ReportMetric(float64(good.failed), "good-failed")
	b.ReportMetric(pct(0.5), "good-p50-ms")
	b.ReportMetric(pct(1), "good-max-ms")
	// Whether the server cut the service's connection: it does when the client reads slower than the
	// flood arrives, past the server's max_pending for the connection.
	stats, err := caller.Request("flood.stats", nil, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	var sc int
	fmt.Sscan(string(stats.Data), &sc)
	b.ReportMetric(float64(sc), "server-slow-consumers")
	b.ReportMetric(float64(bridgeNC.Stats().Reconnects), "service-reconnects")
	b.ReportMetric(0, "ns/op")
}

// startFloodChild starts the test binary again as TestFloodChild and returns its server's URL.
func startFloodChild(b *testing.B) (string, func()) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestFloodChild$")
	cmd.Env = append(os.Environ(), floodChildEnv+"="+b.TempDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if url, ok := strings.CutPrefix(lines.Text(), "NATS_URL="); ok {
			go func() {
				for lines.Scan() { // keep the pipe drained
				}
			}()
			return url, stop
		}
	}
	stop()
	b.Fatal("the flood process did not start its server")
	return "", nil
}

// TestFloodChild is BenchmarkHostileFlood's other process; without floodChildEnv it does nothing. It
// runs a nats-server, prints its URL, and sends a floodOrder when asked on flood.go, answering when all
// of it is sent.
func TestFloodChild(t *testing.T) {
	dir := os.Getenv(floodChildEnv)
	if dir == "" {
		t.Skip("BenchmarkHostileFlood's flooding process")
	}
	ns, err := embedded.Start(embedded.Options{StoreDir: dir, Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	url := ns.ClientURL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = nc.Subscribe("flood.go", func(m *nats.Msg) {
		var o floodOrder
		if err := json.Unmarshal(m.Data, &o); err != nil {
			t.Error(err)
			return
		}
		body := hostileBody(o.Size)
		var wg sync.WaitGroup
		for _, ep := range o.Endpoints {
			wg.Go(func() {
				fc, err := nats.Connect(url)
				if err != nil {
					t.Error(err)
					return
				}
				defer fc.Close()
				begin := time.Now()
				for i := range o.PerEndpoint {
					if err := fc.PublishRequest("tracking.api."+ep, fmt.Sprintf("_INBOX.flood.%d", i), body); err != nil {
						t.Error(err)
						return
					}
					if o.Rate > 0 {
						_ = fc.Flush()
						due := begin.Add(time.Duration(float64(i+1) * float64(len(body)) / float64(o.Rate) * float64(time.Second)))
						time.Sleep(time.Until(due))
					}
				}
				_ = fc.Flush()
			})
		}
		wg.Wait()
		_ = m.Respond([]byte("sent"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nc.Subscribe("flood.stats", func(m *nats.Msg) {
		_ = m.Respond(fmt.Appendf(nil, "%d", ns.NumSlowConsumers()))
	}); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("NATS_URL=%s\n", url)
	select {} // until killed
}

// hostileBody is a JSON object of size bytes of unknown members: every endpoint but the booking
// order's has a problem for each.
func hostileBody(size int) []byte {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; b.Len() < size-16; i++ {
		fmt.Fprintf(&b, `"m%07d":0,`, i)
	}
	b.WriteString(`"id":"x"}`)
	return []byte(b.String())
}
