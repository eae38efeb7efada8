package metrics

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// The metric types, as the exposition's TYPE lines name them.
const (
	TypeCounter   = "counter"
	TypeGauge     = "gauge"
	TypeHistogram = "histogram"
	TypeSummary   = "summary"
)

// Registry holds metric families and gathers their samples for /metrics (WriteText, Handler). It is
// the bridge's own and small on purpose: the metrics are counters, gauges read at scrape time and
// histograms with fixed buckets, with a few label values known in advance, and the Prometheus client
// library doubled the daemon's idle memory for them (docs/performance.md). Safe for concurrent use.
type Registry struct {
	mu     sync.Mutex
	fams   map[string]*family
	before []func()
}

// BeforeGather adds a function that Gather calls before it collects the families: a reading that
// several families share (RegisterRuntime's) is taken there once per scrape.
func (r *Registry) BeforeGather(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.before = append(r.before, f)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{fams: map[string]*family{}} }

// family is one registered metric family: its samples come from collect at every gather.
type family struct {
	name, help, typ string
	collect         func(emit func(Sample))
}

// Label is one label pair of a sample.
type Label struct{ Name, Value string }

// Sample is one line of the exposition: a series' name (a histogram's with its _bucket, _sum or _count
// suffix), its labels sorted by name (le and quantile last), and its value.
type Sample struct {
	Name   string
	Labels []Label
	Value  float64
}

// Label returns the value of the label name, "" when the sample has none.
func (s Sample) Label(name string) string {
	for _, l := range s.Labels {
		if l.Name == name {
			return l.Value
		}
	}
	return ""
}

// Family is a metric family as gathered: its series in a fixed order of their label values (not
// lexicographic; the format asks for none), a histogram's or summary's samples kept together.
type Family struct {
	Name, Help, Type string
	Samples          []Sample
}

// register adds a family; a name registered twice, or not a valid metric name, is a programming error.
func (r *Registry) register(name, help, typ string, collect func(emit func(Sample))) {
	if !validName(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.fams[name]; dup {
		panic(fmt.Sprintf("metrics: %s registered twice", name))
	}
	r.fams[name] = &family{name: name, help: help, typ: typ, collect: collect}
}

// Func registers a family whose samples are read at gather time: collect calls emit once per series,
// with the label values in the order of labels.
func (r *Registry) Func(name, help, typ string, labels []string, collect func(emit func(v float64, values ...string))) {
	checkLabels(labels)
	r.register(name, help, typ, func(emit func(Sample)) {
		collect(func(v float64, values ...string) {
			emit(Sample{Name: name, Labels: pairs(labels, values), Value: v})
		})
	})
}

// GaugeFunc registers a gauge without labels whose value is read at gather time.
func (r *Registry) GaugeFunc(name, help string, f func() float64) {
	r.Func(name, help, TypeGauge, nil, func(emit func(float64, ...string)) { emit(f()) })
}

// Gather returns every family with its current samples, sorted by name.
func (r *Registry) Gather() []Family {
	r.mu.Lock()
	fams := make([]*family, 0, len(r.fams))
	for _, f := range r.fams {
		fams = append(fams, f)
	}
	before := r.before
	r.mu.Unlock()
	for _, f := range before {
		f()
	}
	slices.SortFunc(fams, func(a, b *family) int { return strings.Compare(a.name, b.name) })

	out := make([]Family, 0, len(fams))
	for _, f := range fams {
		var samples []Sample
		f.collect(func(s Sample) { samples = append(samples, s) })
		sortSamples(samples)
		out = append(out, Family{Name: f.name, Help: f.help, Type: f.typ, Samples: samples})
	}
	return out
}

// sortSamples orders samples by their label values other than le and quantile (each ended by 0xff),
// keeping the order in which a series' samples were emitted (buckets ascending, then _sum and _count).
func sortSamples(s []Sample) {
	if len(s) < 2 {
		return
	}
	type keyed struct {
		key string
		s   Sample
	}
	k := make([]keyed, len(s))
	var b strings.Builder
	for i, x := range s {
		b.Reset()
		for _, l := range x.Labels {
			if l.Name != "le" && l.Name != "quantile" {
				b.WriteString(l.Value)
				b.WriteByte(0xff)
			}
		}
		k[i] = keyed{b.String(), x}
	}
	slices.SortStableFunc(k, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	for i := range k {
		s[i] = k[i].s
	}
}

func pairs(names, values []string) []Label {
	if len(values) != len(names) {
		panic(fmt.Sprintf("metrics: %d label values for labels %q", len(values), names))
	}
	if len(names) == 0 {
		return nil
	}
	l := make([]Label, len(names))
	for i := range names {
		// Prometheus refuses a whole page for one label value that is not UTF-8 (Vec's are made valid
		// before they are keyed; Func's here).
		l[i] = Label{names[i], strings.ToValidUTF8(values[i], "\uFFFD")}
	}
	slices.SortFunc(l, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
	return l
}

// Counter is a monotonic count. Its methods are safe for concurrent use and do not allocate.
type Counter struct{ v atomic.Uint64 }

// Inc adds one.
func (c *Counter) Inc() { c.v.Add(1) }

// Value returns the count.
func (c *Counter) Value() uint64 { return c.v.Load() }

// NewCounter registers a counter without labels.
func (r *Registry) NewCounter(name, help string) *Counter {
	c := &Counter{}
	r.register(name, help, TypeCounter, func(emit func(Sample)) {
		emit(Sample{Name: name, Value: float64(c.Value())})
	})
	return c
}

// Vec is a family of children (counters or histograms) by label values. A child is created at its
// first With and lives as long as the registry: keep the values of every label to a bounded set.
type Vec[T any] struct {
	labels   []string
	newChild func() *T
	mu       sync.RWMutex
	children map[string]*child[T]
	limit    int // the most children, 0 for no limit (Limit)
	over     *T  // the child that counts past the limit
}

type child[T any] struct {
	values []string
	m      *T
}

func newVec[T any](labels []string, newChild func() *T) *Vec[T] {
	checkLabels(labels)
	return &Vec[T]{labels: labels, newChild: newChild, children: map[string]*child[T]{}}
}

// With returns the child of the label values, in the order of the Vec's labels, creating it at first.
// A lookup of an existing child does not allocate.
func (v *Vec[T]) With(values ...string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %d label values for labels %q", len(values), v.labels))
	}
	for _, s := range values {
		if !utf8.ValidString(s) {
			// Prometheus refuses a whole page for one such value; made valid first, it cannot share
			// a key, or a series once written, with another list of values.
			return v.With(validUTF8(values)...)
		}
	}
	var buf [128]byte
	key := appendKey(buf[:0], values)
	v.mu.RLock()
	c, ok := v.children[string(key)]
	full := v.limit > 0 && len(v.children) >= v.limit
	v.mu.RUnlock()
	switch {
	case ok:
		return c.m
	case full:
		return v.over // without the write lock or an allocation: past the limit, every event may land here
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.children[string(key)]; ok {
		return c.m
	}
	if v.limit > 0 && len(v.children) >= v.limit {
		return v.over
	}
	return v.add(string(key), values)
}

// add creates the child of values under key; v.mu is held.
func (v *Vec[T]) add(key string, values []string) *T {
	c := &child[T]{values: slices.Clone(values), m: v.newChild()}
	for i, s := range c.values {
		c.values[i] = strings.Clone(s) // do not pin a buffer a value points into
	}
	v.children[key] = c
	return c.m
}

// Limit bounds the Vec to max children, the child of overflow among them (created here): values first
// seen after that count under it. Call it before the Vec is used.
func (v *Vec[T]) Limit(max int, overflow ...string) {
	if len(overflow) != len(v.labels) || max < 1 {
		panic(fmt.Sprintf("metrics: limit %d with overflow values %q for labels %q", max, overflow, v.labels))
	}
	v.over = v.With(overflow...)
	v.limit = max
}

// appendKey appends the children map's key of values: the value itself for one label, else each value
// ended by 0xff, which is not in UTF-8, so no two lists of values share a key.
func appendKey(key []byte, values []string) []byte {
	if len(values) == 1 {
		return append(key, values[0]...)
	}
	for _, s := range values {
		key = append(append(key, s...), 0xff)
	}
	return key
}

func validUTF8(values []string) []string {
	out := make([]string, len(values))
	for i, s := range values {
		out[i] = strings.ToValidUTF8(s, "\uFFFD")
	}
	return out
}

// each calls f for every child.
func (v *Vec[T]) each(f func(values []string, m *T)) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	for _, c := range v.children {
		f(c.values, c.m)
	}
}

// NewCounterVec registers a family of counters by labels.
func (r *Registry) NewCounterVec(name, help string, labels []string) *Vec[Counter] {
	v := newVec(labels, func() *Counter { return &Counter{} })
	r.register(name, help, TypeCounter, func(emit func(Sample)) {
		v.each(func(values []string, c *Counter) {
			emit(Sample{Name: name, Labels: pairs(labels, values), Value: float64(c.Value())})
		})
	})
	return v
}

// Histogram counts observations in buckets with fixed upper bounds. Its methods are safe for concurrent
// use and do not allocate. A gather that runs beside an Observe may count it in _sum and not in the
// buckets, or the other way round; _count is always the +Inf bucket's.
type Histogram struct {
	upper   []float64       // ascending; the +Inf bucket is implicit
	counts  []atomic.Uint64 // per bucket (not cumulative), len(upper)+1
	sumBits atomic.Uint64   // float64 bits of the sum of observations
}

func newHistogram(upper []float64) *Histogram {
	return &Histogram{upper: upper, counts: make([]atomic.Uint64, len(upper)+1)}
}

// Observe records one observation.
func (h *Histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.upper, v)].Add(1) // the first bucket with v <= its bound
	for {
		old := h.sumBits.Load()
		if h.sumBits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 {
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
	}
	return n
}

// emit writes the histogram's series: cumulative buckets, then _sum and _count (the +Inf bucket's).
func (h *Histogram) emit(name string, labels []Label, emit func(Sample)) {
	with := func(le string) []Label {
		return append(slices.Clip(labels), Label{"le", le})
	}
	var cum uint64
	for i := range h.counts {
		cum += h.counts[i].Load()
		le := "+Inf"
		if i < len(h.upper) {
			le = formatFloat(h.upper[i])
		}
		emit(Sample{Name: name + "_bucket", Labels: with(le), Value: float64(cum)})
	}
	emit(Sample{Name: name + "_sum", Labels: labels, Value: math.Float64frombits(h.sumBits.Load())})
	emit(Sample{Name: name + "_count", Labels: labels, Value: float64(cum)})
}

// NewHistogram registers a histogram without labels; buckets are its ascending upper bounds.
func (r *Registry) NewHistogram(name, help string, buckets []float64) *Histogram {
	checkBuckets(buckets)
	h := newHistogram(buckets)
	r.register(name, help, TypeHistogram, func(emit func(Sample)) { h.emit(name, nil, emit) })
	return h
}

// NewHistogramVec registers a family of histograms by labels; buckets are their ascending upper bounds.
func (r *Registry) NewHistogramVec(name, help string, buckets []float64, labels []string) *Vec[Histogram] {
	checkBuckets(buckets)
	v := newVec(labels, func() *Histogram { return newHistogram(buckets) })
	r.register(name, help, TypeHistogram, func(emit func(Sample)) {
		v.each(func(values []string, h *Histogram) { h.emit(name, pairs(labels, values), emit) })
	})
	return v
}

// ExponentialBuckets returns n upper bounds, the first start, each factor times the one before.
func ExponentialBuckets(start, factor float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

func checkBuckets(b []float64) {
	ok := len(b) > 0
	for i, v := range b {
		ok = ok && !math.IsNaN(v) && !math.IsInf(v, 0) && (i == 0 || v > b[i-1])
	}
	if !ok {
		panic(fmt.Sprintf("metrics: buckets %v are not strictly ascending finite bounds", b))
	}
}

func checkLabels(labels []string) {
	for _, l := range labels {
		if !validName(l) || strings.Contains(l, ":") || strings.HasPrefix(l, "__") || l == "le" || l == "quantile" {
			panic(fmt.Sprintf("metrics: invalid label name %q", l))
		}
	}
}

// validName reports whether s matches [a-zA-Z_:][a-zA-Z0-9_:]*, the classic metric name.
func validName(s string) bool {
	for i, c := range []byte(s) {
		ok := c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return s != ""
}
