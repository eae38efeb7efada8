package metrics

import (
	"bytes"
	"go/parser"
	"go/token"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tracking-bridge/tracking-bridge/internal/testutil"
)

// scrape GETs the handler's page with the Accept header accept, and returns its Content-Type and body.
func scrape(t *testing.T, h http.Handler, accept string) (string, string) {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	return testutil.Scrape(t, srv.URL, accept)
}

// prometheusAccept is the Accept header of a Prometheus server's scrapes (3.x, default settings).
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6," +
	"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4," +
	"text/plain;version=0.0.4;q=0.3,*/*;q=0.2"

// TestHandlerNegotiatesOpenMetrics: Prometheus, which asks for OpenMetrics, gets it with the exemplars; a
// client that asks for nothing (curl) gets the text format 0.0.4, which Prometheus's parser reads.
func TestHandlerNegotiatesOpenMetrics(t *testing.T) {
	t.Parallel()
	reg := NewRegistry()
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "x_seconds", Help: "X.", Buckets: []float64{0.5, 1}})
	reg.MustRegister(h)
	h.(prometheus.ExemplarObserver).ObserveWithExemplar(0.75, prometheus.Labels{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
	handler := Handler(reg, slog.New(slog.DiscardHandler))

	ct, body := scrape(t, handler, prometheusAccept)
	if !strings.HasPrefix(ct, "application/openmetrics-text; version=1.0.0") {
		t.Errorf("Prometheus's scrape: Content-Type %q, want OpenMetrics", ct)
	}
	if !strings.Contains(body, `x_seconds_bucket{le="1.0"} 1 # {trace_id="4bf92f3577b34da6a3ce929d0e0e4736"} 0.75`) ||
		!strings.HasSuffix(body, "# EOF\n") {
		t.Errorf("the OpenMetrics page lacks the exemplar or its end:\n%s", body)
	}

	ct, body = scrape(t, handler, "")
	if !strings.HasPrefix(ct, "text/plain; version=0.0.4; charset=utf-8") {
		t.Errorf("a plain GET: Content-Type %q, want the text format 0.0.4", ct)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses the text page: %v\n%s", err, body)
	}
	if mfs["x_seconds"].GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("x_seconds not as observed:\n%s", body)
	}
}

// TestRegistryHasRuntimeAndProcess: the registry carries the Go runtime's and the process's collectors.
func TestRegistryHasRuntimeAndProcess(t *testing.T) {
	t.Parallel()
	mfs, err := NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		got[mf.GetName()] = mf
	}
	want := []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "go_gc_duration_seconds", "go_info"}
	if runtime.GOOS == "linux" {
		want = append(want, "process_resident_memory_bytes", "process_cpu_seconds_total", "process_start_time_seconds")
	}
	for _, name := range want {
		if got[name] == nil {
			t.Errorf("%s is not gathered", name)
		}
	}
}

// TestNewFunc: a family read at scrape time; a value that is not UTF-8 is made valid, and a series with
// the wrong number of label values is logged and left out while the rest of the page is served.
func TestNewFunc(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewFunc("x_state", "States.", prometheus.GaugeValue, []string{"state"},
		func(emit func(float64, ...string)) {
			emit(1, "up")
			emit(0, "down\xff")
		}))
	reg.MustRegister(NewFunc("y_broken", "Broken.", prometheus.GaugeValue, []string{"a"},
		func(emit func(float64, ...string)) { emit(1) }))
	var logs bytes.Buffer
	_, body := scrape(t, Handler(reg, slog.New(slog.NewTextHandler(&logs, nil))), "")
	for _, want := range []string{`x_state{state="up"} 1`, `x_state{state="down` + "\uFFFD" + `"} 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "y_broken") {
		t.Errorf("the broken family is served:\n%s", body)
	}
	if !strings.Contains(logs.String(), "y_broken") {
		t.Errorf("the broken family is not logged: %q", logs.String())
	}
}

func TestStatusCode(t *testing.T) {
	for code, want := range map[int]string{200: "200", 404: "404", 299: "2xx", 599: "5xx", 99: "other", 600: "other", -1: "other"} {
		if got := StatusCode(code); got != want {
			t.Errorf("StatusCode(%d) = %q, want %q", code, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = StatusCode(503) }); n != 0 {
		t.Errorf("StatusCode allocates %v times", n)
	}
}

// TestImportsNoComponent: the package is what the components' metrics share, beneath them: it imports
// none of the bridge's packages (each component declares its own series on the registry it is handed).
func TestImportsNoComponent(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := parser.ParseFile(token.NewFileSet(), f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range parsed.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); strings.HasPrefix(path, "github.com/tracking-bridge/") {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}
