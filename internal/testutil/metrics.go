package testutil

import (
	"io"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metric returns the value of the first series of g's family name whose labels include labels: a
// counter's or a gauge's value, a histogram's count of observations. It is 0 when there is no such series
// (a labelled series is created when first used).
func Metric(tb testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	tb.Helper()
	for _, m := range MetricSeries(tb, g, name) {
		if hasLabels(m, labels) {
			return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue() +
				float64(m.GetHistogram().GetSampleCount())
		}
	}
	return 0
}

// MetricSeries returns the series of g's family name, none when it has no such family.
func MetricSeries(tb testing.TB, g prometheus.Gatherer, name string) []*dto.Metric {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatalf("gathering the metrics: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}

// Scrape GETs url with the Accept header accept ("" for none), fails unless the answer is 200, and returns
// its Content-Type and body.
func Scrape(tb testing.TB, url, accept string) (contentType, body string) {
	tb.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s = %d\n%s", url, resp.StatusCode, b)
	}
	return resp.Header.Get("Content-Type"), string(b)
}
