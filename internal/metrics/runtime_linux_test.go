package metrics

import (
	"math"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRuntimeFamilies: the Go runtime's and the process's families read sensible values here (Linux).
// Their names, types and help texts are compared with the client library's in deploy's
// TestMetricsExposition.
func TestRuntimeFamilies(t *testing.T) {
	// Spend CPU time for process_cpu_seconds_total to compare with getrusage(2).
	var ru syscall.Rusage
	cpu := func() float64 {
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	for x := 0; cpu() < 0.2; x++ {
		_ = strings.Repeat("x", x%1000)
	}
	reg := NewRegistry()
	RegisterRuntime(reg)
	got := map[string]float64{}
	for _, f := range reg.Gather() {
		for _, s := range f.Samples {
			if len(s.Labels) == 0 {
				got[s.Name] = s.Value
			}
		}
	}
	for name, ok := range map[string]func(float64) bool{
		"go_goroutines":                 func(v float64) bool { return v >= 1 },
		"go_memstats_heap_inuse_bytes":  func(v float64) bool { return v > 0 },
		"go_memstats_sys_bytes":         func(v float64) bool { return v > got["go_memstats_heap_inuse_bytes"] },
		"go_sched_gomaxprocs_threads":   func(v float64) bool { return v >= 1 },
		"process_resident_memory_bytes": func(v float64) bool { return v > 1<<20 },
		"process_cpu_seconds_total":     func(v float64) bool { return math.Abs(v-cpu()) < 0.1 },
		"process_open_fds":              func(v float64) bool { return v >= 3 },
		"process_max_fds":               func(v float64) bool { return v >= 3 },
		"process_start_time_seconds":    func(v float64) bool { return v > 1.7e9 },
	} {
		if v, present := got[name]; !present || !ok(v) {
			t.Errorf("%s = %v (present %v)", name, v, present)
		}
	}
}

// TestRuntimeMetricsKnown: every runtime/metrics name the go_memstats_* gauges are computed from exists in
// this Go release (a gauge whose source is missing is left out of /metrics).
func TestRuntimeMetricsKnown(t *testing.T) {
	known := knownRuntimeMetrics()
	for _, g := range goGauges {
		for _, n := range g.from {
			if !known[n] {
				t.Errorf("%s: runtime/metrics has no %s", g.name, n)
			}
		}
	}
}
