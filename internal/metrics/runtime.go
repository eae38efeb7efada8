package metrics

import (
	"bytes"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	rm "runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// RegisterRuntime registers the Go runtime's and the process's metrics on reg, under the names and with
// the help texts of the Prometheus client library's Go and process collectors, which dashboards for Go
// programs expect (go_goroutines, go_memstats_*, process_resident_memory_bytes, ...). The go_memstats_*
// values are computed from runtime/metrics, as the client library's are, without stopping the world.
// The process_* values are read from /proc, from the files the client library reads: where one is
// missing (not Linux), its metrics are left out. Every scrape reads each source once, before the
// families are gathered (reading), so the families computed from one source agree with each other.
func RegisterRuntime(reg *Registry) {
	known := knownRuntimeMetrics()
	var names []string // the runtime/metrics the gauges below are computed from
	for _, g := range goGauges {
		for _, n := range g.from {
			if known[n] && !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	var cur atomic.Pointer[reading]
	reg.BeforeGather(func() { cur.Store(read(names)) })
	// from emits one value of the current reading, when its source could be read.
	from := func(value func(r *reading) (float64, bool)) func(emit func(float64, ...string)) {
		return func(emit func(float64, ...string)) {
			if v, ok := value(cur.Load()); ok { // Gather took the reading before collecting
				emit(v)
			}
		}
	}

	for _, g := range goGauges {
		if slices.ContainsFunc(g.from, func(n string) bool { return !known[n] }) {
			continue
		}
		reg.Func(g.name, g.help, g.typ, nil, from(func(r *reading) (float64, bool) {
			var sum float64
			for _, n := range g.from {
				sum += r.runtime[n]
			}
			return sum, true
		}))
	}
	reg.GaugeFunc("go_goroutines", "Number of goroutines that currently exist.",
		func() float64 { return float64(runtime.NumGoroutine()) })
	reg.GaugeFunc("go_threads", "Number of OS threads created.", func() float64 {
		n, _ := runtime.ThreadCreateProfile(nil)
		return float64(n)
	})
	reg.Func("go_info", "Information about the Go environment.", TypeGauge, []string{"version"},
		func(emit func(float64, ...string)) { emit(1, runtime.Version()) })
	reg.Func("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.",
		TypeGauge, nil, from(func(r *reading) (float64, bool) {
			if r.gc.LastGC.IsZero() {
				return 0, true // no collection yet
			}
			return float64(r.gc.LastGC.UnixNano()) / 1e9, true
		}))
	reg.register("go_gc_duration_seconds",
		"A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.",
		TypeSummary, func(emit func(Sample)) {
			r := cur.Load()
			for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
				emit(Sample{Name: "go_gc_duration_seconds", Labels: []Label{{"quantile", q}}, Value: r.gc.PauseQuantiles[i].Seconds()})
			}
			emit(Sample{Name: "go_gc_duration_seconds_sum", Value: r.gc.PauseTotal.Seconds()})
			emit(Sample{Name: "go_gc_duration_seconds_count", Value: float64(r.gc.NumGC)})
		})

	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return
	}
	reg.Func("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", TypeCounter, nil,
		from(func(r *reading) (float64, bool) { return r.cpu, r.statOK }))
	reg.Func("process_virtual_memory_bytes", "Virtual memory size in bytes.", TypeGauge, nil,
		from(func(r *reading) (float64, bool) { return r.vsize, r.statOK }))
	reg.Func("process_resident_memory_bytes", "Resident memory size in bytes.", TypeGauge, nil,
		from(func(r *reading) (float64, bool) { return r.rss, r.statOK }))
	if start, ok := processStart(); ok {
		reg.GaugeFunc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
			func() float64 { return start })
	}
	reg.Func("process_open_fds", "Number of open file descriptors.", TypeGauge, nil,
		from(func(r *reading) (float64, bool) { return r.openFDs, r.openFDs >= 0 }))
	reg.Func("process_max_fds", "Maximum number of open file descriptors.", TypeGauge, nil,
		from(func(r *reading) (float64, bool) { return r.maxFDs, r.limitsOK }))
	reg.Func("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", TypeGauge, nil,
		from(func(r *reading) (float64, bool) { return r.maxAS, r.limitsOK }))
	reg.Func("process_network_receive_bytes_total", "Number of bytes received by the process over the network.",
		TypeCounter, nil, from(func(r *reading) (float64, bool) { return r.netIn, r.netOK }))
	reg.Func("process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.",
		TypeCounter, nil, from(func(r *reading) (float64, bool) { return r.netOut, r.netOK }))
}

// goGauges are the client library's memstats-style metrics, each a sum of runtime/metrics values, read
// once per scrape for all of them.
var goGauges = []struct {
	name, help, typ string
	from            []string // the runtime/metrics summed
}{
	{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", TypeGauge, []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", TypeCounter, []string{"/gc/heap/allocs:bytes"}},
	{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", TypeGauge, []string{"/memory/classes/profiling/buckets:bytes"}},
	{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", TypeCounter, []string{"/gc/heap/frees:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", TypeGauge, []string{"/memory/classes/metadata/other:bytes"}},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", TypeGauge, []string{"/memory/classes/heap/objects:bytes"}},
	{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", TypeGauge, []string{"/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", TypeGauge, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}},
	{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", TypeGauge, []string{"/gc/heap/objects:objects"}},
	{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", TypeGauge, []string{"/memory/classes/heap/released:bytes"}},
	{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", TypeGauge, []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes", "/memory/classes/heap/released:bytes", "/memory/classes/heap/free:bytes"}},
	{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", TypeCounter, []string{"/gc/heap/allocs:objects", "/gc/heap/tiny/allocs:objects"}},
	{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", TypeGauge, []string{"/memory/classes/metadata/mcache/inuse:bytes"}},
	{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", TypeGauge, []string{"/memory/classes/metadata/mcache/inuse:bytes", "/memory/classes/metadata/mcache/free:bytes"}},
	{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", TypeGauge, []string{"/memory/classes/metadata/mspan/inuse:bytes"}},
	{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", TypeGauge, []string{"/memory/classes/metadata/mspan/inuse:bytes", "/memory/classes/metadata/mspan/free:bytes"}},
	{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", TypeGauge, []string{"/gc/heap/goal:bytes"}},
	{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", TypeGauge, []string{"/memory/classes/other:bytes"}},
	{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", TypeGauge, []string{"/memory/classes/heap/stacks:bytes"}},
	{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", TypeGauge, []string{"/memory/classes/heap/stacks:bytes", "/memory/classes/os-stacks:bytes"}},
	{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", TypeGauge, []string{"/memory/classes/total:bytes"}},
	{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", TypeGauge, []string{"/gc/gogc:percent"}},
	{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", TypeGauge, []string{"/gc/gomemlimit:bytes"}},
	{"go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", TypeGauge, []string{"/sched/gomaxprocs:threads"}},
}

// knownRuntimeMetrics returns the names runtime/metrics has in this Go release. A gauge whose source a
// later release drops is left out rather than shown as 0 (TestRuntimeMetricsKnown fails first).
func knownRuntimeMetrics() map[string]bool {
	known := map[string]bool{}
	for _, d := range rm.All() {
		known[d.Name] = true
	}
	return known
}

// reading is one scrape's values of the runtime and the process.
type reading struct {
	runtime map[string]float64 // by runtime/metrics name
	gc      debug.GCStats

	cpu, vsize, rss float64 // /proc/self/stat
	statOK          bool
	openFDs         float64 // /proc/self/fd; -1 when it cannot be read
	maxFDs, maxAS   float64 // /proc/self/limits
	limitsOK        bool
	netIn, netOut   float64 // /proc/self/net/netstat
	netOK           bool
}

// read takes one scrape's reading; names are the runtime/metrics to read.
func read(names []string) *reading {
	r := &reading{runtime: make(map[string]float64, len(names)), openFDs: -1}
	samples := make([]rm.Sample, len(names))
	for i, n := range names {
		samples[i].Name = n
	}
	rm.Read(samples)
	for _, s := range samples {
		switch s.Value.Kind() {
		case rm.KindUint64:
			r.runtime[s.Name] = float64(s.Value.Uint64())
		case rm.KindFloat64:
			r.runtime[s.Name] = s.Value.Float64()
		}
	}
	r.gc.PauseQuantiles = make([]time.Duration, 5)
	debug.ReadGCStats(&r.gc)

	if f, ok := procStatFields(); ok && len(f) >= 22 {
		num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
		r.cpu = (num(f[11]) + num(f[12])) / userHZ
		r.vsize, r.rss = num(f[20]), num(f[21])*float64(os.Getpagesize())
		r.statOK = true
	}
	if d, err := os.Open("/proc/self/fd"); err == nil {
		names, err := d.Readdirnames(-1)
		d.Close()
		if err == nil {
			r.openFDs = float64(len(names) - 1) // less the descriptor that read the directory
		}
	}
	if raw, err := os.ReadFile("/proc/self/limits"); err == nil {
		var ok1, ok2 bool
		r.maxFDs, ok1 = procLimit(raw, "Max open files")
		r.maxAS, ok2 = procLimit(raw, "Max address space")
		r.limitsOK = ok1 && ok2
	}
	if raw, err := os.ReadFile("/proc/self/net/netstat"); err == nil {
		r.netIn, r.netOut, r.netOK = ipOctets(raw)
	}
	return r
}

// userHZ is the unit of the CPU times in /proc/self/stat: USER_HZ is 100 on every Linux architecture Go
// runs on (the Prometheus client assumes the same).
const userHZ = 100

// procStatFields returns the fields of /proc/self/stat after the command name, which is in parentheses
// and may hold spaces: f[0] is the state (the 3rd field), so utime (the 14th) is f[11].
func procStatFields() ([]string, bool) {
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(raw[i+1:])), true
}

// processStart returns when the process started, in seconds since the epoch: the boot time in /proc/stat
// plus its start time in /proc/self/stat (clock ticks after boot). ok is false when either cannot be
// read, and the metric is left out.
func processStart() (float64, bool) {
	f, ok := procStatFields()
	sys, err := os.ReadFile("/proc/stat")
	if !ok || len(f) < 20 || err != nil {
		return 0, false
	}
	ticks, err1 := strconv.ParseFloat(f[19], 64)
	_, after, found := bytes.Cut(sys, []byte("\nbtime "))
	if err1 != nil || !found {
		return 0, false
	}
	line, _, _ := bytes.Cut(after, []byte("\n"))
	boot, err := strconv.ParseInt(string(line), 10, 64)
	if err != nil {
		return 0, false
	}
	return float64(boot) + ticks/userHZ, true
}

// procLimit returns the soft limit of a row of /proc/self/limits; "unlimited" is the largest uint64.
func procLimit(limits []byte, row string) (float64, bool) {
	for line := range strings.Lines(string(limits)) {
		rest, ok := strings.CutPrefix(line, row)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		if f[0] == "unlimited" {
			return math.MaxUint64, true
		}
		v, err := strconv.ParseFloat(f[0], 64)
		return v, err == nil
	}
	return 0, false
}

// ipOctets returns InOctets and OutOctets of the IpExt lines of /proc/self/net/netstat (a line of names,
// then a line of values), the bytes the process's network namespace received and sent over IP, as the
// client library reports them.
func ipOctets(netstat []byte) (in, out float64, ok bool) {
	var names []string
	for line := range strings.Lines(string(netstat)) {
		rest, found := strings.CutPrefix(line, "IpExt:")
		if !found {
			continue
		}
		if names == nil {
			names = strings.Fields(rest)
			continue
		}
		var gotIn, gotOut bool
		for i, v := range strings.Fields(rest) {
			if i >= len(names) {
				break
			}
			switch names[i] {
			case "InOctets":
				in, _ = strconv.ParseFloat(v, 64)
				gotIn = true
			case "OutOctets":
				out, _ = strconv.ParseFloat(v, 64)
				gotOut = true
			}
		}
		return in, out, gotIn && gotOut
	}
	return 0, 0, false
}
