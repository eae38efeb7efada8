package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// BenchmarkAPI compares one operation (getOrder, read booking order) requested through the service on NATS
// with the same call made directly over HTTP, against the same in-process simulator and in the same
// run, at 1 and 16 concurrent callers, with the simulator answering at once and after 2 ms. Each
// sub-benchmark reports requests/s and the p50 and p99 latency in microseconds. Run it with e.g.
//
//	go test -run XXX -bench BenchmarkAPI -benchtime 5000x ./internal/service/
func BenchmarkAPI(b *testing.B) {
	ns := testutil.StartNATS(b, nil)
	up := simtest.Start(b, false, sim.Options{})
	base := up.Srv.URL + sim.DefaultBasePath
	tokens := newTokens(up.Srv.URL, "demo", "demo")
	tok, err := tokens.Token(context.Background())
	if err != nil {
		b.Fatal(err)
	}

	bridgeHTTP, err := upstream.NewHTTPClient(upstream.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	svc := service.New(ns.Connect(), upstream.NewAPIClient(upstream.APIConfig{BaseURL: base, Tokens: tokens, Client: bridgeHTTP}),
		service.Config{Prefix: "tracking", Concurrency: 32, Timeout: 10 * time.Second, Version: "1.0.0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	b.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(b, 5*time.Second, "service up", func() bool { return svc.Ready() == nil })
	caller := ns.Connect()

	// The order both ways read.
	direct, err := upstream.NewHTTPClient(upstream.ClientOptions{})
	if err != nil {
		b.Fatal(err)
	}
	id := createOrder(b, direct, base, tok)
	getURL := base + "/orders/" + id
	reqBody := []byte(`{"id":"` + id + `"}`)

	ways := []struct {
		name string
		call func() error
	}{
		{"direct", func() error {
			req, err := http.NewRequest(http.MethodGet, getURL, nil)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Accept", "application/json")
			resp, err := direct.Do(req)
			if err != nil {
				return err
			}
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("HTTP %d", resp.StatusCode)
			}
			return err
		}},
		{"bridge", func() error {
			m, err := caller.Request("tracking.api.orders.get", reqBody, 10*time.Second)
			if err == nil && m.Header.Get("Nats-Service-Error-Code") != "" {
				err = fmt.Errorf("%s %s", m.Header.Get("Nats-Service-Error-Code"), m.Header.Get("Nats-Service-Error"))
			}
			return err
		}},
	}
	// Without latency every way is bound by the machine's CPU (simulator, server and callers share it);
	// with 2 ms, a nearby upstream's, the figures show what the bridge's hop adds to a call.
	for _, latency := range []time.Duration{0, 2 * time.Millisecond} {
		up.Sim().SetFaults(sim.Faults{Latency: latency})
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("upstream-latency=%v/callers=%d", latency, callers), func(b *testing.B) {
				compare(b, callers, ways[0].call, ways[1].call)
			})
		}
	}
}

// compare makes b.N calls each way from callers goroutines, in alternating rounds so that a change in
// the machine's load falls on both alike, and reports each way's requests/s, p50 and p99 (µs) and the
// bridge's ratios to the direct calls.
func compare(b *testing.B, callers int, direct, bridge func() error) {
	const rounds = 10
	ways := [2]func() error{direct, bridge}
	var spent [2]time.Duration
	var lat [2][]time.Duration
	b.ResetTimer()
	for r := range rounds {
		n := b.N / rounds
		if r < b.N%rounds {
			n++
		}
		for i := range 2 {
			way := i
			if r%2 == 1 {
				way = 1 - i // alternate which goes first
			}
			d, l := run(b, callers, n, ways[way])
			spent[way] += d
			lat[way] = append(lat[way], l...)
		}
	}
	b.StopTimer()
	rate := func(w int) float64 { return float64(len(lat[w])) / spent[w].Seconds() }
	pct := func(w int, p float64) float64 {
		l := lat[w]
		slices.Sort(l)
		return float64(l[min(len(l)-1, int(p*float64(len(l))))].Microseconds())
	}
	b.ReportMetric(rate(0), "direct-req/s")
	b.ReportMetric(rate(1), "bridge-req/s")
	b.ReportMetric(rate(1)/rate(0), "rate-ratio")
	b.ReportMetric(pct(0, 0.5), "direct-p50-µs")
	b.ReportMetric(pct(1, 0.5), "bridge-p50-µs")
	b.ReportMetric(pct(1, 0.5)/max(1, pct(0, 0.5)), "p50-ratio")
	b.ReportMetric(pct(0, 0.99), "direct-p99-µs")
	b.ReportMetric(pct(1, 0.99), "bridge-p99-µs")
	b.ReportMetric(0, "ns/op") // the time per op mixes both ways: meaningless
}

// run makes n calls from callers goroutines and returns the time taken and each call's latency.
func run(b *testing.B, callers, n int, call func() error) (time.Duration, []time.Duration) {
	var next atomic.Int64
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	begin := time.Now()
	for c := range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				t0 := time.Now()
				if err := call(); err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(begin)
	if e := failed.Load(); e != nil {
		b.Fatal(*e)
	}
	return elapsed, slices.Concat(lat...)
}

// createOrder creates a booking order directly and returns its id.
func createOrder(b *testing.B, c *http.Client, base, tok string) string {
	b.Helper()
	do := func(method, url, body string, v any) {
		req, err := http.NewRequest(method, url, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil || resp.StatusCode >= 300 {
			b.Fatalf("%s %s: %d %v", method, url, resp.StatusCode, err)
		}
	}
	var page struct{ Data []struct{ ID string } }
	do(http.MethodGet, base+"/locations?type=ADMINISTRATIVE_TERMINAL&pageSize=1", "", &page)
	if len(page.Data) == 0 {
		b.Fatal("no terminal")
	}
	var created struct{ ID string }
	do(http.MethodPost, base+"/orders", order(page.Data[0].ID, "BENCH"), &created)
	return created.ID
}

// BenchmarkNATSEcho is the floor under BenchmarkAPI's bridge way: a bare NATS request-reply through the
// same kind of server, answered at once with a body of a booking order's size, at 1 and 16 callers.
func BenchmarkNATSEcho(b *testing.B) {
	ns := testutil.StartNATS(b, nil)
	resp := []byte(order("TERMINAL-0001", "BENCH"))
	if _, err := ns.Connect().Subscribe("echo", func(m *nats.Msg) { _ = m.Respond(resp) }); err != nil {
		b.Fatal(err)
	}
	caller := ns.Connect()
	for _, callers := range []int{1, 16} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			b.ResetTimer()
			d, lat := run(b, callers, b.N, func() error {
				_, err := caller.Request("echo", []byte(`{"id":"BO-00000001"}`), 10*time.Second)
				return err
			})
			slices.Sort(lat)
			b.ReportMetric(float64(len(lat))/d.Seconds(), "req/s")
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		})
	}
}
