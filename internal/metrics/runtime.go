package metrics

import (
	"bytes"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	rm "runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RegisterRuntime registers the Go runtime's and the process's metrics on reg, under the names and with
// the help texts of the Prometheus client library's Go and process collectors, which dashboards for Go
// programs expect (go_goroutines, go_memstats_*, process_resident_memory_bytes, ...). The go_memstats_*
// values are computed from runtime/metrics, as the client library's are, without stopping the world.
// The process_* values are read from /proc: where it is missing (not Linux), they are left out.
func RegisterRuntime(reg *Registry) {
	samples := make([]rm.Sample, len(runtimeNames))
	for i, n := range runtimeNames {
		samples[i].Name = n
	}
	values := every(func() []float64 {
		rm.Read(samples)
		v := make([]float64, len(samples))
		for i, s := range samples {
			switch s.Value.Kind() {
			case rm.KindUint64:
				v[i] = float64(s.Value.Uint64())
			case rm.KindFloat64:
				v[i] = s.Value.Float64()
			}
		}
		return v
	})
	for _, g := range goGauges {
		reg.Func(g.name, g.help, g.typ, nil, func(emit func(float64, ...string)) {
			v := values()
			var sum float64
			for _, i := range g.value {
				sum += v[i]
			}
			emit(sum)
		})
	}
	reg.GaugeFunc("go_goroutines", "Number of goroutines that currently exist.",
		func() float64 { return float64(runtime.NumGoroutine()) })
	reg.GaugeFunc("go_threads", "Number of OS threads created.", func() float64 {
		n, _ := runtime.ThreadCreateProfile(nil)
		return float64(n)
	})
	reg.Func("go_info", "Information about the Go environment.", TypeGauge, []string{"version"},
		func(emit func(float64, ...string)) { emit(1, runtime.Version()) })
	gc := every(func() *debug.GCStats {
		s := &debug.GCStats{PauseQuantiles: make([]time.Duration, 5)}
		debug.ReadGCStats(s)
		return s
	})
	reg.GaugeFunc("go_memstats_last_gc_time_seconds", "Number of seconds since 1970 of last garbage collection.",
		func() float64 {
			if last := gc().LastGC; !last.IsZero() {
				return float64(last.UnixNano()) / 1e9
			}
			return 0 // no collection yet
		})
	reg.register("go_gc_duration_seconds",
		"A summary of the wall-time pause (stop-the-world) duration in garbage collection cycles.",
		TypeSummary, func(emit func(Sample)) {
			s := gc()
			for i, q := range []string{"0", "0.25", "0.5", "0.75", "1"} {
				emit(Sample{Name: "go_gc_duration_seconds", Labels: []Label{{"quantile", q}}, Value: s.PauseQuantiles[i].Seconds()})
			}
			emit(Sample{Name: "go_gc_duration_seconds_sum", Value: s.PauseTotal.Seconds()})
			emit(Sample{Name: "go_gc_duration_seconds_count", Value: float64(s.NumGC)})
		})
	registerProcess(reg)
}

// runtimeNames are the runtime/metrics read at each scrape, once for all the gauges computed from them.
var runtimeNames = []string{
	"/memory/classes/heap/objects:bytes",          // 0
	"/gc/heap/allocs:bytes",                       // 1
	"/memory/classes/profiling/buckets:bytes",     // 2
	"/gc/heap/frees:objects",                      // 3
	"/gc/heap/tiny/allocs:objects",                // 4
	"/memory/classes/metadata/other:bytes",        // 5
	"/memory/classes/heap/released:bytes",         // 6
	"/memory/classes/heap/free:bytes",             // 7
	"/memory/classes/heap/unused:bytes",           // 8
	"/gc/heap/objects:objects",                    // 9
	"/gc/heap/allocs:objects",                     // 10
	"/memory/classes/metadata/mcache/inuse:bytes", // 11
	"/memory/classes/metadata/mcache/free:bytes",  // 12
	"/memory/classes/metadata/mspan/inuse:bytes",  // 13
	"/memory/classes/metadata/mspan/free:bytes",   // 14
	"/gc/heap/goal:bytes",                         // 15
	"/memory/classes/other:bytes",                 // 16
	"/memory/classes/heap/stacks:bytes",           // 17
	"/memory/classes/os-stacks:bytes",             // 18
	"/memory/classes/total:bytes",                 // 19
	"/gc/gogc:percent",                            // 20
	"/gc/gomemlimit:bytes",                        // 21
	"/sched/gomaxprocs:threads",                   // 22
}

// goGauges are the client library's memstats-style metrics, each a sum of runtime/metrics values.
var goGauges = []struct {
	name, help, typ string
	value           []int // indexes into runtimeNames, summed
}{
	{"go_memstats_alloc_bytes", "Number of bytes allocated in heap and currently in use. Equals to /memory/classes/heap/objects:bytes.", TypeGauge, []int{0}},
	{"go_memstats_alloc_bytes_total", "Total number of bytes allocated in heap until now, even if released already. Equals to /gc/heap/allocs:bytes.", TypeCounter, []int{1}},
	{"go_memstats_buck_hash_sys_bytes", "Number of bytes used by the profiling bucket hash table. Equals to /memory/classes/profiling/buckets:bytes.", TypeGauge, []int{2}},
	{"go_memstats_frees_total", "Total number of heap objects frees. Equals to /gc/heap/frees:objects + /gc/heap/tiny/allocs:objects.", TypeCounter, []int{3, 4}},
	{"go_memstats_gc_sys_bytes", "Number of bytes used for garbage collection system metadata. Equals to /memory/classes/metadata/other:bytes.", TypeGauge, []int{5}},
	{"go_memstats_heap_alloc_bytes", "Number of heap bytes allocated and currently in use, same as go_memstats_alloc_bytes. Equals to /memory/classes/heap/objects:bytes.", TypeGauge, []int{0}},
	{"go_memstats_heap_idle_bytes", "Number of heap bytes waiting to be used. Equals to /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", TypeGauge, []int{6, 7}},
	{"go_memstats_heap_inuse_bytes", "Number of heap bytes that are in use. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes", TypeGauge, []int{0, 8}},
	{"go_memstats_heap_objects", "Number of currently allocated objects. Equals to /gc/heap/objects:objects.", TypeGauge, []int{9}},
	{"go_memstats_heap_released_bytes", "Number of heap bytes released to OS. Equals to /memory/classes/heap/released:bytes.", TypeGauge, []int{6}},
	{"go_memstats_heap_sys_bytes", "Number of heap bytes obtained from system. Equals to /memory/classes/heap/objects:bytes + /memory/classes/heap/unused:bytes + /memory/classes/heap/released:bytes + /memory/classes/heap/free:bytes.", TypeGauge, []int{0, 8, 6, 7}},
	{"go_memstats_mallocs_total", "Total number of heap objects allocated, both live and gc-ed. Semantically a counter version for go_memstats_heap_objects gauge. Equals to /gc/heap/allocs:objects + /gc/heap/tiny/allocs:objects.", TypeCounter, []int{10, 4}},
	{"go_memstats_mcache_inuse_bytes", "Number of bytes in use by mcache structures. Equals to /memory/classes/metadata/mcache/inuse:bytes.", TypeGauge, []int{11}},
	{"go_memstats_mcache_sys_bytes", "Number of bytes used for mcache structures obtained from system. Equals to /memory/classes/metadata/mcache/inuse:bytes + /memory/classes/metadata/mcache/free:bytes.", TypeGauge, []int{11, 12}},
	{"go_memstats_mspan_inuse_bytes", "Number of bytes in use by mspan structures. Equals to /memory/classes/metadata/mspan/inuse:bytes.", TypeGauge, []int{13}},
	{"go_memstats_mspan_sys_bytes", "Number of bytes used for mspan structures obtained from system. Equals to /memory/classes/metadata/mspan/inuse:bytes + /memory/classes/metadata/mspan/free:bytes.", TypeGauge, []int{13, 14}},
	{"go_memstats_next_gc_bytes", "Number of heap bytes when next garbage collection will take place. Equals to /gc/heap/goal:bytes.", TypeGauge, []int{15}},
	{"go_memstats_other_sys_bytes", "Number of bytes used for other system allocations. Equals to /memory/classes/other:bytes.", TypeGauge, []int{16}},
	{"go_memstats_stack_inuse_bytes", "Number of bytes obtained from system for stack allocator in non-CGO environments. Equals to /memory/classes/heap/stacks:bytes.", TypeGauge, []int{17}},
	{"go_memstats_stack_sys_bytes", "Number of bytes obtained from system for stack allocator. Equals to /memory/classes/heap/stacks:bytes + /memory/classes/os-stacks:bytes.", TypeGauge, []int{17, 18}},
	{"go_memstats_sys_bytes", "Number of bytes obtained from system. Equals to /memory/classes/total:byte.", TypeGauge, []int{19}},
	{"go_gc_gogc_percent", "Heap size target percentage configured by the user, otherwise 100. This value is set by the GOGC environment variable, and the runtime/debug.SetGCPercent function. Sourced from /gc/gogc:percent.", TypeGauge, []int{20}},
	{"go_gc_gomemlimit_bytes", "Go runtime memory limit configured by the user, otherwise math.MaxInt64. This value is set by the GOMEMLIMIT environment variable, and the runtime/debug.SetMemoryLimit function. Sourced from /gc/gomemlimit:bytes.", TypeGauge, []int{21}},
	{"go_sched_gomaxprocs_threads", "The current runtime.GOMAXPROCS setting, or the number of operating system threads that can execute user-level Go code simultaneously. Sourced from /sched/gomaxprocs:threads.", TypeGauge, []int{22}},
}

// every returns a function that calls read again only when its last result is older than a second: the
// families computed from one reading (runtime/metrics, /proc/self/stat) share it within a scrape, which
// also keeps their values consistent with each other.
func every[T any](read func() T) func() T {
	var (
		mu sync.Mutex
		at time.Time
		v  T
	)
	return func() T {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) > time.Second {
			v, at = read(), time.Now()
		}
		return v
	}
}

// userHZ is the unit of the CPU times in /proc/self/stat: USER_HZ is 100 on every Linux architecture Go
// runs on (the Prometheus client assumes the same).
const userHZ = 100

// registerProcess registers the process_* metrics read from /proc, if it is there.
func registerProcess(reg *Registry) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		return
	}
	type procStat struct {
		cpu, vsize, rss float64
		ok              bool
	}
	stat := every(func() procStat {
		raw, err := os.ReadFile("/proc/self/stat")
		if err != nil {
			return procStat{}
		}
		// Fields after the command name, which is in parentheses and may hold spaces: state is the
		// first, so utime (the 14th field) is f[11].
		i := bytes.LastIndexByte(raw, ')')
		if i < 0 {
			return procStat{}
		}
		f := strings.Fields(string(raw[i+1:]))
		if len(f) < 22 {
			return procStat{}
		}
		num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
		return procStat{(num(f[11]) + num(f[12])) / userHZ, num(f[20]), num(f[21]) * float64(os.Getpagesize()), true}
	})
	fromStat := func(pick func(procStat) float64) func(emit func(float64, ...string)) {
		return func(emit func(float64, ...string)) {
			if st := stat(); st.ok {
				emit(pick(st))
			}
		}
	}
	reg.Func("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", TypeCounter, nil,
		fromStat(func(st procStat) float64 { return st.cpu }))
	reg.Func("process_virtual_memory_bytes", "Virtual memory size in bytes.", TypeGauge, nil,
		fromStat(func(st procStat) float64 { return st.vsize }))
	reg.Func("process_resident_memory_bytes", "Resident memory size in bytes.", TypeGauge, nil,
		fromStat(func(st procStat) float64 { return st.rss }))

	start := processStart()
	reg.GaugeFunc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
		func() float64 { return start })
	reg.Func("process_open_fds", "Number of open file descriptors.", TypeGauge, nil, func(emit func(float64, ...string)) {
		if d, err := os.Open("/proc/self/fd"); err == nil {
			names, err := d.Readdirnames(-1)
			d.Close()
			if err == nil {
				emit(float64(len(names) - 1)) // less the descriptor that read the directory
			}
		}
	})
	limit := func(row string) func(emit func(float64, ...string)) {
		return func(emit func(float64, ...string)) {
			if v, ok := procLimit(row); ok {
				emit(v)
			}
		}
	}
	reg.Func("process_max_fds", "Maximum number of open file descriptors.", TypeGauge, nil, limit("Max open files"))
	reg.Func("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", TypeGauge, nil,
		limit("Max address space"))
	net := func(col int) func(emit func(float64, ...string)) {
		return func(emit func(float64, ...string)) {
			if v, ok := netDevTotal(col); ok {
				emit(v)
			}
		}
	}
	reg.Func("process_network_receive_bytes_total", "Number of bytes received by the process over the network.",
		TypeCounter, nil, net(0))
	reg.Func("process_network_transmit_bytes_total", "Number of bytes sent by the process over the network.",
		TypeCounter, nil, net(8))
}

// processStart returns when the process started, in seconds since the epoch: the boot time in /proc/stat
// plus its start time in /proc/self/stat (clock ticks after boot); the time of this call when either
// cannot be read.
func processStart() float64 {
	now := float64(time.Now().UnixNano()) / 1e9
	raw, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return now
	}
	i := bytes.LastIndexByte(raw, ')')
	if i < 0 {
		return now
	}
	f := strings.Fields(string(raw[i+1:]))
	sys, err := os.ReadFile("/proc/stat")
	if len(f) < 20 || err != nil {
		return now
	}
	ticks, err1 := strconv.ParseFloat(f[19], 64)
	_, after, ok := bytes.Cut(sys, []byte("\nbtime "))
	if err1 != nil || !ok {
		return now
	}
	line, _, _ := bytes.Cut(after, []byte("\n"))
	boot, err := strconv.ParseInt(string(line), 10, 64)
	if err != nil {
		return now
	}
	return float64(boot) + ticks/userHZ
}

// procLimit returns the soft limit of a row of /proc/self/limits; "unlimited" is the largest uint64.
func procLimit(row string) (float64, bool) {
	raw, err := os.ReadFile("/proc/self/limits")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(raw)) {
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

// netDevTotal returns the sum over the interfaces of /proc/self/net/dev of one column: 0 is the bytes
// received, 8 the bytes sent.
func netDevTotal(col int) (float64, bool) {
	raw, err := os.ReadFile("/proc/self/net/dev")
	if err != nil {
		return 0, false
	}
	var sum float64
	for line := range strings.Lines(string(raw)) {
		_, counters, ok := strings.Cut(line, ":")
		if !ok {
			continue // the two header lines
		}
		f := strings.Fields(counters)
		if len(f) <= col {
			return 0, false
		}
		v, err := strconv.ParseFloat(f[col], 64)
		if err != nil {
			return 0, false
		}
		sum += v
	}
	return sum, true
}
