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

	"github.com/tracking-bridge/tracking-bridge/internal/service"
	"github.com/tracking-bridge/tracking-bridge/internal/sim"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
	"github.com/tracking-bridge/tracking-bridge/internal/testutil/simtest"
	"github.com/tracking-bridge/tracking-bridge/internal/upstream"
)

// BenchmarkAPI compares one operation (4.4 read booking order) requested through the service on NATS
// with the same call made directly over HTTP, against the same in-process simulator and in the same
// run, at 1 and 16 concurrent callers. Each sub-benchmark reports requests/s and the p50 and p99
// latency in microseconds. Run it with e.g.
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
	go func() { done <- svc.Run(ctx, context.Background()) }()
	b.Cleanup(func() { cancel(); <-done })
	testutil.Eventually(b, 5*time.Second, "service up", svc.Ready)
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
	for _, callers := range []int{1, 16} {
		for _, w := range ways {
			b.Run(fmt.Sprintf("callers=%d/%s", callers, w.name), func(b *testing.B) {
				measure(b, callers, w.call)
			})
		}
	}
}

// measure makes b.N calls from callers goroutines and reports requests/s, p50 and p99.
func measure(b *testing.B, callers int, call func() error) {
	var next atomic.Int64
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	var failed atomic.Pointer[error]
	b.ResetTimer()
	begin := time.Now()
	for c := range callers {
		wg.Go(func() {
			for next.Add(1) <= int64(b.N) {
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
	b.StopTimer()
	if e := failed.Load(); e != nil {
		b.Fatal(*e)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	pct := func(p float64) float64 {
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds())
	}
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "req/s")
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
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
