package metrics

import (
	"bytes"
	"math"
	"strings"
	"sync"
	"testing"
)

// TestWriteText pins the text format: HELP and TYPE per family in name order, help and label values
// escaped (and made valid UTF-8), labels sorted by name, series sorted by their labels, histogram buckets cumulative with +Inf,
// then _sum and _count. Prometheus's own parser reads the daemon's whole page in deploy's
// TestMetricsExposition.
func TestWriteText(t *testing.T) {
	reg := NewRegistry()
	c := reg.NewCounterVec("b_total", "Counts \\ things\nover two lines.", []string{"z", "a"})
	c.With("1", `quote " backslash \ newline `+"\n").Inc()
	c.With("0", "plain").Inc()
	c.With("0", "plain").Inc()
	c.With("2", "not UTF-8 \xff").Inc()
	h := reg.NewHistogram("a_seconds", "Times.", []float64{0.5, 1, 2.5})
	for _, v := range []float64{0.5, 0.75, 3, 0.1} {
		h.Observe(v)
	}
	reg.GaugeFunc("c", "A gauge.", func() float64 { return math.Inf(1) })
	reg.Func("d", "Two labels.", TypeGauge, []string{"x"}, func(emit func(float64, ...string)) {
		emit(2, "b")
		emit(1e-7, "a")
	})

	requireUnique(t, reg)
	var b bytes.Buffer
	if err := WriteText(&b, reg.Gather()); err != nil {
		t.Fatal(err)
	}
	want := `# HELP a_seconds Times.
# TYPE a_seconds histogram
a_seconds_bucket{le="0.5"} 2
a_seconds_bucket{le="1"} 3
a_seconds_bucket{le="2.5"} 3
a_seconds_bucket{le="+Inf"} 4
a_seconds_sum 4.35
a_seconds_count 4
# HELP b_total Counts \\ things\nover two lines.
# TYPE b_total counter
b_total{a="not UTF-8 �",z="2"} 1
b_total{a="plain",z="0"} 2
b_total{a="quote \" backslash \\ newline \n",z="1"} 1
# HELP c A gauge.
# TYPE c gauge
c +Inf
# HELP d Two labels.
# TYPE d gauge
d{x="a"} 1e-07
d{x="b"} 2
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestHistogramVecSeries(t *testing.T) {
	reg := NewRegistry()
	v := reg.NewHistogramVec("h_seconds", "H.", []float64{1}, []string{"op"})
	v.With("y").Observe(2)
	v.With("x").Observe(0.5)
	var names []string
	for _, s := range reg.Gather()[0].Samples {
		names = append(names, s.Name+"/"+s.Label("op")+"/"+s.Label("le"))
	}
	want := "h_seconds_bucket/x/1 h_seconds_bucket/x/+Inf h_seconds_sum/x/ h_seconds_count/x/ " +
		"h_seconds_bucket/y/1 h_seconds_bucket/y/+Inf h_seconds_sum/y/ h_seconds_count/y/"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("series\n%s\nwant\n%s", got, want)
	}
}

// TestRegistryRefuses: a second family of one name, a name or label out of the format, a label the
// format reserves, buckets out of order, or the wrong number of label values are programming errors.
func TestRegistryRefuses(t *testing.T) {
	for name, f := range map[string]func(*Registry){
		"twice":         func(r *Registry) { r.NewCounter("x", ""); r.NewCounter("x", "") },
		"bad name":      func(r *Registry) { r.NewCounter("x-y", "") },
		"digit first":   func(r *Registry) { r.NewCounter("1x", "") },
		"empty name":    func(r *Registry) { r.NewCounter("", "") },
		"bad label":     func(r *Registry) { r.NewCounterVec("x", "", []string{"a:b"}) },
		"reserved le":   func(r *Registry) { r.NewHistogramVec("x", "", []float64{1}, []string{"le"}) },
		"reserved __":   func(r *Registry) { r.NewCounterVec("x", "", []string{"__a"}) },
		"no buckets":    func(r *Registry) { r.NewHistogram("x", "", nil) },
		"descending":    func(r *Registry) { r.NewHistogram("x", "", []float64{2, 1}) },
		"inf bucket":    func(r *Registry) { r.NewHistogram("x", "", []float64{1, math.Inf(1)}) },
		"equal buckets": func(r *Registry) { r.NewHistogram("x", "", []float64{1, 1, 2}) },
		"NaN bucket":    func(r *Registry) { r.NewHistogram("x", "", []float64{1, math.NaN()}) },
		"values":        func(r *Registry) { r.NewCounterVec("x", "", []string{"a"}).With("1", "2") },
		"func values": func(r *Registry) {
			r.Func("x", "", TypeGauge, []string{"a"}, func(e func(float64, ...string)) { e(1) })
			r.Gather()
		},
		"func bad name": func(r *Registry) { r.GaugeFunc("x y", "", func() float64 { return 0 }) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f(NewRegistry())
		})
	}
}

// TestVecLookupDoesNotAllocate: the per-request lookups (API endpoint and code, upstream operation and
// code) find their child without allocating once it exists.
func TestVecLookupDoesNotAllocate(t *testing.T) {
	reg := NewRegistry()
	c := reg.NewCounterVec("x_total", "", []string{"a", "b"})
	h := reg.NewHistogramVec("y_seconds", "", []float64{1}, []string{"a", "b"})
	c.With("orders.get", "200")
	h.With("orders.get", "200")
	a, b := "orders.get", "200"
	if n := testing.AllocsPerRun(100, func() { c.With(a, b).Inc(); h.With(a, b).Observe(0.1) }); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
}

// TestConcurrentObserveAndGather: counts stay exact under concurrent updates and scrapes (run with -race).
func TestConcurrentObserveAndGather(t *testing.T) {
	reg := NewRegistry()
	c := reg.NewCounterVec("x_total", "", []string{"a"})
	h := reg.NewHistogram("y_seconds", "", []float64{0.5})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 1000 {
				c.With(string(rune('a' + g))).Inc()
				h.Observe(float64(i%2) * 0.75)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			_ = WriteText(&bytes.Buffer{}, reg.Gather())
		}
	})
	wg.Wait()
	if got := h.Count(); got != 4000 {
		t.Errorf("histogram count %d, want 4000", got)
	}
	var sum float64
	for _, f := range reg.Gather() {
		for _, s := range f.Samples {
			switch s.Name {
			case "x_total":
				sum += s.Value
			case "y_seconds_sum":
				if s.Value != 4*500*0.75 {
					t.Errorf("histogram sum %v, want %v", s.Value, 4*500*0.75)
				}
			}
		}
	}
	if sum != 4000 {
		t.Errorf("counters sum to %v, want 4000", sum)
	}
}

// TestInvalidUTF8Values: label values that are not UTF-8 are made valid before a child is keyed, so two
// such values that read alike are one series (never two series of one name and labels on the page), and
// two lists of values never share a child.
func TestInvalidUTF8Values(t *testing.T) {
	reg := NewRegistry()
	c := reg.NewCounterVec("x_total", "", []string{"a", "b"})
	if c.With("a\xff", "b") == c.With("a", "\xffb") {
		t.Error("two lists of values share a child")
	}
	c.With("\xfe", "").Inc()
	c.With("\xfd", "").Inc()
	if got := c.With("\uFFFD", "").Value(); got != 2 {
		t.Errorf("the series of the two values alike holds %d, want 2", got)
	}
	requireUnique(t, reg)
}

// requireUnique fails when two samples of reg have one name and one set of labels.
func requireUnique(t *testing.T, reg *Registry) {
	t.Helper()
	seen := map[string]bool{}
	for _, f := range reg.Gather() {
		for _, s := range f.Samples {
			k := s.Name
			for _, l := range s.Labels {
				k += "\x00" + l.Name + "=" + l.Value
			}
			if seen[k] {
				t.Errorf("series %q appears twice", k)
			}
			seen[k] = true
		}
	}
}

// TestLimitOverflow: past its limit a Vec counts new values under the overflow child, without
// allocating, and shows no more series than the limit.
func TestLimitOverflow(t *testing.T) {
	reg := NewRegistry()
	v := reg.NewCounterVec("x_total", "", []string{"type"})
	v.Limit(3, "other")
	v.With("a").Inc()
	v.With("b").Inc()
	late := "c"
	if n := testing.AllocsPerRun(100, func() { v.With(late).Inc() }); n != 0 {
		t.Errorf("a value past the limit allocates %v times", n)
	}
	if got := v.With("other").Value(); got != 101 {
		t.Errorf("other = %d, want 101", got)
	}
	if n := len(reg.Gather()[0].Samples); n != 3 {
		t.Errorf("%d series, want 3", n)
	}
}
