package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/tracking-bridge/tracking-bridge/internal/layout"
)

// benchIdleRate is the simulator's event rate while a bridge idles: a trickle, as between busy hours.
const benchIdleRate = 5

// benchIdleResult is one idle run: a bridge's memory some time after it became ready.
type benchIdleResult struct {
	pipeline string
	ready    time.Duration // process start to the first 200 of /readyz
	mem      ProcMem
}

func (r benchIdleResult) String() string {
	return fmt.Sprintf("%-8s ready after %.2f s; RSS %.1f MB (anonymous %.1f, file %.1f), peak %.1f MB",
		r.pipeline, r.ready.Seconds(), benchMB(r.mem.RSS), benchMB(r.mem.RssAnon), benchMB(r.mem.RssFile),
		benchMB(r.mem.PeakRSS))
}

// idleRun starts bridge b against a simulator at benchIdleRate events/s, waits until its /readyz answers
// 200, then -idle longer, and reads its memory from /proc.
func (e *benchEnv) idleRun(ctx context.Context, b benchBridge, run int) (benchIdleResult, error) {
	r := benchIdleResult{pipeline: b.name}
	e.seq++
	prefix := fmt.Sprintf("bench%d", e.seq)
	lay := layout.Streams{Prefix: prefix}
	defer e.deleteStreams(lay.Events(), lay.Reports(), lay.DLQ())
	limit := int(benchIdleRate * (e.o.idle + time.Minute).Seconds())
	s, err := e.startSim(ctx, fmt.Sprintf("sim-idle-%d-%s", run, b.name), benchIdleRate, limit)
	if err != nil {
		return r, err
	}
	defer s.stop(e.log)
	addr, err := FreeAddr()
	if err != nil {
		return r, err
	}
	c, err := e.startBridgeOn(ctx, b, fmt.Sprintf("%s-idle-%d", b.name, run), s, prefix, addr)
	if err != nil {
		return r, err
	}
	defer c.Kill()
	if err := waitReady(ctx, "http://"+addr+"/readyz", e.o.timeout, c.Done()); err != nil {
		return r, e.childFailed(c, err)
	}
	r.ready = time.Since(c.Started)
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-c.Done():
		return r, e.childFailed(c, fmt.Errorf("exited while idle"))
	case <-time.After(e.o.idle):
	}
	if r.mem, err = ReadMem(c.Pid()); err != nil {
		return r, err
	}
	if _, err := c.Stop(30 * time.Second); err != nil {
		return r, e.childFailed(c, err)
	}
	return r, nil
}

// waitReady polls url until it answers 200, the child ends (done) or within passes.
func waitReady(ctx context.Context, url string, within time.Duration, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never answered 200: %w", url, ctx.Err())
		case <-done:
			return fmt.Errorf("exited before %s answered 200", url)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// idleRuns runs every bridge -runs times, alternating, and prints the medians and each bridge's against
// the first's.
func (e *benchEnv) idleRuns(ctx context.Context, stdout io.Writer) error {
	fmt.Fprintf(stdout, "idle: RSS %v after /readyz first answered 200, the simulator at %d events/s, %d run(s) per bridge\n",
		e.o.idle, benchIdleRate, e.o.runs)
	for _, b := range e.bridges {
		fmt.Fprintf(stdout, "  %s: %s\n", b.name, b.bin)
	}
	fmt.Fprintln(stdout)
	res := make([][]benchIdleResult, len(e.bridges))
	for i := 1; i <= e.o.runs; i++ {
		fmt.Fprintf(stdout, "run %d (load %s)\n", i, benchLoadAvg())
		for j, b := range e.bridges {
			r, err := e.idleRun(ctx, b, i)
			if err != nil {
				return fmt.Errorf("%s idle run %d: %w", b.name, i, err)
			}
			fmt.Fprintf(stdout, "  %v\n", r)
			res[j] = append(res[j], r)
		}
	}
	med := func(rs []benchIdleResult, f func(ProcMem) int64) float64 {
		vs := make([]float64, len(rs))
		for i, r := range rs {
			vs[i] = benchMB(f(r.mem))
		}
		return Median(vs)
	}
	rss := func(m ProcMem) int64 { return m.RSS }
	anon := func(m ProcMem) int64 { return m.RssAnon }
	file := func(m ProcMem) int64 { return m.RssFile }
	fmt.Fprintf(stdout, "\nmedians of %d run(s)\n", e.o.runs)
	for j, b := range e.bridges {
		fmt.Fprintf(stdout, "  %-9s RSS %.1f MB (anonymous %.1f, file %.1f)", b.name, med(res[j], rss), med(res[j], anon), med(res[j], file))
		if j > 0 {
			fmt.Fprintf(stdout, "   %+.1f MB against %s", med(res[j], rss)-med(res[0], rss), e.bridges[0].name)
		}
		fmt.Fprintln(stdout)
	}
	return nil
}
