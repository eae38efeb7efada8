package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/tracking-bridge/tracking-bridge/config"
	"github.com/tracking-bridge/tracking-bridge/internal/daemon"
	"github.com/tracking-bridge/tracking-bridge/internal/layout"
	"github.com/tracking-bridge/tracking-bridge/internal/logging"
)

// profile runs the bridge once in this process under the CPU profiler: the simulator and nats-server stay
// in their own processes, so the profile holds the bridge (and this benchmark's light polling) only.
func (e *benchEnv) profile(ctx context.Context, stdout io.Writer) error {
	e.seq++
	prefix := fmt.Sprintf("bench%d", e.seq)
	lay := layout.Streams{Prefix: prefix}
	defer e.deleteStreams(lay.Events(), lay.Reports(), lay.DLQ())
	rate, n := -1.0, e.o.n
	if e.o.latency { // profile at the latency test's rate instead of a flood
		rate, n = e.o.rate, int(e.o.rate*e.o.duration.Seconds())
	}
	s, err := e.startSim(ctx, "sim-profile", rate, n)
	if err != nil {
		return err
	}
	defer s.stop(e.log)
	httpAddr, err := FreeAddr()
	if err != nil {
		return err
	}
	cfg := e.bridgeConfig(s, prefix, httpAddr)
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Traced as 'bridge run' would be under this process's OTEL_* variables: a profile of the spans' cost.
	tr, err := config.TracingFromEnv()
	if err != nil {
		return err
	}
	b, err := daemon.New(cfg, logging.New(e.log, "text", cfg.SlogLevel()), daemon.BuildInfo{}, daemon.WithTracing(tr))
	if err != nil {
		return err
	}
	f, err := os.Create(e.o.cpuprofile)
	if err != nil {
		return err
	}
	defer f.Close()

	cpu0, _ := SelfUsage()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(rctx) }()
	wctx, cancel := context.WithTimeout(ctx, e.o.timeout)
	st, werr := WaitStream(wctx, e.js, lay.Events(), uint64(n), benchPoll, nil)
	cancel()
	stop()
	rerr := <-done
	pprof.StopCPUProfile()
	cpu1, maxRSS := SelfUsage()
	if err := errors.Join(werr, rerr); err != nil {
		return err
	}
	cpu := cpu1 - cpu0
	fmt.Fprintf(stdout, "in-process bridge: %d events, %.0f events/s (store window), CPU of this process %.2f µs/event "+
		"(includes the benchmark's polling), peak RSS of this process %.1f MB\nCPU profile: %s\n",
		st.Msgs, Rate(st), float64(cpu.Nanoseconds())/1e3/float64(max(st.Msgs, 1)), benchMB(maxRSS), e.o.cpuprofile)
	if e.o.memprofile != "" {
		mf, err := os.Create(e.o.memprofile)
		if err != nil {
			return err
		}
		defer mf.Close()
		if err := pprof.Lookup("allocs").WriteTo(mf, 0); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "allocation profile: %s\n", e.o.memprofile)
	}
	return nil
}

// benchMachine describes the machine and its load, for the record.
func benchMachine() string {
	model := "unknown"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "unknown"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
				mem = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("machine: %d CPUs (%s), memory %s, %s %s/%s\nload average at the start: %s; %s\n",
		runtime.NumCPU(), model, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH, benchLoadAvg(), benchSpeed())
}

func benchLoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// benchSpeed measures this machine's single-core speed right now (SHA-256 throughput over 32 MB), so that
// a slow phase of a shared host shows in the record even when the load average does not.
func benchSpeed() string {
	buf := make([]byte, 1<<20)
	start := time.Now()
	for range 32 {
		sum := sha256.Sum256(buf)
		buf[0] = sum[0]
	}
	return fmt.Sprintf("sha256 %.0f MB/s", 32/time.Since(start).Seconds())
}

// benchOutput is a bytes.Buffer safe for a child's output goroutine and the reader.
type benchOutput struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *benchOutput) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *benchOutput) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
