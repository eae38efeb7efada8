package consume

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkReports measures reports per second delivered to the simulator over loopback:
//
//   - bridge-N: b.N reports stored in the work-queue stream beforehand (untimed), then the consumer with
//     N in flight validates, sends and acknowledges them all (timed until the last one was accepted);
//   - bare-N: the same bodies POSTed to the same endpoint with the same HTTP client settings, bearer
//     token and Idempotency-Key, by N goroutines: the ceiling the bridge is compared with.
//
// Run with: go test -run '^$' -bench BenchmarkReports -benchtime 20000x ./internal/consume/
func BenchmarkReports(b *testing.B) {
	for _, n := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("bridge-%d", n), func(b *testing.B) { benchBridge(b, n) })
		b.Run(fmt.Sprintf("bare-%d", n), func(b *testing.B) { benchBare(b, n) })
	}
}

// acceptCounter is an Observer that signals when a number of reports was accepted.
type acceptCounter struct {
	want     int64
	accepted atomic.Int64
	done     chan struct{}
}

func (a *acceptCounter) Consumed() {}
func (a *acceptCounter) Outcome(kind, _ string) {
	if kind == "accepted" && a.accepted.Add(1) == a.want {
		close(a.done)
	}
}

func benchBridge(b *testing.B, inFlight int) {
	e := newEnv(b, false)
	e.publishN(b.N)
	cfg := e.config()
	cfg.Concurrency = inFlight
	cfg.Logger = nil
	obs := &acceptCounter{want: int64(b.N), done: make(chan struct{})}
	cfg.Observer = obs
	c := New(e.js, e.client, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	b.ResetTimer()
	cpu0 := cpuTime()
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	select {
	case <-obs.done:
	case err := <-errc:
		b.Fatalf("Run returned early: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatalf("only %d of %d reports accepted", obs.accepted.Load(), b.N)
	}
	b.StopTimer()
	reportRate(b, cpu0)
	cancel()
	<-errc
	if st := c.Stats(); st.Retried+st.Rejected+st.Invalid != 0 {
		b.Fatalf("not every report went straight through: %+v", st)
	}
}

func benchBare(b *testing.B, inFlight int) {
	e := newEnv(b, false)
	bodies := make([][]byte, b.N)
	for i := range bodies {
		bodies[i] = report(i)
	}
	client, url := e.hc, e.reportURL()
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup

	b.ResetTimer()
	cpu0 := cpuTime()
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				tok, err := e.tokens.Token(context.Background())
				if err != nil {
					failed.Add(1)
					continue
				}
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(bodies[i]))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json")
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Idempotency-Key", fmt.Sprintf("r-%d", i))
				resp, err := client.Do(req)
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	reportRate(b, cpu0)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d POSTs failed", n, b.N)
	}
}

// cpuTime returns the CPU time (user and system) the process used so far. The nats-server, the
// simulator and the client all run in the process, so the difference is the whole cost of the run.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportRate reports reports/s and the CPU microseconds per report. The second is less sensitive to other
// load on the machine than the first.
func reportRate(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "reports/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/report")
}
